// The state of an offloaded AdamW step handed off stage by stage (AdamW::begin_handoff), shared by the thread that runs
// backward, which hands each stage's gradients over, and the host thread that receives and updates them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "backend/backend.h"
#include "train/adamw.h"

namespace ember {

struct AdamW::Handoff {
  // At most this many gradient copies to the host, and this many weight copies back (a range's one or two:
  // AdamW::send_weights), outstanding at once: together under Backend::kCopyTickets.
  static constexpr size_t kFetches = 4, kReturns = 3;
  struct Range {
    size_t begin, end;  // shard elements
    Backend::CopyTicket ticket;
  };

  std::mutex mutex;
  std::condition_variable changed;  // any of the below
  bool armed = false;               // begin_handoff ran; finish_handoff not yet
  bool scale_known = false, closed = false, stop = false;
  float* params = nullptr;
  const float* grads = nullptr;
  float lr = 0.0f, grad_scale = 1.0f;
  std::deque<Range> fetching;  // gradient copies issued, not yet waited for
  std::deque<Range> on_host;   // gradients on the host, not yet updated
  size_t handed = 0;           // elements handed off this step
  std::exception_ptr error;    // what ended the host thread
  std::thread host_thread;
};

}  // namespace ember
