// Attention time per training step under each attention schedule: the CPU backend's attention forward and backward
// over every layer of a model (12 layers of the demo's width by default, T = 1024), with GPT-2's full attention and
// with the tscale and sssl presets (model/attention_schedule.h), learned positions and rope. Prints milliseconds per
// step (the best of --rounds), the ratio to full attention, and the share of score entries each schedule computes.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bench_options.h"
#include "core/philox.h"
#include "model/attention_schedule.h"

namespace {

using namespace ember;

// Score entries (query, key) a layer computes out of the causal T (T + 1) / 2.
double visible_keys(const AttentionLayer& layer, int T) {
  double n = 0;
  for (int i = 0; i < T; ++i) n += i - layer.first_key(i) + 1;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int L = 12, C = 128, NH = 4, T = 1024, B = 4, rounds = 3;
  const int status = bench::parse_options(argc, argv, "bench_attention [options]",
                                          {{"n-layer", &L, "layers"},
                                           {"n-embd", &C, "model width"},
                                           {"n-head", &NH, "heads (n-embd a multiple)"},
                                           {"seq-len", &T, "T"},
                                           {"batch-size", &B, "B"},
                                           {"rounds", &rounds, "timed rounds, the best reported"}});
  if (status != bench::kGoOn) return status;
  if (C % NH != 0 || (C / NH) % 2 != 0) {
    std::fprintf(stderr,
                 "error: --n-embd %d is not a multiple of --n-head %d with an even quotient\n"
                 "hint: rope needs an even head size, e.g. --n-embd 128 --n-head 4\n",
                 C, NH);
    return 2;
  }
  std::unique_ptr<Backend> be = make_cpu_backend();
  const size_t n_qkv = size_t(B) * T * 3 * C, n_out = size_t(B) * T * C;
  std::vector<float> qkv(n_qkv), dout(n_out);
  Philox rng(7, 0, 0, RNG_PURPOSE_TEST);
  for (float& x : qkv) x = 1.5f * rng.normal();
  for (float& x : dout) x = rng.normal();
  float* d_qkv = static_cast<float*>(be->alloc(n_qkv * sizeof(float)));
  float* d_dqkv = static_cast<float*>(be->alloc(n_qkv * sizeof(float)));
  float* d_dout = static_cast<float*>(be->alloc(n_out * sizeof(float)));
  float* d_out = static_cast<float*>(be->alloc(n_out * sizeof(float)));
  float* d_lse = static_cast<float*>(be->alloc(size_t(B) * NH * T * sizeof(float)));
  be->copy_to_device(d_qkv, qkv.data(), n_qkv * sizeof(float));
  be->copy_to_device(d_dout, dout.data(), n_out * sizeof(float));

  printf("attention per training step on the CPU: %d layers, B %d, T %d, C %d, %d heads, %d threads (best of %d)\n", L,
         B, T, C, NH, omp_get_max_threads(), rounds);
  printf("| schedule | windows | forward + backward ms | full's time / this | score entries / full's |\n");
  printf("|---|---|---|---|---|\n");
  double full_ms = 0, full_keys = 0;
  const struct {
    const char* name;
    const char* windows;
    PositionEncoding position;
  } schedules[] = {{"full, learned", "full", PositionEncoding::learned},
                   {"full, rope", "full", PositionEncoding::rope},
                   {"tscale, rope", "tscale", PositionEncoding::rope},
                   {"sssl, rope", "sssl", PositionEncoding::rope}};
  for (const auto& sch : schedules) {
    ModelConfig m;
    m.n_layer = L, m.n_head = NH, m.n_embd = C, m.block_size = T, m.position = sch.position;
    m.rope_theta = 500000.0f;
    const std::string problem = parse_attention_windows(sch.windows, L, T, &m.attention_windows, &m.alibi_slopes);
    if (!problem.empty()) {
      fprintf(stderr, "error: %s\n", problem.c_str());
      return 1;
    }
    double best = 1e300, keys = 0;
    for (int l = 0; l < L; ++l) keys += visible_keys(m.attention(l), T);
    for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
      const auto t0 = std::chrono::steady_clock::now();
      for (int l = 0; l < L; ++l) {
        const AttentionLayer layer = m.attention(l);
        be->attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, layer);
        be->attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, layer);
      }
      const double ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best = std::min(best, ms);
    }
    if (full_ms == 0) full_ms = best, full_keys = keys;
    printf("| %s | %s | %.1f | %.2f | %.3f |\n", sch.name, format_attention_windows(m.attention_windows).c_str(), best,
           full_ms / best, keys / full_keys);
  }
  for (void* p : {static_cast<void*>(d_qkv), static_cast<void*>(d_dqkv), static_cast<void*>(d_dout),
                  static_cast<void*>(d_out), static_cast<void*>(d_lse)})
    be->free(p);
  return 0;
}
