// Host AdamW throughput (scripts/bench/adamw.sh): one optimizer step of train/adamw.h on the CPU backend (the update
// an offloaded optimizer runs on the host) over the parameter arena of a GPT-2 shape, the matrices with weight decay
// and the vectors without. Prints milliseconds per step (the best of --rounds after one warm-up step) and parameters
// per second, in all and per thread (OMP_NUM_THREADS sets the threads).
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
  int L = 12, C = 768, V = 50257, T = 1024, rounds = 5;
  const int status = bench::parse_options(argc, argv, "bench_adamw [options]",
                                          {{"n-layer", &L, "layers"},
                                           {"n-embd", &C, "model width"},
                                           {"vocab-size", &V, "vocabulary"},
                                           {"block-size", &T, "positions (rows of wpe)"},
                                           {"rounds", &rounds, "timed steps, the best reported"}});
  if (status != bench::kGoOn) return status;
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

  double best = 1e300;
  for (int r = 0; r <= rounds; ++r) {  // step 0 warms up (first touch of the moments)
    const auto t0 = std::chrono::steady_clock::now();
    optimizer.step(params, grads, 6e-4f);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, ms);
  }
  const int threads = omp_get_max_threads();
  const double per_s = double(n) / (best * 1e-3);
  std::printf("ember AdamW: %zu parameters, %d thread(s): %.2f ms per step, %.1f M parameters/s, %.1f M per thread\n",
              n, threads, best, per_s * 1e-6, per_s * 1e-6 / threads);
  be->free(params);
  be->free(grads);
  return 0;
}
