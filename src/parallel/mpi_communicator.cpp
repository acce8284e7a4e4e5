// The Communicator over MPI and host memory: collectives on a private duplicate of the caller's communicator, with
// size_t counts split into int-sized pieces and AVG done as SUM then a 1/size scale. Every collective is MPI's
// non-blocking one, and a blocking call waits for it by polling, so that no wait outlasts dist.timeout.
#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "parallel/collective_wait.h"
#include "parallel/mpi_check.h"

namespace ember {
namespace {

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case REDUCE_OP_SUM:
    case REDUCE_OP_AVG:  // summed by MPI, scaled by us afterwards (MPI has no average)
      return MPI_SUM;
    case REDUCE_OP_MAX:
      return MPI_MAX;
  }
  EMBER_ASSERT(false, "unknown ReduceOp " + std::to_string(int(op)));
  return MPI_OP_NULL;
}

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

// Every rank multiplies by the same reciprocal, so an averaged buffer stays bitwise identical across ranks (and for
// the power-of-two sizes ember trains on, x * (1/n) equals x / n exactly).
template <class T>
void scale_by_inverse_size(T* buf, size_t n, int size) {
  const T inv = T(1) / T(size);
  for (size_t i = 0; i < n; ++i) buf[i] *= inv;
}

// Calls f(offset, length) for consecutive pieces of [0, n), each at most max_chunk long (so length fits an int).
template <class F>
void for_each_chunk(size_t n, size_t max_chunk, F&& f) {
  for (size_t off = 0; off < n; off += max_chunk) f(off, int(std::min(max_chunk, n - off)));
}

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// A datatype of `len` floats whose extent is one whole block of `block` floats: with it, element r of a gather's
// receive buffer is piece [off, off + len) of block r, so one call moves the same piece of every rank's block.
MPI_Datatype strided_piece_type(int len, size_t block) {
  MPI_Datatype piece = MPI_DATATYPE_NULL, strided = MPI_DATATYPE_NULL;
  EMBER_MPI_CHECK(MPI_Type_contiguous(len, MPI_FLOAT, &piece));
  EMBER_MPI_CHECK(MPI_Type_create_resized(piece, 0, MPI_Aint(block * sizeof(float)), &strided));
  EMBER_MPI_CHECK(MPI_Type_commit(&strided));
  EMBER_MPI_CHECK(MPI_Type_free(&piece));
  return strided;
}

// The requests of one collective (one per piece) and what to do once all have completed (the AVG scaling).
class MpiRequest final : public PendingCollective {
 public:
  // `failed` is shared by every request of one communicator: set once any of them failed.
  MpiRequest(std::vector<MPI_Request> requests, std::function<void()> on_complete,
             std::shared_ptr<const CollectiveWatch> watch, std::shared_ptr<bool> failed, const char* what)
      : requests_(std::move(requests)),
        on_complete_(std::move(on_complete)),
        watch_(std::move(watch)),
        failed_(std::move(failed)),
        what_(what) {}

  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;

  // A destructor cannot throw, and a collective that failed leaves the ranks out of step: log and end the job. When
  // another request of the communicator failed already (its error is on its way up, unwinding past this one), the
  // peers are known to be gone: waiting another dist.timeout would only delay that error.
  ~MpiRequest() override {
    if (done_ || *failed_) return;
    try {
      wait();
    } catch (const std::exception& e) {
      log_error("a pending collective failed while its request was destroyed: %s", e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  // Polls (MPI_Testall drives MPI's progress), so that a peer that never answers ends the wait at dist.timeout.
  void wait() override {
    if (done_) return;
    try {
      poll_until([this] { return test_all(); }, *watch_, std::string("MPI ") + what_);
    } catch (...) {
      done_ = true;  // never wait on a failed request again (from the destructor): the error ends the job
      *failed_ = true;
      throw;
    }
    finish();
  }

  bool test() override {
    if (done_) return true;
    bool complete = false;
    try {
      complete = test_all();
    } catch (...) {
      done_ = true;
      *failed_ = true;
      throw;
    }
    if (complete) finish();
    return done_;
  }

 private:
  bool test_all() {
    int complete = 1;
    if (!requests_.empty())
      EMBER_MPI_CHECK(MPI_Testall(int(requests_.size()), requests_.data(), &complete, MPI_STATUSES_IGNORE));
    return complete != 0;
  }

  void finish() {
    done_ = true;
    if (on_complete_) on_complete_();
  }

  std::vector<MPI_Request> requests_;
  std::function<void()> on_complete_;
  std::shared_ptr<const CollectiveWatch> watch_;
  std::shared_ptr<bool> failed_;
  const char* what_;  // "all-reduce", ...
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, size_t max_chunk, std::shared_ptr<const CollectiveWatch> watch)
      : Communicator(std::move(watch)), max_chunk_(max_chunk) {
    EMBER_ASSERT(max_chunk >= 1 && max_chunk <= MPI_MAX_CHUNK_ELEMENTS,
                 "max_chunk " + std::to_string(max_chunk) + " outside [1, 2^30]");
    EMBER_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
    // Errors come back as codes so EMBER_MPI_CHECK can report them with the statement, rank and host; the default
    // handler (inherited by the duplicate) would abort inside MPI with far less to go on.
    EMBER_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    EMBER_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    EMBER_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }

  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || comm_ == MPI_COMM_NULL) return;
    const int rc = MPI_Comm_free(&comm_);
    if (rc != MPI_SUCCESS) log_error("MPI_Comm_free failed: %s", mpi_error_string(rc).c_str());
  }

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(float* buf, size_t n, ReduceOp op) override { all_reduce_async_of(buf, n, op)->wait(); }
  void all_reduce(double* buf, size_t n, ReduceOp op) override { all_reduce_async_of(buf, n, op)->wait(); }

  std::unique_ptr<PendingCollective> all_reduce_async(float* buf, size_t n, ReduceOp op) override {
    return all_reduce_async_of(buf, n, op);
  }

  void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) override {
    reduce_scatter_async(send, recv, count, op)->wait();
  }

  std::unique_ptr<PendingCollective> reduce_scatter_async(const float* send, float* recv, size_t count,
                                                          ReduceOp op) override {
    check_reduce_scatter_buffers(send, recv, count);
    const MPI_Op mop = mpi_op(op);
    std::vector<MPI_Request> requests;
    if (count <= max_chunk_) {
      if (count > 0) {
        MPI_Request r = MPI_REQUEST_NULL;
        EMBER_MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, int(count), MPI_FLOAT, mop, comm_, &r));
        requests.push_back(r);
      }
    } else {
      // Pieces of a block are not contiguous across blocks, and predefined reductions are only defined on plain
      // datatypes, so the rare huge case reduces each block's piece to its owner instead.
      for_each_chunk(count, max_chunk_, [&](size_t off, int len) {
        for (int b = 0; b < size_; ++b) {
          MPI_Request r = MPI_REQUEST_NULL;
          EMBER_MPI_CHECK(MPI_Ireduce(send + size_t(b) * count + off, b == rank_ ? recv + off : nullptr, len, MPI_FLOAT,
                                      mop, b, comm_, &r));
          requests.push_back(r);
        }
      });
    }
    return request(std::move(requests), avg_scaler(recv, count, op), "reduce-scatter");
  }

  void all_gather(const float* send, float* recv, size_t count) override {
    all_gather_async(send, recv, count)->wait();
  }

  std::unique_ptr<PendingCollective> all_gather_async(const float* send, float* recv, size_t count) override {
    const void* source = gather_source(send, recv, count);
    std::vector<MPI_Request> requests;
    if (count <= max_chunk_) {
      if (count > 0) {
        MPI_Request r = MPI_REQUEST_NULL;
        EMBER_MPI_CHECK(MPI_Iallgather(source, int(count), MPI_FLOAT, recv, int(count), MPI_FLOAT, comm_, &r));
        requests.push_back(r);
      }
    } else {
      for_each_chunk(count, max_chunk_, [&](size_t off, int len) {
        MPI_Datatype piece = strided_piece_type(len, count);
        const void* src = source == MPI_IN_PLACE ? MPI_IN_PLACE : static_cast<const void*>(send + off);
        MPI_Request r = MPI_REQUEST_NULL;
        EMBER_MPI_CHECK(MPI_Iallgather(src, len, MPI_FLOAT, recv + off, 1, piece, comm_, &r));
        // Freeing a type in use is allowed: MPI keeps it alive until the operation completes.
        EMBER_MPI_CHECK(MPI_Type_free(&piece));
        requests.push_back(r);
      });
    }
    return request(std::move(requests), nullptr, "all-gather");
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    EMBER_ASSERT(root >= 0 && root < size_,
                 "broadcast root " + std::to_string(root) + " outside a world of " + std::to_string(size_));
    auto* p = static_cast<char*>(buf);
    std::vector<MPI_Request> requests;
    for_each_chunk(bytes, max_chunk_, [&](size_t off, int len) {
      MPI_Request r = MPI_REQUEST_NULL;
      EMBER_MPI_CHECK(MPI_Ibcast(p + off, len, MPI_BYTE, root, comm_, &r));
      requests.push_back(r);
    });
    request(std::move(requests), nullptr, "broadcast")->wait();
  }

  void barrier() override {
    MPI_Request r = MPI_REQUEST_NULL;
    EMBER_MPI_CHECK(MPI_Ibarrier(comm_, &r));
    request({r}, nullptr, "barrier")->wait();
  }

 private:
  std::unique_ptr<PendingCollective> request(std::vector<MPI_Request> requests, std::function<void()> on_complete,
                                             const char* what) const {
    return std::make_unique<MpiRequest>(std::move(requests), std::move(on_complete), watch_, failed_, what);
  }

  template <class T>
  std::unique_ptr<PendingCollective> all_reduce_async_of(T* buf, size_t n, ReduceOp op) {
    const MPI_Op mop = mpi_op(op);
    std::vector<MPI_Request> requests;
    for_each_chunk(n, max_chunk_, [&](size_t off, int len) {
      MPI_Request r = MPI_REQUEST_NULL;
      EMBER_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf + off, len, mpi_type<T>(), mop, comm_, &r));
      requests.push_back(r);
    });
    return request(std::move(requests), avg_scaler(buf, n, op), "all-reduce");
  }

  template <class T>
  std::function<void()> avg_scaler(T* buf, size_t n, ReduceOp op) const {
    if (op != REDUCE_OP_AVG || n == 0) return nullptr;
    const int size = size_;
    return [buf, n, size] { scale_by_inverse_size(buf, n, size); };
  }

  void check_reduce_scatter_buffers(const float* send, const float* recv, size_t count) const {
    EMBER_ASSERT(!ranges_overlap(send, size_t(size_) * count * sizeof(float), recv, count * sizeof(float)),
                 "reduce_scatter: the receive block overlaps the send buffer");
  }

  // MPI_IN_PLACE when send already is this rank's block of recv (ZeRO-1 gathers parameters where the shard lives);
  // any other overlap is a bug.
  const void* gather_source(const float* send, const float* recv, size_t count) const {
    if (count > 0 && send == recv + size_t(rank_) * count) return MPI_IN_PLACE;
    EMBER_ASSERT(!ranges_overlap(send, count * sizeof(float), recv, size_t(size_) * count * sizeof(float)),
                 "all_gather: the send buffer overlaps the receive buffer other than as this rank's block");
    return send;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::shared_ptr<bool> failed_ = std::make_shared<bool>(false);  // a request failed: the others need not wait
  size_t max_chunk_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator_chunked(MPI_Comm comm, size_t max_chunk,
                                                            std::shared_ptr<const CollectiveWatch> watch) {
  return std::make_unique<MpiCommunicator>(comm, max_chunk, std::move(watch));
}

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::shared_ptr<const CollectiveWatch> watch) {
  return make_mpi_communicator_chunked(comm, MPI_MAX_CHUNK_ELEMENTS, std::move(watch));
}

}  // namespace ember
