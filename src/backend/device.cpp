// Device discovery: what a failed device count means, UUID text, and the fallback for builds without nvcc (no
// CUDA devices).
#include "backend/device.h"

#include <cstdio>

namespace ember {

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::optional<CudaProblem> explain_cuda_count_error(CudaCountError error, const std::string& error_name,
                                                    int driver_version, int runtime_version) {
  if (error == CudaCountError::no_device) return std::nullopt;
  // The runtime says "insufficient driver" when libcuda is missing altogether (driver version 0): no GPU here.
  if (error == CudaCountError::insufficient_driver && driver_version == 0) return std::nullopt;
  if (error == CudaCountError::insufficient_driver)
    return CudaProblem{
        "the NVIDIA driver supports CUDA " + cuda_version_text(driver_version) + ", but this ember's CUDA runtime is " +
            cuda_version_text(runtime_version) + " (" + error_name + ")",
        "install an NVIDIA driver for CUDA " + cuda_version_text(runtime_version) +
            " or newer (nvidia-smi's header shows the CUDA version a driver supports), or build ember with a CUDA "
            "toolkit no newer than " +
            cuda_version_text(driver_version)};
  return CudaProblem{"the CUDA runtime could not count the GPUs (" + error_name + ")",
                     "check that nvidia-smi lists the GPUs and that CUDA_VISIBLE_DEVICES names existing ones"};
}

std::string format_gpu_uuid(const unsigned char bytes[16]) {
  char text[64];
  int at = snprintf(text, sizeof(text), "GPU-");
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text[at++] = '-';
    at += snprintf(text + at, sizeof(text) - size_t(at), "%02x", unsigned(bytes[i]));
  }
  return std::string(text, size_t(at));
}

#ifndef EMBER_HAVE_CUDA
CudaDevices discover_cuda_devices() { return {}; }
int cuda_device_count() { return 0; }
std::string cuda_device_name(int) { return "none"; }
#endif

}  // namespace ember
