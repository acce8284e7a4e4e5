// Helpers shared by the GPU communicators (NCCL, host-staged MPI): where a buffer lives, and how a communication
// stream waits for the ops a backend has queued on its own stream before it reads their results.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_check.h"

namespace ember::cuda {

// True for device (and managed) memory, false for host memory, pinned or not. The Communicator interface takes both:
// gradients and parameters live on the device, loss scalars and the resume path on the host.
inline bool is_device_memory(const void* ptr) {
  cudaPointerAttributes attr{};
  EMBER_CUDA_CHECK(cudaPointerGetAttributes(&attr, ptr));
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

// Makes `consumer` wait for everything queued on `producer` so far, without blocking the host: `marker` is recorded
// on the producer and waited on by the consumer (one event serves every call; a wait captures the record before it).
// With no producer stream, waits for all work on the device instead.
inline void order_after(cudaStream_t consumer, cudaStream_t producer, cudaEvent_t marker) {
  if (!producer) {
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
    return;
  }
  EMBER_CUDA_CHECK(cudaEventRecord(marker, producer));
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(consumer, marker, 0));
}

inline bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace ember::cuda
