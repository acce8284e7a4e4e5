// The memory a model will need, estimated from its configuration alone (the model's own size formulas,
// GPT::footprint), and the check against what the host or the GPU has free, made before anything is allocated.
// Training's estimate, which adds the optimizer, is in train/memory_estimate.h.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "model/model_config.h"

namespace ember {

struct MemoryEstimate {
  size_t weights = 0;      // parameters, gradients (training), the bf16 weight copy (bf16 and int8 precision), the
                           // dense layers' int8 copies (int8 precision)
  size_t moments = 0;      // AdamW's two moments (this rank's shard under ZeRO-1)
  size_t activations = 0;  // activations, backward scratch and token ids of one micro-batch
  size_t extra = 0;        // ZeRO-1's gradient shard; host buffers of eval and generate
  size_t total() const;    // the parts above, saturating at SIZE_MAX
  // Host memory beside the backend's: an offloaded optimizer's master weights, moments and gradient staging
  // (train/adamw.h). On a backend without device memory it shares the host with total().
  size_t host = 0;
};

// What a gradient-free model of (B, T) allocates for eval and generate, plus `extra` bytes of host buffers.
MemoryEstimate estimate_inference_memory(const ModelConfig& model, int B, int T, MatmulPrecision precision,
                                         size_t extra = 0);

// The bytes this process may still allocate on the host: MemAvailable from /proc/meminfo, lowered to the headroom
// under a cgroup v2 memory limit where there is one. Nothing where neither can be read.
std::optional<size_t> host_available_bytes();

// "" when `ranks` processes each needing `need` fit in `available` bytes of `where`; else the error message, which
// gives the estimate by part, the total and what is available.
std::string memory_shortfall(const std::string& what, const MemoryEstimate& need, int ranks, size_t available,
                             const std::string& where);

// "" when `need` fits, else the error message: with a device (device_free known), total() in its free memory and
// need.host in the host's available memory, shared by the ranks_on_host ranks of this host; without one, both in
// the host's. Nothing to check (""), where neither is known.
std::string memory_problem(const std::string& what, const MemoryEstimate& need, std::optional<size_t> device_free,
                           const std::string& device, std::optional<size_t> host_available, int ranks_on_host);

// Throws ember::Error (with `hint`) when `need` does not fit (memory_problem) in the backend's device memory, as it
// reports it, and this host's available memory (host_available_bytes).
void require_memory(const std::string& what, const MemoryEstimate& need, const Backend& backend, int ranks_on_host,
                    const std::string& hint);

}  // namespace ember
