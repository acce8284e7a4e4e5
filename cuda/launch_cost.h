// The cost ledger's record of one launch of the CUDA backend (scripts/bench/cost.sh). Every launcher reports each
// kernel or GEMM it launches here, with the global-memory bytes the kernel's code loads and stores (each pass over
// an array counted as the code makes it; what caches would keep is not modelled) and the floating-point operations it
// does; a GEMM counts 2 m n k and its operands read once and its result written once (read too where it accumulates).
// On a GPU nothing listens; the kernel model's count-only mode (tests/kernel_model) listens instead of running the
// kernels, so the ledger follows the launch sequence the backend really issues.
#pragma once

namespace ember {

struct LaunchCost {
  const char* name;  // the kernel, or "gemm" / "gemm+bias" for cuBLAS and cuBLASLt
  double read_bytes = 0.0;
  double write_bytes = 0.0;
  double flops = 0.0;
  bool gemm = false;          // cuBLAS or cuBLASLt
  bool tensor_cores = false;  // the FLOPs run on the tensor cores (bf16 GEMMs, the tensor-core attention)
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
                          bool tensor_cores = false) {
  if (LaunchCostSink* sink = launch_cost_sink())
    sink->record({name, read_bytes, write_bytes, flops, gemm, tensor_cores});
}

}  // namespace ember
