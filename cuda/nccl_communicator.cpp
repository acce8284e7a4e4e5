// The Communicator over NCCL (implementation): collectives on device buffers run on one high-priority stream that
// first waits for the backend's stream; host buffers go over MPI. AVG is NCCL's own ncclAvg. Every wait polls
// (parallel/collective_wait.h): an asynchronous NCCL error aborts the communicator and throws instead of hanging.
#include "nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "cuda_memory.h"
#include "parallel/collective_wait.h"

namespace ember {
namespace {

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case REDUCE_OP_SUM:
      return ncclSum;
    case REDUCE_OP_AVG:
      return ncclAvg;
    case REDUCE_OP_MAX:
      return ncclMax;
  }
  EMBER_ASSERT(false, "unknown ReduceOp " + std::to_string(int(op)));
  return ncclSum;
}

// An NCCL error raised while a kernel was running (a peer failed, a network error): "" while there is none.
std::string async_error(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm, &async);
  if (rc != ncclSuccess) return "ncclCommGetAsyncError: " + cuda::nccl_error_string(rc);
  return async == ncclSuccess ? "" : cuda::nccl_error_string(async);
}

// Whether an event (or a stream) has completed; a CUDA error other than "not ready" is thrown.
bool event_done(cudaEvent_t e) {
  const cudaError_t rc = cudaEventQuery(e);
  if (rc == cudaErrorNotReady) return false;
  EMBER_CUDA_CHECK(rc);
  return true;
}

// One NCCL communicator and its health, shared by the communicator and its pending requests: a request may be
// waited on (or destroyed) after an error aborted the communicator, and must then neither wait nor touch it.
struct NcclShared {
  ncclComm_t comm = nullptr;
  CollectiveHealth health;
  std::shared_ptr<const CollectiveWatch> watch;  // the communicator's dist.timeout and context

  // Waits for `done` by polling, aborting the communicator on an asynchronous error or at dist.timeout
  // (parallel/collective_wait.h).
  void wait(const std::function<bool()>& done, const std::string& what) {
    wait_or_abort(health, {done, [this] { return async_error(comm); }, [this] { ncclCommAbort(comm); }}, what,
                  watch ? *watch : CollectiveWatch{});
  }
};

// One collective queued on the communicator's stream, marked by an event recorded right after it.
class NcclRequest final : public PendingCollective {
 public:
  NcclRequest(cudaEvent_t done, std::shared_ptr<NcclShared> shared) : done_event_(done), shared_(std::move(shared)) {}
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;

  // A destructor cannot throw, and a failed collective leaves the ranks out of step: log and end the job. After an
  // abort there is nothing left to wait for.
  ~NcclRequest() override {
    if (!done_ && !shared_->health.aborted) {
      try {
        wait();
      } catch (const std::exception& e) {
        log_error("a pending NCCL collective failed while its request was destroyed: %s", e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    cudaEventDestroy(done_event_);
  }

  void wait() override {
    if (done_) return;
    done_ = true;  // a failure below ends the job; never wait on this event again (from the destructor)
    shared_->wait([this] { return event_done(done_event_); }, "an NCCL collective");
  }

  bool test() override {
    if (done_) return true;
    if (!event_done(done_event_)) {
      // Not done: an asynchronous error would keep it so for ever.
      if (!shared_->health.aborted && async_error(shared_->comm).empty()) return false;
    }
    wait();  // done (checks the error once more), or failed (aborts and throws)
    return true;
  }

 private:
  cudaEvent_t done_event_;
  std::shared_ptr<NcclShared> shared_;
  bool done_ = false;
};

// A request for a collective with nothing to move.
class DoneRequest final : public PendingCollective {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm comm, Backend* backend, std::shared_ptr<const CollectiveWatch> watch)
      : Communicator(std::move(watch)), host_(make_mpi_communicator(comm, watch_)) {
    shared_->watch = watch_;
    if (auto* cuda = dynamic_cast<CudaBackend*>(backend)) {
      device_ = cuda->device();
      producer_ = cuda->stream();
      EMBER_CUDA_CHECK(cudaSetDevice(device_));  // ncclCommInitRank binds to the current device
    } else {
      EMBER_CUDA_CHECK(cudaGetDevice(&device_));
    }
    // Highest priority: a collective's kernels start as soon as an SM frees up, instead of queueing behind the
    // backward kernels launched after it, so the all-reduce of one bucket overlaps the backward of the next.
    int least = 0, greatest = 0;
    EMBER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    EMBER_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&marker_, cudaEventDisableTiming));

    ncclUniqueId id{};
    if (host_->rank() == 0) EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
    host_->broadcast(&id, sizeof(id), 0);
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&synced_, cudaEventDisableTiming));
    EMBER_NCCL_CHECK(ncclCommInitRank(&shared_->comm, host_->size(), id, host_->rank()));
    int version = 0;
    EMBER_NCCL_CHECK(ncclGetVersion(&version));
    log_debug("NCCL %d.%d.%d communicator: rank %d of %d on device %d", version / 10000, version / 100 % 100,
              version % 100, host_->rank(), host_->size(), device_);
  }

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // No checks: a destructor must not throw, and after a device fault every call below fails anyway. It waits for
  // queued collectives by polling, so a failed peer cannot hang it; after an abort it waits for nothing and the
  // communicator is already freed.
  ~NcclCommunicator() override {
    if (shared_->comm && !shared_->health.aborted) {
      try {
        shared_->wait([this] { return cudaStreamQuery(stream_) != cudaErrorNotReady; }, "NCCL shutdown");
      } catch (const std::exception& e) {
        log_error("%s", e.what());
      }
    }
    if (shared_->comm && !shared_->health.aborted) ncclCommDestroy(shared_->comm);
    if (synced_) cudaEventDestroy(synced_);
    cudaEventDestroy(marker_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "nccl"; }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }

  void all_reduce(float* buf, size_t n, ReduceOp op) override {
    if (n == 0) return;
    if (!cuda::is_device_memory(buf)) return host_->all_reduce(buf, n, op);
    run([&] { EMBER_NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, nccl_op(op), shared_->comm, stream_)); });
  }
  void all_reduce(double* buf, size_t n, ReduceOp op) override {
    if (n == 0) return;
    if (!cuda::is_device_memory(buf)) return host_->all_reduce(buf, n, op);
    run([&] { EMBER_NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat64, nccl_op(op), shared_->comm, stream_)); });
  }
  std::unique_ptr<PendingCollective> all_reduce_async(float* buf, size_t n, ReduceOp op) override {
    if (n == 0) return std::make_unique<DoneRequest>();
    if (!cuda::is_device_memory(buf)) return host_->all_reduce_async(buf, n, op);
    return start(
        [&] { EMBER_NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, nccl_op(op), shared_->comm, stream_)); });
  }

  void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) override {
    if (count == 0) return;
    if (!on_device(send, recv, "reduce_scatter")) return host_->reduce_scatter(send, recv, count, op);
    check_reduce_scatter_buffers(send, recv, count);
    run([&] {
      EMBER_NCCL_CHECK(ncclReduceScatter(send, recv, count, ncclFloat32, nccl_op(op), shared_->comm, stream_));
    });
  }
  std::unique_ptr<PendingCollective> reduce_scatter_async(const float* send, float* recv, size_t count,
                                                          ReduceOp op) override {
    if (count == 0) return std::make_unique<DoneRequest>();
    if (!on_device(send, recv, "reduce_scatter")) return host_->reduce_scatter_async(send, recv, count, op);
    check_reduce_scatter_buffers(send, recv, count);
    return start([&] {
      EMBER_NCCL_CHECK(ncclReduceScatter(send, recv, count, ncclFloat32, nccl_op(op), shared_->comm, stream_));
    });
  }

  // NCCL gathers in place exactly when send is this rank's block of recv, the interface's in-place form.
  void all_gather(const float* send, float* recv, size_t count) override {
    if (count == 0) return;
    if (!on_device(send, recv, "all_gather")) return host_->all_gather(send, recv, count);
    check_gather_buffers(send, recv, count);
    run([&] { EMBER_NCCL_CHECK(ncclAllGather(send, recv, count, ncclFloat32, shared_->comm, stream_)); });
  }
  std::unique_ptr<PendingCollective> all_gather_async(const float* send, float* recv, size_t count) override {
    if (count == 0) return std::make_unique<DoneRequest>();
    if (!on_device(send, recv, "all_gather")) return host_->all_gather_async(send, recv, count);
    check_gather_buffers(send, recv, count);
    return start([&] { EMBER_NCCL_CHECK(ncclAllGather(send, recv, count, ncclFloat32, shared_->comm, stream_)); });
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    EMBER_ASSERT(root >= 0 && root < size(),
                 "broadcast root " + std::to_string(root) + " outside a world of " + std::to_string(size()));
    if (bytes == 0) return;
    if (!cuda::is_device_memory(buf)) return host_->broadcast(buf, bytes, root);
    run([&] { EMBER_NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, shared_->comm, stream_)); });
  }

  // Our queued collectives complete first, so a barrier also means "everything sent before it has arrived".
  void barrier() override {
    sync("an NCCL collective before a barrier");
    host_->barrier();
  }

 private:
  // Queues `enqueue` (one NCCL call on stream_) after the backend's queued ops and waits for it: blocking calls
  // return with the result in place, for the host and every stream alike.
  template <class F>
  void run(F&& enqueue) {
    check_usable();
    cuda::order_after(stream_, producer_, marker_);
    enqueue();
    sync("an NCCL collective");
  }

  // Waits until everything queued on stream_ is done, by polling an event recorded after it (never blocking in the
  // driver, so an asynchronous error aborts the communicator instead of hanging this rank).
  void sync(const std::string& what) {
    EMBER_CUDA_CHECK(cudaEventRecord(synced_, stream_));
    shared_->wait([this] { return event_done(synced_); }, what);
  }

  // After an abort the communicator is gone: every later call fails with the error that aborted it.
  void check_usable() {
    if (shared_->health.aborted) shared_->wait([] { return true; }, "an NCCL collective");
  }

  // As run(), but returns at once with a request marked by an event recorded after the call.
  template <class F>
  std::unique_ptr<PendingCollective> start(F&& enqueue) {
    check_usable();
    cuda::order_after(stream_, producer_, marker_);
    enqueue();
    cudaEvent_t done = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    const cudaError_t rc = cudaEventRecord(done, stream_);
    if (rc != cudaSuccess) cudaEventDestroy(done);
    EMBER_CUDA_CHECK(rc);
    return std::make_unique<NcclRequest>(done, shared_);
  }

  // Both buffers on the device (NCCL) or both on the host (MPI); a mix is a bug in the caller.
  static bool on_device(const void* send, const void* recv, const char* what) {
    const bool s = cuda::is_device_memory(send), r = cuda::is_device_memory(recv);
    EMBER_ASSERT(s == r, std::string(what) + ": one buffer is in device memory and the other in host memory");
    return s;
  }

  void check_reduce_scatter_buffers(const float* send, const float* recv, size_t count) const {
    EMBER_ASSERT(!cuda::ranges_overlap(send, size_t(size()) * count * sizeof(float), recv, count * sizeof(float)),
                 "reduce_scatter: the receive block overlaps the send buffer");
  }

  void check_gather_buffers(const float* send, const float* recv, size_t count) const {
    if (send == recv + size_t(rank()) * count) return;
    EMBER_ASSERT(!cuda::ranges_overlap(send, count * sizeof(float), recv, size_t(size()) * count * sizeof(float)),
                 "all_gather: the send buffer overlaps the receive buffer other than as this rank's block");
  }

  std::unique_ptr<Communicator> host_;  // MPI: host buffers, and the broadcast of the ncclUniqueId
  int device_ = 0;
  cudaStream_t producer_ = nullptr;  // the backend's stream (null: wait for the whole device)
  cudaStream_t stream_ = nullptr;    // every NCCL call is queued here
  cudaEvent_t marker_ = nullptr;     // recorded on producer_ and waited on by stream_
  cudaEvent_t synced_ = nullptr;     // recorded on stream_ by a blocking call, which polls it
  std::shared_ptr<NcclShared> shared_ = std::make_shared<NcclShared>();  // the communicator and its health
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, Backend* backend,
                                                     std::shared_ptr<const CollectiveWatch> watch) {
  return std::make_unique<NcclCommunicator>(comm, backend, std::move(watch));
}

}  // namespace ember
