// Checkpoints written by an earlier ember still load: the files in tests/fixtures (a sync run on 2 ranks, an async
// run of a center and 2 workers) are read through the public API and compared with what the HDF5 C API reads from
// them directly, so the expected values never come from the code under test.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "model/model_config.h"
#include "model/param_table.h"

namespace ember {
namespace {

const std::string SYNC_FILE = std::string(EMBER_SOURCE_DIR) + "/tests/fixtures/checkpoint_v1_sync_np2.h5";
const std::string ASYNC_FILE = std::string(EMBER_SOURCE_DIR) + "/tests/fixtures/checkpoint_v1_async_np3.h5";
const std::vector<std::string> WORKER_ARRAYS = {"exp_avg", "exp_avg_sq", "residual"};

// The model both fixtures were trained with.
ModelConfig fixture_model() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 16;
  c.vocab_size = 256;
  return c;
}

// Direct reads with the HDF5 C API, independent of src/checkpoint. A failed call fails the test.
class RawFile {
 public:
  // Without file locking, as ember opens checkpoints: HDF5 shares one open file between both opens, and refuses a
  // second open whose locking differs.
  explicit RawFile(const std::string& path) {
    const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
    H5Pset_file_locking(fapl, false, true);
#endif
    id_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    EXPECT_GE(id_, 0) << path;
  }
  ~RawFile() {
    if (id_ >= 0) H5Fclose(id_);
  }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;

  // Every element of the float dataset `path`, in row-major order.
  std::vector<float> floats(const std::string& path) const {
    std::vector<float> out;
    const hid_t d = H5Dopen2(id_, path.c_str(), H5P_DEFAULT);
    EXPECT_GE(d, 0) << path;
    if (d < 0) return out;
    const hid_t s = H5Dget_space(d);
    out.resize(size_t(H5Sget_simple_extent_npoints(s)));
    EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), 0) << path;
    H5Sclose(s);
    H5Dclose(d);
    return out;
  }

  template <typename T>
  T number(const std::string& obj, const char* name, hid_t mem_type) const {
    T v{};
    const hid_t a = H5Aopen_by_name(id_, obj.c_str(), name, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(a, 0) << obj << ":" << name;
    if (a < 0) return v;
    EXPECT_GE(H5Aread(a, mem_type, &v), 0) << obj << ":" << name;
    H5Aclose(a);
    return v;
  }
  int64_t i64(const std::string& obj, const char* name) const { return number<int64_t>(obj, name, H5T_NATIVE_INT64); }
  uint64_t u64(const std::string& obj, const char* name) const {
    return number<uint64_t>(obj, name, H5T_NATIVE_UINT64);
  }
  float f32(const std::string& obj, const char* name) const { return number<float>(obj, name, H5T_NATIVE_FLOAT); }

  // A variable-length string attribute (as ember writes them).
  std::string str(const std::string& obj, const char* name) const {
    std::string out;
    const hid_t a = H5Aopen_by_name(id_, obj.c_str(), name, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(a, 0) << obj << ":" << name;
    if (a < 0) return out;
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    char* p = nullptr;
    EXPECT_GE(H5Aread(a, t, &p), 0) << obj << ":" << name;
    if (p) out = p;
    H5free_memory(p);
    H5Tclose(t);
    H5Aclose(a);
    return out;
  }

 private:
  hid_t id_;
};

// Counts the elements of the tensor set at `prefix` whose value in `arena` (holding arena elements [begin, end))
// differs from the file's dataset, over every parameter of `t` inside that range.
size_t differences(const RawFile& raw, const ParamTable& t, const std::string& prefix, const std::vector<float>& arena,
                   size_t begin, size_t end) {
  size_t bad = 0;
  for (const ParamInfo& p : t.params()) {
    std::string path = prefix + "/" + p.name;  // Hugging Face key with '.' -> '/'
    for (char& ch : path)
      if (ch == '.') ch = '/';
    const std::vector<float> want = raw.floats(path);
    EXPECT_EQ(want.size(), p.numel) << path;
    for (size_t i = 0; i < want.size() && i < p.numel; ++i) {
      const size_t at = p.offset + i;
      if (at >= begin && at < end) bad += arena[at - begin] != want[i];
    }
  }
  return bad;
}

TEST(CheckpointCompat, SyncFileOfTwoRanksLoads) {
  const RawFile raw(SYNC_FILE);
  const CheckpointMeta meta = read_checkpoint_meta(SYNC_FILE);
  EXPECT_EQ(meta.step, 3);
  EXPECT_EQ(meta.step, raw.i64("/", "step"));
  EXPECT_EQ(meta.tokens_seen, raw.i64("/", "tokens_seen"));
  EXPECT_EQ(meta.world_size, 2);
  EXPECT_EQ(meta.mode, TrainingMode::sync);
  EXPECT_EQ(raw.str("/", "mode"), "sync");
  EXPECT_EQ(meta.created, raw.str("/", "created"));
  EXPECT_EQ(meta.version, raw.str("/", "ember_version"));
  EXPECT_EQ(meta.model, fixture_model());
  EXPECT_EQ(meta.optimizer_step, raw.i64("/optimizer", "step"));
  EXPECT_EQ(meta.beta1, raw.f32("/optimizer", "beta1"));
  EXPECT_EQ(meta.beta2, raw.f32("/optimizer", "beta2"));
  EXPECT_EQ(meta.eps, raw.f32("/optimizer", "eps"));
  EXPECT_EQ(meta.weight_decay, raw.f32("/optimizer", "weight_decay"));
  EXPECT_EQ(meta.lr, raw.f32("/optimizer", "lr"));
  EXPECT_NE(meta.config_ini.find("[model]"), std::string::npos);
  ASSERT_EQ(meta.ranks.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    const std::string g = "/ranks/" + std::to_string(r);
    EXPECT_EQ(meta.ranks[r].data_cursor, raw.u64(g, "data_cursor")) << r;
    EXPECT_EQ(meta.ranks[r].rng_offset, raw.u64(g, "rng_offset")) << r;
    EXPECT_EQ(meta.ranks[r].role, "") << r;
    EXPECT_TRUE(meta.ranks[r].arrays.empty()) << r;
  }
  EXPECT_EQ(meta.async_version, 0u);

  // The whole arena, then a shard that is neither half the writer had (a resume on another number of ranks).
  const ParamTable t(meta.model);
  const size_t total = t.total_numel();
  for (const auto& [begin, end] : {std::pair<size_t, size_t>{0, total}, {total / 3, 2 * total / 3 + 5}}) {
    std::vector<float> params(total, 0.0f), m(end - begin, 0.0f), v(end - begin, 0.0f);
    CheckpointMeta got;
    load_checkpoint(
        SYNC_FILE, t,
        {{SET_MODEL, params.data()}, {SET_EXP_AVG, m.data(), begin, end}, {SET_EXP_AVG_SQ, v.data(), begin, end}}, got);
    EXPECT_EQ(got.step, meta.step);
    EXPECT_EQ(differences(raw, t, "/model", params, 0, total), 0u);
    EXPECT_EQ(differences(raw, t, "/optimizer/exp_avg", m, begin, end), 0u) << begin << ".." << end;
    EXPECT_EQ(differences(raw, t, "/optimizer/exp_avg_sq", v, begin, end), 0u) << begin << ".." << end;
    size_t nonzero = 0;  // a trained model: the comparison is not of zeros with zeros
    for (float x : m) nonzero += x != 0.0f;
    EXPECT_GT(nonzero, 0u);
  }
  std::vector<float> none(4, -1.0f);
  EXPECT_FALSE(load_rank_arrays(SYNC_FILE, 0, {{"exp_avg", none.data(), none.size()}}));
  verify_checkpoint(SYNC_FILE);
  for (const CheckpointDatasetReport& r : scan_checkpoint(SYNC_FILE)) EXPECT_TRUE(r.ok) << r.path << ": " << r.problem;
}

TEST(CheckpointCompat, AsyncFileOfACenterAndTwoWorkersLoads) {
  const RawFile raw(ASYNC_FILE);
  const CheckpointMeta meta = read_checkpoint_meta(ASYNC_FILE);
  EXPECT_EQ(meta.step, 4);
  EXPECT_EQ(meta.step, raw.i64("/", "step"));
  EXPECT_EQ(meta.tokens_seen, raw.i64("/", "tokens_seen"));
  EXPECT_EQ(meta.world_size, 3);
  EXPECT_EQ(meta.mode, TrainingMode::async);
  EXPECT_EQ(raw.str("/", "mode"), "async");
  EXPECT_EQ(meta.async_version, raw.u64("/", "async_version"));
  EXPECT_GT(meta.async_version, 0u);
  EXPECT_EQ(meta.model, fixture_model());
  EXPECT_EQ(meta.optimizer_step, raw.i64("/optimizer", "step"));
  EXPECT_EQ(meta.lr, raw.f32("/optimizer", "lr"));
  ASSERT_EQ(meta.ranks.size(), 3u);
  for (size_t r = 0; r < 3; ++r) {
    const std::string g = "/ranks/" + std::to_string(r);
    EXPECT_EQ(meta.ranks[r].role, r == 0 ? "center" : "worker") << r;
    EXPECT_EQ(meta.ranks[r].role, raw.str(g, "role")) << r;
    EXPECT_EQ(meta.ranks[r].optimizer_step, raw.i64(g, "optimizer_step")) << r;
    EXPECT_EQ(meta.ranks[r].seq, raw.u64(g, "seq")) << r;
    EXPECT_EQ(meta.ranks[r].data_cursor, raw.u64(g, "data_cursor")) << r;
    EXPECT_EQ(meta.ranks[r].arrays, r == 0 ? std::vector<std::string>{} : WORKER_ARRAYS) << r;
  }

  // The center's weights and momentum.
  const ParamTable t(meta.model);
  const size_t total = t.total_numel();
  std::vector<float> params(total, 0.0f), momentum(total, 0.0f);
  CheckpointMeta got;
  load_checkpoint(ASYNC_FILE, t, {{SET_MODEL, params.data()}, {SET_MOMENTUM, momentum.data()}}, got);
  EXPECT_EQ(got.async_version, meta.async_version);
  EXPECT_EQ(differences(raw, t, "/model", params, 0, total), 0u);
  EXPECT_EQ(differences(raw, t, "/optimizer/momentum_buffer", momentum, 0, total), 0u);

  // Each worker's own AdamW moments and error-feedback residual: flat arrays of the arena's length.
  for (int r = 1; r <= 2; ++r) {
    std::vector<std::vector<float>> arrays(WORKER_ARRAYS.size(), std::vector<float>(total, -1.0f));
    std::vector<RankArray> dst;
    for (size_t k = 0; k < WORKER_ARRAYS.size(); ++k) dst.push_back({WORKER_ARRAYS[k], arrays[k].data(), total});
    ASSERT_TRUE(load_rank_arrays(ASYNC_FILE, r, dst)) << r;
    for (size_t k = 0; k < WORKER_ARRAYS.size(); ++k)
      EXPECT_EQ(arrays[k], raw.floats("/ranks/" + std::to_string(r) + "/" + WORKER_ARRAYS[k])) << r << " " << k;
  }
  std::vector<float> unused(total, -1.0f);
  EXPECT_FALSE(load_rank_arrays(ASYNC_FILE, 0, {{"exp_avg", unused.data(), total}}));  // the center has none
  EXPECT_FALSE(load_rank_arrays(ASYNC_FILE, 3, {{"exp_avg", unused.data(), total}}));  // no third worker

  // A sync resume from it finds no AdamW moments and says so, with today's hint.
  try {
    load_checkpoint(ASYNC_FILE, t, {{SET_MODEL, params.data()}, {SET_EXP_AVG, unused.data()}}, got);
    ADD_FAILURE() << "expected a missing-dataset error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/optimizer/exp_avg/transformer/wte/weight is missing"), std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("no optimizer state"), std::string::npos) << e.hint();
  }
  verify_checkpoint(ASYNC_FILE);
  for (const CheckpointDatasetReport& r : scan_checkpoint(ASYNC_FILE)) EXPECT_TRUE(r.ok) << r.path << ": " << r.problem;
}

}  // namespace
}  // namespace ember
