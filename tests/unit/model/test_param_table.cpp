// The parameter table against Hugging Face GPT-2 names and shapes, and its unpadded layout.
#include <gtest/gtest.h>

#include <vector>

#include "model/gpt.h"
#include "model/param_table.h"
#include "model_test_util.h"

namespace ember {
namespace {

TEST(ParamTable, HuggingFaceNamesAndShapes) {
  ModelConfig c = tiny_config();
  ParamTable table(c);
  ASSERT_EQ(table.params().size(), 2u + 12u * c.n_layer + 2u);
  EXPECT_EQ(table.wte().name, "transformer.wte.weight");
  EXPECT_EQ(table.wte().shape, (std::vector<int64_t>{c.vocab_size, c.n_embd}));
  EXPECT_EQ(table.wpe()->shape, (std::vector<int64_t>{c.block_size, c.n_embd}));
  const ParamInfo& qkv = table.block(1, BLOCK_PARAM_QKV_W);
  EXPECT_EQ(qkv.name, "transformer.h.1.attn.c_attn.weight");
  EXPECT_EQ(qkv.shape, (std::vector<int64_t>{c.n_embd, 3 * c.n_embd}));
  EXPECT_EQ(table.block(0, BLOCK_PARAM_FCPROJ_W).shape, (std::vector<int64_t>{4 * c.n_embd, c.n_embd}));
  EXPECT_EQ(table.ln_f_bias().name, "transformer.ln_f.bias");
  EXPECT_EQ(table.find("lm_head.weight"), nullptr);  // tied to wte, never stored
  // GPT-2 parameter count: 12 L C^2 + 13 L C + (V + T) C + 2 C.
  const size_t L = c.n_layer, C = c.n_embd, V = c.vocab_size, T = c.block_size;
  size_t total = 0;
  for (const auto& p : table.params()) {
    total += p.numel;
    EXPECT_EQ(p.offset % 16, 0u) << p.name;
    EXPECT_EQ(p.decay, p.shape.size() == 2) << p.name;
  }
  EXPECT_EQ(total, 12 * L * C * C + 13 * L * C + (V + T) * C + 2 * C);
  // wte's padding rows (48 ids padded to 128) follow its V rows in the arena, inside no tensor.
  ASSERT_EQ(c.padded_vocab_size(), 128);
  EXPECT_GE(table.wpe()->offset, table.wte().offset + size_t(c.padded_vocab_size()) * C);
  ModelConfig gpt2 = c;
  gpt2.vocab_size = 50257;
  EXPECT_EQ(gpt2.padded_vocab_size(), 50304);
}

// Rotary positions replace the learned ones: no wpe row, every block's tensors one row earlier, T C fewer floats.
TEST(ParamTable, RopeModelsHaveNoPositionTable) {
  ModelConfig c = tiny_config();
  const ParamTable learned(c);
  c.position = PositionEncoding::rope;
  const ParamTable rope(c);
  EXPECT_EQ(rope.wpe(), nullptr);
  EXPECT_EQ(rope.find("transformer.wpe.weight"), nullptr);
  ASSERT_EQ(rope.params().size(), learned.params().size() - 1);
  EXPECT_EQ(rope.block(1, BLOCK_PARAM_QKV_W).name, "transformer.h.1.attn.c_attn.weight");
  EXPECT_EQ(rope.block(0, BLOCK_PARAM_LN1_W).offset, learned.wpe()->offset);
  EXPECT_EQ(rope.ln_f_bias().name, "transformer.ln_f.bias");
  EXPECT_EQ(learned.total_numel() - rope.total_numel(), size_t(c.block_size) * c.n_embd);
}

// The unpadded layout (an async worker's checkpointed flat arrays): every tensor at its offset without wte's padding
// rows (each tensor 16-float aligned, as the table lays them out), and back, the padding rows then zero.
TEST(ParamTable, UnpaddedLayoutLeavesTheVocabularyPaddingOut) {
  const ModelConfig c = tiny_config();
  const ParamTable table(c);
  size_t unpadded = 0;
  for (const ParamInfo& p : table.params()) unpadded += (p.numel + 15) / 16 * 16;
  ASSERT_EQ(table.unpadded_numel(), unpadded);
  ASSERT_LT(table.unpadded_numel(), table.total_numel());
  std::vector<float> arena(table.total_numel());
  for (size_t i = 0; i < arena.size(); ++i) arena[i] = float(i % 1000) + 0.5f;  // the padding too: not zero
  std::vector<float> flat(table.unpadded_numel()), back(arena.size(), -1.0f);
  table.to_unpadded(arena.data(), flat.data());
  size_t at = 0;  // each tensor's offset in the unpadded layout
  for (const ParamInfo& p : table.params()) {
    for (size_t k = 0; k < p.numel; ++k) ASSERT_EQ(flat[at + k], arena[p.offset + k]) << p.name << " element " << k;
    for (size_t k = p.numel; k < (p.numel + 15) / 16 * 16 && &p == &table.wte(); ++k) ASSERT_EQ(flat[at + k], 0.0f);
    at += (p.numel + 15) / 16 * 16;
  }
  table.from_unpadded(flat.data(), back.data());
  const ParamInfo& w = table.wte();
  for (size_t i = 0; i < arena.size(); ++i) {
    const bool padding = i >= w.offset + w.numel && i < table.wpe()->offset;
    ASSERT_EQ(back[i], padding ? 0.0f : arena[i]) << "arena element " << i;
  }
}

}  // namespace
}  // namespace ember
