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
  size_t total() const;    // saturating at SIZE_MAX
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

// Throws ember::Error (with `hint`) when `need` does not fit: on a GPU backend in the device's free memory, else in
// the host's available memory shared by the `ranks_on_host` ranks of this host. No check where neither is known.
void require_memory(const std::string& what, const MemoryEstimate& need, const Backend& backend, int ranks_on_host,
                    const std::string& hint);

}  // namespace ember
