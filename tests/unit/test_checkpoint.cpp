// Checkpoint tests: bitwise round trip (whole and sharded), the documented HDF5 layout, atomic save/keep-K/latest,
// resume resolution with fallback past damaged files, clear errors for wrong configs and bad files or folders, and
// the async additions (extra tensor sets, per-rank flat arrays, role state) in one process.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/h5.h"
#include "core/philox.h"
#include "model/model_config.h"
#include "model/param_table.h"
#include "test_support.h"
#include "train/checkpoint.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

ModelConfig small_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 64;
  return c;
}

// Arenas for one model: parameters and both AdamW moments, random inside every tensor and zero in the alignment
// padding between tensors (so a whole-arena memcmp also proves that load leaves the padding alone).
struct Arenas {
  std::vector<float> params, m, v;
  explicit Arenas(const ParamTable& t)
      : params(t.total_numel(), 0.0f), m(t.total_numel(), 0.0f), v(t.total_numel(), 0.0f) {}
  CheckpointTensors tensors() { return CheckpointTensors{params.data(), m.data(), v.data()}; }
};

Arenas random_arenas(const ParamTable& t, uint32_t step) {
  Arenas a(t);
  Philox rng(1234, 0, step, RNG_PURPOSE_TEST);
  for (const ParamInfo& p : t.params())
    for (size_t i = 0; i < p.numel; ++i) {
      a.params[p.offset + i] = rng.normal();
      a.m[p.offset + i] = 0.01f * rng.normal();
      a.v[p.offset + i] = 1e-4f * rng.uniform();
    }
  return a;
}

CheckpointMeta make_meta(const ModelConfig& c, int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.tokens_seen = step * 1024 + 7;
  m.world_size = 1;
  m.mode = "sync";
  m.config_ini = "[model]\nn_layer = " + std::to_string(c.n_layer) + "\nn_embd = " + std::to_string(c.n_embd) + "\n";
  m.model = c;
  m.optimizer_step = step;
  m.beta1 = 0.9f;
  m.beta2 = 0.95f;
  m.eps = 1e-8f;
  m.weight_decay = 0.1f;
  m.lr = 3e-4f;
  m.ranks.at(0).data_cursor = uint64_t(step) * 8 + 3;
  m.ranks.at(0).rng_offset = (uint64_t(1) << 40) + uint64_t(step);  // needs all 64 bits
  return m;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

// Runs `fn`, expects an ember::Error whose message contains every string of `in_what` and whose hint is non-empty;
// returns the error for further checks.
Error expect_error(const std::function<void()>& fn, const std::vector<std::string>& in_what) {
  try {
    fn();
  } catch (const Error& e) {
    for (const std::string& s : in_what)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << "'" << s << "' not in: " << e.what();
    EXPECT_FALSE(e.hint().empty()) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "message is not one line: " << e.what();
    return e;
  }
  ADD_FAILURE() << "expected ember::Error";
  return Error("", "");
}

// Flips 8 bytes in the middle of the only occurrence of `marker` (raw fp32 bytes of tensor data) in the file at
// `path`: damage that only the Fletcher32 checksum of that chunk can notice.
void flip_marker(const std::string& path, const std::string& marker) {
  std::string bytes = read_text(path);
  const size_t at = bytes.find(marker);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes.find(marker, at + 1), std::string::npos) << "marker must be unique";
  for (size_t i = 0; i < 8; ++i) bytes[at + 20 + i] = char(~bytes[at + 20 + i]);
  write_text(path, bytes);
}

// Puts 16 values no random draw produces in the middle of wte and returns their bytes, to find them in the file.
std::string plant_marker(const ParamTable& t, Arenas& a, float base) {
  const size_t mid = t.wte().offset + t.wte().numel / 2;
  for (int i = 0; i < 16; ++i) a.params[mid + size_t(i)] = base + 0.125f * float(i);
  return std::string(reinterpret_cast<const char*>(&a.params[mid]), 16 * sizeof(float));
}

// True when the dataset `name` of the open file `f` is chunked with the Fletcher32 filter.
bool chunked_with_fletcher32(hid_t f, const char* name) {
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  if (d < 0) return false;
  hid_t dcpl = H5Dget_create_plist(d);
  bool fletcher = false;
  const int n = H5Pget_nfilters(dcpl);
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, cd[8];
    size_t ncd = 8;
    char fname[64];
    if (H5Pget_filter2(dcpl, unsigned(i), &flags, &ncd, cd, sizeof(fname), fname, nullptr) == H5Z_FILTER_FLETCHER32)
      fletcher = true;
  }
  const bool chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
  H5Pclose(dcpl);
  H5Dclose(d);
  return chunked && fletcher;
}

// Shape of the dataset `name` of the open file `f` (empty when it cannot be opened).
std::vector<hsize_t> dims_of(hid_t f, const char* name) {
  std::vector<hsize_t> dims;
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  if (d < 0) return dims;
  hid_t s = H5Dget_space(d);
  dims.resize(size_t(H5Sget_simple_extent_ndims(s)));
  H5Sget_simple_extent_dims(s, dims.data(), nullptr);
  H5Sclose(s);
  H5Dclose(d);
  return dims;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ember_ckpt_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(CheckpointTest, RoundTripIsBitwise) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 1);
  const CheckpointMeta meta = make_meta(c, 10);
  const std::string folder = (dir_ / "ckpt").string();
  const std::string path = save_checkpoint(folder, meta, t, src.tensors(), 3);
  EXPECT_EQ(path, checkpoint_path(folder, 10));
  EXPECT_EQ(fs::path(path).filename(), "step_00000010.h5");
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  Arenas dst(t);
  CheckpointMeta got;
  load_checkpoint(path, t, dst.tensors(), got);
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
  load_checkpoint(path, t, CheckpointTensors{weights.data(), nullptr, nullptr}, got2);
  EXPECT_EQ(std::memcmp(src.params.data(), weights.data(), bytes), 0);
}

TEST_F(CheckpointTest, LayoutFollowsHuggingFaceNames) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 2);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 3), t, src.tensors(), 0);

  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  auto dims_of = [&](const char* name) {
    std::vector<hsize_t> dims;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    EXPECT_GE(d, 0) << name;
    if (d < 0) return dims;
    hid_t s = H5Dget_space(d);
    dims.resize(size_t(H5Sget_simple_extent_ndims(s)));
    H5Sget_simple_extent_dims(s, dims.data(), nullptr);
    H5Sclose(s);
    H5Dclose(d);
    return dims;
  };
  const hsize_t C = hsize_t(c.n_embd), V = hsize_t(c.vocab_size), T = hsize_t(c.block_size);
  EXPECT_EQ(dims_of("/model/transformer/h/0/attn/c_attn/weight"), (std::vector<hsize_t>{C, 3 * C}));
  EXPECT_EQ(dims_of("/model/transformer/h/1/mlp/c_proj/weight"), (std::vector<hsize_t>{4 * C, C}));
  EXPECT_EQ(dims_of("/model/transformer/wte/weight"), (std::vector<hsize_t>{V, C}));
  EXPECT_EQ(dims_of("/model/transformer/wpe/weight"), (std::vector<hsize_t>{T, C}));
  EXPECT_EQ(dims_of("/model/transformer/ln_f/bias"), (std::vector<hsize_t>{C}));
  EXPECT_EQ(dims_of("/optimizer/exp_avg/transformer/h/0/attn/c_attn/weight"), (std::vector<hsize_t>{C, 3 * C}));
  EXPECT_EQ(dims_of("/optimizer/exp_avg_sq/transformer/wte/weight"), (std::vector<hsize_t>{V, C}));
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

TEST_F(CheckpointTest, KeepsNewestKAndLatestNamesNewest) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 3);
  for (int64_t step : {100, 200, 300, 400, 500}) save_checkpoint(dir_.string(), make_meta(c, step), t, a.tensors(), 2);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000400.h5", "step_00000500.h5"}));
  EXPECT_EQ(read_text(dir_ / "latest"), "step_00000500.h5\n");

  // A resumed run saving a lower step than files left over keeps its own file: `latest` names it.
  save_checkpoint(dir_.string(), make_meta(c, 450), t, a.tensors(), 1);
  EXPECT_TRUE(fs::exists(dir_ / "step_00000450.h5"));
  EXPECT_TRUE(fs::exists(dir_ / "step_00000500.h5"));
  EXPECT_FALSE(fs::exists(dir_ / "step_00000400.h5"));
  EXPECT_EQ(read_text(dir_ / "latest"), "step_00000450.h5\n");

  // keep_latest_k <= 0 keeps everything; a stale temp file from an interrupted save is cleaned up.
  const fs::path all = dir_ / "all";
  fs::create_directories(all);
  write_text(all / "step_00000007.h5.tmp", "partial");
  for (int64_t step : {1, 2, 3}) save_checkpoint(all.string(), make_meta(c, step), t, a.tensors(), 0);
  EXPECT_TRUE(fs::exists(all / "step_00000001.h5"));
  EXPECT_TRUE(fs::exists(all / "step_00000003.h5"));
  EXPECT_FALSE(fs::exists(all / "step_00000007.h5.tmp"));
  EXPECT_EQ(read_text(all / "latest"), "step_00000003.h5\n");
}

TEST_F(CheckpointTest, ResolveResume) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 11);
  const std::string folder = (dir_ / "ckpt").string();
  EXPECT_EQ(resolve_resume(folder, ""), "");
  EXPECT_EQ(resolve_resume(folder, "auto"), "");  // folder does not exist yet: fresh start
  fs::create_directories(folder);
  EXPECT_EQ(resolve_resume(folder, "auto"), "");  // empty folder

  // Without `latest`, the highest step number wins (not the lexically last name: 9 digits past 99999999).
  for (int64_t step : {99999999, 100000000, 5}) save_checkpoint(folder, make_meta(c, step), t, a.tensors(), 0);
  fs::remove(fs::path(folder) / "latest");
  EXPECT_EQ(resolve_resume(folder, "auto"), (fs::path(folder) / "step_100000000.h5").string());

  write_text(fs::path(folder) / "latest", "step_00000005.h5\n");
  EXPECT_EQ(resolve_resume(folder, "auto"), (fs::path(folder) / "step_00000005.h5").string());

  write_text(fs::path(folder) / "latest", "step_00000077.h5\n");  // names a deleted file: fall back
  EXPECT_EQ(resolve_resume(folder, "auto"), (fs::path(folder) / "step_100000000.h5").string());

  const std::string explicit_path = (fs::path(folder) / "step_00000005.h5").string();
  EXPECT_EQ(resolve_resume(folder, explicit_path), explicit_path);
  const std::string missing = (dir_ / "nope" / "step_00000001.h5").string();
  expect_error([&] { resolve_resume(folder, missing); }, {missing, "does not exist"});
  expect_error([&] { resolve_resume(folder, folder); }, {folder, "not a file"});
  const std::string junk = (dir_ / "junk.h5").string();
  write_text(junk, "x");
  expect_error([&] { resolve_resume(folder, junk); }, {junk, "not an HDF5 file"});
}

TEST_F(CheckpointTest, ShapeMismatchNamesDatasetAndShapes) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 4);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 1), t, a.tensors(), 0);

  ModelConfig wide = c;
  wide.n_embd = 48;
  const ParamTable t48(wide);
  Arenas b(t48);
  const std::vector<float> before = b.params;
  CheckpointMeta got;
  const Error e = expect_error([&] { load_checkpoint(path, t48, b.tensors(), got); },
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
  expect_error([&] { load_checkpoint(path, t1, s.tensors(), got); }, {path, "n_layer=2", "n_layer=1"});
}

TEST_F(CheckpointTest, CorruptedDataIsDetectedByChecksum) {
  ModelConfig c = small_config();
  c.vocab_size = 2048;  // wte = 2048 x 32 = 64K floats, one 256 KiB chunk
  const ParamTable t(c);
  Arenas a = random_arenas(t, 5);
  // A marker no random draw produces, in the middle of wte, to find the chunk's bytes in the file.
  const size_t mid = t.wte().offset + t.wte().numel / 2;
  for (int i = 0; i < 16; ++i) a.params[mid + size_t(i)] = 1000.0f + 0.125f * float(i);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 1), t, a.tensors(), 0);

  flip_marker(path, std::string(reinterpret_cast<const char*>(&a.params[mid]), 16 * sizeof(float)));

  Arenas b(t);
  CheckpointMeta got;
  const Error e = expect_error([&] { load_checkpoint(path, t, b.tensors(), got); },
                               {path, "/model/transformer/wte/weight", "corrupted (checksum mismatch)"});
  EXPECT_NE(e.hint().find("earlier checkpoint"), std::string::npos) << e.hint();
  // Metadata is intact, so the meta-only read still works.
  EXPECT_EQ(read_checkpoint_meta(path).step, 1);
}

TEST_F(CheckpointTest, TruncatedAndForeignFilesGiveClearErrors) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 6);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 1), t, a.tensors(), 0);
  Arenas b(t);
  CheckpointMeta got;

  const std::string half = (dir_ / "half.h5").string();
  fs::copy_file(path, half);
  fs::resize_file(half, fs::file_size(half) / 2);
  expect_error([&] { load_checkpoint(half, t, b.tensors(), got); }, {half, "is truncated"});
  expect_error([&] { read_checkpoint_meta(half); }, {half});

  const std::string stub = (dir_ / "stub.h5").string();
  fs::copy_file(path, stub);
  fs::resize_file(stub, 4);
  expect_error([&] { read_checkpoint_meta(stub); }, {stub, "not an HDF5 file"});

  const std::string text = (dir_ / "notes.txt").string();
  write_text(text, "this is not a checkpoint\n");
  expect_error([&] { load_checkpoint(text, t, b.tensors(), got); }, {text, "not an HDF5 file"});

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
  expect_error([&] { load_checkpoint(future, t, b.tensors(), got); }, {future, "format_version 2", "not supported"});
}

TEST_F(CheckpointTest, UnwritableFolderFailsAndKeepsEarlierCheckpoint) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 7);
  const fs::path good = dir_ / "good";
  const std::string first = save_checkpoint(good.string(), make_meta(c, 10), t, a.tensors(), 1);
  const std::string first_bytes = read_text(first);

  write_text(dir_ / "blocker", "a regular file where a folder should be");
  const std::string bad = (dir_ / "blocker" / "ckpt").string();
  const Error e = expect_error([&] { save_checkpoint(bad, make_meta(c, 20), t, a.tensors(), 1); }, {bad});
  EXPECT_NE(e.hint().find("permissions"), std::string::npos) << e.hint();

  EXPECT_EQ(read_text(first), first_bytes);
  EXPECT_EQ(read_text(good / "latest"), "step_00000010.h5\n");
  Arenas b(t);
  CheckpointMeta got;
  load_checkpoint(first, t, b.tensors(), got);
  EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), t.total_numel() * sizeof(float)), 0);
}

// Saves at step 10, then fails a save at step 20 in the same folder through `fail`; afterwards the folder must
// hold exactly what it held before (step 10 intact, `latest` unchanged, no temp files).
void expect_failed_save_changes_nothing(const fs::path& folder, const std::function<void()>& fail) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 8);
  const std::string first = save_checkpoint(folder.string(), make_meta(c, 10), t, a.tensors(), 1);
  const std::string first_bytes = read_text(first);
  fail();
  EXPECT_EQ(read_text(first), first_bytes);
  EXPECT_EQ(read_text(folder / "latest"), "step_00000010.h5\n");
  EXPECT_FALSE(fs::exists(folder / "step_00000020.h5.tmp"));
  EXPECT_FALSE(fs::exists(folder / "latest.tmp"));
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), first);
}

TEST_F(CheckpointTest, FailedRenameLeavesLatestAlone) {
  const fs::path folder = dir_ / "ckpt";
  expect_failed_save_changes_nothing(folder, [&] {
    // A non-empty directory squatting on the final name makes the rename fail after the file is fully written.
    fs::create_directories(folder / "step_00000020.h5" / "x");
    const ModelConfig c = small_config();
    const ParamTable t(c);
    Arenas a = random_arenas(t, 9);
    expect_error([&] { save_checkpoint(folder.string(), make_meta(c, 20), t, a.tensors(), 1); }, {"step_00000020.h5"});
    EXPECT_TRUE(fs::is_directory(folder / "step_00000020.h5" / "x"));
  });
}

TEST_F(CheckpointTest, NoRoomFailsBeforeWriting) {
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
      save_checkpoint(folder.string(), make_meta(c, 20), t, a.tensors(), 1);
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

ModelConfig padded_config() { return test::padded_model_config(); }

bool inside_a_tensor(const ParamTable& t, size_t i) {
  return std::any_of(t.params().begin(), t.params().end(),
                     [&](const ParamInfo& p) { return i >= p.offset && i < p.offset + p.numel; });
}

TEST_F(CheckpointTest, LoadsAnOptimizerShard) {
  const ModelConfig c = padded_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 12);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 4), t, src.tensors(), 0);
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
    load_checkpoint(path, t, CheckpointTensors{params.data(), m.data(), v.data(), begin, end}, got);
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

TEST_F(CheckpointTest, PerRankStateRoundTrips) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 13);
  CheckpointMeta meta = make_meta(c, 6);
  meta.world_size = 3;
  meta.ranks = {{7, uint64_t(1) << 40}, {8, 2}, {UINT64_MAX, 3}};
  const std::string path = save_checkpoint(dir_.string(), meta, t, a.tensors(), 0);
  const CheckpointMeta got = read_checkpoint_meta(path);
  EXPECT_EQ(got.world_size, 3);
  ASSERT_EQ(got.ranks.size(), 3u);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(got.ranks[r].data_cursor, meta.ranks[r].data_cursor) << r;
    EXPECT_EQ(got.ranks[r].rng_offset, meta.ranks[r].rng_offset) << r;
  }
  Arenas b(t);
  CheckpointMeta loaded;
  load_checkpoint(path, t, b.tensors(), loaded);
  ASSERT_EQ(loaded.ranks.size(), 3u);
  EXPECT_EQ(loaded.ranks[2].data_cursor, UINT64_MAX);

  // world_size and the per-rank entries must agree, and one rank writes the whole arena.
  CheckpointMeta bad = meta;
  bad.ranks.resize(2);
  expect_error([&] { save_checkpoint(dir_.string(), bad, t, a.tensors(), 0); }, {"world_size"});
  CheckpointTensors part = a.tensors();
  part.shard_begin = 16;
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, part, 0); }, {"whole parameter arena"});
  EXPECT_FALSE(fs::exists(dir_ / "step_00000006.h5.tmp"));
}

// What one async rank saves besides the weights: the center's momentum set (random inside every tensor, zero in
// the padding) and this rank's flat arrays exp_avg, exp_avg_sq, residual of `len` floats each.
struct AsyncState {
  std::vector<float> momentum;
  std::vector<std::vector<float>> arrays;
  size_t len = 0;
};

const std::vector<std::string> ASYNC_ARRAYS = {"exp_avg", "exp_avg_sq", "residual"};

AsyncState random_async_state(const ParamTable& t, size_t len, uint32_t seed) {
  AsyncState a;
  a.momentum.assign(t.total_numel(), 0.0f);
  a.len = len;
  Philox rng(seed, 0, 1, RNG_PURPOSE_TEST);
  for (const ParamInfo& p : t.params())
    for (size_t i = 0; i < p.numel; ++i) a.momentum[p.offset + i] = 0.1f * rng.normal();
  for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k) {
    a.arrays.emplace_back(len);
    for (float& x : a.arrays.back()) x = rng.normal();
  }
  return a;
}

// The meta of an async save by one process: rank 0 is a worker owning the three arrays.
CheckpointMeta make_async_meta(const ModelConfig& c, int64_t step) {
  CheckpointMeta m = make_meta(c, step);
  m.mode = "async";
  m.async_version = (uint64_t(1) << 33) + 5;  // needs all 64 bits
  m.ranks.at(0).role = "worker";
  m.ranks.at(0).optimizer_step = step * 4 + 1;
  m.ranks.at(0).seq = (uint64_t(1) << 40) + 3;
  m.ranks.at(0).arrays = ASYNC_ARRAYS;
  return m;
}

// Weights, the momentum set and rank 0's arrays, as an async center+worker in one process saves them (no AdamW
// moments in the arena sets: a worker's live in its rank arrays).
CheckpointTensors async_tensors(Arenas& arenas, AsyncState& a) {
  CheckpointTensors tt{arenas.params.data(), nullptr, nullptr};
  tt.extra_sets = {{"/optimizer/momentum_buffer", a.momentum.data()}};
  for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k) tt.rank_arrays.emplace_back(ASYNC_ARRAYS[k], a.arrays[k].data());
  tt.rank_array_len = a.len;
  return tt;
}

// Buffers for load_rank_arrays, filled with `fill`.
struct RankArraysDst {
  std::vector<std::vector<float>> arrays;
  RankArraysDst(size_t len, float fill) : arrays(ASYNC_ARRAYS.size(), std::vector<float>(len, fill)) {}
  std::vector<std::pair<std::string, float*>> dst() {
    std::vector<std::pair<std::string, float*>> d;
    for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k) d.emplace_back(ASYNC_ARRAYS[k], arrays[k].data());
    return d;
  }
};

TEST_F(CheckpointTest, AsyncExtraSetAndRankArraysRoundTrip) {
  const ModelConfig c = padded_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 16);
  const size_t len = (size_t(1) << 20) + 5;  // two chunks, the second partial
  AsyncState a = random_async_state(t, len, 16);
  const CheckpointMeta meta = make_async_meta(c, 12);
  const std::string path = save_checkpoint(dir_.string(), meta, t, async_tensors(src, a), 0);

  // Weights and the extra set come back bitwise; padding stays untouched (zero on both sides).
  std::vector<float> params(t.total_numel(), 0.0f), momentum(t.total_numel(), 0.0f);
  CheckpointTensors load{params.data(), nullptr, nullptr};
  load.extra_sets = {{"/optimizer/momentum_buffer", momentum.data()}};
  CheckpointMeta got;
  load_checkpoint(path, t, load, got);
  EXPECT_EQ(params, src.params);
  EXPECT_EQ(momentum, a.momentum);

  EXPECT_EQ(got.mode, "async");
  EXPECT_EQ(got.async_version, meta.async_version);
  ASSERT_EQ(got.ranks.size(), 1u);
  EXPECT_EQ(got.ranks[0].role, "worker");
  EXPECT_EQ(got.ranks[0].optimizer_step, meta.ranks[0].optimizer_step);
  EXPECT_EQ(got.ranks[0].seq, meta.ranks[0].seq);
  EXPECT_EQ(got.ranks[0].arrays, ASYNC_ARRAYS);
  EXPECT_EQ(got.ranks[0].data_cursor, meta.ranks[0].data_cursor);
  EXPECT_EQ(read_checkpoint_meta(path).ranks.at(0).arrays, ASYNC_ARRAYS);

  RankArraysDst back(len, -1.0f);
  ASSERT_TRUE(load_rank_arrays(path, 0, back.dst(), len));
  for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k) EXPECT_EQ(back.arrays[k], a.arrays[k]) << ASYNC_ARRAYS[k];
  std::vector<float> residual(len, -1.0f);  // any subset, in any order
  ASSERT_TRUE(load_rank_arrays(path, 0, {{"residual", residual.data()}}, len));
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
  expect_error([&] { load_checkpoint(path, t, want.tensors(), got); },
               {path, "/optimizer/exp_avg/transformer/wte/weight", "is missing"});
}

TEST_F(CheckpointTest, FilesWithoutAsyncAttributesStillLoad) {
  // A sync save writes exactly the attributes files had before the async additions: none of the new ones.
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 17);
  CheckpointMeta meta = make_meta(c, 5);
  meta.async_version = 9;  // only stored in async mode
  const std::string path = save_checkpoint(dir_.string(), meta, t, a.tensors(), 0);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_EQ(H5Aexists(f, "async_version"), 0);
  for (const char* attr : {"role", "optimizer_step", "seq"})
    EXPECT_EQ(H5Aexists_by_name(f, "/ranks/0", attr, H5P_DEFAULT), 0) << attr;
  H5Fclose(f);

  Arenas b(t);
  CheckpointMeta got;
  got.async_version = 1;
  load_checkpoint(path, t, b.tensors(), got);
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
  EXPECT_FALSE(load_rank_arrays(path, 0, dst.dst(), 16));
  EXPECT_EQ(dst.arrays[0], std::vector<float>(16, -1.0f));
  std::vector<float> momentum(t.total_numel(), 0.0f);
  CheckpointTensors with_set = b.tensors();
  with_set.extra_sets = {{"/optimizer/momentum_buffer", momentum.data()}};
  const Error e = expect_error([&] { load_checkpoint(path, t, with_set, got); },
                               {path, "/optimizer/momentum_buffer/transformer/wte/weight", "is missing"});
  EXPECT_NE(e.hint().find("mode sync"), std::string::npos) << e.hint();
}

TEST_F(CheckpointTest, LoadRankArraysReturnsFalseForMissingRankOrName) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 18);
  AsyncState a = random_async_state(t, 777, 18);
  const std::string path = save_checkpoint(dir_.string(), make_async_meta(c, 3), t, async_tensors(src, a), 0);
  RankArraysDst dst(777, -1.0f);
  EXPECT_FALSE(load_rank_arrays(path, 1, dst.dst(), 777));  // more workers than the writer had
  EXPECT_FALSE(load_rank_arrays(path, 7, dst.dst(), 777));
  std::vector<float> x(777, -1.0f), y(777, -1.0f);
  EXPECT_FALSE(load_rank_arrays(path, 0, {{"exp_avg", x.data()}, {"momentum", y.data()}}, 777));
  EXPECT_EQ(x, std::vector<float>(777, -1.0f));  // nothing read when any name is missing
  for (const std::vector<float>& arr : dst.arrays) EXPECT_EQ(arr, std::vector<float>(777, -1.0f));
  EXPECT_TRUE(load_rank_arrays(path, 0, dst.dst(), 777));
  EXPECT_EQ(dst.arrays[1], a.arrays[1]);
}

TEST_F(CheckpointTest, RankArrayOfWrongLengthOrCorruptedIsAnError) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 19);
  const size_t len = 4099;
  AsyncState a = random_async_state(t, len, 19);
  for (int i = 0; i < 16; ++i) a.arrays[2][len / 2 + size_t(i)] = 7000.0f + 0.125f * float(i);  // a marker
  const std::string marker(reinterpret_cast<const char*>(&a.arrays[2][len / 2]), 16 * sizeof(float));
  const std::string path = save_checkpoint(dir_.string(), make_async_meta(c, 4), t, async_tensors(src, a), 0);

  RankArraysDst dst(len + 1, -1.0f);
  const Error e = expect_error([&] { load_rank_arrays(path, 0, dst.dst(), len + 1); },
                               {path, "/ranks/0/exp_avg", "[4099]", "[4100]"});
  EXPECT_NE(e.hint().find("different model config"), std::string::npos) << e.hint();
  for (const std::vector<float>& arr : dst.arrays) EXPECT_EQ(arr, std::vector<float>(len + 1, -1.0f));

  flip_marker(path, marker);
  RankArraysDst back(len, -1.0f);
  const Error corrupt = expect_error([&] { load_rank_arrays(path, 0, back.dst(), len); },
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

TEST_F(CheckpointTest, AsyncSaveArgumentsAreChecked) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas src = random_arenas(t, 20);
  AsyncState a = random_async_state(t, 64, 20);
  const CheckpointMeta meta = make_async_meta(c, 8);

  CheckpointTensors renamed = async_tensors(src, a);
  renamed.rank_arrays[1].first = "exp_avg2";
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, renamed, 0); }, {"rank_arrays", "ranks[0].arrays"});
  CheckpointTensors reordered = async_tensors(src, a);
  std::swap(reordered.rank_arrays[0], reordered.rank_arrays[2]);
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, reordered, 0); }, {"rank_arrays"});
  CheckpointTensors no_len = async_tensors(src, a);
  no_len.rank_array_len = 0;
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, no_len, 0); }, {"rank_array_len"});

  // Arrays of a rank that does not take part in the save would never be written.
  CheckpointMeta two = meta;
  two.world_size = 2;
  two.ranks.push_back(two.ranks[0]);
  expect_error([&] { save_checkpoint(dir_.string(), two, t, async_tensors(src, a), 0); }, {"ranks[1]", "takes part"});

  for (const char* prefix : {"/model", "/model/x", "/optimizer/exp_avg", "/ranks/0/m", "optimizer/m", "/config", "/"}) {
    CheckpointTensors bad = async_tensors(src, a);
    bad.extra_sets.emplace_back(prefix, a.momentum.data());
    expect_error([&] { save_checkpoint(dir_.string(), meta, t, bad, 0); }, {"extra_sets", prefix});
  }
  CheckpointTensors no_data = async_tensors(src, a);
  no_data.extra_sets[0].second = nullptr;  // one rank writes the whole arena: it needs the set
  expect_error([&] { save_checkpoint(dir_.string(), meta, t, no_data, 0); }, {"/optimizer/momentum_buffer"});
  EXPECT_FALSE(fs::exists(dir_ / "step_00000008.h5.tmp"));
  EXPECT_FALSE(fs::exists(dir_ / "step_00000008.h5"));
}

// Saves steps 1, 2 and 3 into `folder` (keeping all) and returns the marker planted in step 3's wte.
std::string save_three(const fs::path& folder) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 14);
  save_checkpoint(folder.string(), make_meta(c, 1), t, a.tensors(), 0);
  save_checkpoint(folder.string(), make_meta(c, 2), t, a.tensors(), 0);
  const std::string marker = plant_marker(t, a, 3000.0f);
  save_checkpoint(folder.string(), make_meta(c, 3), t, a.tensors(), 0);
  return marker;
}

TEST_F(CheckpointTest, AutoResumeSkipsCorruptedNewest) {
  const fs::path folder = dir_ / "ckpt";
  const std::string marker = save_three(folder);
  const std::string s1 = (folder / "step_00000001.h5").string(), s2 = (folder / "step_00000002.h5").string(),
                    s3 = (folder / "step_00000003.h5").string();
  flip_marker(s3, marker);
  EXPECT_EQ(read_checkpoint_meta(s3).step, 3);  // the metadata still reads: only a full read notices

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), s2);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("checkpoint " + s3 +
                     " is unreadable (dataset /model/transformer/wte/weight is corrupted "
                     "(checksum mismatch)); falling back to " +
                     s2),
            std::string::npos)
      << log;

  // An explicit --resume of the damaged file fails with the clear error instead.
  expect_error([&] { resolve_resume(folder.string(), s3); }, {s3, "corrupted (checksum mismatch)"});

  // Fallbacks are older than the file `latest` names, never newer leftovers; with none readable, an error rather
  // than a silent fresh start.
  fs::resize_file(s2, fs::file_size(s2) / 2);
  write_text(folder / "latest", "step_00000002.h5\n");
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), s1);
  fs::resize_file(s1, 100);
  ::testing::internal::CaptureStderr();
  expect_error([&] { resolve_resume(folder.string(), "auto"); }, {folder.string(), "none of its"});
  const std::string log2 = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log2.find("checkpoint " + s1 + " is unreadable"), std::string::npos) << log2;
}

TEST_F(CheckpointTest, AutoResumeSkipsTruncatedNewest) {
  const fs::path folder = dir_ / "ckpt";
  save_three(folder);
  const std::string s2 = (folder / "step_00000002.h5").string(), s3 = (folder / "step_00000003.h5").string();
  fs::resize_file(s3, fs::file_size(s3) - 1000);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), s2);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("checkpoint " + s3 + " is unreadable (truncated"), std::string::npos) << log;
  EXPECT_NE(log.find("falling back to " + s2), std::string::npos) << log;
}

TEST_F(CheckpointTest, AutoResumeWhenLatestNamesMissingFile) {
  const fs::path folder = dir_ / "ckpt";
  save_three(folder);
  EXPECT_EQ(read_text(folder / "latest"), "step_00000003.h5\n");
  fs::remove(folder / "step_00000003.h5");
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), (folder / "step_00000002.h5").string());
  write_text(folder / "latest", "step_00000009.h5\n");
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), (folder / "step_00000002.h5").string());
}

TEST_F(CheckpointTest, ScanReportsEveryDatasetAndCorruption) {
  ModelConfig c = small_config();
  c.n_layer = 11;  // h/10 exists: the listing must put it after h/2
  c.n_embd = 16;
  c.n_head = 1;
  c.vocab_size = 1024;
  const ParamTable t(c);
  Arenas a = random_arenas(t, 15);
  const std::string marker = plant_marker(t, a, 5000.0f);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 1), t, a.tensors(), 0);
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

// select_flat_range on a 3-d dataset: every flat range [lo, hi) reads exactly the elements lo .. hi-1.
TEST(CheckpointFlatRange, SelectsEveryRangeOf3dDataset) {
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
      H5Handle mspace(H5Screate_simple(1, &count, nullptr), H5Sclose);
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
