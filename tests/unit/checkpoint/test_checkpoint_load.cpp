// Checkpoint loading: clear errors for wrong configs and bad files, optimizer shards of any range, files without the
// async attributes, per-rank arrays, the full scan behind inspect, and the flat-range selection it all rests on.
#include <gtest/gtest.h>
#include <hdf5.h>

#include "checkpoint/h5.h"
#include "parallel/host_collectives.h"

#include "checkpoint_test_util.h"

namespace ember {
namespace {

class CheckpointLoad : public checkpoint_test::CheckpointTest {};

using namespace checkpoint_test;

TEST_F(CheckpointLoad, ShapeMismatchNamesDatasetAndShapes) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 4);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 1), t, a.contents(), 0, self_world());

  ModelConfig wide = c;
  wide.n_embd = 48;
  const ParamTable t48(wide);
  Arenas b(t48);
  const std::vector<float> before = b.params;
  CheckpointMeta got;
  const Error e = expect_error([&] { load_checkpoint(path, t48, b.sets(), got); },
                               {path, "/model/transformer/wte/weight", "[64, 32]", "[64, 48]"});
  EXPECT_NE(e.hint().find("different model config"), std::string::npos) << e.hint();
  EXPECT_NE(e.hint().find("n_layer=2"), std::string::npos) << e.hint();
  EXPECT_NE(e.hint().find("n_embd=32"), std::string::npos) << e.hint();
  EXPECT_EQ(b.params, before);  // shapes are checked before anything is read

  // Same widths, fewer blocks: every dataset of the smaller table fits, but the extra blocks must not be dropped.
  ModelConfig shallow = c;
  shallow.n_layer = 1;
  const ParamTable t1(shallow);
  Arenas s(t1);
  expect_error([&] { load_checkpoint(path, t1, s.sets(), got); }, {path, "n_layer=2", "n_layer=1"});
}

TEST_F(CheckpointLoad, CorruptedDataIsDetectedByChecksum) {
  ModelConfig c = small_config();
  c.vocab_size = 2048;  // wte = 2048 x 32 = 64K floats, one 256 KiB chunk
  const ParamTable t(c);
  Arenas a = random_arenas(t, 5);
  // A marker no random draw produces, in the middle of wte, to find the chunk's bytes in the file.
  const size_t mid = t.wte().offset + t.wte().numel / 2;
  for (int i = 0; i < 16; ++i) a.params[mid + size_t(i)] = 1000.0f + 0.125f * float(i);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 1), t, a.contents(), 0, self_world());

  flip_marker(path, std::string(reinterpret_cast<const char*>(&a.params[mid]), 16 * sizeof(float)));

  Arenas b(t);
  CheckpointMeta got;
  const Error e = expect_error([&] { load_checkpoint(path, t, b.sets(), got); },
                               {path, "/model/transformer/wte/weight", "corrupted (checksum mismatch)"});
  EXPECT_NE(e.hint().find("earlier checkpoint"), std::string::npos) << e.hint();
  // Metadata is intact, so the meta-only read still works.
  EXPECT_EQ(read_checkpoint_meta(path).step, 1);
}

TEST_F(CheckpointLoad, TruncatedAndForeignFilesGiveClearErrors) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 6);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 1), t, a.contents(), 0, self_world());
  Arenas b(t);
  CheckpointMeta got;

  const std::string half = (dir_ / "half.h5").string();
  fs::copy_file(path, half);
  fs::resize_file(half, fs::file_size(half) / 2);
  expect_error([&] { load_checkpoint(half, t, b.sets(), got); }, {half, "is truncated"});
  expect_error([&] { read_checkpoint_meta(half); }, {half});

  const std::string stub = (dir_ / "stub.h5").string();
  fs::copy_file(path, stub);
  fs::resize_file(stub, 4);
  expect_error([&] { read_checkpoint_meta(stub); }, {stub, "not an HDF5 file"});

  const std::string text = (dir_ / "notes.txt").string();
  write_text(text, "this is not a checkpoint\n");
  expect_error([&] { load_checkpoint(text, t, b.sets(), got); }, {text, "not an HDF5 file"});

  const std::string missing = (dir_ / "missing.h5").string();
  expect_error([&] { read_checkpoint_meta(missing); }, {missing});

  // A valid HDF5 file without our format attribute.
  const std::string other = (dir_ / "other.h5").string();
  {
    hid_t f = H5Fcreate(other.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    H5Fclose(f);
  }
  expect_error([&] { read_checkpoint_meta(other); }, {other, "not an ember checkpoint (format attribute missing)"});

  // A newer format version.
  const std::string future = (dir_ / "future.h5").string();
  fs::copy_file(path, future);
  {
    hid_t f = H5Fopen(future.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t attr = H5Aopen(f, "format_version", H5P_DEFAULT);
    const int64_t v = CHECKPOINT_FORMAT_VERSION + 1;
    ASSERT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &v), 0);
    H5Aclose(attr);
    H5Fclose(f);
  }
  expect_error([&] { load_checkpoint(future, t, b.sets(), got); }, {future, "format_version 2", "not supported"});
}

TEST_F(CheckpointLoad, LoadsAnOptimizerShard) {
  const ModelConfig c = padded_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 12);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 4), t, src.contents(), 0, self_world());
  const ParamInfo& qkv = t.block(0, BLOCK_PARAM_QKV_W);  // (C, 3C)
  const ParamInfo& fc = t.block(1, BLOCK_PARAM_FC_W);    // (C, 4C)
  const size_t qkv_cols = size_t(qkv.shape[1]), fc_cols = size_t(fc.shape[1]);
  ASSERT_LT(qkv.offset + qkv.numel, t.total_numel());
  ASSERT_TRUE(!inside_a_tensor(t, t.block(0, BLOCK_PARAM_LN1_W).offset + size_t(c.n_embd))) << "no padding to test";
  const std::pair<size_t, size_t> shards[] = {
      {qkv.offset + 3 * qkv_cols + 5, fc.offset + 7 * fc_cols + 11},   // across tensors and padding, ends mid-row
      {qkv.offset + 2 * qkv_cols + 1, qkv.offset + 2 * qkv_cols + 9},  // inside one row
      {qkv.offset + qkv_cols - 3, qkv.offset + 4 * qkv_cols + 2},      // partial row, whole rows, partial row
      {qkv.offset + 7, qkv.offset + 7},                                // empty
      {fc.offset + 13, t.total_numel()},                               // to the end of the arena
      {0, t.total_numel()},                                            // everything
  };
  const float sentinel = -12345.0f;
  for (const auto& [begin, end] : shards) {
    std::vector<float> params(t.total_numel(), 0.0f), m(end - begin + 1, sentinel), v(end - begin + 1, sentinel);
    CheckpointMeta got;
    load_checkpoint(
        path, t,
        {{SET_MODEL, params.data()}, {SET_EXP_AVG, m.data(), begin, end}, {SET_EXP_AVG_SQ, v.data(), begin, end}}, got);
    EXPECT_EQ(params, src.params);  // weights are always read whole
    size_t bad = 0;
    for (size_t i = begin; i < end; ++i) {
      // Inside a tensor: the saved value; in the padding between tensors: untouched.
      const bool in = inside_a_tensor(t, i);
      bad += m[i - begin] != (in ? src.m[i] : sentinel);
      bad += v[i - begin] != (in ? src.v[i] : sentinel);
    }
    bad += m.back() != sentinel || v.back() != sentinel;  // nothing written past the shard
    EXPECT_EQ(bad, 0u) << "shard [" << begin << ", " << end << ")";
  }
}

TEST_F(CheckpointLoad, FilesWithoutAsyncAttributesStillLoad) {
  // A sync save writes exactly the attributes files had before the async additions: none of the new ones.
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 17);
  CheckpointMeta meta = make_meta(c, 5);
  meta.async_version = 9;  // only stored in async mode
  const std::string path = save_checkpoint(dir_.string(), meta, t, a.contents(), 0, self_world());
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_EQ(H5Aexists(f, "async_version"), 0);
  for (const char* attr : {"role", "optimizer_step", "seq"})
    EXPECT_EQ(H5Aexists_by_name(f, "/ranks/0", attr, H5P_DEFAULT), 0) << attr;
  H5Fclose(f);

  Arenas b(t);
  CheckpointMeta got;
  got.async_version = 1;
  load_checkpoint(path, t, b.sets(), got);
  EXPECT_EQ(b.params, a.params);
  EXPECT_EQ(got.async_version, 0u);
  ASSERT_EQ(got.ranks.size(), 1u);
  EXPECT_EQ(got.ranks[0].role, "");
  EXPECT_EQ(got.ranks[0].optimizer_step, 0);
  EXPECT_EQ(got.ranks[0].seq, 0u);
  EXPECT_TRUE(got.ranks[0].arrays.empty());
  EXPECT_EQ(got.ranks[0].data_cursor, meta.ranks[0].data_cursor);

  // An async run resuming from it: no rank arrays to restore, and a missing extra set is named with its mode.
  RankArraysDst dst(16, -1.0f);
  EXPECT_FALSE(load_rank_arrays(path, 0, dst.dst()));
  EXPECT_EQ(dst.arrays[0], std::vector<float>(16, -1.0f));
  std::vector<float> momentum(t.total_numel(), 0.0f);
  std::vector<TensorSet> with_set = b.sets();
  with_set.push_back({SET_MOMENTUM, momentum.data()});
  const Error e = expect_error([&] { load_checkpoint(path, t, with_set, got); },
                               {path, "/optimizer/momentum_buffer/transformer/wte/weight", "is missing"});
  EXPECT_NE(e.hint().find("mode sync"), std::string::npos) << e.hint();
}

TEST_F(CheckpointLoad, LoadRankArraysReturnsFalseForMissingRankOrName) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 18);
  AsyncState a = random_async_state(t, 777, 18);
  const std::string path =
      save_checkpoint(dir_.string(), make_async_meta(c, 3), t, async_contents(src, a), 0, self_world());
  RankArraysDst dst(777, -1.0f);
  EXPECT_FALSE(load_rank_arrays(path, 1, dst.dst()));  // more workers than the writer had
  EXPECT_FALSE(load_rank_arrays(path, 7, dst.dst()));
  std::vector<float> x(777, -1.0f), y(777, -1.0f);
  EXPECT_FALSE(load_rank_arrays(path, 0, {{"exp_avg", x.data(), 777}, {"momentum", y.data(), 777}}));
  EXPECT_EQ(x, std::vector<float>(777, -1.0f));  // nothing read when any name is missing
  for (const std::vector<float>& arr : dst.arrays) EXPECT_EQ(arr, std::vector<float>(777, -1.0f));
  EXPECT_TRUE(load_rank_arrays(path, 0, dst.dst()));
  EXPECT_EQ(dst.arrays[1], a.arrays[1]);
}

TEST_F(CheckpointLoad, RankArrayOfWrongLengthOrCorruptedIsAnError) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 19);
  const size_t len = 4099;
  AsyncState a = random_async_state(t, len, 19);
  for (int i = 0; i < 16; ++i) a.arrays[2][len / 2 + size_t(i)] = 7000.0f + 0.125f * float(i);  // a marker
  const std::string marker(reinterpret_cast<const char*>(&a.arrays[2][len / 2]), 16 * sizeof(float));
  const std::string path =
      save_checkpoint(dir_.string(), make_async_meta(c, 4), t, async_contents(src, a), 0, self_world());

  RankArraysDst dst(len + 1, -1.0f);
  const Error e =
      expect_error([&] { load_rank_arrays(path, 0, dst.dst()); }, {path, "/ranks/0/exp_avg", "[4099]", "[4100]"});
  EXPECT_NE(e.hint().find("different model config"), std::string::npos) << e.hint();
  for (const std::vector<float>& arr : dst.arrays) EXPECT_EQ(arr, std::vector<float>(len + 1, -1.0f));

  flip_marker(path, marker);
  RankArraysDst back(len, -1.0f);
  const Error corrupt = expect_error([&] { load_rank_arrays(path, 0, back.dst()); },
                                     {path, "/ranks/0/residual", "corrupted (checksum mismatch)"});
  EXPECT_NE(corrupt.hint().find("earlier checkpoint"), std::string::npos) << corrupt.hint();
  size_t damaged = 0;
  for (const CheckpointDatasetReport& r : scan_checkpoint(path))
    if (!r.ok) {
      ++damaged;
      EXPECT_EQ(r.path, "/ranks/0/residual");
      EXPECT_EQ(r.problem, "corrupted (checksum mismatch)");
    }
  EXPECT_EQ(damaged, 1u);
  expect_error([&] { verify_checkpoint(path); }, {path, "/ranks/0/residual", "corrupted (checksum mismatch)"});
}

TEST_F(CheckpointLoad, ScanReportsEveryDatasetAndCorruption) {
  ModelConfig c = small_config();
  c.n_layer = 11;  // h/10 exists: the listing must put it after h/2
  c.n_embd = 16;
  c.n_head = 1;
  c.vocab_size = 1024;
  const ParamTable t(c);
  Arenas a = random_arenas(t, 15);
  const std::string marker = plant_marker(t, a, 5000.0f);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 1), t, a.contents(), 0, self_world());
  verify_checkpoint(path);

  auto find = [](const std::vector<CheckpointDatasetReport>& all, const std::string& name) {
    return std::find_if(all.begin(), all.end(), [&](const CheckpointDatasetReport& r) { return r.path == name; }) -
           all.begin();
  };
  std::vector<CheckpointDatasetReport> all = scan_checkpoint(path);
  ASSERT_EQ(all.size(), 1 + 3 * t.params().size());
  for (const CheckpointDatasetReport& r : all) EXPECT_TRUE(r.ok) << r.path << ": " << r.problem;
  const auto cfg = size_t(find(all, "/config"));
  ASSERT_LT(cfg, all.size());
  EXPECT_EQ(all[cfg].dtype, "string");
  EXPECT_TRUE(all[cfg].shape.empty());
  const auto wte = size_t(find(all, "/model/transformer/wte/weight"));
  ASSERT_LT(wte, all.size());
  EXPECT_EQ(all[wte].dtype, "float32");
  EXPECT_EQ(all[wte].shape, (std::vector<uint64_t>{1024, 16}));
  EXPECT_LT(find(all, "/model/transformer/h/2/ln_1/bias"), find(all, "/model/transformer/h/10/ln_1/bias"));

  flip_marker(path, marker);
  all = scan_checkpoint(path);
  ASSERT_EQ(all.size(), 1 + 3 * t.params().size());
  for (const CheckpointDatasetReport& r : all) {
    if (r.path == "/model/transformer/wte/weight") {
      EXPECT_FALSE(r.ok);
      EXPECT_EQ(r.problem, "corrupted (checksum mismatch)");
    } else {
      EXPECT_TRUE(r.ok) << r.path << ": " << r.problem;
    }
  }
  expect_error([&] { verify_checkpoint(path); },
               {path, "/model/transformer/wte/weight", "corrupted (checksum mismatch)"});
}

// select_flat_range on a 3-d dataset: every flat range [lo, hi) reads exactly the elements lo .. hi-1 into the memory
// space flat_range_memory_space gives it, which is 3-d (the shape of the selection, so that HDF5 maps it by blocks)
// exactly where the range is whole rows of the first dimension.
TEST_F(CheckpointLoad, SelectsEveryRangeOf3dDataset) {
  H5Quiet quiet;
  H5Handle fapl = EMBER_H5_OWN(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  ASSERT_GE(H5Pset_fapl_core(fapl.get(), 1 << 16, false), 0);  // in memory, never written out
  H5Handle file(H5Fcreate("flat_range.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  ASSERT_GE(file.get(), 0);
  const std::vector<hsize_t> dims = {3, 4, 5};
  const hsize_t n = 60;
  H5Handle space(H5Screate_simple(3, dims.data(), nullptr), H5Sclose);
  H5Handle dset(H5Dcreate2(file.get(), "d", H5T_NATIVE_INT, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
  ASSERT_GE(dset.get(), 0);
  std::vector<int> all(n);
  for (hsize_t i = 0; i < n; ++i) all[i] = int(i);
  ASSERT_GE(H5Dwrite(dset.get(), H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()), 0);
  int bad = 0;
  for (hsize_t lo = 0; lo <= n; ++lo)
    for (hsize_t hi = lo; hi <= n; ++hi) {
      H5Handle fspace(H5Dget_space(dset.get()), H5Sclose);
      select_flat_range(fspace.get(), dims, lo, hi);
      if (H5Sget_select_npoints(fspace.get()) != hssize_t(hi - lo)) {
        ++bad;
        continue;
      }
      if (lo == hi) continue;
      const hsize_t count = hi - lo;
      H5Handle mspace = flat_range_memory_space(dims, lo, hi);
      const int want_rank = lo % 20 == 0 && hi % 20 == 0 ? 3 : 1;
      if (H5Sget_simple_extent_ndims(mspace.get()) != want_rank ||
          H5Sget_simple_extent_npoints(mspace.get()) != hssize_t(count)) {
        ++bad;
        continue;
      }
      std::vector<int> got(count, -1);
      if (H5Dread(dset.get(), H5T_NATIVE_INT, mspace.get(), fspace.get(), H5P_DEFAULT, got.data()) < 0) {
        ++bad;
        continue;
      }
      for (hsize_t i = 0; i < count; ++i) bad += got[i] != int(lo + i);
    }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace ember
