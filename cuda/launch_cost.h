// The cost ledger's record of one launch of the CUDA backend (scripts/bench/cost.sh). Every launcher reports each
// kernel or GEMM it launches here, with the global-memory bytes the kernel's code loads and stores (each pass over
// an array counted as the code makes it; what caches would keep is not modelled) and the floating-point operations it
// does; a GEMM counts 2 m n k and its operands read once and its result written once (read too where it accumulates).
// On a GPU nothing listens; the kernel model's count-only mode (tests/kernel_model) listens instead of running the
// kernels, so the ledger follows the launch sequence the backend really issues.
#pragma once

namespace ember {

// Where a launch's operations run, which sets the peak they are timed against.
enum class FlopUnit {
  cuda_cores,  // fp32 on the CUDA cores
  bf16,        // the tensor cores in bf16 (bf16 GEMMs, the tensor-core attention)
  int8,        // the tensor cores in int8 (integer operations, int32 sums)
  fp8,         // the tensor cores in fp8, fp32 accumulation
};

struct LaunchCost {
  const char* name;  // the kernel, or "gemm" / "gemm+bias" for cuBLAS and cuBLASLt
  double read_bytes = 0.0;
  double write_bytes = 0.0;
  double flops = 0.0;
  bool gemm = false;  // a matrix product: cuBLAS or cuBLASLt, or the scaled int8 GEMM kernel
  FlopUnit unit = FlopUnit::cuda_cores;
};

class LaunchCostSink {
 public:
  virtual void record(const LaunchCost& cost) = 0;

 protected:
  ~LaunchCostSink() = default;
};

// Where launches report, or null (every real run, where reporting costs one test of a pointer).
inline LaunchCostSink*& launch_cost_sink() {
  static LaunchCostSink* sink = nullptr;
  return sink;
}

inline void report_launch(const char* name, double read_bytes, double write_bytes, double flops, bool gemm = false,
                          FlopUnit unit = FlopUnit::cuda_cores) {
  if (LaunchCostSink* sink = launch_cost_sink()) sink->record({name, read_bytes, write_bytes, flops, gemm, unit});
}

// A cuBLAS or cuBLASLt GEMM's record: A and B (both fp32 or, with `ab_bf16`, both bf16) read once, C (fp32 or, with
// `c_bf16`, bf16) written once and also read when beta is not 0, 2 m n k operations on the tensor cores in bf16.
inline void report_gemm(const char* name, bool ab_bf16, int m, int n, int k, float beta, bool c_bf16,
                        double extra_read = 0.0, double extra_write = 0.0) {
  const double in = ab_bf16 ? 2.0 : 4.0, out = c_bf16 ? 2.0 : 4.0, mn = double(m) * n;
  report_launch(name, in * (double(m) * k + double(k) * n) + (beta != 0.0f ? out * mn : 0.0) + extra_read,
                out * mn + extra_write, 2.0 * mn * k, /*gemm=*/true, ab_bf16 ? FlopUnit::bf16 : FlopUnit::cuda_cores);
}

}  // namespace ember
