// Device discovery, answered on every build: without the CUDA backend compiled in, there are zero CUDA devices.
#pragma once

#include <string>

namespace ember {

int cuda_device_count();
std::string cuda_device_name(int device);

}  // namespace ember
