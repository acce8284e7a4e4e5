// CUDA device discovery: how many devices this process can see, and their names, without failing when none is
// present (a CPU-only machine reports zero devices rather than an error).
#include <cuda_runtime.h>

#include <string>

#include "backend/device.h"

namespace ember {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" / "no driver" error
    return 0;
  }
  return n;
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();  // clear it, so a later launch check does not report it
    return "unknown";
  }
  return prop.name;
}

}  // namespace ember
