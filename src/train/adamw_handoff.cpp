// AdamW's per-stage hand-off (implementation). The thread that runs backward only issues copies (hand_off); a host
// thread of the optimizer's own waits for them, updates each range on the host and sends its weights back. Gradient
// copies are waited for first, so they never queue behind an update; without the scale, ranges wait on the host
// until finish_handoff brings it. The update of a range is the chunked step's (update_on_host), so the numbers are
// those of AdamW::step whichever way the ranges arrive.
#include "train/adamw_handoff.h"

#include "core/error.h"

namespace ember {

bool offload_hands_off(const RunConfig& c, int world_size) {
  if (c.training.offload != Offload::optimizer) return false;
  if (c.training.mode == TrainingMode::async) return c.async.ranks_per_worker == 1;
  return world_size == 1 && c.training.zero == 0;
}

void AdamW::begin_handoff(float* params, const float* grads, float lr, std::optional<float> grad_scale) {
  EMBER_ASSERT(handoff_ && !handoff_->armed && begin_ == 0, "AdamW: a hand-off needs handoff, and covers the arena");
  Handoff& h = *handoff_;
  refresh_masters(params);
  ++t_;
  h.armed = true;
  h.scale_known = grad_scale.has_value();
  h.grad_scale = grad_scale.value_or(1.0f);
  h.closed = h.stop = false;
  h.params = params;
  h.grads = grads;
  h.lr = lr;
  h.handed = 0;
  h.error = nullptr;
  h.fetching.clear();
  h.on_host.clear();
  h.host_thread = std::thread([this] { run_handoff(); });
}

void AdamW::hand_off(size_t begin, size_t end) {
  Handoff& h = *handoff_;
  EMBER_ASSERT(h.armed && begin <= end && end <= end_, "AdamW: hand_off outside an armed step or the arena");
  std::unique_lock<std::mutex> lock(h.mutex);
  h.changed.wait(lock, [&] { return h.fetching.size() < Handoff::kFetches || h.error; });
  if (h.error) return;  // finish_handoff rethrows it
  h.fetching.push_back(
      {begin, end, backend_.copy_to_host_async(host_grads_ + begin, h.grads + begin, (end - begin) * sizeof(float))});
  h.handed += end - begin;
  h.changed.notify_all();
}

void AdamW::run_handoff() {
  Handoff& h = *handoff_;
  std::deque<Backend::CopyTicket> returns;  // weight copies still running
  try {
    backend_.bind_thread();
    std::unique_lock<std::mutex> lock(h.mutex);
    for (;;) {
      h.changed.wait(
          lock, [&] { return h.stop || !h.fetching.empty() || (h.scale_known && !h.on_host.empty()) || h.closed; });
      if (h.stop) break;
      if (!h.fetching.empty()) {
        const Handoff::Range r = h.fetching.front();
        lock.unlock();
        backend_.wait_copy(r.ticket);
        lock.lock();
        h.fetching.pop_front();
        h.on_host.push_back(r);
        h.changed.notify_all();
      } else if (h.scale_known && !h.on_host.empty()) {
        const Handoff::Range r = h.on_host.front();
        h.on_host.pop_front();
        const float lr = h.lr, scale = h.grad_scale;
        float* params = h.params;
        lock.unlock();
        update_on_host(r.begin, r.end, host_grads_ + r.begin, lr, scale);
        while (returns.size() + 2 > Handoff::kReturns) {  // room for the range's copies (two at most)
          backend_.wait_copy(returns.front());
          returns.pop_front();
        }
        send_weights(params, r.begin, r.end, returns);
        lock.lock();
      } else {
        break;  // closed: every range arrived and was updated
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(h.mutex);
    h.error = std::current_exception();
    h.changed.notify_all();
  }
  // No copy may outlive the step: each ticket is waited for, the gradients' of a stopped step too.
  std::lock_guard<std::mutex> lock(h.mutex);
  for (const Handoff::Range& r : h.fetching) returns.push_back(r.ticket);
  h.fetching.clear();
  for (Backend::CopyTicket t : returns) {
    try {
      backend_.wait_copy(t);
    } catch (...) {
      if (!h.error) h.error = std::current_exception();
    }
  }
}

void AdamW::finish_handoff(const float* params, const float* grads, float lr, float grad_scale) {
  Handoff& h = *handoff_;
  EMBER_ASSERT(params == h.params && grads == h.grads && lr == h.lr, "AdamW: a step unlike the one handed off");
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    EMBER_ASSERT(h.error || h.handed == end_ - begin_, "AdamW: a handed-off step finished before all its gradients");
    EMBER_ASSERT(!h.scale_known || grad_scale == h.grad_scale, "AdamW: the hand-off's scale changed");
    h.grad_scale = grad_scale;
    h.scale_known = h.closed = true;
    h.changed.notify_all();
  }
  h.host_thread.join();
  h.armed = false;
  if (h.error) std::rethrow_exception(h.error);
}

void AdamW::stop_handoff() noexcept {
  if (!handoff_ || !handoff_->host_thread.joinable()) return;
  Handoff& h = *handoff_;
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    h.stop = true;
    h.changed.notify_all();
  }
  h.host_thread.join();
  h.armed = false;
}

}  // namespace ember
