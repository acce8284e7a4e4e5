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
  const size_t each = add_sat(need.total(), need.host);
  size_t all = each;
  for (int r = 1; r < ranks; ++r) all = add_sat(all, each);
  if (all <= available) return "";
  std::string parts;
  auto part = [&](const char* name, size_t bytes, bool always) {
    if (bytes || always) parts += (parts.empty() ? "" : ", ") + std::string(name) + " " + human_bytes(bytes);
  };
  const bool model = need.total() > 0;  // not just the host part of an offloaded optimizer
  part("weights", need.weights, model);
  part("AdamW moments", need.moments, false);
  part("activations", need.activations, model);
  part("buffers", need.extra, false);
  part("offloaded optimizer", need.host, false);
  std::string per_rank = ranks > 1 ? " per rank, x " + std::to_string(ranks) + " ranks = " + human_bytes(all) : "";
  return "memory: " + what + " needs about " + human_bytes(each) + " (" + parts + ")" + per_rank + ", but " + where +
         " has " + human_bytes(available) + " available";
}

std::string memory_problem(const std::string& what, const MemoryEstimate& need, std::optional<size_t> device_free,
                           const std::string& device, std::optional<size_t> host_available, int ranks_on_host) {
  const std::string host = "this host (MemAvailable)";
  if (!device_free) return host_available ? memory_shortfall(what, need, ranks_on_host, *host_available, host) : "";
  MemoryEstimate on_device = need, on_host;
  on_device.host = 0;
  on_host.host = need.host;
  std::string problem = memory_shortfall(what, on_device, 1, *device_free, device + " (free memory)");
  if (problem.empty() && need.host && host_available)
    problem = memory_shortfall(what + " on the host", on_host, ranks_on_host, *host_available, host);
  return problem;
}

void require_memory(const std::string& what, const MemoryEstimate& need, const Backend& backend, int ranks_on_host,
                    const std::string& hint) {
  size_t used = 0, total = 0;
  std::optional<size_t> device_free;
  if (backend.device_memory(&used, &total)) device_free = total > used ? total - used : 0;
  const std::string problem =
      memory_problem(what, need, device_free, backend.name(), host_available_bytes(), ranks_on_host);
  if (!problem.empty()) throw_error(problem, hint);
}

}  // namespace ember
