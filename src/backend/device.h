// Device discovery, answered on every build: without the CUDA backend compiled in, there are zero CUDA devices.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ember {

// One visible CUDA device: its UUID ("GPU-8f6c2e1a-...", as nvidia-smi -L prints it; the same in every process
// that sees the device, whatever CUDA_VISIBLE_DEVICES renumbered) and its name.
struct CudaDevice {
  std::string uuid;
  std::string name;
};

// Why the CUDA runtime could not count devices on a machine that may well have them (an NVIDIA driver older than the
// runtime needs, a broken install), as an error message and a hint for the user.
struct CudaProblem {
  std::string what;
  std::string hint;
};

// What this process can use of CUDA: the visible devices by ordinal, or none and possibly why. No devices and no
// problem is a machine without NVIDIA GPUs, or without the NVIDIA driver at all.
struct CudaDevices {
  std::vector<CudaDevice> devices;
  std::optional<CudaProblem> problem;
  int count() const { return int(devices.size()); }
};

CudaDevices discover_cuda_devices();
int cuda_device_count();  // the number discover_cuda_devices() finds, without their properties
std::string cuda_device_name(int device);

// How cudaGetDeviceCount failed, as discover_cuda_devices() classifies it.
enum class CudaCountError { no_device, insufficient_driver, other };
// The problem a failed count means, from the runtime's error name ("cudaErrorInsufficientDriver") and the versions
// cudaDriverGetVersion and cudaRuntimeGetVersion report (1000 major + 10 minor; a driver version of 0 means no
// driver is installed). Nothing when there is simply no GPU: no device, or no driver at all.
std::optional<CudaProblem> explain_cuda_count_error(CudaCountError error, const std::string& error_name,
                                                    int driver_version, int runtime_version);
// "13.0" for 13000: a CUDA version as cudaDriverGetVersion and cudaRuntimeGetVersion encode it.
std::string cuda_version_text(int version);
// The UUID of a device as nvidia-smi prints it: "GPU-" and the 16 bytes in hex, grouped 4-2-2-2-6.
std::string format_gpu_uuid(const unsigned char bytes[16]);

}  // namespace ember
