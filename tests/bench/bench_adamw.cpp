// Host AdamW throughput (scripts/bench/adamw.sh): one optimizer step of train/adamw.h on the CPU backend (the update
// an offloaded optimizer runs on the host) over the parameter arena of a GPT-2 shape, the matrices with weight decay
// and the vectors without. Prints milliseconds per step (the best of --rounds after one warm-up step) and parameters
// per second, in all and per thread (OMP_NUM_THREADS sets the threads). --variant 2 times the host update of an
// offloaded optimizer whose model keeps its weights' bf16 copy (the copy written in the update's pass:
// Backend::adamw_update_segments_bf16); --variant 3 the same with the copy cast in a pass of its own after it.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "bench_options.h"
#include "core/philox.h"
#include "model/param_table.h"
#include "train/adamw.h"

int main(int argc, char** argv) {
  using namespace ember;
  int L = 12, C = 768, V = 50257, T = 1024, rounds = 5, variant = 1;
  const int status =
      bench::parse_options(argc, argv, "bench_adamw [options]",
                           {{"n-layer", &L, "layers"},
                            {"n-embd", &C, "model width"},
                            {"vocab-size", &V, "vocabulary"},
                            {"block-size", &T, "positions (rows of wpe)"},
                            {"rounds", &rounds, "timed steps, the best reported"},
                            {"variant", &variant, "1 the update, 2 with a bf16 copy written in it, 3 cast after it"}});
  if (status != bench::kGoOn) return status;
  if (variant > 3) {
    std::fprintf(stderr, "error: --variant %d is not 1, 2 or 3\nhint: bench_adamw --help lists them\n", variant);
    return 2;
  }
  const int bf16_copy = variant - 1;  // 0 none, 1 written in the update, 2 cast after it
  ModelConfig model;
  model.n_layer = L, model.n_embd = C, model.n_head = 1, model.vocab_size = V, model.block_size = T;
  const ParamTable table(model);
  const size_t n = table.total_numel();

  std::unique_ptr<Backend> be = make_cpu_backend();
  auto* params = static_cast<float*>(be->alloc(n * sizeof(float)));
  auto* grads = static_cast<float*>(be->alloc(n * sizeof(float)));
  std::vector<float> host(n);
  Philox rng(11, 0, 0, RNG_PURPOSE_TEST);
  for (float& x : host) x = 0.02f * rng.normal();
  be->copy_to_device(params, host.data(), n * sizeof(float));
  for (float& x : host) x = 1e-3f * rng.normal();
  be->copy_to_device(grads, host.data(), n * sizeof(float));
  AdamW optimizer(*be, table, OptimizerConfig{}, 0, n);
  // With a bf16 copy: the backend's update over the table's rows as segments (the decay as AdamW gives it), and the
  // copy, as an offloaded optimizer's host update runs them.
  const OptimizerConfig oc;
  std::vector<AdamWSegment> segments;
  for (const ParamInfo& p : table.params())
    segments.push_back({p.offset, p.offset + p.numel, p.decay ? oc.weight_decay : 0.0f});
  std::vector<float> m(bf16_copy ? n : 0), v(bf16_copy ? n : 0);
  std::vector<BFloat16> copy(bf16_copy ? n : 0);
  auto step = [&](int t) {
    if (bf16_copy == 0) return optimizer.step(params, grads, 6e-4f);
    if (bf16_copy == 1)
      return be->adamw_update_segments_bf16(params, copy.data(), grads, m.data(), v.data(), segments.data(),
                                            segments.size(), 6e-4f, oc.beta1, oc.beta2, oc.eps, t, 1.0f);
    be->adamw_update_segments(params, grads, m.data(), v.data(), segments.data(), segments.size(), 6e-4f, oc.beta1,
                              oc.beta2, oc.eps, t, 1.0f);
    be->cast_to_bf16(copy.data(), params, n);
  };

  double best = 1e300;
  for (int r = 0; r <= rounds; ++r) {  // step 0 warms up (first touch of the moments)
    const auto t0 = std::chrono::steady_clock::now();
    step(r + 1);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, ms);
  }
  const int threads = omp_get_max_threads();
  const double per_s = double(n) / (best * 1e-3);
  const char* what[] = {"", " + bf16 copy in the update", " + bf16 copy after it"};
  std::printf("ember AdamW%s: %zu parameters, %d thread(s): %.2f ms per step, %.1f M parameters/s, %.1f M per thread\n",
              what[bf16_copy], n, threads, best, per_s * 1e-6, per_s * 1e-6 / threads);
  be->free(params);
  be->free(grads);
  return 0;
}
