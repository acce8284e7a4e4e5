// CUDA device discovery: the devices this process can see, by UUID and name, without failing when none is present
// (a CPU-only machine reports zero devices rather than an error), and with the reason when a driver is too old.
#include <cuda_runtime.h>

#include <string>

#include "backend/device.h"

namespace ember {

CudaDevices discover_cuda_devices() {
  CudaDevices found;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" / "no driver" error
    int driver = 0, runtime = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    cudaGetLastError();
    const CudaCountError kind = e == cudaErrorNoDevice             ? CudaCountError::no_device
                                : e == cudaErrorInsufficientDriver ? CudaCountError::insufficient_driver
                                                                   : CudaCountError::other;
    found.problem = explain_cuda_count_error(kind, cudaGetErrorName(e), driver, runtime);
    return found;
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      cudaGetLastError();
      found.devices.push_back({"", "unknown"});  // device_select names it by host and ordinal instead
      continue;
    }
    found.devices.push_back({format_gpu_uuid(reinterpret_cast<const unsigned char*>(prop.uuid.bytes)), prop.name});
  }
  return found;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
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
