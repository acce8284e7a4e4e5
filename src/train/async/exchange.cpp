// The async-mode exchange (implementation): the window's layout, its allocation and the center's side; the workers'
// side is exchange_worker.cpp. The protocol and window layout are described in exchange.h.
#include "train/async/exchange.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <string>

#include "core/error.h"
#include "core/timer.h"
#include "parallel/mpi_check.h"
#include "parallel/stall_watchdog.h"
#include "train/async/window.h"

namespace ember {

namespace {

constexpr size_t kAlign = 64;

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The center's loads and stores of its own window memory, in program order as the workers' gets and puts see them
// (the unified memory model: the window is that memory).
void fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

}  // namespace

MPI_Win allocate_window(MPI_Comm comm, size_t bytes, uint8_t** base) {
  MPI_Info info;
  EMBER_MPI_CHECK(MPI_Info_create(&info));
  // Only MPI_Fetch_and_op on one counter is ever accumulated; no ordering among accumulates is needed.
  EMBER_MPI_CHECK(MPI_Info_set(info, "accumulate_ordering", "none"));
  MPI_Win win = MPI_WIN_NULL;
  void* mem = nullptr;
  const int rc = MPI_Win_allocate(MPI_Aint(bytes), 1, info, comm, &mem, &win);
  EMBER_MPI_CHECK(MPI_Info_free(&info));
  if (rc != MPI_SUCCESS)
    throw_error("async exchange: MPI could not make the center's window over these ranks: " + mpi_error_string(rc),
                "Open MPI's default one-sided component (osc/sm) reaches only the ranks of one launch on one host: "
                "across hosts, or with ranks that joined (async.join), give every mpirun --mca osc pt2pt (or ucx)");
  EMBER_MPI_CHECK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  int* model = nullptr;
  int found = 0;
  EMBER_MPI_CHECK(MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &found));
  if (!found || *model != MPI_WIN_UNIFIED)
    throw_error("async exchange: this MPI's one-sided component gives windows the separate memory model",
                "choose another one-sided component (e.g. --mca osc pt2pt or --mca osc ucx with Open MPI)");
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

AsyncLayout::AsyncLayout(const AsyncShape& shape) {
  packed = DeltaCodec(shape.compression, shape.n, shape.block_size).packed_bytes();
  roster = align_up(sizeof(Header));
  slots = roster + align_up(size_t(shape.workers) * sizeof(uint64_t));
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
      applied_in_(size_t(shape.workers)),
      roster_(size_t(shape.workers), 0),
      heartbeats_(size_t(shape.workers), 0),
      reserved_(size_t(shape.workers), 0),
      tokens_taken_(size_t(shape.workers), 0) {
  check_comm(comm, shape, kCenter);
  EMBER_MPI_CHECK(MPI_Comm_dup(comm, &probe_comm_));
  win_ = allocate_window(comm, layout_.total, &base_);
  // Nobody reaches the window before the barrier below.
  std::memset(base_, 0, layout_.params);
  if (shape.n > 0) std::memcpy(base_ + layout_.params, global, shape.n * sizeof(float));
  AsyncLayout::Header* h = header();
  h->version = version;
  h->params_version = version;
  h->tokens_applied = tokens_applied;
  h->samples_reserved = samples_reserved;
  fence();
  EMBER_MPI_CHECK(MPI_Barrier(comm));
}

// Freeing a window is collective: while an error unwinds the stack, the other ranks will never join it, so the
// window is left to MPI_Abort, which main() calls next; once a worker was dropped it never will either, and the
// process ends without MPI (parallel/world.h, leave_job).
AsyncCenter::~AsyncCenter() {
  if (std::uncaught_exceptions() > 0 || live_workers() < shape_.workers) return;
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  if (probe_comm_ != MPI_COMM_NULL) MPI_Comm_free(&probe_comm_);
}

AsyncLayout::Header* AsyncCenter::header() { return reinterpret_cast<AsyncLayout::Header*>(base_); }
uint64_t* AsyncCenter::roster() { return reinterpret_cast<uint64_t*>(base_ + layout_.roster); }
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
  fence();
  stop_requested_ = false;
  for (int w = 0; w < shape_.workers; ++w) {
    if (dropped(w)) continue;
    AsyncLayout::Slot* s = slot(w);
    barrier_acks_[size_t(w)] = s->barrier_ack;
    download_taken_[size_t(w)] = s->download_taken;
    heartbeats_[size_t(w)] = s->heartbeat;
    reserved_[size_t(w)] = s->reserved;
    stop_requested_ = stop_requested_ || s->stop_request != 0;
    if (s->seq == s->taken) continue;
    fence();  // the message was whole before its seq said so: read it after the seq
    AsyncMessage m;
    m.worker = w;
    m.seq = s->seq;
    m.base_version = s->base_version;
    m.tokens = s->tokens;
    std::memcpy(&m.loss, &s->loss_bits, sizeof(m.loss));
    // The worker rebased onto base_version and added its messages not in that version yet itself (one or several:
    // the center may take a message and apply it later): the versions that applied them later are no news to the
    // worker and do not count as staleness. Bases only grow, so older versions are of no further use.
    std::deque<uint64_t>& own = applied_in_[size_t(w)];
    while (!own.empty() && own.front() <= s->base_version) own.pop_front();
    const uint64_t since = version_ >= s->base_version ? version_ - s->base_version : 0;
    m.staleness = since - std::min<uint64_t>(since, own.size());
    m.bytes.assign(base_ + layout_.slot_message(w), base_ + layout_.slot_message(w) + layout_.packed);
    s->staleness = m.staleness;
    fence();  // the copy is done before the worker may write the slot again
    s->taken = m.seq;
    bytes_taken_ += layout_.packed;
    tokens_taken_[size_t(w)] += m.tokens;
    ++messages_taken_;
    taken.push_back(std::move(m));
  }
  serve();
  return taken;
}

void AsyncCenter::serve() {
  const size_t n = shape_.n;
  for (int w = 0; w < shape_.workers; ++w) {
    if (dropped(w)) continue;
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
    // A worker may be reading the record meanwhile: the leading seq says busy while the rest changes, and turns to
    // the new seq only after the trailing one has (AsyncWorker::fetch reads them in the opposite order).
    AsyncLayout::Download d{x.seq, version_, applied_seq_[k], folded_seq_[k]};
    uint8_t* area = base_ + layout_.download(w);
    const uint64_t busy = AsyncLayout::Download::kBusy;
    std::memcpy(area, &busy, sizeof(busy));
    fence();
    std::memcpy(area + sizeof(d.seq), reinterpret_cast<const uint8_t*>(&d) + sizeof(d.seq), sizeof(d) - sizeof(d.seq));
    std::memcpy(area + sizeof(d), x.bytes.data(), layout_.packed);
    fence();
    std::memcpy(area + sizeof(d) + layout_.packed, &x.seq, sizeof(x.seq));
    fence();
    std::memcpy(area, &x.seq, sizeof(x.seq));
    written.push_back(std::move(x));
    ++downloads_written_;
  }
}

void AsyncCenter::decode(const AsyncMessage& message, float* out) const { codec_.unpack(message.bytes.data(), out); }

uint64_t AsyncCenter::publish(uint64_t tokens, const std::vector<AsyncMessage>& included) {
  const uint64_t next = version_ + 1;
  AsyncLayout::Header* h = header();
  h->version = next;
  h->tokens_applied += tokens;
  for (const AsyncMessage& m : included) {
    applied_seq_[size_t(m.worker)] = m.seq;
    std::deque<uint64_t>& own = applied_in_[size_t(m.worker)];
    if (own.empty() || own.back() != next) own.push_back(next);
  }
  version_ = next;
  tokens_applied_ = h->tokens_applied;
  fence();
  serve();
  return next;
}

void AsyncCenter::request_barrier(AsyncBarrier kind) {
  EMBER_ASSERT(kind != AsyncBarrier::none, "request_barrier needs a kind");
  AsyncLayout::Header* h = header();
  h->barrier_kind = uint64_t(kind);
  fence();  // a worker that sees the new seq sees its kind
  h->barrier_seq = ++barrier_seq_;
  fence();
  barrier_kind_ = kind;
}

bool AsyncCenter::barrier_reached() const {
  if (barrier_kind_ == AsyncBarrier::none) return false;
  for (int w = 0; w < shape_.workers; ++w)
    if (!dropped(w) && barrier_acks_[size_t(w)] != barrier_seq_) return false;
  return true;
}

void AsyncCenter::release_barrier() {
  fence();  // the roster is final before the go
  header()->barrier_go = barrier_seq_;
  fence();
}

void AsyncCenter::drop(int worker) {
  if (dropped(worker)) return;
  roster_[size_t(worker)] = version_ + 1;
  roster()[worker] = version_ + 1;
  fence();
}

int AsyncCenter::live_workers() const { return int(std::count(roster_.begin(), roster_.end(), uint64_t(0))); }

std::vector<int> AsyncCenter::members() const {
  std::vector<int> ranks = {kCenter};
  for (int w = 0; w < shape_.workers; ++w)
    if (!dropped(w)) ranks.push_back(w + 1);
  return ranks;
}

uint64_t AsyncCenter::samples_reserved() {
  fence();
  return header()->samples_reserved;
}

}  // namespace ember
