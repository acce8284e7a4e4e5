// The Communicator interface: the collectives data-parallel training needs, blocking and non-blocking, over
// buffers of the backend's memory. MPI implements it over host buffers; cuda/ adds NCCL and host-staged MPI, which
// take device buffers and host ones alike (parallel/comm_select.h picks one).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "parallel/collective_watch.h"

namespace ember {

enum ReduceOp { REDUCE_OP_SUM, REDUCE_OP_AVG, REDUCE_OP_MAX };

// A pending non-blocking collective. wait() completes it (and applies the AVG scaling); test() makes progress and
// says whether it is complete. Destroying a pending request waits for it. The buffers given when it started must
// stay valid until then.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place over n floats.
  virtual void all_reduce(float* buf, size_t n, ReduceOp op) = 0;
  virtual std::unique_ptr<PendingCollective> all_reduce_async(float* buf, size_t n, ReduceOp op) = 0;
  // In place over n doubles (scalars: losses, norms, flags).
  virtual void all_reduce(double* buf, size_t n, ReduceOp op) = 0;
  // send holds size() * count floats; rank r receives the reduction of block r into recv (count floats).
  virtual void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) = 0;
  virtual std::unique_ptr<PendingCollective> reduce_scatter_async(const float* send, float* recv, size_t count,
                                                                  ReduceOp op) = 0;
  // Every rank contributes count floats; recv holds size() * count floats, rank r's block at r * count.
  // send may be rank r's own block of recv (send == recv + rank() * count): the gather is then in place.
  virtual void all_gather(const float* send, float* recv, size_t count) = 0;
  virtual std::unique_ptr<PendingCollective> all_gather_async(const float* send, float* recv, size_t count) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void barrier() = 0;

 protected:
  // `watch`: the World's (its owner sets the timeout and context), or none for waits without a limit.
  explicit Communicator(std::shared_ptr<const CollectiveWatch> watch)
      : watch_(watch ? std::move(watch) : std::make_shared<const CollectiveWatch>()) {}
  std::shared_ptr<const CollectiveWatch> watch_;
};

// An MPI communicator over host memory on a duplicate of `comm` (so its traffic never matches anyone else's); its
// waits go by `watch` (the World's, normally).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::shared_ptr<const CollectiveWatch> watch = {});

}  // namespace ember
