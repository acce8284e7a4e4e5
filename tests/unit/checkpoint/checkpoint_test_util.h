// Shared pieces of the checkpoint unit tests: a small model, random arenas and metadata, async per-rank state,
// error and file-damage helpers, and a fixture that gives each test a fresh folder.
#pragma once

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/philox.h"
#include "model/model_config.h"
#include "model/param_table.h"
#include "test_support.h"

namespace ember::checkpoint_test {

namespace fs = std::filesystem;

namespace fs = std::filesystem;

inline ModelConfig small_config() {
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
  // The weights and both moments, whole: what a one-rank sync save writes and a resume reads.
  std::vector<TensorSet> sets() {
    return {{SET_MODEL, params.data()}, {SET_EXP_AVG, m.data()}, {SET_EXP_AVG_SQ, v.data()}};
  }
  CheckpointContents contents() { return CheckpointContents{sets()}; }
};

inline Arenas random_arenas(const ParamTable& t, uint32_t step) {
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

inline CheckpointMeta make_meta(const ModelConfig& c, int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.tokens_seen = step * 1024 + 7;
  m.world_size = 1;
  m.mode = TrainingMode::sync;
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

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_text(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

// Runs `fn`, expects an ember::Error whose message contains every string of `in_what` and whose hint is non-empty;
// returns the error for further checks.
inline Error expect_error(const std::function<void()>& fn, const std::vector<std::string>& in_what) {
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
inline void flip_marker(const std::string& path, const std::string& marker) {
  std::string bytes = read_text(path);
  const size_t at = bytes.find(marker);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes.find(marker, at + 1), std::string::npos) << "marker must be unique";
  for (size_t i = 0; i < 8; ++i) bytes[at + 20 + i] = char(~bytes[at + 20 + i]);
  write_text(path, bytes);
}

// Puts 16 values no random draw produces in the middle of wte and returns their bytes, to find them in the file.
inline std::string plant_marker(const ParamTable& t, Arenas& a, float base) {
  const size_t mid = t.wte().offset + t.wte().numel / 2;
  for (int i = 0; i < 16; ++i) a.params[mid + size_t(i)] = base + 0.125f * float(i);
  return std::string(reinterpret_cast<const char*>(&a.params[mid]), 16 * sizeof(float));
}

// True when the dataset `name` of the open file `f` is chunked with the Fletcher32 filter.
inline bool chunked_with_fletcher32(hid_t f, const char* name) {
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
inline std::vector<hsize_t> dims_of(hid_t f, const char* name) {
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

inline ModelConfig padded_config() { return test::padded_model_config(); }

inline bool inside_a_tensor(const ParamTable& t, size_t i) {
  return std::any_of(t.params().begin(), t.params().end(),
                     [&](const ParamInfo& p) { return i >= p.offset && i < p.offset + p.numel; });
}
// What one async rank saves besides the weights: the center's momentum set (random inside every tensor, zero in
// the padding) and this rank's flat arrays exp_avg, exp_avg_sq, residual of `len` floats each.
struct AsyncState {
  std::vector<float> momentum;
  std::vector<std::vector<float>> arrays;
  size_t len = 0;
};

inline const std::vector<std::string> ASYNC_ARRAYS = {"exp_avg", "exp_avg_sq", "residual"};

inline AsyncState random_async_state(const ParamTable& t, size_t len, uint32_t seed) {
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
inline CheckpointMeta make_async_meta(const ModelConfig& c, int64_t step) {
  CheckpointMeta m = make_meta(c, step);
  m.mode = TrainingMode::async;
  m.async_version = (uint64_t(1) << 33) + 5;  // needs all 64 bits
  m.ranks.at(0).role = "worker";
  m.ranks.at(0).optimizer_step = step * 4 + 1;
  m.ranks.at(0).seq = (uint64_t(1) << 40) + 3;
  m.ranks.at(0).arrays = ASYNC_ARRAYS;
  return m;
}

// Weights, the momentum set and rank 0's arrays, as an async center+worker in one process saves them (no AdamW
// moments in the arena sets: a worker's live in its rank arrays).
inline CheckpointContents async_contents(Arenas& arenas, AsyncState& a) {
  CheckpointContents cc;
  cc.sets = {{SET_MODEL, arenas.params.data()}, {SET_MOMENTUM, a.momentum.data()}};
  for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k)
    cc.rank_arrays.push_back({ASYNC_ARRAYS[k], a.arrays[k].data(), a.len});
  return cc;
}

// Buffers for load_rank_arrays, filled with `fill`.
struct RankArraysDst {
  std::vector<std::vector<float>> arrays;
  RankArraysDst(size_t len, float fill) : arrays(ASYNC_ARRAYS.size(), std::vector<float>(len, fill)) {}
  std::vector<RankArray> dst() {
    std::vector<RankArray> d;
    for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k) d.push_back({ASYNC_ARRAYS[k], arrays[k].data(), arrays[k].size()});
    return d;
  }
};

}  // namespace ember::checkpoint_test
