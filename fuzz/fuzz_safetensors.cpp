// Fuzz target: a safetensors file as `ember import` opens it (the header JSON, dtypes, shapes, byte ranges), then
// every tensor read back as fp32. Input: the file.
#include <cstdint>

#include "fuzz_util.h"
#include "hf/safetensors.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      fuzz::scratch_file("model.safetensors", std::string(reinterpret_cast<const char*>(data), size));
  try {
    SafetensorsFile file(path);
    for (const auto& [name, entry] : file.entries()) {
      const std::vector<float> values = file.read_floats(name);
      uint64_t numel = 1;
      for (int64_t d : entry.shape) numel *= uint64_t(d);
      if (values.size() != numel) fuzz::broken("read_floats gave another count than the shape");
    }
  } catch (const Error&) {
  }
  return 0;
}
