// CUDA backend: a stable sort of int32 (key, value) pairs by key, for the encoder's backward pass (cuda_encoder.cu),
// by CUB's radix sort (part of the CUDA toolkit). A least-significant-digit radix sort keeps the input order among
// equal keys, so the result is a function of the input alone. Kept in its own file: the kernel model
// (tests/kernel_model) cannot compile CUB's device code and stands in for these two functions with std::stable_sort.
#include <cub/device/device_radix_sort.cuh>

#include "cuda_check.h"
#include "cuda_ops.h"
#include "launch_cost.h"

namespace ember {
namespace cuda {

size_t sort_pairs_temp_bytes(int n) {
  size_t bytes = 0;
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), n));
  return bytes;
}

void launch_sort_pairs(int32_t* keys_out, int32_t* values_out, const int32_t* keys_in, const int32_t* values_in, int n,
                       void* temp, size_t temp_bytes, cudaStream_t stream) {
  if (n == 0) return;
  // Four passes of 8 bits over the keys and values, each reading and writing both.
  report_launch("sort_pairs", 4 * 8.0 * n, 4 * 8.0 * n, 0.0);
  EMBER_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, values_in, values_out, n, 0, 32, stream));
}

}  // namespace cuda

}  // namespace ember
