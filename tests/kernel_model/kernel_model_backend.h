// The kernel-model backend (kernel_model_backend.cpp): the CUDA backend's kernels, launchers and adapter decisions run
// on the CPU by the kernel model, with a model of cuBLAS and the CPU backend's memory. For tests only.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace ember {
// `compute_capability` (e.g. 75 for sm_75, 90 for sm_90) is the device the adapter decisions are made for: before
// sm_80 attention takes no tensor cores, and bf16-stored qkv and out go through fp32 scratch.
std::unique_ptr<Backend> make_kernel_model_backend(int compute_capability = 90);
}  // namespace ember
