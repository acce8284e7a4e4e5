// What the parallel checkpoint tests share (tests/mpi/test_checkpoint_mpi*.cpp): arenas of values that are a function
// of the index only, shard splits at mid-row cuts, load-and-compare over any split, and a fresh folder shared by all
// ranks for each test.
#pragma once

#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "model/model_config.h"
#include "model/param_table.h"
#include "parallel/world.h"
#include "test_support.h"

namespace ember {

namespace fs = std::filesystem;

using test::world_rank;
using test::world_size;

// Every rank calls this at the same point, so a failure on any rank fails the test on all of them.
inline long long total_over_ranks(long long local) {
  long long total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

inline std::string broadcast_from_root(std::string s) {
  unsigned long long n = s.size();
  MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  s.resize(size_t(n));
  if (n) MPI_Bcast(s.data(), int(n), MPI_CHAR, 0, MPI_COMM_WORLD);
  return s;
}

// True on every rank when `s` is the same string on every rank.
inline bool same_on_all_ranks(const std::string& s) { return total_over_ranks(broadcast_from_root(s) != s) == 0; }

inline ModelConfig test_config() { return test::padded_model_config(); }

// The values every rank stores, a function of the arena index only, exact in fp32.
inline float param_value(size_t i) { return float(i % 1000) * 0.25f + 1.0f; }
inline float exp_avg_value(size_t i) { return float(i % 777) * 0.5f - 100.0f; }
inline float exp_avg_sq_value(size_t i) { return float(i % 999) * 0.125f + 3.0f; }
constexpr float SENTINEL = -4242.0f;  // what the padding between tensors holds after a load: never written

inline bool inside_a_tensor(const ParamTable& t, size_t i) {
  return std::any_of(t.params().begin(), t.params().end(),
                     [&](const ParamInfo& p) { return i >= p.offset && i < p.offset + p.numel; });
}

// The first arena index >= i that lies strictly inside a row of a 2-d tensor (not at a row start), so shard
// boundaries cut rows and the writer's partial-row hyperslabs get exercised.
inline size_t mid_row_at_or_after(const ParamTable& t, size_t i) {
  for (size_t j = i; j < t.total_numel(); ++j)
    for (const ParamInfo& p : t.params())
      if (p.shape.size() == 2 && j > p.offset && j < p.offset + p.numel && (j - p.offset) % size_t(p.shape[1]) != 0)
        return j;
  return t.total_numel();
}

// Boundaries of `pieces` shards: cuts near total * weight_k / sum(weights), each moved to a mid-row index.
inline std::vector<size_t> split(const ParamTable& t, const std::vector<size_t>& weights) {
  size_t sum = 0;
  for (size_t w : weights) sum += w;
  std::vector<size_t> b = {0};
  size_t acc = 0;
  for (size_t k = 0; k + 1 < weights.size(); ++k) {
    acc += weights[k];
    b.push_back(std::max(b.back(), mid_row_at_or_after(t, t.total_numel() * acc / sum)));
  }
  b.push_back(t.total_numel());
  return b;
}

inline std::vector<size_t> even_split(const ParamTable& t, int pieces) {
  return split(t, std::vector<size_t>(size_t(pieces), 1));
}

struct RankArenas {
  std::vector<float> params, m, v;  // params: the whole arena; m, v: the shard [begin, end)
  size_t begin = 0, end = 0;
  // The weights whole, the moments of [begin, end), and that range to write.
  CheckpointContents contents() {
    return {{{SET_MODEL, params.data()}, {SET_EXP_AVG, m.data(), begin, end}, {SET_EXP_AVG_SQ, v.data(), begin, end}},
            begin,
            end};
  }
};

inline RankArenas filled(const ParamTable& t, size_t begin, size_t end) {
  RankArenas a;
  a.begin = begin;
  a.end = end;
  a.params.resize(t.total_numel());
  for (size_t i = 0; i < a.params.size(); ++i) a.params[i] = param_value(i);
  for (size_t i = begin; i < end; ++i) {
    a.m.push_back(exp_avg_value(i));
    a.v.push_back(exp_avg_sq_value(i));
  }
  return a;
}

// Loads `path` with the moment shard [begin, end) and counts the elements that differ from what was saved.
inline long long load_and_check(const std::string& path, const ParamTable& t, size_t begin, size_t end,
                                CheckpointMeta& meta) {
  std::vector<float> params(t.total_numel(), SENTINEL), m(end - begin, SENTINEL), v(end - begin, SENTINEL);
  load_checkpoint(
      path, t,
      {{SET_MODEL, params.data()}, {SET_EXP_AVG, m.data(), begin, end}, {SET_EXP_AVG_SQ, v.data(), begin, end}}, meta);
  long long bad = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const bool in = inside_a_tensor(t, i);
    const bool ok =
        params[i] == (in ? param_value(i) : SENTINEL) &&
        (i < begin || i >= end ||
         (m[i - begin] == (in ? exp_avg_value(i) : SENTINEL) && v[i - begin] == (in ? exp_avg_sq_value(i) : SENTINEL)));
    if (!ok && bad++ < 5)
      fprintf(stderr, "[rank %d] %s shard [%zu, %zu): arena index %zu differs\n", world_rank(), path.c_str(), begin,
              end, i);
  }
  return bad;
}

// MPI_COMM_WORLD as a World, described once (collectively, on the first call of every rank).
inline const World& test_world() {
  static const World world = make_world();
  return world;
}

inline CheckpointMeta make_meta(const ModelConfig& c, int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.tokens_seen = step * 4096;
  m.world_size = world_size();
  m.config_ini = "[model]\nn_layer = 2\n";
  m.model = c;
  m.optimizer_step = step;
  m.lr = 1e-3f;
  m.ranks.resize(size_t(world_size()));
  for (size_t r = 0; r < m.ranks.size(); ++r) m.ranks[r] = {100 + r, (uint64_t(1) << 40) + 7 * r};
  return m;
}

// Runs `fn`, which must throw ember::Error; returns its message, or "" (and fails) if it did not throw.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "[rank " << world_rank() << "] expected ember::Error";
  return "";
}

// A fresh folder shared by all ranks (rank 0 picks the unique name), removed after the test.
class CheckpointMpiFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name;
    if (world_rank() == 0) {
      std::string tmpl = (fs::temp_directory_path() / "ember_ckpt_mpi_XXXXXX").string();
      if (::mkdtemp(tmpl.data()) != nullptr) name = tmpl;
    }
    dir_ = broadcast_from_root(name);
    ASSERT_FALSE(dir_.empty()) << "mkdtemp failed";
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (world_rank() == 0) fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

}  // namespace ember
