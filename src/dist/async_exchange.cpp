// The async-mode exchange (implementation); the protocol and window layout are described in async_exchange.h.
#include "dist/async_exchange.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <string>

#include "core/error.h"
#include "core/timer.h"
#include "dist/mpi_check.h"
#include "dist/stall_watchdog.h"

namespace ember {
namespace {

constexpr size_t kAlign = 64;
// One MPI_Put/MPI_Get moves at most this many bytes (its count is an int).
constexpr size_t kMaxTransfer = size_t(1) << 30;
constexpr int kCenter = 0;

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The window's memory: the whole layout on the center, nothing on a worker. Errors on the window return to the
// checks (and from there end the job with a message) instead of aborting inside MPI.
MPI_Win allocate_window(MPI_Comm comm, size_t bytes, uint8_t** base) {
  MPI_Info info;
  EMBER_MPI_CHECK(MPI_Info_create(&info));
  // Only MPI_Fetch_and_op on one counter is ever accumulated; no ordering among accumulates is needed.
  EMBER_MPI_CHECK(MPI_Info_set(info, "accumulate_ordering", "none"));
  MPI_Win win = MPI_WIN_NULL;
  void* mem = nullptr;
  EMBER_MPI_CHECK(MPI_Win_allocate(MPI_Aint(bytes), 1, info, comm, &mem, &win));
  EMBER_MPI_CHECK(MPI_Info_free(&info));
  EMBER_MPI_CHECK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  *base = static_cast<uint8_t*>(mem);
  return win;
}

void check_comm(MPI_Comm comm, const AsyncShape& shape, int expected_rank) {
  int rank = -1, size = 0;
  EMBER_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  EMBER_MPI_CHECK(MPI_Comm_size(comm, &size));
  EMBER_ASSERT(size == shape.workers + 1, "async exchange: communicator size must be workers + 1");
  EMBER_ASSERT(expected_rank < 0 ? rank >= 1 : rank == expected_rank, "async exchange: wrong rank for this role");
  EMBER_ASSERT(shape.block_size >= 1 && shape.workers >= 1, "async exchange: bad shape");
}

}  // namespace

AsyncLayout::AsyncLayout(const AsyncShape& shape) {
  packed = DeltaCodec(shape.compression, shape.n, shape.block_size).packed_bytes();
  slots = align_up(sizeof(Header));
  slot_stride = align_up(sizeof(Slot) + packed);
  downloads = slots + size_t(shape.workers) * slot_stride;
  download_stride = align_up(download_bytes());
  params = downloads + size_t(shape.workers) * download_stride;
  total = params + align_up(shape.n * sizeof(float));
}

// ---------------------------------------------------------------------------------------------------------------------
// Center

AsyncCenter::AsyncCenter(MPI_Comm comm, const AsyncShape& shape, const float* global, uint64_t version,
                         uint64_t tokens_applied, uint64_t samples_reserved)
    : shape_(shape),
      layout_(shape),
      comm_(comm),
      codec_(shape.compression, shape.n, shape.block_size),
      global_(global),
      mirrors_(size_t(shape.workers), std::vector<float>(global, global + shape.n)),
      mirror_version_(size_t(shape.workers), version),
      download_seq_(size_t(shape.workers), 0),
      download_taken_(size_t(shape.workers), 0),
      folded_seq_(size_t(shape.workers), 0),
      written_(size_t(shape.workers)),
      applied_seq_(size_t(shape.workers), 0),
      diff_(shape.n),
      version_(version),
      tokens_applied_(tokens_applied),
      barrier_acks_(size_t(shape.workers), 0),
      applied_in_(size_t(shape.workers), 0) {
  check_comm(comm, shape, kCenter);
  EMBER_MPI_CHECK(MPI_Comm_dup(comm, &probe_comm_));
  win_ = allocate_window(comm, layout_.total, &base_);
  // Nobody reaches the window before the barrier below; the epoch makes the stores public in any memory model.
  lock();
  std::memset(base_, 0, layout_.params);
  if (shape.n > 0) std::memcpy(base_ + layout_.params, global, shape.n * sizeof(float));
  AsyncLayout::Header* h = header();
  h->version = version;
  h->params_version = version;
  h->tokens_applied = tokens_applied;
  h->samples_reserved = samples_reserved;
  unlock();
  EMBER_MPI_CHECK(MPI_Barrier(comm));
}

// Freeing a window is collective: while an error unwinds the stack, the other ranks will never join it, so the
// window is left to MPI_Abort, which main() calls next.
AsyncCenter::~AsyncCenter() {
  if (std::uncaught_exceptions() > 0) return;
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  if (probe_comm_ != MPI_COMM_NULL) MPI_Comm_free(&probe_comm_);
}

void AsyncCenter::lock() { EMBER_MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, kCenter, 0, win_)); }
void AsyncCenter::unlock() { EMBER_MPI_CHECK(MPI_Win_unlock(kCenter, win_)); }

AsyncLayout::Header* AsyncCenter::header() { return reinterpret_cast<AsyncLayout::Header*>(base_); }
AsyncLayout::Slot* AsyncCenter::slot(int worker) {
  return reinterpret_cast<AsyncLayout::Slot*>(base_ + layout_.slot(worker));
}

void AsyncCenter::progress() {
  // Over TCP, osc/ucx emulates remote atomics and locks in software: a worker's lock request advances only while
  // the center's UCX worker is polled, which the center's locks of itself (served locally) never do. A probe runs
  // Open MPI's progress loop, which polls every one-sided component.
  int flag = 0;
  EMBER_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, probe_comm_, &flag, MPI_STATUS_IGNORE));
}

std::vector<AsyncMessage> AsyncCenter::take() {
  std::vector<AsyncMessage> taken;
  progress();
  lock();
  stop_requested_ = false;
  for (int w = 0; w < shape_.workers; ++w) {
    AsyncLayout::Slot* s = slot(w);
    barrier_acks_[size_t(w)] = s->barrier_ack;
    download_taken_[size_t(w)] = s->download_taken;
    stop_requested_ = stop_requested_ || s->stop_request != 0;
    if (s->seq == s->taken) continue;
    AsyncMessage m;
    m.worker = w;
    m.seq = s->seq;
    m.base_version = s->base_version;
    m.tokens = s->tokens;
    std::memcpy(&m.loss, &s->loss_bits, sizeof(m.loss));
    // The worker rebased onto base_version and, when its previous message was not in that version yet, added that
    // message itself: the version that applied it later is no news to the worker and does not count as staleness.
    const uint64_t own = applied_in_[size_t(w)] > s->base_version ? 1 : 0;
    m.staleness = version_ >= s->base_version + own ? version_ - s->base_version - own : 0;
    m.bytes.assign(base_ + layout_.slot_message(w), base_ + layout_.slot_message(w) + layout_.packed);
    s->taken = s->seq;
    s->staleness = m.staleness;
    bytes_taken_ += layout_.packed;
    ++messages_taken_;
    taken.push_back(std::move(m));
  }
  serve();
  unlock();
  return taken;
}

void AsyncCenter::serve() {
  const size_t n = shape_.n;
  for (int w = 0; w < shape_.workers; ++w) {
    const size_t k = size_t(w);
    float* mirror = mirrors_[k].data();
    std::deque<Written>& written = written_[k];
    // The worker took download `taken`: the mirror adds exactly what the worker decoded, so the two stay equal bit
    // for bit. Downloads written after it were relative to the mirror before it, and the worker will refuse them.
    const uint64_t taken = download_taken_[k];
    if (taken > folded_seq_[k]) {
      auto it = std::find_if(written.begin(), written.end(), [taken](const Written& x) { return x.seq == taken; });
      EMBER_ASSERT(it != written.end(), "async exchange: worker rank " + std::to_string(w + 1) + " reports download " +
                                            std::to_string(taken) + ", which was never written");
      if (shape_.error_feedback)
        codec_.unpack_add(it->bytes.data(), mirror);
      else  // the test switch: count the message as if it had carried the whole difference, which is then lost
        std::copy(it->target.begin(), it->target.end(), mirrors_[k].begin());
      folded_seq_[k] = taken;
      mirror_version_[k] = it->version;
      written.clear();
    }
    // Write a download when the newest version is news to the worker: a fresh one once the last was taken, or a
    // newer one in place of a download the worker has not taken yet, so a fetch always brings the newest version.
    const uint64_t carries = written.empty() ? mirror_version_[k] : written.back().version;
    if (carries == version_) continue;
    float* diff = diff_.data();
    const float* global = global_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) diff[i] = global[i] - mirror[i];
    Written x{++download_seq_[k], version_, std::vector<uint8_t>(layout_.packed), {}};
    codec_.pack(diff, x.bytes.data());
    if (!shape_.error_feedback) x.target.assign(global, global + n);
    AsyncLayout::Download d{x.seq, version_, applied_seq_[k], folded_seq_[k]};
    uint8_t* area = base_ + layout_.download(w);
    std::memcpy(area, &d, sizeof(d));
    std::memcpy(area + sizeof(d), x.bytes.data(), layout_.packed);
    std::memcpy(area + sizeof(d) + layout_.packed, &x.seq, sizeof(x.seq));
    written.push_back(std::move(x));
    ++downloads_written_;
  }
}

void AsyncCenter::decode(const AsyncMessage& message, float* out) const { codec_.unpack(message.bytes.data(), out); }

uint64_t AsyncCenter::publish(uint64_t tokens, const std::vector<AsyncMessage>& included) {
  const uint64_t next = version_ + 1;
  lock();
  AsyncLayout::Header* h = header();
  h->version = next;
  h->tokens_applied += tokens;
  for (const AsyncMessage& m : included) {
    applied_seq_[size_t(m.worker)] = m.seq;
    applied_in_[size_t(m.worker)] = next;
  }
  version_ = next;
  tokens_applied_ = h->tokens_applied;
  serve();
  unlock();
  return next;
}

void AsyncCenter::request_barrier(AsyncBarrier kind) {
  EMBER_ASSERT(kind != AsyncBarrier::none, "request_barrier needs a kind");
  lock();
  AsyncLayout::Header* h = header();
  h->barrier_seq = ++barrier_seq_;
  h->barrier_kind = uint64_t(kind);
  unlock();
  barrier_kind_ = kind;
}

bool AsyncCenter::barrier_reached() const {
  if (barrier_kind_ == AsyncBarrier::none) return false;
  for (uint64_t ack : barrier_acks_)
    if (ack != barrier_seq_) return false;
  return true;
}

uint64_t AsyncCenter::samples_reserved() {
  lock();
  const uint64_t s = header()->samples_reserved;
  unlock();
  return s;
}

// ---------------------------------------------------------------------------------------------------------------------
// Worker

AsyncWorker::AsyncWorker(MPI_Comm comm, const AsyncShape& shape, int worker_rank, double timeout_seconds)
    : shape_(shape),
      layout_(shape),
      worker_(worker_rank - 1),
      timeout_(timeout_seconds),
      codec_(shape.compression, shape.n, shape.block_size),
      feedback_(codec_),
      message_(layout_.packed),
      download_(layout_.download_bytes()) {
  check_comm(comm, shape, -1);
  EMBER_MPI_CHECK(MPI_Comm_dup(comm, &probe_comm_));  // collective with the center's
  uint8_t* unused = nullptr;
  win_ = allocate_window(comm, 0, &unused);
  EMBER_MPI_CHECK(MPI_Barrier(comm));
}

AsyncWorker::~AsyncWorker() {
  if (std::uncaught_exceptions() > 0) return;  // as ~AsyncCenter
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  if (probe_comm_ != MPI_COMM_NULL) MPI_Comm_free(&probe_comm_);
}

// Each waits inside MPI for the center to answer: a center whose host is down, frozen or cut off never does, so each
// is bounded by async.center_timeout (dist/stall_watchdog.h).
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

uint64_t AsyncWorker::reserve(uint64_t count) {
  const double t0 = now_seconds();
  uint64_t first = 0;
  lock();
  EMBER_MPI_CHECK(MPI_Fetch_and_op(&count, &first, MPI_UINT64_T, kCenter,
                                   MPI_Aint(offsetof(AsyncLayout::Header, samples_reserved)), MPI_SUM, win_));
  unlock();
  bytes_put_ += sizeof(count);
  bytes_got_ += sizeof(first);
  blocked_ += now_seconds() - t0;
  return first;
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
  AsyncLayout::Download d{};
  Published p;
  lock();
  get(&h, 0, sizeof(h));
  get(&mine, layout_.slot(worker_), sizeof(mine));
  get(&d, layout_.download(worker_), sizeof(d));
  flush();
  p.full = !have_params_;
  if (p.full) get(base, layout_.params, shape_.n * sizeof(float));
  // A download is for this worker only when it was computed against the parameters this worker holds (base_seq is
  // the download it took last); one the center wrote before it learnt of that take is refused.
  bool fresh = d.seq != download_taken_ && d.base_seq == download_taken_;
  if (fresh) {
    // Record, message and trailing seq in one get: one-sided components may serve the gets of one epoch on
    // either side of the center's writes, and a record whose seqs disagree is refused as torn.
    get(download_.data(), layout_.download(worker_), layout_.download_bytes());
    flush();
    AsyncLayout::Download again{};
    uint64_t trailer = 0;
    std::memcpy(&again, download_.data(), sizeof(again));
    std::memcpy(&trailer, download_.data() + sizeof(again) + layout_.packed, sizeof(trailer));
    fresh = again.seq == d.seq && trailer == d.seq;
    if (fresh) put(&d.seq, layout_.slot(worker_) + offsetof(AsyncLayout::Slot, download_taken), sizeof(d.seq));
  }
  unlock();  // completes the gets and the put
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
  p.staleness = mine.staleness;
  return p;
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
