// The device's measured bf16 GEMM peak, the denominator of MFU in scripts/bench/gpu.sh: square bf16 GEMMs with
// fp32 accumulation and bf16 output (what a bf16 training step runs) through cuBLAS at a few sizes, timed with CUDA
// events after warm-up; prints each size's TFLOP/s and the best as "bf16_gemm_tflops <value>".
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what, const std::string& hint) {
  fprintf(stderr, "error: gpu_gemm_peak: %s\nhint: %s\n", what.c_str(), hint.c_str());
  exit(1);
}

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(rc), "check nvidia-smi and the driver");
}

void check_cublas(cublasStatus_t rc, const char* what) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    die(std::string(what) + " failed with cuBLAS status " + std::to_string(int(rc)),
        "check the CUDA toolkit and driver versions");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {4096, 8192, 16384};
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--size") && i + 1 < argc) {
      sizes = {atoi(argv[++i])};
    } else {
      die(std::string("unknown argument '") + argv[i] + "'", "usage: gpu_gemm_peak [--size N] [--iters K]");
    }
  }
  if (iters < 1 || sizes[0] < 16) die("--iters must be >= 1 and --size >= 16", "e.g. gpu_gemm_peak --size 8192");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    die("no CUDA device", "run it on a machine with an NVIDIA GPU (nvidia-smi lists it)");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  printf("device %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);

  cublasHandle_t h = nullptr;
  check_cublas(cublasCreate(&h), "cublasCreate");
  double best = 0.0;
  for (int n : sizes) {
    const size_t elems = size_t(n) * n;
    // Random normal operands: all-zero inputs draw less power, and an H100 clocks higher on them than on real data.
    std::vector<__nv_bfloat16> host(elems);
    std::mt19937 gen{uint32_t(n)};
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& x : host) x = __float2bfloat16(normal(gen));
    void *a = nullptr, *b = nullptr, *c = nullptr;
    const size_t bytes = elems * sizeof(__nv_bfloat16);
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaMalloc(&c, bytes) != cudaSuccess) {
      cudaGetLastError();
      cudaFree(a);
      cudaFree(b);
      printf("n %d: skipped, %.1f GiB of operands do not fit\n", n, 3.0 * double(bytes) / (1 << 30));
      continue;
    }
    check_cuda(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice), "copy A");
    check_cuda(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice), "copy B");
    const float alpha = 1.0f, beta = 0.0f;
    auto gemm = [&] {
      check_cublas(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                                &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (bf16)");
    };
    for (int i = 0; i < 5; ++i) gemm();  // warm-up: clocks up, cuBLAS heuristics cached
    cudaEvent_t start, stop;
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
    check_cuda(cudaEventRecord(start), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) gemm();
    check_cuda(cudaEventRecord(stop), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    const double tflops = 2.0 * double(n) * n * n * iters / (double(ms) * 1e-3) / 1e12;
    printf("n %d: %.3f ms per GEMM, %.1f TFLOP/s\n", n, double(ms) / iters, tflops);
    best = std::max(best, tflops);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
  }
  cublasDestroy(h);
  if (best <= 0.0) die("no size could be measured", "free GPU memory or pass a smaller --size");
  printf("bf16_gemm_tflops %.1f\n", best);
  return 0;
}
