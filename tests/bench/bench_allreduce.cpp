// All-reduce benchmark: the MPI Communicator's in-place SUM against a raw MPI_Allreduce on the same buffer, from
// 4 KB to 256 MB, so any overhead of the wrapper (chunking, the duplicate communicator) shows as a ratio near 1.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace {

struct Options {
  size_t min_bytes = size_t{4} << 10;
  size_t max_bytes = size_t{256} << 20;
  int iters = 0;   // 0: chosen per size so each timed round moves about 256 MiB (at least 3, at most 200 calls)
  int warmup = 2;  // calls per variant before timing: the first ones pay for connection setup and page faults
  int rounds = 3;  // alternating timed rounds per variant; the fastest is kept, since the machine may be shared
};

const char* USAGE =
    "usage: bench_allreduce [--min-bytes N] [--max-bytes N] [--iters N] [--warmup N] [--rounds N]\n"
    "  sizes go from --min-bytes to --max-bytes by factors of 4 (default 4096 .. 268435456)\n";

[[noreturn]] void usage_error(int rank, const std::string& message) {
  if (rank == 0) fprintf(stderr, "error: %s\nhint: %s", message.c_str(), USAGE);
  MPI_Finalize();
  exit(2);
}

Options parse_options(int argc, char** argv, int rank) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "-h" || key == "--help") {
      if (rank == 0) printf("%s", USAGE);
      MPI_Finalize();
      exit(0);
    }
    if (i + 1 >= argc) usage_error(rank, "option " + key + " needs a value");
    char* end = nullptr;
    const long long v = strtoll(argv[++i], &end, 10);
    if (*end != '\0' || v < 0) usage_error(rank, "option " + key + " needs a non-negative integer, got " + argv[i]);
    if (key == "--min-bytes")
      o.min_bytes = size_t(v);
    else if (key == "--max-bytes")
      o.max_bytes = size_t(v);
    else if (key == "--iters")
      o.iters = int(v);
    else if (key == "--warmup")
      o.warmup = int(v);
    else if (key == "--rounds")
      o.rounds = int(v);
    else
      usage_error(rank, "unknown option " + key);
  }
  if (o.min_bytes < sizeof(float) || o.min_bytes > o.max_bytes)
    usage_error(rank, "need 4 <= --min-bytes <= --max-bytes");
  if (o.rounds < 1) usage_error(rank, "--rounds must be at least 1");
  return o;
}

// Multiples of 0.5 below 2^10: sums over any number of ranks we run are exact in fp32, so the check is bitwise.
float input(int rank, size_t i) { return float(rank + 1) * 0.5f + float(i % 97); }

float expected(int size, size_t i) {
  double sum = 0;
  for (int r = 0; r < size; ++r) sum += double(input(r, i));
  return float(sum);
}

// Mismatches of one all-reduce of the known input, summed over ranks (every rank gets the total).
long long check_once(std::vector<float>& buf, int rank, int size, bool use_comm, ember::Communicator& comm) {
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = input(rank, i);
  if (use_comm)
    comm.all_reduce(buf.data(), buf.size(), ember::REDUCE_OP_SUM);
  else
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  long long bad = 0, total = 0;
  for (size_t i = 0; i < buf.size(); ++i) bad += buf[i] != expected(size, i);
  MPI_Allreduce(&bad, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

// Mean seconds per call over `iters` calls, as seen by the slowest rank (a collective is done when all ranks are).
double time_calls(std::vector<float>& buf, int iters, bool use_comm, ember::Communicator& comm) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int k = 0; k < iters; ++k) {
    if (use_comm)
      comm.all_reduce(buf.data(), buf.size(), ember::REDUCE_OP_SUM);
    else
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  const double local = (MPI_Wtime() - t0) / iters;
  double slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Options opt = parse_options(argc, argv, rank);
  int code = 0;
  {
    std::unique_ptr<ember::Communicator> comm = ember::make_mpi_communicator(MPI_COMM_WORLD);
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(version, &len);
    if (char* nl = strchr(version, '\n')) *nl = '\0';
    // nccl-tests' bus bandwidth: a ring all-reduce moves 2(n-1)/n of the buffer over each rank's busiest link.
    const double bus_factor = 2.0 * (size - 1) / size;
    if (rank == 0) {
      printf("# all_reduce SUM, float32, in place: ember %s communicator vs MPI_Allreduce, %d ranks (%s)\n",
             comm->name().c_str(), size, version);
      printf("# time: mean us per call on the slowest rank, fastest of %d alternating rounds after %d warm-up calls\n",
             opt.rounds, opt.warmup);
      printf("# algbw = bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests); ratio = ember time / raw time\n");
      printf("%12s %10s %6s | %11s %9s %9s | %11s %9s %9s | %6s\n", "bytes", "floats", "iters", "ember us", "algbw",
             "busbw", "raw us", "algbw", "busbw", "ratio");
      printf("%12s %10s %6s | %11s %9s %9s | %11s %9s %9s | %6s\n", "", "", "", "", "GB/s", "GB/s", "", "GB/s", "GB/s",
             "");
      fflush(stdout);
    }
    for (size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 4) {
      const size_t n = bytes / sizeof(float);
      std::vector<float> buf(n);
      // Correctness first: a fast wrong all-reduce is not a result.
      const long long bad_comm = check_once(buf, rank, size, true, *comm);
      const long long bad_raw = check_once(buf, rank, size, false, *comm);
      if (bad_comm || bad_raw) {
        if (rank == 0)
          fprintf(stderr, "error: %zu bytes: %lld wrong values from the communicator, %lld from MPI_Allreduce\n", bytes,
                  bad_comm, bad_raw);
        code = 1;
        break;
      }
      // Zeros while timing: repeated in-place sums of anything else grow without bound (to inf after ~100 calls).
      std::fill(buf.begin(), buf.end(), 0.0f);
      const int iters =
          opt.iters > 0 ? opt.iters : int(std::clamp<size_t>((size_t{256} << 20) / bytes, size_t{3}, size_t{200}));
      if (opt.warmup > 0) {
        time_calls(buf, opt.warmup, true, *comm);
        time_calls(buf, opt.warmup, false, *comm);
      }
      double best_comm = 1e30, best_raw = 1e30;
      for (int r = 0; r < opt.rounds; ++r) {
        best_comm = std::min(best_comm, time_calls(buf, iters, true, *comm));
        best_raw = std::min(best_raw, time_calls(buf, iters, false, *comm));
      }
      if (rank == 0) {
        const double alg_comm = bytes / best_comm / 1e9, alg_raw = bytes / best_raw / 1e9;
        printf("%12zu %10zu %6d | %11.1f %9.3f %9.3f | %11.1f %9.3f %9.3f | %6.3f\n", bytes, n, iters, best_comm * 1e6,
               alg_comm, alg_comm * bus_factor, best_raw * 1e6, alg_raw, alg_raw * bus_factor, best_comm / best_raw);
        fflush(stdout);
      }
      if (bytes > opt.max_bytes / 4) break;  // the next size would pass max_bytes (or overflow)
    }
  }
  MPI_Finalize();
  return code;
}
