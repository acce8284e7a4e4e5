// OpenBLAS picks its kernels for the CPU when it loads. Debian 12's OpenBLAS (0.3.21) does not know CPUs newer than
// itself (Intel's Sapphire Rapids and later, say) and takes its Prescott kernels (SSE3) there, several times slower
// at the fp32 products than the AVX-512 ones the CPU could run. OPENBLAS_CORETYPE overrides the choice, but is read
// only as the library loads.
#pragma once

namespace ember {

// Called first thing in main(), before any thread or MPI: where OpenBLAS took its Prescott kernels on a CPU with
// AVX-512 (or AVX2) and OPENBLAS_CORETYPE is not set, sets it to the newest kernels the library has for that CPU
// (SkylakeX, or Haswell) and executes the program again, argv unchanged, in the same process (same PID, so MPI
// launchers and Slurm see nothing). Returns where nothing needs doing, or where the exec fails (then with the slow
// kernels, after a warning).
void select_blas_kernels(char** argv);

// The kernels OpenBLAS runs ("SkylakeX", "Haswell", "Prescott", ...), for the start-up log.
const char* blas_kernels();

}  // namespace ember
