// Device discovery fallback for builds without nvcc: reports no CUDA devices.
#include "backend/device.h"

#ifndef EMBER_HAVE_CUDA
namespace ember {
int cuda_device_count() { return 0; }
std::string cuda_device_name(int) { return "none"; }
}  // namespace ember
#endif
