// AdamW (implementation): one backend call per step over the shard's table rows, each row keeping its own weight
// decay whichever ranks its elements land on; adjacent rows with the same decay form one segment. Offloaded, one
// call of the host's CPU backend per chunk of the shard.
#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <initializer_list>

#include "core/error.h"
#include "model/gpt.h"
#include "train/adamw_handoff.h"

namespace ember {

namespace {

// Elements per chunk of an offloaded update (16 MiB): each of the host's two gradient staging buffers holds one.
constexpr size_t kOffloadChunk = size_t(1) << 22;

// The elements of an offloaded shard's gradient staging on the host: two chunks, or handed off the whole shard.
size_t gradient_staging(size_t shard, bool handoff) { return handoff ? shard : 2 * std::min(shard, kOffloadChunk); }

}  // namespace

AdamW::AdamW(Backend& backend, const ParamTable& table, const OptimizerConfig& config, size_t shard_begin,
             size_t shard_end, Offload offload, bool handoff, DeviceWeights device)
    : backend_(backend),
      table_(table),
      config_(config),
      begin_(shard_begin),
      end_(shard_end),
      offload_(offload),
      device_(device) {
  EMBER_ASSERT(shard_begin <= shard_end, "empty or inverted optimizer shard");
  EMBER_ASSERT(!device_.layout || offloaded(), "AdamW: device weights need the optimizer offloaded");
  const size_t n = std::max<size_t>(end_ - begin_, 1);
  if (offloaded()) {  // zeroed host memory (page-locked on a GPU), as the backend's is
    host_ = make_cpu_backend();
    const auto [p0, p1] = device_.layout ? device_.layout->range(begin_, end_) : std::make_pair(size_t(0), size_t(0));
    packed_begin_ = p0, packed_end_ = p1;
    try {
      host_masters_ = static_cast<float*>(backend_.alloc_host(n * sizeof(float)));
      m_ = static_cast<float*>(backend_.alloc_host(n * sizeof(float)));
      v_ = static_cast<float*>(backend_.alloc_host(n * sizeof(float)));
      host_grads_ = static_cast<float*>(backend_.alloc_host(gradient_staging(n, handoff) * sizeof(float)));
      if (device_.layout) {
        const size_t packed = std::max<size_t>(p1 - p0, 1);
        host_bf16_ = static_cast<BFloat16*>(backend_.alloc_host(n * sizeof(BFloat16)));
        host_packed_ = static_cast<float*>(backend_.alloc_host(packed * sizeof(float)));
        if (device_.packed_bf16)
          host_packed_bf16_ = static_cast<BFloat16*>(backend_.alloc_host(packed * sizeof(BFloat16)));
      }
      if (handoff) handoff_ = std::make_unique<Handoff>();
    } catch (...) {  // no destructor runs for a constructor that throws: free what was allocated
      for (void* p : std::initializer_list<void*>{m_, v_, host_masters_, host_grads_, host_bf16_, host_packed_,
                                                  host_packed_bf16_})
        backend_.free_host(p);
      throw;
    }
  } else {
    m_ = static_cast<float*>(backend_.alloc(n * sizeof(float)));
    v_ = static_cast<float*>(backend_.alloc(n * sizeof(float)));
  }
  std::vector<const ParamInfo*> rows;
  for (const ParamInfo& p : table_.params()) rows.push_back(&p);
  std::sort(rows.begin(), rows.end(), [](const ParamInfo* a, const ParamInfo* b) { return a->offset < b->offset; });
  for (const ParamInfo* p : rows) {
    const size_t lo = std::max(p->offset, begin_), hi = std::min(p->offset + p->numel, end_);
    if (lo >= hi) continue;
    const float wd = p->decay ? config_.weight_decay : 0.0f;
    AdamWSegment* last = segments_.empty() ? nullptr : &segments_.back();
    if (last && last->end == lo - begin_ && last->weight_decay == wd)
      last->end = hi - begin_;
    else
      segments_.push_back({lo - begin_, hi - begin_, wd});
  }
}

AdamW::~AdamW() {
  stop_handoff();
  if (offloaded()) {
    for (void* p :
         std::initializer_list<void*>{m_, v_, host_masters_, host_grads_, host_bf16_, host_packed_, host_packed_bf16_})
      backend_.free_host(p);
    return;
  }
  backend_.free(m_);
  backend_.free(v_);
}

void AdamW::step(float* params, const float* shard_grads, float lr, float grad_scale) {
  if (handoff_ && handoff_->armed) return finish_handoff(params, shard_grads, lr, grad_scale);
  ++t_;
  if (offloaded()) return offloaded_step(params, shard_grads, lr, grad_scale);
  backend_.adamw_update_segments(params + begin_, shard_grads, m_, v_, segments_.data(), segments_.size(), lr,
                                 config_.beta1, config_.beta2, config_.eps, t_, grad_scale);
}

// Chunk by chunk, pipelined on the backend's asynchronous copies: chunk k + 1's gradients come to the host (into the
// other of two staging buffers) while the host updates chunk k, and chunk k's new weights go back while it updates
// the next. The segments are cut to each chunk: the update is elementwise, so the cut changes no value.
void AdamW::offloaded_step(float* params, const float* shard_grads, float lr, float grad_scale) {
  const size_t n = end_ - begin_, chunks = (n + kOffloadChunk - 1) / kOffloadChunk,
               staging = std::min(n, kOffloadChunk);
  refresh_masters(params);
  auto first = [&](size_t k) { return k * kOffloadChunk; };
  auto last = [&](size_t k) { return std::min(n, (k + 1) * kOffloadChunk); };
  auto fetch = [&](size_t k) {
    return backend_.copy_to_host_async(host_grads_ + (k % 2) * staging, shard_grads + first(k),
                                       (last(k) - first(k)) * sizeof(float));
  };
  std::deque<Backend::CopyTicket> back;  // the weights' copies still running
  Backend::CopyTicket next = chunks ? fetch(0) : 0;
  for (size_t k = 0; k < chunks; ++k) {
    const size_t c0 = first(k), c1 = last(k);
    backend_.wait_copy(next);
    if (k + 1 < chunks) next = fetch(k + 1);  // its buffer held chunk k - 1, whose update is done
    update_on_host(c0, c1, host_grads_ + (k % 2) * staging, lr, grad_scale);
    while (back.size() + 3 > size_t(Backend::kCopyTickets)) {  // room for this chunk's two and the next fetch
      backend_.wait_copy(back.front());
      back.pop_front();
    }
    send_weights(params, c0, c1, back);
  }
  for (Backend::CopyTicket t : back) backend_.wait_copy(t);
}

void AdamW::update_on_host(size_t c0, size_t c1, const float* g, float lr, float grad_scale) {
  std::vector<AdamWSegment>& cut = cut_;  // one thread updates at a time: the step's, or the hand-off's
  cut.clear();
  for (const AdamWSegment& s : segments_)
    if (std::max(s.begin, c0) < std::min(s.end, c1))
      cut.push_back({std::max(s.begin, c0) - c0, std::min(s.end, c1) - c0, s.weight_decay});
  if (cut.empty()) return;
  if (host_bf16_)  // with device weights the update writes the bf16 copy too (padding between rows keeps its cast)
    host_->adamw_update_segments_bf16(host_masters_ + c0, host_bf16_ + c0, g, m_ + c0, v_ + c0, cut.data(), cut.size(),
                                      lr, config_.beta1, config_.beta2, config_.eps, t_, grad_scale);
  else
    host_->adamw_update_segments(host_masters_ + c0, g, m_ + c0, v_ + c0, cut.data(), cut.size(), lr, config_.beta1,
                                 config_.beta2, config_.eps, t_, grad_scale);
}

void AdamW::send_weights(float* params, size_t c0, size_t c1, std::deque<Backend::CopyTicket>& copies) {
  if (!device_.layout) {
    copies.push_back(
        backend_.copy_to_device_async(params + begin_ + c0, host_masters_ + c0, (c1 - c0) * sizeof(float)));
    return;
  }
  if (device_.bf16)  // host_bf16_ was written by the update (update_on_host)
    copies.push_back(
        backend_.copy_to_device_async(device_.bf16 + begin_ + c0, host_bf16_ + c0, (c1 - c0) * sizeof(BFloat16)));
  const auto [p0, p1] = device_.layout->pack(begin_ + c0, begin_ + c1, host_masters_ + c0, host_packed_, packed_begin_);
  if (p0 == p1) return;
  const float* packed = host_packed_ + (p0 - packed_begin_);
  copies.push_back(backend_.copy_to_device_async(device_.fp32 + p0, packed, (p1 - p0) * sizeof(float)));
  if (!device_.packed_bf16) return;
  // Their bf16 copy from the shard's, which the update wrote (the same bits as casting the packed masters).
  device_.layout->pack(begin_ + c0, begin_ + c1, host_bf16_ + c0, host_packed_bf16_, packed_begin_);
  const BFloat16* packed_bf16 = host_packed_bf16_ + (p0 - packed_begin_);
  copies.push_back(backend_.copy_to_device_async(device_.packed_bf16 + p0, packed_bf16, (p1 - p0) * sizeof(BFloat16)));
}

void AdamW::weights_loaded(const float* host_arena) {
  if (!offloaded()) return;
  std::memcpy(host_masters_, host_arena + begin_, (end_ - begin_) * sizeof(float));
  if (host_bf16_) host_->cast_to_bf16(host_bf16_, host_masters_, end_ - begin_);
  masters_stale_ = false;
}

void AdamW::refresh_masters(const float* params) {
  if (!masters_stale_) return;
  EMBER_ASSERT(!device_.layout, "AdamW: with device weights the masters are set from the host (weights_loaded)");
  backend_.copy_to_host(host_masters_, params + begin_, (end_ - begin_) * sizeof(float));
  masters_stale_ = false;
}

void AdamW::load_moments(const float* m, const float* v) {
  const size_t bytes = (end_ - begin_) * sizeof(float);
  if (offloaded()) {
    std::memcpy(m_, m, bytes);
    std::memcpy(v_, v, bytes);
  } else {
    backend_.copy_to_device(m_, m, bytes);
    backend_.copy_to_device(v_, v, bytes);
  }
}

void AdamW::read_moments(float* m, float* v) const {
  const size_t bytes = (end_ - begin_) * sizeof(float);
  if (offloaded()) {
    std::memcpy(m, m_, bytes);
    std::memcpy(v, v_, bytes);
  } else {
    backend_.copy_to_host(m, m_, bytes);
    backend_.copy_to_host(v, v_, bytes);
  }
}

size_t AdamW::offload_host_bytes(const HostShard& s) {
  size_t bytes = (3 * s.numel + gradient_staging(s.numel, s.handoff)) * sizeof(float);
  if (s.home != WeightHome::device)
    bytes += s.numel * sizeof(BFloat16) +
             s.packed * (sizeof(float) + (s.home == WeightHome::host_dense ? sizeof(BFloat16) : 0));
  return bytes;
}

WeightHome offload_weight_home(const RunConfig& c, MatmulPrecision precision) {
  if (c.training.offload != Offload::optimizer || c.training.mode != TrainingMode::sync ||
      !GPT::host_masters_possible(c.model, precision))
    return WeightHome::device;
  return dense_weights_quantized(precision) && c.training.zero == 0 ? WeightHome::host_dense : WeightHome::host;
}

size_t AdamW::host_bytes() const {
  if (!offloaded()) return 0;
  const WeightHome home = !device_.layout       ? WeightHome::device
                          : device_.packed_bf16 ? WeightHome::host_dense
                                                : WeightHome::host;
  return offload_host_bytes({end_ - begin_, handoff_enabled(), home, packed_end_ - packed_begin_});
}

float clip_scale(float norm, float max_norm) {
  return max_norm > 0.0f && norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
}

}  // namespace ember
