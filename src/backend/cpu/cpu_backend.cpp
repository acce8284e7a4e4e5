// CPU backend (core): construction, host memory and the plain elementwise ops (add, accumulate, scale, cast).
// The other op families live in their own cpu_<family>.cpp files next to this one.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_gemm_int8.h"
#include "core/error.h"

namespace ember {

using cpu::kMinParallelWork;

CpuBackend::CpuBackend() {
  // All parallelism is OpenMP with static splits; GEMMs are sliced per thread (cpu_gemm.cpp) and attention calls
  // small GEMMs from inside parallel loops. OpenBLAS threads would oversubscribe the cores and fight OpenMP's
  // spin-waiting workers, so OpenBLAS runs on the calling thread only. This setting is process-wide.
  openblas_set_num_threads(1);
}

std::string CpuBackend::name() const { return "cpu"; }

std::string CpuBackend::int8_engine() const { return cpu::int8_gemm_engine(); }

void CpuBackend::weights_changed() {
  for (auto* copies : {&int8_forward_weights_, &int8_backward_weights_})
    for (auto& [address, copy] : *copies) copy.current = false;
  for (auto& [address, copy] : fp8_weights_) copy.current = false;
}

size_t CpuBackend::quantized_weight_copy_bytes() const {
  size_t bytes = 0;
  for (const auto* copies : {&int8_forward_weights_, &int8_backward_weights_})
    for (const auto& [address, copy] : *copies) bytes += copy.q.size() + copy.scales.size() * sizeof(float);
  for (const auto& [address, copy] : fp8_weights_) bytes += copy.q.size() + sizeof(float);
  return bytes;
}

void CpuBackend::track_quantized_copies() {
  const size_t held = quantized_weight_copy_bytes();
  if (held == quantized_tracked_bytes_) return;
  if (quantized_tracked_bytes_) track_free(&int8_forward_weights_);
  track_alloc(&int8_forward_weights_, held);
  quantized_tracked_bytes_ = held;
}

void* CpuBackend::alloc(size_t bytes) {
  // aligned_alloc wants a size that is a multiple of the alignment; a zero-byte request still gets a valid pointer.
  const size_t rounded = (bytes + 63) / 64 * 64 + (bytes == 0 ? 64 : 0);
  void* ptr = std::aligned_alloc(64, rounded);
  if (!ptr)
    throw_error("CPU backend: out of host memory allocating " + std::to_string(bytes) + " bytes",
                "reduce batch_size or seq_len, or use a smaller model config");
  std::memset(ptr, 0, rounded);
  track_alloc(ptr, rounded);
  return ptr;
}

void CpuBackend::free(void* ptr) {
  weights_changed();  // the address may come back holding another weight
  track_free(ptr);
  std::free(ptr);
}

void CpuBackend::copy_to_device(void* dst, const void* src_host, size_t bytes) {
  if (bytes) std::memcpy(dst, src_host, bytes);
}
void CpuBackend::copy_to_host(void* dst_host, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst_host, src, bytes);
}
void CpuBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}
void CpuBackend::zero(void* ptr, size_t bytes) {
  if (bytes) std::memset(ptr, 0, bytes);
}
void CpuBackend::synchronize() {}  // every op has finished when it returns

void CpuBackend::add(float* out, const float* a, TensorIn b, size_t n) {
  if (b.bf16) {
    const BFloat16* h = b.b16();
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
    for (size_t i = 0; i < n; ++i) out[i] = a[i] + from_bf16(h[i]);
    return;
  }
  const float* f = b.f32();
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + f[i];
}

void CpuBackend::accumulate(float* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void CpuBackend::scale(float* x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

void CpuBackend::cast_to_bf16(BFloat16* out, const float* inp, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(inp[i]);
}

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace ember
