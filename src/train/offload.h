// Where the optimizer's state lives (training.offload, DeepSpeed's name): none keeps the fp32 master weights and
// AdamW's moments in the backend's memory; optimizer keeps them in host memory and runs the update there, the
// device holding the weights it computes with and the gradients (train/adamw.h).
#pragma once

#include <optional>
#include <string>

#include "core/enum_names.h"

namespace ember {

enum class Offload { none, optimizer };
inline constexpr Offload kOffloads[] = {Offload::none, Offload::optimizer};

inline const char* offload_name(Offload o) { return o == Offload::optimizer ? "optimizer" : "none"; }
inline std::optional<Offload> parse_offload(const std::string& name) {
  return find_by_name(kOffloads, offload_name, name);
}

}  // namespace ember
