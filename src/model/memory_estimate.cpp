// The model's memory estimate and the check (implementation). The numbers come from GPT::footprint, the same
// formulas the model's constructor allocates by; a unit test builds the model and compares.
#include "model/memory_estimate.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "model/gpt.h"

namespace ember {
namespace {

size_t add_sat(size_t a, size_t b) {
  size_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

std::string human_bytes(size_t bytes) {
  if (bytes == SIZE_MAX) return "more than 16 EiB";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[48];
  snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// The first number of a "Key: N kB" line of /proc/meminfo, in bytes.
std::optional<size_t> meminfo_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0 && line.size() > strlen(key) && line[strlen(key)] == ':') {
      std::istringstream fields(line.substr(strlen(key) + 1));
      unsigned long long kib = 0;
      if (fields >> kib) return size_t(kib) * 1024;
    }
  return std::nullopt;
}

// A number from a one-line cgroup file ("max" where unlimited).
std::optional<size_t> cgroup_value(const char* path) {
  std::ifstream in(path);
  unsigned long long v = 0;
  if (in >> v) return size_t(v);
  return std::nullopt;
}

}  // namespace

size_t MemoryEstimate::total() const { return add_sat(add_sat(weights, moments), add_sat(activations, extra)); }

MemoryEstimate estimate_inference_memory(const ModelConfig& model, int B, int T, MatmulPrecision precision,
                                         size_t extra) {
  const GPT::Footprint fp =
      GPT::footprint(model, B, T, /*with_grads=*/false, Recompute::none, gemm_inputs_in_bf16(precision));
  MemoryEstimate m;
  m.weights = fp.weight_bytes;
  m.activations = fp.activation_bytes;
  m.extra = extra;
  return m;
}

std::optional<size_t> host_available_bytes() {
  std::optional<size_t> avail = meminfo_bytes("MemAvailable");
  const std::optional<size_t> limit = cgroup_value("/sys/fs/cgroup/memory.max");
  const std::optional<size_t> used = cgroup_value("/sys/fs/cgroup/memory.current");
  if (limit && used) {
    const size_t headroom = *limit > *used ? *limit - *used : 0;
    avail = avail ? std::min(*avail, headroom) : headroom;
  }
  return avail;
}

std::string memory_shortfall(const std::string& what, const MemoryEstimate& need, int ranks, size_t available,
                             const std::string& where) {
  size_t all = need.total();
  for (int r = 1; r < ranks; ++r) all = add_sat(all, need.total());
  if (all <= available) return "";
  std::string parts = "weights " + human_bytes(need.weights);
  if (need.moments) parts += ", AdamW moments " + human_bytes(need.moments);
  parts += ", activations " + human_bytes(need.activations);
  if (need.extra) parts += ", buffers " + human_bytes(need.extra);
  std::string per_rank = ranks > 1 ? " per rank, x " + std::to_string(ranks) + " ranks = " + human_bytes(all) : "";
  return "memory: " + what + " needs about " + human_bytes(need.total()) + " (" + parts + ")" + per_rank + ", but " +
         where + " has " + human_bytes(available) + " available";
}

void require_memory(const std::string& what, const MemoryEstimate& need, const Backend& backend, int ranks_on_host,
                    const std::string& hint) {
  size_t used = 0, total = 0;
  std::string problem;
  if (backend.device_memory(&used, &total)) {
    problem = memory_shortfall(what, need, 1, total > used ? total - used : 0, backend.name() + " (free memory)");
  } else if (const std::optional<size_t> avail = host_available_bytes()) {
    problem = memory_shortfall(what, need, ranks_on_host, *avail, "this host (MemAvailable)");
  }
  if (!problem.empty()) throw_error(problem, hint);
}

}  // namespace ember
