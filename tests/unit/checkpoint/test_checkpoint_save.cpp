// Checkpoint saving: bitwise round trip, the documented HDF5 layout, failed saves that leave the folder as it was,
// per-rank state, the async contents (momentum set, per-rank flat arrays, role state) and the checks of the contents.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>

#include "checkpoint/h5.h"
#include "checkpoint/layout.h"
#include "parallel/host_collectives.h"

#include "checkpoint_test_util.h"

namespace ember {
namespace {

class CheckpointSave : public checkpoint_test::CheckpointTest {};

using namespace checkpoint_test;

TEST_F(CheckpointSave, RoundTripIsBitwise) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 1);
  const CheckpointMeta meta = make_meta(c, 10);
  const std::string folder = (dir_ / "ckpt").string();
  const std::string path = save_checkpoint(folder, meta, t, src.contents(), 3, self_world());
  EXPECT_EQ(path, checkpoint_path(folder, 10));
  EXPECT_EQ(fs::path(path).filename(), "step_00000010.h5");
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  Arenas dst(t);
  CheckpointMeta got;
  load_checkpoint(path, t, dst.sets(), got);
  const size_t bytes = t.total_numel() * sizeof(float);
  EXPECT_EQ(std::memcmp(src.params.data(), dst.params.data(), bytes), 0);
  EXPECT_EQ(std::memcmp(src.m.data(), dst.m.data(), bytes), 0);
  EXPECT_EQ(std::memcmp(src.v.data(), dst.v.data(), bytes), 0);

  EXPECT_EQ(got.step, meta.step);
  EXPECT_EQ(got.tokens_seen, meta.tokens_seen);
  EXPECT_EQ(got.world_size, meta.world_size);
  EXPECT_EQ(got.mode, meta.mode);
  EXPECT_EQ(got.config_ini, meta.config_ini);
  EXPECT_EQ(got.model, meta.model);
  EXPECT_EQ(got.optimizer_step, meta.optimizer_step);
  EXPECT_EQ(got.beta1, meta.beta1);
  EXPECT_EQ(got.beta2, meta.beta2);
  EXPECT_EQ(got.eps, meta.eps);
  EXPECT_EQ(got.weight_decay, meta.weight_decay);
  EXPECT_EQ(got.lr, meta.lr);
  EXPECT_EQ(got.ranks.at(0).data_cursor, meta.ranks.at(0).data_cursor);
  EXPECT_EQ(got.ranks.at(0).rng_offset, meta.ranks.at(0).rng_offset);
  EXPECT_EQ(got.version, EMBER_VERSION);
  ASSERT_EQ(got.created.size(), 20u) << got.created;  // 2024-05-20T12:34:56Z
  EXPECT_EQ(got.created[10], 'T');
  EXPECT_EQ(got.created.back(), 'Z');

  const CheckpointMeta only_meta = read_checkpoint_meta(path);
  EXPECT_EQ(only_meta.step, meta.step);
  EXPECT_EQ(only_meta.created, got.created);
  EXPECT_EQ(only_meta.config_ini, meta.config_ini);

  // Weights only (eval, generate): the moment arenas are not needed and stay untouched.
  std::vector<float> weights(t.total_numel(), 0.0f);
  CheckpointMeta got2;
  load_checkpoint(path, t, {TensorSet{SET_MODEL, weights.data()}}, got2);
  EXPECT_EQ(std::memcmp(src.params.data(), weights.data(), bytes), 0);
}

TEST_F(CheckpointSave, LayoutFollowsHuggingFaceNames) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 2);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 3), t, src.contents(), 0, self_world());

  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);

  const hsize_t C = hsize_t(c.n_embd), V = hsize_t(c.vocab_size), T = hsize_t(c.block_size);
  EXPECT_EQ(dims_of(f, "/model/transformer/h/0/attn/c_attn/weight"), (std::vector<hsize_t>{C, 3 * C}));
  EXPECT_EQ(dims_of(f, "/model/transformer/h/1/mlp/c_proj/weight"), (std::vector<hsize_t>{4 * C, C}));
  EXPECT_EQ(dims_of(f, "/model/transformer/wte/weight"), (std::vector<hsize_t>{V, C}));
  EXPECT_EQ(dims_of(f, "/model/transformer/wpe/weight"), (std::vector<hsize_t>{T, C}));
  EXPECT_EQ(dims_of(f, "/model/transformer/ln_f/bias"), (std::vector<hsize_t>{C}));
  EXPECT_EQ(dims_of(f, "/optimizer/exp_avg/transformer/h/0/attn/c_attn/weight"), (std::vector<hsize_t>{C, 3 * C}));
  EXPECT_EQ(dims_of(f, "/optimizer/exp_avg_sq/transformer/wte/weight"), (std::vector<hsize_t>{V, C}));
  EXPECT_EQ(H5Lexists(f, "/model/lm_head", H5P_DEFAULT), 0);  // tied to wte, not stored

  // Values land at the documented place: wte row 5 equals the arena slice.
  {
    hid_t d = H5Dopen2(f, "/model/transformer/wte/weight", H5P_DEFAULT);
    std::vector<float> wte(t.wte().numel);
    ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, wte.data()), 0);
    H5Dclose(d);
    EXPECT_EQ(std::memcmp(wte.data() + 5 * C, src.params.data() + t.wte().offset + 5 * C, C * sizeof(float)), 0);
  }

  // Every tensor dataset is chunked with the Fletcher32 filter.
  for (const char* name : {"/model/transformer/wte/weight", "/model/transformer/h/0/ln_1/weight",
                           "/optimizer/exp_avg_sq/transformer/h/1/attn/c_attn/bias"})
    EXPECT_TRUE(chunked_with_fletcher32(f, name)) << name;

  // Root attributes and per-rank state.
  auto read_i64 = [&](const char* obj, const char* name) {
    int64_t v = -1;
    hid_t a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(a, 0) << obj << " " << name;
    if (a >= 0) {
      H5Aread(a, H5T_NATIVE_INT64, &v);
      H5Aclose(a);
    }
    return v;
  };
  EXPECT_EQ(read_i64("/", "format_version"), CHECKPOINT_FORMAT_VERSION);
  EXPECT_EQ(read_i64("/", "step"), 3);
  EXPECT_EQ(read_i64("/", "n_embd"), c.n_embd);
  EXPECT_EQ(read_i64("/", "n_head"), c.n_head);
  EXPECT_EQ(read_i64("/optimizer", "step"), 3);
  EXPECT_EQ(read_i64("/ranks/0", "data_cursor"), 3 * 8 + 3);
  {
    hid_t a = H5Aopen_by_name(f, "/", "format", H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(a, 0);
    hid_t type = H5Aget_type(a);
    char* s = nullptr;
    ASSERT_GE(H5Aread(a, type, &s), 0);
    EXPECT_STREQ(s, CHECKPOINT_FORMAT);
    H5free_memory(s);
    H5Tclose(type);
    H5Aclose(a);
  }
  EXPECT_GT(H5Lexists(f, "/config", H5P_DEFAULT), 0);
  H5Fclose(f);
}

// The attention schedule is stored only where it is not GPT-2's (a GPT-2 file keeps its attributes as before) and
// reads back equal; a rope model has no wpe tensor. A damaged schedule attribute is refused naming it.
TEST_F(CheckpointSave, AttentionScheduleRoundTrips) {
  ModelConfig c = small_config();
  {
    const ParamTable t(c);
    Arenas src = random_arenas(t, 1);
    const std::string path =
        save_checkpoint((dir_ / "gpt2").string(), make_meta(c, 1), t, src.contents(), 0, self_world());
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    for (const char* attr : {"position", "rope_theta", "attention_windows", "alibi_slopes"})
      EXPECT_EQ(H5Aexists(f, attr), 0) << attr;
    H5Fclose(f);
  }
  c.position = PositionEncoding::rope, c.rope_theta = 500000.0f;
  c.attention_windows = {1, 0}, c.alibi_slopes = {0.0f, 0.375f};
  const ParamTable t(c);
  EXPECT_EQ(t.wpe(), nullptr);
  Arenas src = random_arenas(t, 2);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 4), t, src.contents(), 0, self_world());
  Arenas dst(t);
  CheckpointMeta got;
  load_checkpoint(path, t, dst.sets(), got);
  EXPECT_EQ(got.model, c);
  EXPECT_EQ(std::memcmp(src.params.data(), dst.params.data(), t.total_numel() * sizeof(float)), 0);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_EQ(H5Lexists(f, "/model/transformer/wpe", H5P_DEFAULT), 0);
  ASSERT_GE(H5Adelete(f, "attention_windows"), 0);
  write_attr_str(f, "attention_windows", "1,zero", checkpoint_detail::h5_context(path));
  H5Fclose(f);
  expect_error([&] { read_checkpoint_meta(path); }, {path, "/attention_windows", "1,zero"});
}

TEST_F(CheckpointSave, UnwritableFolderFailsAndKeepsEarlierCheckpoint) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 7);
  const fs::path good = dir_ / "good";
  const std::string first = save_checkpoint(good.string(), make_meta(c, 10), t, a.contents(), 1, self_world());
  const std::string first_bytes = read_text(first);

  write_text(dir_ / "blocker", "a regular file where a folder should be");
  const std::string bad = (dir_ / "blocker" / "ckpt").string();
  const Error e =
      expect_error([&] { save_checkpoint(bad, make_meta(c, 20), t, a.contents(), 1, self_world()); }, {bad});
  EXPECT_NE(e.hint().find("permissions"), std::string::npos) << e.hint();

  EXPECT_EQ(read_text(first), first_bytes);
  EXPECT_EQ(read_text(good / "latest"), "step_00000010.h5\n");
  Arenas b(t);
  CheckpointMeta got;
  load_checkpoint(first, t, b.sets(), got);
  EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), t.total_numel() * sizeof(float)), 0);
}

// Saves at step 10, then fails a save at step 20 in the same folder through `fail`; afterwards the folder must
// hold exactly what it held before (step 10 intact, `latest` unchanged, no temp files).
void expect_failed_save_changes_nothing(const fs::path& folder, const std::function<void()>& fail) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 8);
  const std::string first = save_checkpoint(folder.string(), make_meta(c, 10), t, a.contents(), 1, self_world());
  const std::string first_bytes = read_text(first);
  fail();
  EXPECT_EQ(read_text(first), first_bytes);
  EXPECT_EQ(read_text(folder / "latest"), "step_00000010.h5\n");
  EXPECT_FALSE(fs::exists(folder / "step_00000020.h5.tmp"));
  EXPECT_FALSE(fs::exists(folder / "latest.tmp"));
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), first);
}

TEST_F(CheckpointSave, FailedRenameLeavesLatestAlone) {
  const fs::path folder = dir_ / "ckpt";
  expect_failed_save_changes_nothing(folder, [&] {
    // A non-empty directory squatting on the final name makes the rename fail after the file is fully written.
    fs::create_directories(folder / "step_00000020.h5" / "x");
    const ModelConfig c = small_config();
    const ParamTable t(c);
    Arenas a = random_arenas(t, 9);
    expect_error([&] { save_checkpoint(folder.string(), make_meta(c, 20), t, a.contents(), 1, self_world()); },
                 {"step_00000020.h5"});
    EXPECT_TRUE(fs::is_directory(folder / "step_00000020.h5" / "x"));
  });
}

TEST_F(CheckpointSave, NoRoomFailsBeforeWriting) {
  const fs::path folder = dir_ / "ckpt";
  expect_failed_save_changes_nothing(folder, [&] {
    // A checkpoint that cannot fit is refused before a byte is written. The file-size limit stands in for a full
    // disk here (the free-space check works the same way); SIGXFSZ is ignored in case a write slipped through.
    ModelConfig c = small_config();
    c.vocab_size = 2048;  // a checkpoint far larger than the limit
    const ParamTable t(c);
    Arenas a = random_arenas(t, 10);
    struct rlimit old {};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    auto old_handler = signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = 16 * 1024;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    bool threw = false;
    try {
      save_checkpoint(folder.string(), make_meta(c, 20), t, a.contents(), 1, self_world());
    } catch (const Error& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find("step_00000020.h5"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("ulimit -f"), std::string::npos) << e.what();
    }
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    EXPECT_TRUE(threw);
  });
}

TEST_F(CheckpointSave, PerRankStateRoundTrips) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 13);
  CheckpointMeta meta = make_meta(c, 6);
  meta.world_size = 3;
  meta.ranks = {{7, uint64_t(1) << 40}, {8, 2}, {UINT64_MAX, 3}};
  const std::string path = save_checkpoint(dir_.string(), meta, t, a.contents(), 0, self_world());
  const CheckpointMeta got = read_checkpoint_meta(path);
  EXPECT_EQ(got.world_size, 3);
  ASSERT_EQ(got.ranks.size(), 3u);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(got.ranks[r].data_cursor, meta.ranks[r].data_cursor) << r;
    EXPECT_EQ(got.ranks[r].rng_offset, meta.ranks[r].rng_offset) << r;
  }
  Arenas b(t);
  CheckpointMeta loaded;
  load_checkpoint(path, t, b.sets(), loaded);
  ASSERT_EQ(loaded.ranks.size(), 3u);
  EXPECT_EQ(loaded.ranks[2].data_cursor, UINT64_MAX);

  // world_size and the per-rank entries must agree, and one rank writes the whole arena.
  CheckpointMeta bad = meta;
  bad.ranks.resize(2);
  expect_error([&] { save_checkpoint(dir_.string(), bad, t, a.contents(), 0, self_world()); }, {"world_size"});
  CheckpointContents part = a.contents();
  part.write_begin = 16;
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, part, 0, self_world()); }, {"whole parameter arena"});
  EXPECT_FALSE(fs::exists(dir_ / "step_00000006.h5.tmp"));
}

TEST_F(CheckpointSave, AsyncExtraSetAndRankArraysRoundTrip) {
  const ModelConfig c = padded_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 16);
  const size_t len = (size_t(1) << 20) + 5;  // two chunks, the second partial
  AsyncState a = random_async_state(t, len, 16);
  const CheckpointMeta meta = make_async_meta(c, 12);
  const std::string path = save_checkpoint(dir_.string(), meta, t, async_contents(src, a), 0, self_world());

  // Weights and the extra set come back bitwise; padding stays untouched (zero on both sides).
  std::vector<float> params(t.total_numel(), 0.0f), momentum(t.total_numel(), 0.0f);
  const std::vector<TensorSet> load = {{SET_MODEL, params.data()}, {SET_MOMENTUM, momentum.data()}};
  CheckpointMeta got;
  load_checkpoint(path, t, load, got);
  EXPECT_EQ(params, src.params);
  EXPECT_EQ(momentum, a.momentum);

  EXPECT_EQ(got.mode, TrainingMode::async);
  EXPECT_EQ(got.async_version, meta.async_version);
  ASSERT_EQ(got.ranks.size(), 1u);
  EXPECT_EQ(got.ranks[0].role, "worker");
  EXPECT_EQ(got.ranks[0].optimizer_step, meta.ranks[0].optimizer_step);
  EXPECT_EQ(got.ranks[0].seq, meta.ranks[0].seq);
  EXPECT_EQ(got.ranks[0].arrays, ASYNC_ARRAYS);
  EXPECT_EQ(got.ranks[0].data_cursor, meta.ranks[0].data_cursor);
  EXPECT_EQ(read_checkpoint_meta(path).ranks.at(0).arrays, ASYNC_ARRAYS);

  RankArraysDst back(len, -1.0f);
  ASSERT_TRUE(load_rank_arrays(path, 0, back.dst()));
  for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k) EXPECT_EQ(back.arrays[k], a.arrays[k]) << ASYNC_ARRAYS[k];
  std::vector<float> residual(len, -1.0f);  // any subset, in any order
  ASSERT_TRUE(load_rank_arrays(path, 0, {{"residual", residual.data(), len}}));
  EXPECT_EQ(residual, a.arrays[2]);

  // The documented layout: the set under its prefix with the model's shapes, flat 1-d Fletcher32 arrays, attributes.
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hsize_t C = hsize_t(c.n_embd), V = hsize_t(c.vocab_size);
  EXPECT_EQ(dims_of(f, "/optimizer/momentum_buffer/transformer/wte/weight"), (std::vector<hsize_t>{V, C}));
  EXPECT_EQ(dims_of(f, "/optimizer/momentum_buffer/transformer/h/1/mlp/c_fc/weight"), (std::vector<hsize_t>{C, 4 * C}));
  EXPECT_TRUE(chunked_with_fletcher32(f, "/optimizer/momentum_buffer/transformer/h/0/ln_1/bias"));
  for (const std::string& name : ASYNC_ARRAYS) {
    const std::string ds = "/ranks/0/" + name;
    EXPECT_EQ(dims_of(f, ds.c_str()), (std::vector<hsize_t>{len})) << ds;
    EXPECT_TRUE(chunked_with_fletcher32(f, ds.c_str())) << ds;
  }
  EXPECT_EQ(H5Lexists(f, "/optimizer/exp_avg", H5P_DEFAULT), 0);
  for (const char* attr : {"role", "optimizer_step", "seq"})
    EXPECT_GT(H5Aexists_by_name(f, "/ranks/0", attr, H5P_DEFAULT), 0) << attr;
  EXPECT_GT(H5Aexists(f, "async_version"), 0);
  H5Fclose(f);

  // inspect's scan and the resume verification read the flat arrays like any other dataset.
  verify_checkpoint(path);
  const std::vector<CheckpointDatasetReport> all = scan_checkpoint(path);
  EXPECT_EQ(all.size(), 1 + 2 * t.params().size() + ASYNC_ARRAYS.size());
  size_t flat = 0;
  for (const CheckpointDatasetReport& r : all) {
    EXPECT_TRUE(r.ok) << r.path << ": " << r.problem;
    if (r.path.rfind("/ranks/0/", 0) != 0) continue;
    ++flat;
    EXPECT_EQ(r.dtype, "float32") << r.path;
    EXPECT_EQ(r.shape, (std::vector<uint64_t>{len})) << r.path;
  }
  EXPECT_EQ(flat, ASYNC_ARRAYS.size());

  // A training resume that wants AdamW moments from this file gets the clear "no optimizer state" error.
  Arenas want(t);
  expect_error([&] { load_checkpoint(path, t, want.sets(), got); },
               {path, "/optimizer/exp_avg/transformer/wte/weight", "is missing"});
}

TEST_F(CheckpointSave, AsyncSaveArgumentsAreChecked) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 20);
  AsyncState a = random_async_state(t, 64, 20);
  const CheckpointMeta meta = make_async_meta(c, 8);

  CheckpointContents renamed = async_contents(src, a);
  renamed.rank_arrays[1].name = "exp_avg2";
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, renamed, 0, self_world()); },
               {"rank_arrays", "ranks[0].arrays"});
  CheckpointContents reordered = async_contents(src, a);
  std::swap(reordered.rank_arrays[0], reordered.rank_arrays[2]);
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, reordered, 0, self_world()); }, {"rank_arrays"});
  CheckpointContents no_len = async_contents(src, a);
  no_len.rank_arrays[1].len = 0;
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, no_len, 0, self_world()); },
               {"rank_arrays", "positive len"});

  // Arrays of a rank that does not take part in the save would never be written.
  CheckpointMeta two = meta;
  two.world_size = 2;
  two.ranks.push_back(two.ranks[0]);
  expect_error([&] { save_checkpoint(dir_.string(), two, t, async_contents(src, a), 0, self_world()); },
               {"ranks[1]", "takes part"});

  // A prefix must name datasets of its own: clear of the fixed layout and of every other set.
  for (const char* prefix : {"/model", "/model/x", "/optimizer/momentum_buffer", "/optimizer/momentum_buffer/x",
                             "/optimizer", "/ranks", "/ranks/0/m", "optimizer/m", "/config", "/"}) {
    CheckpointContents bad = async_contents(src, a);
    bad.sets.push_back({prefix, a.momentum.data()});
    expect_error([&] { save_checkpoint(dir_.string(), meta, t, bad, 0, self_world()); }, {"sets", prefix});
  }
  CheckpointContents model_second = async_contents(src, a);
  std::swap(model_second.sets[0], model_second.sets[1]);
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, model_second, 0, self_world()); }, {"sets", "/model"});
  CheckpointContents no_data = async_contents(src, a);
  no_data.sets[1].data = nullptr;  // one rank writes the whole arena: it needs the set
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, no_data, 0, self_world()); },
               {"/optimizer/momentum_buffer"});
  EXPECT_FALSE(fs::exists(dir_ / "step_00000008.h5.tmp"));
  EXPECT_FALSE(fs::exists(dir_ / "step_00000008.h5"));
}

}  // namespace
}  // namespace ember
