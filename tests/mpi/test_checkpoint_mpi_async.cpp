// Parallel checkpoint tests of the async layout: a center writing the arena and an extra set, workers only their
// own flat arrays, read back exactly; a mistake on one rank fails every rank.
#include <gtest/gtest.h>

#include "checkpoint_mpi_test_util.h"

namespace ember {
namespace {

class CheckpointMpiAsync : public CheckpointMpiFolder {};

// Async values, a function of (rank, array, index) only, exact in fp32 and distinct across ranks and arrays.
float momentum_value(size_t i) { return float(i % 555) * 0.375f - 50.0f; }
float rank_array_value(size_t r, size_t k, size_t i) {
  return float((i * 31 + 7) % 2039) + 2048.0f * float(k) + 8192.0f * float(r) + 0.5f;
}
const std::vector<std::string> ASYNC_ARRAYS = {"exp_avg", "exp_avg_sq", "residual"};
constexpr size_t ASYNC_LEN = (size_t(1) << 20) + 3;  // two chunks, the second partial

// An async run's meta: rank 0 the center, every other rank a worker with its three arrays.
CheckpointMeta make_async_meta(const ModelConfig& c, int64_t step) {
  CheckpointMeta m = make_meta(c, step);
  m.mode = TrainingMode::async;
  m.async_version = (uint64_t(1) << 35) + 9;
  m.ranks[0].role = "center";
  for (size_t r = 1; r < m.ranks.size(); ++r) {
    m.ranks[r].role = "worker";
    m.ranks[r].optimizer_step = 1000 + int64_t(r);
    m.ranks[r].seq = (uint64_t(1) << 40) + r;
    m.ranks[r].arrays = ASYNC_ARRAYS;
  }
  return m;
}

// Counts the elements of worker r's arrays in `path` that differ from rank_array_value.
long long check_rank_arrays(const std::string& path, size_t r) {
  std::vector<std::vector<float>> got(ASYNC_ARRAYS.size(), std::vector<float>(ASYNC_LEN, SENTINEL));
  std::vector<RankArray> dst;
  for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k) dst.push_back({ASYNC_ARRAYS[k], got[k].data(), ASYNC_LEN});
  if (!load_rank_arrays(path, int(r), dst)) {
    fprintf(stderr, "[rank %d] %s: no arrays for rank %zu\n", world_rank(), path.c_str(), r);
    return 1;
  }
  long long bad = 0;
  for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k)
    for (size_t i = 0; i < ASYNC_LEN; ++i)
      if (got[k][i] != rank_array_value(r, k, i) && bad++ < 5)
        fprintf(stderr, "[rank %d] %s: /ranks/%zu/%s[%zu] differs\n", world_rank(), path.c_str(), r,
                ASYNC_ARRAYS[k].c_str(), i);
  return bad;
}

TEST_F(CheckpointMpiAsync, AsyncCenterAndWorkersRoundTrip) {
  const ModelConfig c = test_config();
  const ParamTable t(c);
  const int rank = world_rank(), n = world_size();
  const size_t total = t.total_numel();
  const CheckpointMeta meta = make_async_meta(c, 60);

  // The center holds the global weights and the momentum; a worker's own weights differ and must not be written.
  std::vector<float> params(total), momentum;
  for (size_t i = 0; i < total; ++i) params[i] = rank == 0 ? param_value(i) : -1.0f - float(rank);
  std::vector<std::vector<float>> arrays;
  CheckpointContents tt;
  tt.write_begin = rank == 0 ? 0 : total;
  tt.write_end = total;
  if (rank == 0) {
    for (size_t i = 0; i < total; ++i) momentum.push_back(momentum_value(i));
    tt.sets = {{SET_MODEL, params.data()}, {SET_MOMENTUM, momentum.data()}};
  } else {
    tt.sets = {{SET_MODEL, params.data()}, {SET_MOMENTUM, nullptr}};
    for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k) {
      arrays.emplace_back(ASYNC_LEN);
      for (size_t i = 0; i < ASYNC_LEN; ++i) arrays[k][i] = rank_array_value(size_t(rank), k, i);
      tt.rank_arrays.push_back({ASYNC_ARRAYS[k], arrays[k].data(), ASYNC_LEN});
    }
  }
  const std::string path = save_checkpoint(dir_.string(), meta, t, tt, 0, test_world());
  EXPECT_TRUE(same_on_all_ranks(path));

  // Every rank reads the weights and the momentum whole, and the arrays of every worker.
  long long bad = 0;
  std::vector<float> w(total, SENTINEL), mom(total, SENTINEL);
  const std::vector<TensorSet> load = {{SET_MODEL, w.data()}, {SET_MOMENTUM, mom.data()}};
  CheckpointMeta got;
  load_checkpoint(path, t, load, got);
  for (size_t i = 0; i < total; ++i) {
    const bool in = inside_a_tensor(t, i);
    if ((w[i] != (in ? param_value(i) : SENTINEL) || mom[i] != (in ? momentum_value(i) : SENTINEL)) && bad++ < 5)
      fprintf(stderr, "[rank %d] arena index %zu differs\n", rank, i);
  }
  for (int r = 1; r < n; ++r) bad += check_rank_arrays(path, size_t(r));
  std::vector<float> unused(ASYNC_LEN, SENTINEL);
  EXPECT_FALSE(load_rank_arrays(path, n, {{"exp_avg", unused.data(), ASYNC_LEN}}));  // more workers than written
  EXPECT_FALSE(load_rank_arrays(path, 0, {{"exp_avg", unused.data(), ASYNC_LEN}}));  // the center has none
  EXPECT_EQ(total_over_ranks(bad), 0);

  EXPECT_EQ(got.mode, TrainingMode::async);
  EXPECT_EQ(got.async_version, meta.async_version);
  ASSERT_EQ(got.ranks.size(), size_t(n));
  EXPECT_EQ(got.ranks[0].role, "center");
  EXPECT_EQ(got.ranks[0].optimizer_step, 0);
  EXPECT_EQ(got.ranks[0].seq, 0u);
  EXPECT_TRUE(got.ranks[0].arrays.empty());
  for (size_t r = 1; r < got.ranks.size(); ++r) {
    EXPECT_EQ(got.ranks[r].role, "worker") << r;
    EXPECT_EQ(got.ranks[r].optimizer_step, 1000 + int64_t(r)) << r;
    EXPECT_EQ(got.ranks[r].seq, (uint64_t(1) << 40) + r) << r;
    EXPECT_EQ(got.ranks[r].arrays, ASYNC_ARRAYS) << r;
    EXPECT_EQ(got.ranks[r].data_cursor, 100 + r) << r;
  }

  // One process checks the whole file as `ember inspect` and --resume do: every dataset, the flat arrays included.
  long long damaged = 0;
  if (rank == 0) {
    verify_checkpoint(path);
    const std::vector<CheckpointDatasetReport> reports = scan_checkpoint(path);
    EXPECT_EQ(reports.size(), 1 + 2 * t.params().size() + ASYNC_ARRAYS.size() * size_t(n - 1));
    size_t flat = 0;
    for (const CheckpointDatasetReport& r : reports) {
      damaged += !r.ok;
      if (r.path.rfind("/ranks/", 0) != 0) continue;
      ++flat;
      EXPECT_EQ(r.dtype, "float32") << r.path;
      EXPECT_EQ(r.shape, (std::vector<uint64_t>{ASYNC_LEN})) << r.path;
    }
    EXPECT_EQ(flat, ASYNC_ARRAYS.size() * size_t(n - 1));
  }
  EXPECT_EQ(total_over_ranks(damaged), 0);
}

TEST_F(CheckpointMpiAsync, AsyncMistakeOnOneRankFailsEveryRank) {
  const int n = world_size();
  if (n < 2) GTEST_SKIP() << "needs a center and at least one worker (2 ranks)";
  const ModelConfig c = test_config();
  const ParamTable t(c);
  const int rank = world_rank();
  const size_t total = t.total_numel();
  std::vector<float> params(total, 1.0f), momentum(total, 2.0f), array(16, 3.0f);
  auto contents = [&](const std::string& array_name) {
    CheckpointContents tt;
    tt.sets = {{SET_MODEL, params.data()}, {SET_MOMENTUM, rank == 0 ? momentum.data() : nullptr}};
    tt.write_begin = rank == 0 ? 0 : total;
    tt.write_end = total;
    if (rank > 0)
      for (const std::string& name : ASYNC_ARRAYS)
        tt.rank_arrays.push_back({name == "residual" ? array_name : name, array.data(), array.size()});
    return tt;
  };
  // The last worker names an array differently from the metadata.
  std::string e = error_of([&] {
    save_checkpoint(dir_.string(), make_async_meta(c, 70), t, contents(rank == n - 1 ? "residue" : "residual"), 0,
                    test_world());
  });
  EXPECT_NE(e.find("rank_arrays"), std::string::npos) << e;
  EXPECT_TRUE(same_on_all_ranks(e)) << e;

  // The last worker's copy of the metadata has another seq for rank 1.
  CheckpointMeta other = make_async_meta(c, 71);
  if (rank == n - 1) other.ranks[1].seq += 1;
  e = error_of([&] { save_checkpoint(dir_.string(), other, t, contents("residual"), 0, test_world()); });
  EXPECT_NE(e.find("other metadata"), std::string::npos) << e;
  EXPECT_TRUE(same_on_all_ranks(e)) << e;

  // Nothing half-written is left behind, and the correct save then works.
  MPI_Barrier(MPI_COMM_WORLD);
  for (int64_t step : {70, 71}) EXPECT_FALSE(fs::exists(checkpoint_path(dir_.string(), step) + ".tmp"));
  const std::string path =
      save_checkpoint(dir_.string(), make_async_meta(c, 72), t, contents("residual"), 0, test_world());
  std::vector<float> back(array.size(), 0.0f);
  EXPECT_TRUE(load_rank_arrays(path, n - 1, {{"residual", back.data(), array.size()}}));
  EXPECT_EQ(back, array);
}

}  // namespace
}  // namespace ember
