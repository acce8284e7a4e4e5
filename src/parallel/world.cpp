// World (implementation): reads rank, size, node-local placement and host from MPI, and runs the start-up checks.
// Node-local rank comes from a shared-memory split rather than environment variables, so it works under any launcher.
#include "parallel/world.h"

#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "parallel/host_collectives.h"
#include "parallel/mpi_check.h"
#include "parallel/stall_watchdog.h"

namespace ember {

namespace {

// FNV-1a, 64 bit: a config text is a few kB, so hashing it is instant, and 8 bytes per rank are all that crosses the
// network when the ranks agree (the usual case).
std::uint64_t fnv1a_64(const std::string& text) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The key lines of an INI text as "section.key = value", in order; [section] headers and blank lines only set the
// prefix, so two texts are compared key by key.
std::vector<std::string> qualified_lines(const std::string& ini) {
  std::vector<std::string> out;
  std::string section;
  std::istringstream in(ini);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) {
      out.push_back(line);
      continue;
    }
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    while (!key.empty() && key.back() == ' ') key.pop_back();
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    out.push_back((section.empty() ? key : section + "." + key) + " = " + value);
  }
  return out;
}

// "rank R: <its line>, rank 0: <rank 0's line>" for the first key line where the two texts differ.
std::string first_difference(int rank, const std::string& mine, const std::string& root) {
  const auto [x, y] = first_config_difference(mine, root);
  if (x.empty()) return "rank " + std::to_string(rank) + ": same keys and values as rank 0 but a different config text";
  return "rank " + std::to_string(rank) + ": " + x + ", rank 0: " + y;
}

}  // namespace

std::pair<std::string, std::string> first_config_difference(const std::string& mine, const std::string& theirs,
                                                            const std::vector<std::string>& ignored) {
  auto keep = [&](const std::string& line) {
    for (const std::string& key : ignored)
      if (line.compare(0, key.size() + 3, key + " = ") == 0) return false;
    return true;
  };
  std::vector<std::string> a, b;
  for (std::string& line : qualified_lines(mine))
    if (keep(line)) a.push_back(std::move(line));
  for (std::string& line : qualified_lines(theirs))
    if (keep(line)) b.push_back(std::move(line));
  for (std::size_t i = 0; i < a.size() || i < b.size(); ++i) {
    std::string x = i < a.size() ? a[i] : "(end of config)";
    std::string y = i < b.size() ? b[i] : "(end of config)";
    if (x != y) return {std::move(x), std::move(y)};
  }
  return {};
}

World make_world() { return make_world(MPI_COMM_WORLD); }

World make_world(MPI_Comm comm) {
  int initialized = 0;
  EMBER_MPI_CHECK(MPI_Initialized(&initialized));
  EMBER_ASSERT(initialized, "make_world() called before MPI_Init");

  World world;
  world.comm = comm;
  EMBER_MPI_CHECK(MPI_Comm_rank(comm, &world.rank));
  EMBER_MPI_CHECK(MPI_Comm_size(comm, &world.size));

  // Ranks sharing memory share a node; keying by world rank keeps their local order the same as their global order,
  // so local rank 0 is the lowest world rank on the node (the one that picks GPU 0).
  MPI_Comm node = MPI_COMM_NULL;
  EMBER_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &node));
  EMBER_MPI_CHECK(MPI_Comm_rank(node, &world.local_rank));
  EMBER_MPI_CHECK(MPI_Comm_size(node, &world.local_size));
  EMBER_MPI_CHECK(MPI_Comm_free(&node));

  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  EMBER_MPI_CHECK(MPI_Get_processor_name(host, &len));
  world.host.assign(host, len);
  return world;
}

void require_power_of_two(const World& world) {
  const int n = world.size;
  if (n >= 1 && (n & (n - 1)) == 0) return;
  // Every rank sees the same size and throws the same error, so no rank is left waiting in a collective.
  throw_error("world size " + std::to_string(n) + " is not a power of two (ember trains on 1, 2, 4, 8, ... ranks)",
              "launch with a power-of-two task count: mpirun -np 4 / srun -n 4 (or --ntasks-per-node so that "
              "nodes x tasks is a power of two)");
}

void require_same_config(const World& world, const std::string& config_ini) {
  const std::uint64_t mine = fnv1a_64(config_ini);
  const std::vector<std::uint64_t> hashes = all_gather_values(world, &mine, 1);
  int first = -1, differing = 0;
  for (int r = 1; r < world.size; ++r) {
    if (hashes[r] == hashes[0]) continue;
    if (first < 0) first = r;
    ++differing;
  }
  if (first < 0) return;
  // Every rank saw the same hashes, so every rank takes this path and joins both broadcasts: no rank is left waiting.
  const std::string root_ini = broadcast_string(world, config_ini, 0);
  const std::string line = world.rank == first ? first_difference(first, config_ini, root_ini) : std::string();
  std::string message = "config differs between ranks: " + broadcast_string(world, line, first);
  if (differing > 1)
    message += " (" + std::to_string(differing) + " of " + std::to_string(world.size) + " ranks differ from rank 0)";
  throw_error(message,
              "every rank must get the same --config file (the same contents on every host) and the same "
              "--section.key=value overrides: check the per-rank commands of the launch (mpirun ':' sections, srun "
              "--multi-prog, the components of a heterogeneous Slurm job)");
}

}  // namespace ember

namespace ember {

MpiSession::MpiSession(int* argc, char*** argv) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  // Failed MPI calls return their code to EMBER_MPI_CHECK, which reports it (statement, rank, host) before the
  // whole job is aborted, instead of MPI aborting silently inside the call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

namespace {
std::atomic<bool> g_left_job{false};
}  // namespace

void leave_job() { g_left_job = true; }

World make_sub_world(const World& world, const std::vector<int>& ranks, int tag) {
  MPI_Group all = MPI_GROUP_NULL, some = MPI_GROUP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  EMBER_MPI_CHECK(MPI_Comm_group(world.comm, &all));
  EMBER_MPI_CHECK(MPI_Group_incl(all, int(ranks.size()), ranks.data(), &some));
  const StallGuard guard(
      world.watch->timeout_seconds,
      "making a communicator of " + std::to_string(ranks.size()) + " ranks did not complete within dist.timeout = " +
          std::to_string(int(world.watch->timeout_seconds)) + " s: one of them died, froze or lost its link",
      "resume the job with --resume auto once every host is back");
  EMBER_MPI_CHECK(MPI_Comm_create_group(world.comm, some, tag, &comm));
  EMBER_MPI_CHECK(MPI_Group_free(&some));
  EMBER_MPI_CHECK(MPI_Group_free(&all));
  World sub = make_world(comm);
  sub.watch = world.watch;
  return sub;
}

void free_sub_world(World& world) {
  if (world.comm != MPI_COMM_NULL && world.comm != MPI_COMM_WORLD) EMBER_MPI_CHECK(MPI_Comm_free(&world.comm));
}

void MpiSession::finish(bool failed, int code, bool agreed) {
  if (g_left_job) {
    fflush(stdout);
    fflush(stderr);
    _exit(code);
  }
  // A failure on one rank must end every rank, never leave the others waiting in a collective; an agreed one waits,
  // bounded, until every rank has unwound (rank 0 removes what a refused start created on the way).
  if (failed && size_ > 1 && agreed) {
    constexpr double kAgreedExitWait = 10.0;
    MPI_Request r = MPI_REQUEST_NULL;
    const double deadline = MPI_Wtime() + kAgreedExitWait;
    int done = 0;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &r) == MPI_SUCCESS)
      while (!done && MPI_Wtime() < deadline && MPI_Test(&r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS)
        if (!done) usleep(1000);
  }
  if (failed && size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
}

}  // namespace ember
