// The DataLoader: order, determinism and resume. Shards are built with tokens equal to their global position, so
// every batch says exactly where it came from.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/data_loader.h"
#include "data/shard.h"
#include "data_test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------------------
// DataLoader

constexpr int LT = 7;  // odd seq_len on purpose: no sample boundary lines up with a power of two

// Shards of these lengths (the 3-token one holds no sample) with token = global position, vocab 1000.
struct LoaderFixture {
  TempDir dir;
  std::vector<int> starts;  // first token of every sample, in sequential order
  uint64_t tokens = 0;
  LoaderFixture() {
    const std::vector<size_t> lengths = {50, 3, 64, 22};
    uint16_t next = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      std::vector<uint16_t> shard(lengths[k]);
      for (auto& t : shard) t = next++;
      for (size_t s = 0; s < (lengths[k] - 1) / LT; ++s) starts.push_back(shard[s * LT]);
      write_shard(dir / ("train_00000" + std::to_string(k) + ".bin"), shard);
      tokens += lengths[k];
    }
  }
};

using Batch = std::pair<std::vector<int32_t>, std::vector<int32_t>>;

Batch batch_at(const DataLoader& dl, uint64_t g, int B) {
  Batch b{std::vector<int32_t>(size_t(B) * LT), std::vector<int32_t>(size_t(B) * LT)};
  dl.batch_at(g, b.first.data(), b.second.data(), B);
  return b;
}

Batch next_batch(DataLoader& dl, int B) {
  Batch b{std::vector<int32_t>(size_t(B) * LT), std::vector<int32_t>(size_t(B) * LT)};
  dl.next_batch(b.first.data(), b.second.data(), B);
  return b;
}

// The first token of each sample in the epoch that starts at global index e * n.
std::vector<int> epoch_order(const DataLoader& dl, uint64_t epoch) {
  std::vector<int> order;
  const uint64_t n = dl.num_samples();
  for (uint64_t g = epoch * n; g < (epoch + 1) * n; ++g) order.push_back(batch_at(dl, g, 1).first[0]);
  return order;
}

TEST(DataLoader, CountsSamplesAndTokens) {
  LoaderFixture fx;
  DataLoader dl(fx.dir.str(), "train", LT, 1000, 1, true);
  EXPECT_EQ(dl.num_samples(), 49u / 7 + 0 + 63u / 7 + 21u / 7);
  EXPECT_EQ(dl.num_samples(), fx.starts.size());
  EXPECT_EQ(dl.num_tokens(), fx.tokens);
  EXPECT_EQ(dl.cursor(), 0u);
}

TEST(DataLoader, TargetsAreInputsShiftedByOne) {
  LoaderFixture fx;
  DataLoader dl(fx.dir.str(), "train", LT, 1000, 3, true);
  const int B = 5;
  for (uint64_t g = 0; g < 3 * dl.num_samples(); g += B) {
    const Batch b = batch_at(dl, g, B);
    for (int r = 0; r < B; ++r)
      for (int t = 0; t < LT; ++t) {
        const size_t i = size_t(r) * LT + t;
        // Tokens are global positions and samples never cross shards, so each row counts up by one.
        EXPECT_EQ(b.first[i], b.first[size_t(r) * LT] + t);
        EXPECT_EQ(b.second[i], b.first[i] + 1);
        if (t + 1 < LT) {
          EXPECT_EQ(b.second[i], b.first[i + 1]);
        }
      }
  }
}

TEST(DataLoader, EverySampleOncePerEpoch) {
  LoaderFixture fx;
  DataLoader dl(fx.dir.str(), "train", LT, 1000, 1234, true);
  std::vector<int> expected = fx.starts;
  std::sort(expected.begin(), expected.end());
  std::vector<std::vector<int>> orders;
  for (uint64_t e = 0; e < 3; ++e) {
    std::vector<int> order = epoch_order(dl, e);
    orders.push_back(order);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, expected) << "epoch " << e;
  }
  // 19! orders: two equal epochs would mean the epoch is not part of the key.
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  EXPECT_NE(orders[0], fx.starts) << "shuffled order equals the sequential one";
}

TEST(DataLoader, SequentialWhenNotShuffled) {
  LoaderFixture fx;
  DataLoader dl(fx.dir.str(), "train", LT, 1000, 99, false);
  EXPECT_EQ(epoch_order(dl, 0), fx.starts);
  EXPECT_EQ(epoch_order(dl, 4), fx.starts);
}

TEST(DataLoader, DeterministicAcrossLoadersAndCallHistory) {
  LoaderFixture fx;
  DataLoader a(fx.dir.str(), "train", LT, 1000, 42, true);
  DataLoader b(fx.dir.str(), "train", LT, 1000, 42, true);
  const uint64_t n = a.num_samples();
  // Give `a` a different history: it has cached a later epoch's permutation before the comparisons start.
  for (int i = 0; i < 9; ++i) next_batch(a, 4);
  batch_at(a, 5 * n + 3, 2);
  // g across the epoch-0/1 boundary (n - 2 .. n + 1) and far-away epochs, in scrambled order.
  for (uint64_t g : {n - 2, uint64_t(0), 3 * n + 5, uint64_t(7), n - 1, 2 * n - 3, uint64_t(1000003)}) {
    EXPECT_EQ(batch_at(a, g, 4), batch_at(b, g, 4)) << "g = " << g;
  }
  // A batch that spans the boundary holds the tail of epoch 0 then the head of epoch 1.
  const Batch span = batch_at(a, n - 2, 4);
  const std::vector<int> e0 = epoch_order(b, 0), e1 = epoch_order(b, 1);
  EXPECT_EQ(span.first[0], e0[n - 2]);
  EXPECT_EQ(span.first[LT], e0[n - 1]);
  EXPECT_EQ(span.first[2 * LT], e1[0]);
  EXPECT_EQ(span.first[3 * LT], e1[1]);

  DataLoader c(fx.dir.str(), "train", LT, 1000, 43, true);
  EXPECT_NE(epoch_order(a, 0), epoch_order(c, 0)) << "a different seed gave the same order";
}

TEST(DataLoader, CursorResumeMatchesContinuousRun) {
  LoaderFixture fx;
  const int B = 4, steps = 12;  // 48 samples: crosses two epoch boundaries of 19
  DataLoader continuous(fx.dir.str(), "train", LT, 1000, 7, true);
  std::vector<Batch> expected;
  for (int s = 0; s < steps; ++s) expected.push_back(next_batch(continuous, B));
  EXPECT_EQ(continuous.cursor(), uint64_t(B) * steps);

  uint64_t saved = 0;
  {
    DataLoader first(fx.dir.str(), "train", LT, 1000, 7, true);
    for (int s = 0; s < 5; ++s) EXPECT_EQ(next_batch(first, B), expected[s]) << "step " << s;
    saved = first.cursor();
  }
  DataLoader resumed(fx.dir.str(), "train", LT, 1000, 7, true);
  resumed.set_cursor(saved);
  for (int s = 5; s < steps; ++s) EXPECT_EQ(next_batch(resumed, B), expected[s]) << "step " << s;

  // batch_at leaves the cursor alone.
  const uint64_t before = resumed.cursor();
  batch_at(resumed, 3, B);
  EXPECT_EQ(resumed.cursor(), before);
}

TEST(DataLoader, TokenAboveVocabIsAnError) {
  TempDir dir;
  write_shard(dir / "train_000000.bin", std::vector<uint16_t>(40, 5));
  std::vector<uint16_t> bad(40, 7);
  bad[17] = 300;
  write_shard(dir / "train_000001.bin", bad);
  expect_error([&] { DataLoader dl(dir.str(), "train", 4, 256, 1, true); },
               {dir / "train_000001.bin", "300", "256", "vocab"});
  DataLoader ok(dir.str(), "train", 4, 301, 1, true);  // exactly large enough
  EXPECT_EQ(ok.num_tokens(), 80u);
}

TEST(DataLoader, NoShardsIsAnError) {
  TempDir dir;
  write_shard(dir / "val_000000.bin", std::vector<uint16_t>(40, 1));
  expect_error([&] { DataLoader dl(dir.str(), "train", 4, 256, 1, true); }, {dir.str(), "train"});
  try {
    DataLoader dl(dir.str(), "train", 4, 256, 1, true);
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("ember prep"), std::string::npos) << e.hint();
  }
  expect_error([&] { DataLoader dl(dir / "missing", "train", 4, 256, 1, true); }, {dir / "missing"});
}

TEST(DataLoader, ShardsShorterThanSeqLenAreAnError) {
  TempDir dir;
  write_shard(dir / "train_000000.bin", std::vector<uint16_t>(8, 1));
  expect_error([&] { DataLoader dl(dir.str(), "train", 8, 256, 1, true); }, {dir.str(), "seq_len+1"});
  DataLoader dl(dir.str(), "train", 7, 256, 1, true);  // 8 tokens = exactly one sample of T = 7
  EXPECT_EQ(dl.num_samples(), 1u);
}

TEST(DataLoader, BadShardIsNamed) {
  TempDir dir;
  write_shard(dir / "train_000000.bin", std::vector<uint16_t>(40, 1));
  write_raw_shard(dir / "train_000001.bin", 777, 1, 2, 2);
  expect_error([&] { DataLoader dl(dir.str(), "train", 4, 256, 1, true); }, {dir / "train_000001.bin", "magic"});
}

}  // namespace
}  // namespace ember
