// The kernel-model backend (kernel_model_backend.cpp): the CUDA backend's kernels, launchers and adapter decisions run
// on the CPU by the kernel model, with a model of cuBLAS and the CPU backend's memory. For tests only.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace ember {
// `compute_capability` (e.g. 75 for sm_75, 90 for sm_90) is the device the adapter decisions are made for: before
// sm_80 attention takes no tensor cores, and bf16-stored qkv and out go through fp32 scratch.
// `count_only` (the cost ledger, cuda/launch_cost.h): no kernel runs and no buffer exists; every launch reports its
// cost to launch_cost_sink() and is counted, cuBLASLt's fused epilogues are taken as the device would take them, and
// the device's block and capacity sizes apply. One such backend at a time, in a process of its own.
std::unique_ptr<Backend> make_kernel_model_backend(int compute_capability = 90, bool count_only = false);

// Count-only mode's counts so far: kernel launches, and calls of the cuBLAS model (plain GEMMs), so that the ledger
// can check that every launch reported its cost.
struct KernelModelCounts {
  long long launches = 0;
  long long gemms = 0;
};
KernelModelCounts kernel_model_counts();
}  // namespace ember
