// Helpers shared by the test suites: an array in a backend's memory, the MPI world's rank and size, and a model
// config whose tensors leave alignment padding in the parameter arena.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "model/model_config.h"

namespace ember::test {

// An array in one backend's memory, freed on scope exit.
template <typename T>
class BackendArray {
 public:
  BackendArray(Backend& be, size_t n) : be_(be), n_(n), ptr_(static_cast<T*>(be.alloc(n * sizeof(T)))) {}
  BackendArray(Backend& be, const std::vector<T>& host) : BackendArray(be, host.size()) {
    be_.copy_to_device(ptr_, host.data(), n_ * sizeof(T));
  }
  ~BackendArray() { be_.free(ptr_); }
  BackendArray(const BackendArray&) = delete;
  BackendArray& operator=(const BackendArray&) = delete;
  T* get() { return ptr_; }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    be_.copy_to_host(h.data(), ptr_, n_ * sizeof(T));
    return h;
  }

 private:
  Backend& be_;
  size_t n_;
  T* ptr_;
};

// Whether this build has the CUDA backend (some rules differ without it, whether or not a GPU is present).
#ifdef EMBER_HAVE_CUDA
inline constexpr bool kCudaBuild = true;
#else
inline constexpr bool kCudaBuild = false;
#endif

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Tensor sizes that are not multiples of the arena's 16-float alignment, so the arena has padding between tensors.
inline ModelConfig padded_model_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 24;
  c.block_size = 13;
  c.vocab_size = 61;
  return c;
}

}  // namespace ember::test
