// The host-staged MPI Communicator (implementation): each device argument gets a pinned host view (a pooled staging
// buffer, filled from the device when the collective reads it), the MPI communicator runs on the views, and the
// views it wrote are copied back. All copies run on one stream of our own, after the backend's queued ops.
#include "host_staged_communicator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "cuda_memory.h"

namespace ember {
namespace {

// Pinned host buffers, reused: cudaMallocHost takes milliseconds, and every training step asks for the same sizes
// (one per gradient bucket in flight), so after the first step no call allocates.
class PinnedPool {
 public:
  PinnedPool() = default;
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  ~PinnedPool() {
    for (const Buffer& b : buffers_) cudaFreeHost(b.ptr);
  }

  // The smallest free buffer of at least `bytes`, or a new one.
  void* acquire(size_t bytes) {
    Buffer* best = nullptr;
    for (Buffer& b : buffers_)
      if (!b.in_use && b.bytes >= bytes && (!best || b.bytes < best->bytes)) best = &b;
    if (!best) {
      void* ptr = nullptr;
      EMBER_CUDA_CHECK(cudaMallocHost(&ptr, bytes));
      buffers_.push_back({ptr, bytes, false});
      best = &buffers_.back();
    }
    best->in_use = true;
    return best->ptr;
  }

  void release(void* ptr) {
    for (Buffer& b : buffers_)
      if (b.ptr == ptr) b.in_use = false;
  }

 private:
  struct Buffer {
    void* ptr;
    size_t bytes;
    bool in_use;
  };
  std::vector<Buffer> buffers_;
};

// One collective argument as MPI sees it: the caller's buffer when that is host memory, else a pinned staging
// buffer leased from the pool (returned when the view is destroyed).
struct HostView {
  HostView() = default;
  HostView(HostView&& o) noexcept { *this = std::move(o); }
  HostView& operator=(HostView&& o) noexcept {
    std::swap(host, o.host), std::swap(device, o.device), std::swap(bytes, o.bytes), std::swap(pool, o.pool);
    return *this;
  }
  HostView(const HostView&) = delete;
  HostView& operator=(const HostView&) = delete;
  ~HostView() {
    if (pool) pool->release(host);
  }

  void* host = nullptr;
  void* device = nullptr;  // the caller's device buffer, or null when the caller's buffer is host memory
  size_t bytes = 0;
  PinnedPool* pool = nullptr;  // set while a staging buffer is leased
};

class HostStagedCommunicator;

// A non-blocking MPI collective on host views, and the views to copy back to the device once it completes.
class StagedRequest final : public PendingCollective {
 public:
  StagedRequest(HostStagedCommunicator& owner, std::unique_ptr<PendingCollective> inner, std::vector<HostView> views,
                std::vector<size_t> written)
      : owner_(owner), inner_(std::move(inner)), views_(std::move(views)), written_(std::move(written)) {}
  StagedRequest(const StagedRequest&) = delete;
  StagedRequest& operator=(const StagedRequest&) = delete;

  // A destructor cannot throw, and a failed collective leaves the ranks out of step: log and end the job.
  ~StagedRequest() override {
    if (done_) return;
    try {
      wait();
    } catch (const std::exception& e) {
      log_error("a pending host-staged collective failed while its request was destroyed: %s", e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  void wait() override {
    if (done_) return;
    done_ = true;  // a failure below ends the job; never wait again (from the destructor)
    inner_->wait();
    copy_back();
  }

  bool test() override {
    if (done_) return true;
    if (!inner_->test()) return false;
    done_ = true;
    copy_back();
    return true;
  }

 private:
  void copy_back();

  HostStagedCommunicator& owner_;
  std::unique_ptr<PendingCollective> inner_;
  std::vector<HostView> views_;  // every view the collective uses: their staging buffers stay leased until done
  std::vector<size_t> written_;  // indices into views_ of those the collective writes
  bool done_ = false;
};

class HostStagedCommunicator final : public Communicator {
 public:
  HostStagedCommunicator(MPI_Comm comm, Backend* backend, std::shared_ptr<const CollectiveWatch> watch)
      : Communicator(std::move(watch)), host_(make_mpi_communicator(comm, watch_)) {
    if (auto* cuda = dynamic_cast<CudaBackend*>(backend)) {
      producer_ = cuda->stream();
      EMBER_CUDA_CHECK(cudaSetDevice(cuda->device()));
    }
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&marker_, cudaEventDisableTiming));
  }

  HostStagedCommunicator(const HostStagedCommunicator&) = delete;
  HostStagedCommunicator& operator=(const HostStagedCommunicator&) = delete;

  ~HostStagedCommunicator() override {
    cudaStreamSynchronize(stream_);
    cudaEventDestroy(marker_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "mpi (host-staged)"; }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }

  void all_reduce(float* buf, size_t n, ReduceOp op) override { all_reduce_staged(buf, n, op); }
  void all_reduce(double* buf, size_t n, ReduceOp op) override { all_reduce_staged(buf, n, op); }

  std::unique_ptr<PendingCollective> all_reduce_async(float* buf, size_t n, ReduceOp op) override {
    if (n == 0 || !cuda::is_device_memory(buf)) return host_->all_reduce_async(buf, n, op);
    std::vector<HostView> views;
    views.push_back(view(buf, n * sizeof(float), /*copy_in=*/true));
    auto inner = host_->all_reduce_async(static_cast<float*>(views[0].host), n, op);
    return std::make_unique<StagedRequest>(*this, std::move(inner), std::move(views), std::vector<size_t>{0});
  }

  void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) override {
    if (count == 0 || !any_on_device(send, recv)) return host_->reduce_scatter(send, recv, count, op);
    HostView s = view(send, size_t(size()) * count * sizeof(float), true), r = view(recv, count * sizeof(float), false);
    host_->reduce_scatter(static_cast<const float*>(s.host), static_cast<float*>(r.host), count, op);
    copy_to_device(r);
  }

  std::unique_ptr<PendingCollective> reduce_scatter_async(const float* send, float* recv, size_t count,
                                                          ReduceOp op) override {
    if (count == 0 || !any_on_device(send, recv)) return host_->reduce_scatter_async(send, recv, count, op);
    std::vector<HostView> views;
    views.push_back(view(send, size_t(size()) * count * sizeof(float), true));
    views.push_back(view(recv, count * sizeof(float), false));
    auto inner = host_->reduce_scatter_async(static_cast<const float*>(views[0].host),
                                             static_cast<float*>(views[1].host), count, op);
    return std::make_unique<StagedRequest>(*this, std::move(inner), std::move(views), std::vector<size_t>{1});
  }

  // Staged as an in-place gather: this rank's block is copied into its place in the view of recv, so the send
  // buffer needs no view of its own (and the interface's in-place form, send inside recv, needs nothing special).
  void all_gather(const float* send, float* recv, size_t count) override {
    if (count == 0 || !any_on_device(send, recv)) return host_->all_gather(send, recv, count);
    HostView r = gather_view(send, recv, count);
    float* r_host = static_cast<float*>(r.host);
    host_->all_gather(r_host + size_t(rank()) * count, r_host, count);
    copy_to_device(r);
  }

  std::unique_ptr<PendingCollective> all_gather_async(const float* send, float* recv, size_t count) override {
    if (count == 0 || !any_on_device(send, recv)) return host_->all_gather_async(send, recv, count);
    std::vector<HostView> views;
    views.push_back(gather_view(send, recv, count));
    float* r_host = static_cast<float*>(views[0].host);
    auto inner = host_->all_gather_async(r_host + size_t(rank()) * count, r_host, count);
    return std::make_unique<StagedRequest>(*this, std::move(inner), std::move(views), std::vector<size_t>{0});
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    if (bytes == 0 || !cuda::is_device_memory(buf)) return host_->broadcast(buf, bytes, root);
    HostView v = view(buf, bytes, /*copy_in=*/rank() == root);
    host_->broadcast(v.host, bytes, root);
    if (rank() != root) copy_to_device(v);
  }

  void barrier() override { host_->barrier(); }

  // Copies a view back into the caller's device buffer (nothing for a host buffer) and waits for the copy. It first
  // waits for the backend's queued ops, which may still use the buffer (a broadcast's receivers read nothing before).
  void copy_to_device(const HostView& v) {
    if (!v.device) return;
    cuda::order_after(stream_, producer_, marker_);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(v.device, v.host, v.bytes, cudaMemcpyHostToDevice, stream_));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  template <class T>
  void all_reduce_staged(T* buf, size_t n, ReduceOp op) {
    if (n == 0 || !cuda::is_device_memory(buf)) return host_->all_reduce(buf, n, op);
    HostView v = view(buf, n * sizeof(T), /*copy_in=*/true);
    host_->all_reduce(static_cast<T*>(v.host), n, op);
    copy_to_device(v);
  }

  static bool any_on_device(const void* a, const void* b) {
    return cuda::is_device_memory(a) || cuda::is_device_memory(b);
  }

  // The host view of `ptr`: itself for host memory; else a staging buffer, filled from the device when copy_in.
  HostView view(const void* ptr, size_t bytes, bool copy_in) {
    HostView v;
    v.bytes = bytes;
    if (!cuda::is_device_memory(ptr)) {
      v.host = const_cast<void*>(ptr);
      return v;
    }
    v.device = const_cast<void*>(ptr);
    v.host = pool_.acquire(bytes);
    v.pool = &pool_;
    if (copy_in) copy_to_host(v.host, ptr, bytes);
    return v;
  }

  // The view of an all-gather's receive buffer with this rank's block already in place.
  HostView gather_view(const float* send, float* recv, size_t count) {
    const size_t block = count * sizeof(float);
    const float* own = recv + size_t(rank()) * count;
    EMBER_ASSERT(send == own || !cuda::ranges_overlap(send, block, recv, size_t(size()) * block),
                 "all_gather: the send buffer overlaps the receive buffer other than as this rank's block");
    HostView r = view(recv, size_t(size()) * block, /*copy_in=*/false);
    float* dst = static_cast<float*>(r.host) + size_t(rank()) * count;
    if (dst == send) return r;  // host recv, gathered in place
    if (cuda::is_device_memory(send))
      copy_to_host(dst, send, block);
    else
      std::memcpy(dst, send, block);
    return r;
  }

  // Copies device memory into a staging buffer once the backend's queued ops (which may still write it) are done.
  void copy_to_host(void* dst, const void* src, size_t bytes) {
    cuda::order_after(stream_, producer_, marker_);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  std::unique_ptr<Communicator> host_;  // MPI over host memory (the views)
  cudaStream_t producer_ = nullptr;     // the backend's stream (null: wait for the whole device)
  cudaStream_t stream_ = nullptr;       // staging copies
  cudaEvent_t marker_ = nullptr;        // recorded on producer_ and waited on by stream_
  PinnedPool pool_;
};

void StagedRequest::copy_back() {
  for (size_t i : written_) owner_.copy_to_device(views_[i]);
}

}  // namespace

std::unique_ptr<Communicator> make_host_staged_communicator(MPI_Comm comm, Backend* backend,
                                                            std::shared_ptr<const CollectiveWatch> watch) {
  return std::make_unique<HostStagedCommunicator>(comm, backend, std::move(watch));
}

}  // namespace ember
