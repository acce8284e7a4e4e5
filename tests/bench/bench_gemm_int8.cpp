// int8 GEMM benchmark: the products of one GPT-2 layer (forward shapes) for N tokens, as fp32 (OpenBLAS, the CPU
// backend's fp32 path), as the CPU backend's bf16 path (both operands rounded to bf16, then the same SGEMM) and as int8
// (oneDNN, with and without quantizing the activations per row and scaling the result). Prints GFLOP/s per shape and
// the ratio of int8 to fp32 over the whole layer.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_gemm_int8.h"
#include "core/dtype.h"
#include "core/int8_quant.h"
#include "core/philox.h"

namespace {

using namespace ember;

struct Shape {
  const char* name;
  int K, OC;
};

template <typename F>
double best_seconds(int rounds, F&& run) {
  run();  // warm-up: primitives made, pages touched
  double best = 1e300;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

std::vector<float> normal(size_t n, uint32_t stream) {
  Philox rng(1, 0, stream, RNG_PURPOSE_TEST);
  std::vector<float> v(n);
  for (float& x : v) x = rng.normal();
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int N = argc > 1 ? std::atoi(argv[1]) : 1024, C = argc > 2 ? std::atoi(argv[2]) : 768;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  if (N <= 0 || C <= 0 || rounds <= 0) {
    fprintf(stderr, "error: bad arguments\nhint: usage: bench_gemm_int8 [TOKENS=1024] [C=768] [ROUNDS=5]\n");
    return 2;
  }
  openblas_set_num_threads(1);  // as the CPU backend runs it: the threads are OpenMP's, one slice of C each
  const Shape shapes[] = {{"c_attn", C, 3 * C}, {"attn.c_proj", C, C}, {"c_fc", C, 4 * C}, {"mlp.c_proj", 4 * C, C}};
  printf("tokens=%d C=%d threads=%d int8=%s\n", N, C, omp_get_max_threads(), cpu::int8_gemm_engine().c_str());
  printf("%-12s %10s %10s %10s %14s\n", "product", "fp32", "bf16", "int8", "int8+quant");
  double total[4] = {0, 0, 0, 0}, flops_all = 0;
  for (const Shape& s : shapes) {
    const auto x = normal(size_t(N) * s.K, 1), w = normal(size_t(s.K) * s.OC, 2);
    std::vector<float> out(size_t(N) * s.OC), xr(x.size()), wr(w.size());
    std::vector<int8_t> qx(x.size()), qw(w.size());
    std::vector<float> sx(N), sw(s.OC);
    quantize_int8_columns(w.data(), s.K, s.OC, qw.data(), sw.data());  // once per optimizer step: not timed
    const double t_fp32 = best_seconds(rounds, [&] {
      cpu::gemm_parallel(false, false, N, s.OC, s.K, 1.0f, x.data(), s.K, w.data(), s.OC, 0.0f, out.data(), s.OC);
    });
    const double t_bf16 = best_seconds(rounds, [&] {
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < x.size(); ++i) xr[i] = round_to_bf16(x[i]);
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < w.size(); ++i) wr[i] = round_to_bf16(w[i]);
      cpu::gemm_parallel(false, false, N, s.OC, s.K, 1.0f, xr.data(), s.K, wr.data(), s.OC, 0.0f, out.data(), s.OC);
    });
    const double t_int8 = best_seconds(
        rounds, [&] { cpu::gemm_s8(false, false, N, s.OC, s.K, qx.data(), s.K, qw.data(), s.OC, out.data(), s.OC); });
    const double t_quant = best_seconds(rounds, [&] {
      quantize_int8_rows(x.data(), N, s.K, qx.data(), sx.data());
      cpu::gemm_s8(false, false, N, s.OC, s.K, qx.data(), s.K, qw.data(), s.OC, out.data(), s.OC);
#pragma omp parallel for schedule(static)
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < s.OC; ++o) out[size_t(n) * s.OC + o] *= sx[n] * sw[o];
    });
    const double flops = 2.0 * N * s.K * s.OC;
    flops_all += flops;
    const double t[4] = {t_fp32, t_bf16, t_int8, t_quant};
    for (int i = 0; i < 4; ++i) total[i] += t[i];
    printf("%-12s %10.1f %10.1f %10.1f %14.1f  GFLOP/s\n", s.name, flops / t_fp32 * 1e-9, flops / t_bf16 * 1e-9,
           flops / t_int8 * 1e-9, flops / t_quant * 1e-9);
  }
  printf("%-12s %10.1f %10.1f %10.1f %14.1f  GFLOP/s\n", "layer", flops_all / total[0] * 1e-9,
         flops_all / total[1] * 1e-9, flops_all / total[2] * 1e-9, flops_all / total[3] * 1e-9);
  printf("int8/fp32 speed-up: %.2fx (products alone), %.2fx (with quantization and scaling)\n", total[0] / total[2],
         total[0] / total[3]);
  return 0;
}
