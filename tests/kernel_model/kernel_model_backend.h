// The kernel-model backend (kernel_model_backend.cpp): the CUDA backend's kernels run on the CPU by the kernel model,
// with the CPU backend's GEMMs and memory. For tests only.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace ember {
std::unique_ptr<Backend> make_kernel_model_backend();
}
