// The async-mode exchange (docs/architecture.md, "Asynchronous mode"): one MPI_Win_allocate window on the center
// (rank 0) holding, per worker, a mailbox slot for its deltas and a download for the parameters it lacks, plus the
// roster and the parameters the job started from. Workers reach it only with passive target operations (MPI_Put,
// MPI_Get, MPI_Fetch_and_op under a shared lock of rank 0). The center never locks its own window: a worker frozen
// or cut off inside its epoch would hold that lock, and with it the whole job. It reads and writes its memory
// directly (every osc component here gives the unified memory model), and each record says by itself when it is
// whole: a worker writes its message, flushes, then its seq, and does not write again until the center has taken
// it; the center writes a download between two copies of its seq, and a worker accepts it only when both agree
// with a third read after it. No bulk MPI_Accumulate (over UCX it moves the data twice) and no MPI_MODE_NOCHECK with
// lock_all (osc/pt2pt hangs).
//
// A worker's cycle: reserve() a range of global sample indices, train on it (heartbeat() between steps), fetch()
// its download, send() the error-feedback compressed delta of its parameters since its last sync, and rebase onto
// the download plus its own messages not in it (add_pending()). The center's cycle: take() every new message, fold the
// deltas into the global parameters with its outer optimizer, and publish() the new version. For each worker the center
// keeps a mirror of the parameters that worker holds; whenever the worker has consumed its previous download and the
// mirror is behind, the center compresses (global - mirror) into the worker's download and adds what it sent to the
// mirror. A download is therefore one message whatever the number of versions the worker missed, and what it could not
// carry stays in (global - mirror) for the next one: error feedback on the way down, per worker.
//
// A worker the center hears nothing from for too long is dropped(): the roster says so, the center serves it no
// more and no barrier waits for it; the samples it reserved but never delivered are skipped (reserved() and
// tokens_taken() tell how many). A dropped worker that comes back learns it from its next fetch and must leave.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "parallel/stall_watchdog.h"
#include "train/async/delta_codec.h"

namespace ember {

// What every rank of an async job agrees on.
struct AsyncShape {
  size_t n = 0;              // values per message: the model's parameters
  size_t block_size = 2048;  // values per fp32 scale
  DeltaCompression compression = DeltaCompression::onebit;
  int workers = 1;             // ranks 1..workers of the communicator
  bool error_feedback = true;  // false: what a message could not carry is dropped, on the way up and down (a test
                               // switch)
};

// Barriers the center asks the workers to join; all ranks then run a collective step (a checkpoint) together. After
// a join barrier's checkpoint the ranks that asked to join are taken in and every rank starts again from it.
enum class AsyncBarrier : uint64_t { none = 0, checkpoint = 1, stop = 2, finish = 3, join = 4 };

// Byte offsets in the center's window, each 64-byte aligned:
//   header                Header
//   roster                one uint64_t per worker: 0 while it takes part, else 1 + the version it was dropped at
//   slot w (w < workers)  Slot, then the packed message of worker rank w + 1 (written by the worker)
//   download w            Download, a packed message for worker rank w + 1, and the seq again (by the center)
//   params                n floats: the parameters at the window's creation, every worker's first fetch
struct AsyncLayout {
  struct Header {
    uint64_t version;           // updates published so far
    uint64_t params_version;    // the version of the params region (the window's first)
    uint64_t tokens_applied;    // tokens behind every delta folded in
    uint64_t samples_reserved;  // the next global sample index to hand out (MPI_Fetch_and_op)
    uint64_t barrier_seq;       // barriers requested so far
    uint64_t barrier_kind;      // AsyncBarrier of the newest one
    uint64_t barrier_go;        // the newest barrier whose members are final: the roster holds them
    uint64_t pad;
  };
  struct Slot {
    uint64_t seq;             // messages the worker has written; written last, after a flush of the message
    uint64_t base_version;    // the version of the parameters the delta was taken against
    uint64_t tokens;          // tokens trained into the delta
    uint64_t loss_bits;       // the worker's mean training loss over those tokens (a double's bits), for the log
    uint64_t taken;           // the newest seq the center has taken: the slot is free again when taken == seq
    uint64_t staleness;       // versions published between the base and the take of the newest message taken
    uint64_t barrier_ack;     // the newest barrier_seq the worker has reached
    uint64_t stop_request;    // non-zero: the worker asks the job to stop (it received SIGUSR1/SIGTERM)
    uint64_t download_taken;  // the newest download seq the worker has applied: the center may write the next
    uint64_t heartbeat;       // counts the worker's signs of life (every fetch, and heartbeat() between them)
    uint64_t reserved;        // samples the worker will train of those it reserved (while reserving: at most), in total
  };
  // A download record: this, the packed message, then seq again (a reader whose two seqs differ saw a torn record).
  struct Download {
    uint64_t seq;       // downloads written so far; kBusy while the center rewrites the record
    uint64_t version;   // the version the worker holds once it has added the message
    uint64_t applied;   // the newest seq of this worker whose delta that version includes
    uint64_t base_seq;  // the download taken last that the message is relative to (0: the first parameters)
    static constexpr uint64_t kBusy = ~uint64_t(0);
  };

  explicit AsyncLayout(const AsyncShape& shape);
  size_t slot(int worker) const { return slots + size_t(worker) * slot_stride; }  // worker: 0-based
  size_t slot_message(int worker) const { return slot(worker) + sizeof(Slot); }
  size_t download(int worker) const { return downloads + size_t(worker) * download_stride; }
  size_t download_bytes() const { return sizeof(Download) + packed + sizeof(uint64_t); }

  size_t packed = 0;  // bytes of one packed message
  size_t roster = 0, slots = 0, slot_stride = 0, downloads = 0, download_stride = 0, params = 0, total = 0;
};

// A message as the center took it out of a slot.
struct AsyncMessage {
  int worker = 0;  // 0-based: rank worker + 1
  uint64_t seq = 0;
  uint64_t base_version = 0;
  uint64_t tokens = 0;
  uint64_t staleness = 0;  // versions published since its base, less those that applied this worker's earlier
                           // messages (the worker added those to its base itself)
  double loss = 0.0;       // the worker's mean training loss behind the delta
  std::vector<uint8_t> bytes;
};

class AsyncCenter {
 public:
  // Collective over comm with the workers' AsyncWorker constructors; this process must be rank 0 of comm, whose
  // size must be shape.workers + 1. `global` (n floats) is the center's copy of the parameters: it must stay valid
  // for the life of this object, and change only just before publish(). It is `version` now, with the given tokens
  // applied and sample counter, and is what every worker's first fetch brings.
  AsyncCenter(MPI_Comm comm, const AsyncShape& shape, const float* global, uint64_t version, uint64_t tokens_applied,
              uint64_t samples_reserved);
  ~AsyncCenter();  // frees the window: collective, like the constructor (not once a worker was dropped)
  AsyncCenter(const AsyncCenter&) = delete;
  AsyncCenter& operator=(const AsyncCenter&) = delete;

  // Takes the newest message of every slot that has one the center has not taken yet, frees the slot and reads the
  // barrier acknowledgements and stop requests. One short exclusive epoch on the center's own window; progresses
  // one-sided traffic (osc/pt2pt needs the target in MPI), so an idle center calls it in a loop. Also writes the
  // download of every worker that has consumed its previous one and is behind.
  std::vector<AsyncMessage> take();
  // out (n) = the delta the message carries.
  void decode(const AsyncMessage& message, float* out) const;
  // The global parameters have changed: they are the next version, which folds in `tokens` more tokens and the
  // `included` messages. Writes the downloads that can be written now. Returns the new version.
  uint64_t publish(uint64_t tokens, const std::vector<AsyncMessage>& included = {});

  // Asks every worker to join a barrier of `kind`; reached() once every worker still in the job has acknowledged
  // it. release_barrier() then fixes its members (the roster as it is now) and lets the workers go on to the
  // collective step, which members() take part in.
  void request_barrier(AsyncBarrier kind);
  bool barrier_pending() const { return barrier_kind_ != AsyncBarrier::none; }
  AsyncBarrier barrier_kind() const { return barrier_kind_; }
  bool barrier_reached() const;  // as of the last take()
  void release_barrier();
  void end_barrier() { barrier_kind_ = AsyncBarrier::none; }

  // Takes worker w (0-based) out of the job for good: the roster says so, its slot is read and its download written
  // no more, and barriers do not wait for it. Messages already taken stay valid.
  void drop(int worker);
  bool dropped(int worker) const { return roster_[size_t(worker)] != 0; }
  int live_workers() const;
  std::vector<int> members() const;  // ranks of comm still in the job: 0, then the live workers' ranks
  // As of the last take(): worker w's heartbeat counter, and the samples it reserved and will train in total.
  uint64_t heartbeat(int worker) const { return heartbeats_[size_t(worker)]; }
  uint64_t reserved(int worker) const { return reserved_[size_t(worker)]; }
  uint64_t tokens_taken(int worker) const { return tokens_taken_[size_t(worker)]; }  // in its messages taken
  bool stop_requested() const { return stop_requested_; }  // as of the last take(): some worker asked to stop

  uint64_t version() const { return version_; }
  uint64_t tokens_applied() const { return tokens_applied_; }
  uint64_t samples_reserved();  // reads the counter the workers advance (exclusive epoch)
  // What worker w (0-based) holds as of its last download the center knows it took: the first parameters plus every
  // download it took.
  const std::vector<float>& mirror(int worker) const { return mirrors_[size_t(worker)]; }
  uint64_t bytes_taken() const { return bytes_taken_; }  // message bytes taken out of slots so far
  uint64_t messages_taken() const { return messages_taken_; }
  uint64_t downloads_written() const { return downloads_written_; }

 private:
  void progress();
  void serve();  // writes the downloads that can be written
  AsyncLayout::Header* header();
  uint64_t* roster();
  AsyncLayout::Slot* slot(int worker);

  AsyncShape shape_;
  AsyncLayout layout_;
  MPI_Comm comm_;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;  // never carries a message: probed only to run MPI's progress loop
  MPI_Win win_ = MPI_WIN_NULL;
  uint8_t* base_ = nullptr;
  DeltaCodec codec_;
  const float* global_;
  std::vector<std::vector<float>> mirrors_;  // per worker (n)
  std::vector<uint64_t> mirror_version_;     // per worker: the version its mirror is
  // Per worker: downloads written, taken by the worker (as last read), and folded into the mirror.
  std::vector<uint64_t> download_seq_, download_taken_, folded_seq_;
  struct Written {
    uint64_t seq, version;
    std::vector<uint8_t> bytes;
    std::vector<float> target;  // without error feedback only: the global parameters the message was cut from
  };
  std::vector<std::deque<Written>> written_;  // per worker: downloads written since the last one folded
  std::vector<uint64_t> applied_seq_;         // per worker: the newest seq the global parameters include
  std::vector<float> diff_;                   // (n) scratch
  uint64_t version_ = 0;
  uint64_t tokens_applied_ = 0;
  uint64_t barrier_seq_ = 0;
  AsyncBarrier barrier_kind_ = AsyncBarrier::none;
  std::vector<uint64_t> barrier_acks_;
  // Per worker: the versions that applied its messages, newer than the base of its last message taken.
  std::vector<std::deque<uint64_t>> applied_in_;
  std::vector<uint64_t> roster_;  // per worker, as in the window
  std::vector<uint64_t> heartbeats_, reserved_, tokens_taken_;
  bool stop_requested_ = false;
  uint64_t bytes_taken_ = 0, messages_taken_ = 0, downloads_written_ = 0;
};

class AsyncWorker {
 public:
  // Collective over comm with the center's constructor; this process is rank worker_rank >= 1. A wait for the
  // center (a slot it has not emptied) longer than timeout_seconds fails with an error naming the center.
  AsyncWorker(MPI_Comm comm, const AsyncShape& shape, int worker_rank, double timeout_seconds);
  ~AsyncWorker();
  AsyncWorker(const AsyncWorker&) = delete;
  AsyncWorker& operator=(const AsyncWorker&) = delete;

  // Atomically takes the next `count` global sample indices from the center's counter (MPI_Fetch_and_op); of them
  // this worker trains those below `target`, in whole multiples of `quantum` (`count` of the result; 0 once the
  // target is reached). Its slot counts them as reserved, and counts all `count` while the take is under way: the
  // center never believes a worker lost on the way owed less than it did.
  struct Reservation {
    uint64_t first = 0, count = 0;
  };
  Reservation reserve(uint64_t count, uint64_t quantum, uint64_t target);
  // A sign of life for the center, between two messages (one small put).
  void heartbeat();
  // Compresses delta (n floats) with this worker's error feedback and sends it: waits until the center has taken
  // the previous message, puts the message with its base version and token count, flushes, then writes the seq.
  // `weight` is what the center is expected to apply of it, for add_pending().
  void send(const float* delta, uint64_t base_version, uint64_t tokens, double loss = 0.0, float weight = 1.0f);

  // What a fetch saw in the center's header.
  struct Published {
    uint64_t version = 0, tokens_applied = 0, samples_reserved = 0, barrier_seq = 0, barrier_go = 0;
    AsyncBarrier barrier_kind = AsyncBarrier::none;
    uint64_t staleness = 0;   // of this worker's newest message the center has taken
    uint64_t applied = 0;     // the newest seq of this worker that the parameters in `base` include
    uint64_t newest = 0;      // the newest version published (version may trail it)
    bool full = false;        // the full parameters were fetched (the first fetch)
    bool downloaded = false;  // a download was added
    bool dropped = false;     // the center dropped this worker: it must leave the job (the other fields are unset)
  };
  // Brings `base` (n floats, this worker's parameters as of its previous fetch) forward: the first fetch reads the
  // parameters the window started with, and every fetch adds the download the center has written since, if any.
  Published fetch(float* base);
  // Tells the center this worker has reached barrier `seq`.
  void ack_barrier(uint64_t seq);
  // The ranks of comm still in the job as of the last fetch: 0, then the live workers' ranks.
  std::vector<int> members() const;
  bool intact() const;  // no worker has been dropped, as of the last fetch
  // Asks the center to stop the job (sticky).
  void request_stop();

  ErrorFeedback& feedback() { return feedback_; }
  uint64_t seq() const { return seq_; }
  // out (n) += weight x the delta of every sent message the last fetched parameters do not include yet, as the
  // center decodes it: a worker rebases onto its parameters plus its own rounds still on the way.
  void add_pending(float* out) const;
  size_t pending() const { return sent_.size(); }
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
  // Bounds one blocking one-sided call to the center (`call`, "MPI_Win_flush") by the timeout.
  StallGuard center_guard(const char* call) const;

  AsyncShape shape_;
  AsyncLayout layout_;
  int worker_;  // 0-based
  double timeout_;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  DeltaCodec codec_;
  ErrorFeedback feedback_;
  std::vector<uint8_t> message_, download_;
  struct Sent {
    uint64_t seq;
    float weight;
    std::vector<uint8_t> bytes;
  };
  std::deque<Sent> sent_;         // sent messages the fetched parameters do not include yet
  std::vector<uint64_t> roster_;  // as of the last fetch
  uint64_t seq_ = 0;
  uint64_t heartbeat_ = 0;
  uint64_t reserved_ = 0;
  uint64_t download_taken_ = 0;
  uint64_t version_ = 0;  // of the parameters the fetches built
  uint64_t applied_ = 0;  // the newest seq of this worker they include
  bool have_params_ = false;
  uint64_t bytes_put_ = 0, bytes_got_ = 0;
  double blocked_ = 0.0;
};

}  // namespace ember
