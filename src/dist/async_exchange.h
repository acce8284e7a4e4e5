// The async-mode exchange (docs/architecture.md, "Asynchronous mode"): one MPI_Win_allocate window on the center
// (rank 0) holding a mailbox slot per worker, a ring of recently published updates and the published parameters.
// Workers reach it only with passive target operations (MPI_Put, MPI_Get, MPI_Fetch_and_op under a shared lock of
// rank 0); the center touches its own window memory only under an exclusive lock of itself, so neither side ever sees
// the other's half-written data. No bulk MPI_Accumulate (over UCX it moves the data twice) and no MPI_MODE_NOCHECK
// with lock_all (osc/pt2pt hangs).
//
// A worker's cycle: reserve() a range of global sample indices, train on it, send() the 1-bit error-feedback
// delta of its parameters since its last sync, fetch() the newest published parameters and rebase onto them.
// The center's cycle: take() every new message, fold the deltas into the global parameters with its outer
// optimizer, and publish() the resulting update, itself 1-bit compressed with the center's own error feedback, so
// the published parameters trail the global ones by exactly the center's residual.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/delta_codec.h"

namespace ember {

// What every rank of an async job agrees on.
struct AsyncShape {
  size_t n = 0;                // values per message: the model's parameters
  size_t block_size = 2048;    // values per fp32 scale
  DeltaCompression compression = DeltaCompression::onebit;
  int workers = 1;             // ranks 1..workers of the communicator
  bool error_feedback = true;  // false: residuals are dropped after every message (a test switch)
};

// Barriers the center asks the workers to join; all ranks then run a collective step (a checkpoint) together.
enum class AsyncBarrier : uint64_t { none = 0, checkpoint = 1, stop = 2, finish = 3 };

// Byte offsets in the center's window, each 64-byte aligned:
//   header              Header
//   slot w (w < workers) Slot, then the packed message of worker rank w + 1
//   ring entry k        uint64 version, then a packed published update; version v lives at entry v % ring_size
//   params              n floats: the published parameters
struct AsyncLayout {
  struct Header {
    uint64_t version;           // updates published so far
    uint64_t ring_start;        // the version the window started at: versions <= ring_start are not in the ring
    uint64_t tokens_applied;    // tokens behind every delta folded in
    uint64_t samples_reserved;  // the next global sample index to hand out (MPI_Fetch_and_op)
    uint64_t barrier_seq;       // barriers requested so far
    uint64_t barrier_kind;      // AsyncBarrier of the newest one
    uint64_t pad[2];
  };
  struct Slot {
    uint64_t seq;           // messages the worker has written; written last, after a flush of the message
    uint64_t base_version;  // the published version the delta was taken against
    uint64_t tokens;        // tokens trained into the delta
    uint64_t loss_bits;     // the worker's mean training loss over those tokens (a double's bits), for the log
    uint64_t taken;         // the newest seq the center has taken: the slot is free again when taken == seq
    uint64_t staleness;     // versions published between the base and the take of the newest message taken
    uint64_t barrier_ack;   // the newest barrier_seq the worker has reached
    uint64_t stop_request;  // non-zero: the worker asks the job to stop (it received SIGUSR1/SIGTERM)
    uint64_t applied;       // the newest seq whose delta a published version includes
  };

  explicit AsyncLayout(const AsyncShape& shape);
  size_t slot(int worker) const { return slots + size_t(worker) * slot_stride; }  // worker: 0-based
  size_t slot_message(int worker) const { return slot(worker) + sizeof(Slot); }
  size_t ring_entry(uint64_t version) const { return ring + size_t(version % ring_size) * ring_stride; }

  size_t packed = 0;     // bytes of one packed message
  size_t ring_size = 0;  // published updates kept: 4 per worker + 4, so a worker four rounds behind the others
                         // still catches up from the ring instead of fetching the full parameters
  size_t slots = 0, slot_stride = 0, ring = 0, ring_stride = 0, params = 0, total = 0;
};

// A message as the center took it out of a slot.
struct AsyncMessage {
  int worker = 0;  // 0-based: rank worker + 1
  uint64_t seq = 0;
  uint64_t base_version = 0;
  uint64_t tokens = 0;
  uint64_t staleness = 0;  // versions published since its base by other workers' messages (a worker whose own
                           // previous message was applied after its base has folded that one in itself)
  double loss = 0.0;       // the worker's mean training loss behind the delta
  std::vector<uint8_t> bytes;
};

class AsyncCenter {
 public:
  // Collective over comm with the workers' AsyncWorker constructors; this process must be rank 0 of comm, whose
  // size must be shape.workers + 1. The published parameters start as `initial` (n floats) at `version`, with the
  // given tokens applied and sample counter; the ring starts empty, so every worker's first fetch is a full one.
  AsyncCenter(MPI_Comm comm, const AsyncShape& shape, const float* initial, uint64_t version, uint64_t tokens_applied,
              uint64_t samples_reserved);
  ~AsyncCenter();  // frees the window: collective, like the constructor
  AsyncCenter(const AsyncCenter&) = delete;
  AsyncCenter& operator=(const AsyncCenter&) = delete;

  // Takes the newest message of every slot that has one the center has not taken yet, frees the slot and reads the
  // barrier acknowledgements and stop requests. One short exclusive epoch on the center's own window; progresses
  // one-sided traffic (osc/pt2pt needs the target in MPI), so an idle center calls it in a loop.
  std::vector<AsyncMessage> take();
  // out (n) = the delta the message carries.
  void decode(const AsyncMessage& message, float* out) const;
  // Publishes `update` (n floats, the change of the global parameters) as the next version: compressed with the
  // center's error feedback, stored in the ring and added to the published parameters; marks the `included`
  // messages as applied in their slots. Returns the new version.
  uint64_t publish(const float* update, uint64_t tokens, const std::vector<AsyncMessage>& included = {});

  // Asks every worker to join a barrier of `kind`; reached() once every worker has acknowledged it.
  void request_barrier(AsyncBarrier kind);
  bool barrier_pending() const { return barrier_kind_ != AsyncBarrier::none; }
  AsyncBarrier barrier_kind() const { return barrier_kind_; }
  bool barrier_reached() const;  // as of the last take()
  void end_barrier() { barrier_kind_ = AsyncBarrier::none; }
  bool stop_requested() const { return stop_requested_; }  // as of the last take(): some worker asked to stop

  uint64_t version() const { return version_; }
  uint64_t tokens_applied() const { return tokens_applied_; }
  uint64_t samples_reserved();  // reads the counter the workers advance (exclusive epoch)
  const ErrorFeedback& feedback() const { return feedback_; }
  uint64_t bytes_taken() const { return bytes_taken_; }  // message bytes taken out of slots so far
  uint64_t messages_taken() const { return messages_taken_; }

 private:
  void progress();
  void lock();
  void unlock();
  AsyncLayout::Header* header();
  AsyncLayout::Slot* slot(int worker);

  AsyncShape shape_;
  AsyncLayout layout_;
  MPI_Comm comm_;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;  // never carries a message: probed only to run MPI's progress loop
  MPI_Win win_ = MPI_WIN_NULL;
  uint8_t* base_ = nullptr;
  DeltaCodec codec_;
  ErrorFeedback feedback_;
  std::vector<uint8_t> staging_;
  uint64_t version_ = 0;
  uint64_t tokens_applied_ = 0;
  uint64_t barrier_seq_ = 0;
  AsyncBarrier barrier_kind_ = AsyncBarrier::none;
  std::vector<uint64_t> barrier_acks_;
  std::vector<uint64_t> applied_in_;  // per worker: the version that applied its last message (0: none yet)
  bool stop_requested_ = false;
  uint64_t bytes_taken_ = 0, messages_taken_ = 0;
};

class AsyncWorker {
 public:
  // Collective over comm with the center's constructor; this process is rank worker_rank >= 1. A wait for the
  // center (a slot it has not emptied) longer than timeout_seconds fails with an error naming the center.
  AsyncWorker(MPI_Comm comm, const AsyncShape& shape, int worker_rank, double timeout_seconds);
  ~AsyncWorker();
  AsyncWorker(const AsyncWorker&) = delete;
  AsyncWorker& operator=(const AsyncWorker&) = delete;

  // Atomically takes `count` global sample indices from the center's counter; returns the first one.
  uint64_t reserve(uint64_t count);
  // Compresses delta (n floats) with this worker's error feedback and sends it: waits until the center has taken
  // the previous message, puts the message with its base version and token count, flushes, then writes the seq.
  void send(const float* delta, uint64_t base_version, uint64_t tokens, double loss = 0.0);

  // What a fetch saw in the center's header.
  struct Published {
    uint64_t version = 0, tokens_applied = 0, samples_reserved = 0, barrier_seq = 0;
    AsyncBarrier barrier_kind = AsyncBarrier::none;
    uint64_t staleness = 0;  // of this worker's newest message the center has taken
    uint64_t applied = 0;    // the newest seq of this worker that the fetched parameters include
    bool full = false;       // the full parameters were fetched (first fetch, or too far behind for the ring)
  };
  // Brings `base` (n floats, the published parameters as of this worker's previous fetch) to the newest version:
  // from the ring of published updates when every missed one is still there, else by fetching the parameters.
  Published fetch(float* base);
  // Tells the center this worker has reached barrier `seq`.
  void ack_barrier(uint64_t seq);
  // Asks the center to stop the job (sticky).
  void request_stop();

  ErrorFeedback& feedback() { return feedback_; }
  uint64_t seq() const { return seq_; }
  // out (n) += scale * the delta the newest sent message carries, as the center will decode it.
  void add_last_message(float scale, float* out) const;
  // Traffic and time spent in MPI calls on the window, summed since construction.
  uint64_t bytes_put() const { return bytes_put_; }
  uint64_t bytes_got() const { return bytes_got_; }
  double blocked_seconds() const { return blocked_; }

 private:
  void lock();
  void unlock();
  void get(void* dst, size_t offset, size_t bytes);
  void put(const void* src, size_t offset, size_t bytes);
  void flush();
  [[noreturn]] void center_timeout(const char* what) const;

  AsyncShape shape_;
  AsyncLayout layout_;
  int worker_;  // 0-based
  double timeout_;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  DeltaCodec codec_;
  ErrorFeedback feedback_;
  std::vector<uint8_t> message_;
  uint64_t seq_ = 0;
  uint64_t version_ = 0;
  bool have_version_ = false;
  uint64_t bytes_put_ = 0, bytes_got_ = 0;
  double blocked_ = 0.0;
};

}  // namespace ember
