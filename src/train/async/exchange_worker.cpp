// The async-mode exchange, the workers' side (implementation): reserve samples, beat, send deltas, fetch the
// published parameters, all by one-sided operations on the center's window. The protocol and window layout are
// described in exchange.h.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.h"
#include "core/timer.h"
#include "parallel/mpi_check.h"
#include "parallel/stall_watchdog.h"
#include "train/async/exchange.h"
#include "train/async/window.h"

namespace ember {

AsyncWorker::AsyncWorker(MPI_Comm comm, const AsyncShape& shape, int worker_rank, double timeout_seconds)
    : shape_(shape),
      layout_(shape),
      worker_(worker_rank - 1),
      timeout_(timeout_seconds),
      codec_(shape.compression, shape.n, shape.block_size),
      feedback_(codec_),
      message_(layout_.packed),
      download_(layout_.download_bytes()),
      roster_(size_t(shape.workers), 0) {
  check_comm(comm, shape, -1);
  EMBER_MPI_CHECK(MPI_Comm_dup(comm, &probe_comm_));  // collective with the center's
  uint8_t* unused = nullptr;
  win_ = allocate_window(comm, 0, &unused);
  EMBER_MPI_CHECK(MPI_Barrier(comm));
}

AsyncWorker::~AsyncWorker() {
  if (std::uncaught_exceptions() > 0 || !intact()) return;  // as ~AsyncCenter
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  if (probe_comm_ != MPI_COMM_NULL) MPI_Comm_free(&probe_comm_);
}

// Each waits inside MPI for the center to answer: a center whose host is down, frozen or cut off never does, so each
// is bounded by async.center_timeout (parallel/stall_watchdog.h).
void AsyncWorker::lock() {
  const StallGuard guard = center_guard("MPI_Win_lock");
  EMBER_MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, kCenter, 0, win_));
}
void AsyncWorker::unlock() {
  const StallGuard guard = center_guard("MPI_Win_unlock");
  EMBER_MPI_CHECK(MPI_Win_unlock(kCenter, win_));
}
void AsyncWorker::flush() {
  const StallGuard guard = center_guard("MPI_Win_flush");
  EMBER_MPI_CHECK(MPI_Win_flush(kCenter, win_));
}

StallGuard AsyncWorker::center_guard(const char* call) const {
  return StallGuard(timeout_,
                    "async worker rank " + std::to_string(worker_ + 1) + ": the center (rank 0) did not answer " +
                        call + " within async.center_timeout = " + std::to_string(int(timeout_)) +
                        " s: its host is down, frozen or cut off from this one",
                    "check that rank 0 is running and reachable from this host; once it is, resume the job with "
                    "--resume auto (on slow links raise async.center_timeout)");
}

void AsyncWorker::get(void* dst, size_t offset, size_t bytes) {
  for (size_t done = 0; done < bytes; done += kMaxTransfer) {
    const int count = int(std::min(kMaxTransfer, bytes - done));
    EMBER_MPI_CHECK(MPI_Get(static_cast<uint8_t*>(dst) + done, count, MPI_BYTE, kCenter, MPI_Aint(offset + done), count,
                            MPI_BYTE, win_));
  }
  bytes_got_ += bytes;
}

void AsyncWorker::put(const void* src, size_t offset, size_t bytes) {
  for (size_t done = 0; done < bytes; done += kMaxTransfer) {
    const int count = int(std::min(kMaxTransfer, bytes - done));
    EMBER_MPI_CHECK(MPI_Put(static_cast<const uint8_t*>(src) + done, count, MPI_BYTE, kCenter, MPI_Aint(offset + done),
                            count, MPI_BYTE, win_));
  }
  bytes_put_ += bytes;
}

void AsyncWorker::center_timeout(const char* what) const {
  throw_error("async worker rank " + std::to_string(worker_ + 1) + ": the center (rank 0) " + what + " for " +
                  std::to_string(int(timeout_)) + " s",
              "check that rank 0 is running and reachable from this host (the center must be able to run MPI "
              "calls); on slow links raise async.center_timeout");
}

AsyncWorker::Reservation AsyncWorker::reserve(uint64_t count, uint64_t quantum, uint64_t target) {
  const double t0 = now_seconds();
  const size_t reserved_at = layout_.slot(worker_) + offsetof(AsyncLayout::Slot, reserved);
  uint64_t first = 0;
  lock();
  // Owed before taken: a worker lost in between counts as owing a few samples too many, which ends the run a little
  // early, never as owing too few, which would have the center wait for ever for samples nobody holds.
  const uint64_t most = reserved_ + count;
  put(&most, reserved_at, sizeof(most));
  flush();
  EMBER_MPI_CHECK(MPI_Fetch_and_op(&count, &first, MPI_UINT64_T, kCenter,
                                   MPI_Aint(offsetof(AsyncLayout::Header, samples_reserved)), MPI_SUM, win_));
  flush();
  const uint64_t take = first >= target ? 0 : std::min(count, (target - first) / quantum * quantum);
  reserved_ += take;
  put(&reserved_, reserved_at, sizeof(reserved_));
  unlock();
  bytes_put_ += sizeof(count);
  bytes_got_ += sizeof(first);
  blocked_ += now_seconds() - t0;
  return {first, take};
}

void AsyncWorker::heartbeat() {
  const double t0 = now_seconds();
  const uint64_t beat = ++heartbeat_;
  lock();
  put(&beat, layout_.slot(worker_) + offsetof(AsyncLayout::Slot, heartbeat), sizeof(beat));
  unlock();
  blocked_ += now_seconds() - t0;
}

void AsyncWorker::send(const float* delta, uint64_t base_version, uint64_t tokens, double loss, float weight) {
  feedback_.compress(delta, message_.data());
  if (!shape_.error_feedback) feedback_.reset();
  const double t0 = now_seconds();
  const size_t slot = layout_.slot(worker_);
  // The slot holds one message: wait until the center has taken the previous one (it takes every slot on each
  // pass of its loop, so this is normally immediate).
  double pause = 50e-6;
  for (;;) {
    uint64_t taken = 0;
    lock();
    get(&taken, slot + offsetof(AsyncLayout::Slot, taken), sizeof(taken));
    flush();
    if (taken == seq_) break;  // still locked: the put follows in the same epoch
    unlock();
    if (now_seconds() - t0 > timeout_) center_timeout("has not taken this worker's previous update");
    usleep(useconds_t(pause * 1e6));
    pause = std::min(pause * 2, 5e-3);
  }
  uint64_t meta[3] = {base_version, tokens, 0};
  std::memcpy(&meta[2], &loss, sizeof(loss));
  put(message_.data(), layout_.slot_message(worker_), layout_.packed);
  put(meta, slot + offsetof(AsyncLayout::Slot, base_version), sizeof(meta));
  flush();  // the message is complete at the center before its sequence number says so
  const uint64_t next = seq_ + 1;
  put(&next, slot + offsetof(AsyncLayout::Slot, seq), sizeof(next));
  unlock();
  seq_ = next;
  sent_.push_back({next, weight, message_});
  blocked_ += now_seconds() - t0;
}

AsyncWorker::Published AsyncWorker::fetch(float* base) {
  const double t0 = now_seconds();
  AsyncLayout::Header h{};
  AsyncLayout::Slot mine{};
  uint64_t lead = 0;
  Published p;
  const size_t slot = layout_.slot(worker_), area = layout_.download(worker_);
  const uint64_t beat = ++heartbeat_;
  lock();
  get(&h, 0, sizeof(h));
  get(roster_.data(), layout_.roster, roster_.size() * sizeof(uint64_t));
  get(&mine, slot, sizeof(mine));
  get(&lead, area, sizeof(lead));
  put(&beat, slot + offsetof(AsyncLayout::Slot, heartbeat), sizeof(beat));
  flush();
  if (roster_[size_t(worker_)] != 0) {
    unlock();
    p.dropped = true;
    return p;
  }
  p.full = !have_params_;
  if (p.full) get(base, layout_.params, shape_.n * sizeof(float));
  // The center rewrites a download while workers may read it (exchange.h): the record is whole when its
  // leading seq, read before it, inside it and after it, and its trailing seq all agree. A download is for this
  // worker only when it was computed against the parameters this worker holds (base_seq is the download it took
  // last); one the center wrote before it learnt of that take is refused.
  AsyncLayout::Download d{};
  bool fresh = lead != download_taken_ && lead != AsyncLayout::Download::kBusy;
  if (fresh) {
    get(download_.data(), area, layout_.download_bytes());
    flush();
    uint64_t again = 0, trailer = 0;
    get(&again, area, sizeof(again));
    flush();
    std::memcpy(&d, download_.data(), sizeof(d));
    std::memcpy(&trailer, download_.data() + sizeof(d) + layout_.packed, sizeof(trailer));
    fresh = d.seq == lead && trailer == lead && again == lead && d.base_seq == download_taken_;
    if (fresh) put(&d.seq, slot + offsetof(AsyncLayout::Slot, download_taken), sizeof(d.seq));
  }
  unlock();  // completes the gets and the puts
  blocked_ += now_seconds() - t0;
  if (p.full) {
    have_params_ = true;
    version_ = h.params_version;
  }
  p.downloaded = fresh;
  if (fresh) {
    codec_.unpack_add(download_.data() + sizeof(AsyncLayout::Download), base);
    download_taken_ = d.seq;
    version_ = d.version;
    applied_ = d.applied;
  }
  while (!sent_.empty() && sent_.front().seq <= applied_) sent_.pop_front();
  p.version = version_;
  p.applied = applied_;
  p.newest = h.version;
  p.tokens_applied = h.tokens_applied;
  p.samples_reserved = h.samples_reserved;
  p.barrier_seq = h.barrier_seq;
  p.barrier_kind = AsyncBarrier(h.barrier_kind);
  p.barrier_go = h.barrier_go;
  p.staleness = mine.staleness;
  return p;
}

std::vector<int> AsyncWorker::members() const {
  std::vector<int> ranks = {kCenter};
  for (size_t w = 0; w < roster_.size(); ++w)
    if (roster_[w] == 0) ranks.push_back(int(w) + 1);
  return ranks;
}

bool AsyncWorker::intact() const {
  return std::all_of(roster_.begin(), roster_.end(), [](uint64_t r) { return r == 0; });
}

void AsyncWorker::add_pending(float* out) const {
  for (const Sent& m : sent_) codec_.unpack_add(m.bytes.data(), out, m.weight);
}

void AsyncWorker::ack_barrier(uint64_t seq) {
  const double t0 = now_seconds();
  lock();
  put(&seq, layout_.slot(worker_) + offsetof(AsyncLayout::Slot, barrier_ack), sizeof(seq));
  unlock();
  blocked_ += now_seconds() - t0;
}

void AsyncWorker::request_stop() {
  const uint64_t one = 1;
  lock();
  put(&one, layout_.slot(worker_) + offsetof(AsyncLayout::Slot, stop_request), sizeof(one));
  unlock();
}

}  // namespace ember
