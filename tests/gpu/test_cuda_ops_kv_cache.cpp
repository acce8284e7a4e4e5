// CUDA KV-cache inference ops (cuda_kv_cache.cu) against the CPU backend on random caches and rows of several slots:
// the embedding and the cache writes bitwise, the attention within the fp32 tolerance.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/rope.h"
#include "cuda_ops_test_util.h"

namespace ember {
namespace {

// (C, NH, max_T), named C<C>_NH<NH>_maxT<max_T>.
struct KvShape {
  int C, NH, max_T;
};
std::string kv_shape_name(const ::testing::TestParamInfo<KvShape>& info) {
  const KvShape& s = info.param;
  return "C" + std::to_string(s.C) + "_NH" + std::to_string(s.NH) + "_maxT" + std::to_string(s.max_T);
}

// One step of three slots: slot 0's prefill of positions 0..4, slot 1's decode row at max_T - 1 (the cache's last
// row) and one at a random earlier position, slot 2's first token (position 0) and a random later one. The caches
// start random everywhere, so keys past a row's position or of another slot would change its output if read. The
// embedding is one add and the writes are copies: bitwise. The attention's outputs sum up to max_T
// probability-weighted values after HS-term score dot products (K = max_T + HS), in other orders than the CPU's
// (warp trees, tiles of 128 keys with an online softmax). Repeated, the kernels give the same bits.
class CudaOpsKvCache : public CudaOps, public ::testing::WithParamInterface<KvShape> {};
TEST_P(CudaOpsKvCache, MatchesTheCpu) {
  const auto [C, NH, max_T] = GetParam();
  const int S = 3, V = 50, HS = C / NH;
  Rng rng(61 + uint32_t(max_T));
  Ints slot, pos;
  for (int t = 0; t < 5 && t < max_T; ++t) slot.push_back(0), pos.push_back(t);
  slot.push_back(1), pos.push_back(max_T - 1);
  slot.push_back(1), pos.push_back(int32_t(rng.philox.below(uint64_t(max_T - 1))));
  slot.push_back(2), pos.push_back(0);
  slot.push_back(2), pos.push_back(1 + int32_t(rng.philox.below(uint64_t(max_T - 1))));
  const int N = int(slot.size());
  const Ints inp = rng.tokens(size_t(N), V);
  const Floats wte = rng.normal(size_t(V) * C), wpe = rng.normal(size_t(max_T) * C);
  const Floats qkv = rng.normal(size_t(N) * 3 * C, 1.5f);  // scores ~N(0, 1.5^2): peaked softmax rows
  const Floats k0 = rng.normal(size_t(S) * max_T * C), v0 = rng.normal(k0.size());

  Floats emb[2], k_cache[2], v_cache[2], out[2], again;
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int b = 0; b < 2; ++b) {
    IBuf d_inp(*be[b], inp), d_slot(*be[b], slot), d_pos(*be[b], pos);
    FBuf d_wte(*be[b], wte), d_wpe(*be[b], wpe), d_qkv(*be[b], qkv), d_k(*be[b], k0), d_v(*be[b], v0),
        d_emb(*be[b], size_t(N) * C), d_out(*be[b], size_t(N) * C);
    be[b]->encoder_forward_positions(d_emb.get(), d_inp.get(), d_pos.get(), d_wte.get(), d_wpe.get(), N, C);
    be[b]->kv_cache_write(d_k.get(), d_v.get(), d_qkv.get(), d_slot.get(), d_pos.get(), N, C, max_T);
    be[b]->attention_kv_forward(d_out.get(), d_qkv.get(), d_k.get(), d_v.get(), d_slot.get(), d_pos.get(), N, C, NH,
                                max_T);
    emb[b] = d_emb.host(), k_cache[b] = d_k.host(), v_cache[b] = d_v.host(), out[b] = d_out.host();
    if (b == 1) {
      be[b]->attention_kv_forward(d_out.get(), d_qkv.get(), d_k.get(), d_v.get(), d_slot.get(), d_pos.get(), N, C, NH,
                                  max_T);
      again = d_out.host();
    }
  }
  expect_bitwise("encoder_forward_positions", emb[1], emb[0]);
  expect_bitwise("kv_cache_write k_cache", k_cache[1], k_cache[0]);
  expect_bitwise("kv_cache_write v_cache", v_cache[1], v_cache[0]);
  expect_close("attention_kv_forward", out[1], out[0], fp32_tol(max_T + HS, out[0]));
  expect_bitwise("attention_kv_forward repeated", again, out[1]);
}
// The same with a layer's schedule over ring caches (Backend::KvAttention): rows at positions far past the ring (each
// key at row pos % ring), a window, an ALiBi bias and rotary positions. The rotated keys are bitwise the CPU's (the
// rotation's products kept out of FMAs); a window edge one key off, or a ring row one off, changes the outputs.
TEST_P(CudaOpsKvCache, MatchesTheCpuWithASchedule) {
  const auto [C, NH, max_T] = GetParam();
  const int S = 3, HS = C / NH, half = HS / 2;
  for (const int window : {7, max_T - 1}) {
    Backend::KvAttention a;
    a.window = window, a.ring = window + 4, a.alibi_slope = window == 7 ? 0.25f : 0.0f;
    Rng rng(83 + uint32_t(max_T + window));
    Ints slot, pos;
    for (int t = 0; t < 4; ++t) slot.push_back(0), pos.push_back(1000 + t);  // a chunk of four rows
    slot.push_back(1), pos.push_back(3);                                     // fewer keys than the window
    slot.push_back(2), pos.push_back(int32_t(5 * max_T + 2));
    const int N = int(slot.size());
    const Floats qkv = rng.normal(size_t(N) * 3 * C, 1.5f);
    const Floats k0 = rng.normal(size_t(S) * a.ring * C), v0 = rng.normal(k0.size());
    std::vector<float> cos(size_t(N) * half), sin(cos.size());
    for (int i = 0; i < N; ++i)
      rope_table(10000.0f, half, pos[size_t(i)], 1, cos.data() + i * half, sin.data() + i * half);
    for (const bool rope : {false, true}) {
      if (rope && HS % 2 != 0) continue;
      const std::string tag = "window " + std::to_string(window) + (rope ? " rope " : " ");
      Floats k_cache[2], v_cache[2], out[2];
      Backend* be[2] = {cpu.get(), gpu.get()};
      for (int b = 0; b < 2; ++b) {
        IBuf d_slot(*be[b], slot), d_pos(*be[b], pos);
        FBuf d_qkv(*be[b], qkv), d_k(*be[b], k0), d_v(*be[b], v0), d_out(*be[b], size_t(N) * C), d_cos(*be[b], cos),
            d_sin(*be[b], sin);
        Backend::KvAttention ab = a;
        if (rope) ab.rope_cos = d_cos.get(), ab.rope_sin = d_sin.get();
        be[b]->kv_cache_write(d_k.get(), d_v.get(), d_qkv.get(), d_slot.get(), d_pos.get(), N, C, NH, ab);
        be[b]->attention_kv_forward(d_out.get(), d_qkv.get(), d_k.get(), d_v.get(), d_slot.get(), d_pos.get(), N, C, NH,
                                    ab);
        k_cache[b] = d_k.host(), v_cache[b] = d_v.host(), out[b] = d_out.host();
      }
      expect_bitwise(tag + "kv_cache_write k_cache", k_cache[1], k_cache[0]);
      expect_bitwise(tag + "kv_cache_write v_cache", v_cache[1], v_cache[0]);
      expect_close(tag + "attention_kv_forward", out[1], out[0], fp32_tol(window + HS + 2, out[0]));
    }
  }
}

// HS = 16 with max_T = 300 (the last row's keys span three tiles of 128, the last partial); HS = 64 (GPT-2's);
// HS = 130 (more dims than the block has threads, five strides of a warp's lanes); HS = 5 with max_T = 129 (one key in
// the second tile).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaOpsKvCache,
                         ::testing::Values(KvShape{48, 3, 300}, KvShape{128, 2, 70}, KvShape{260, 2, 40},
                                           KvShape{15, 3, 129}),
                         kv_shape_name);

}  // namespace
}  // namespace ember
