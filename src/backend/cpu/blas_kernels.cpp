// OpenBLAS's kernel choice (blas_kernels.h).
#include "backend/cpu/blas_kernels.h"

#include <cblas.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ember {

const char* blas_kernels() { return openblas_get_corename(); }

void select_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") || std::strcmp(openblas_get_corename(), "Prescott") != 0) return;
  __builtin_cpu_init();
  const char* kernels = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                        : __builtin_cpu_supports("avx2")  ? "Haswell"
                                                          : nullptr;
  if (!kernels) return;
  setenv("OPENBLAS_CORETYPE", kernels, 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr,
               "warning: OpenBLAS runs its Prescott kernels on this CPU, and restarting with OPENBLAS_CORETYPE=%s "
               "failed (%s); fp32 products will be slow\n",
               kernels, std::strerror(errno));
}

}  // namespace ember
