// What every rank of an async run knows and holds (internal to the async_*.cpp files): the shape of the run in
// samples and steps, the rank's backend and model, the resume checkpoint, and the collective checkpoint save that
// the center and the workers join together.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "model/gpt.h"
#include "parallel/communicator.h"
#include "parallel/device_select.h"
#include "parallel/host_collectives.h"
#include "parallel/world.h"
#include "tokenizer/tokenizer.h"
#include "train/async/exchange.h"
#include "train/metrics.h"
#include "train/run.h"
#include "train/run_config.h"
#include "train/task_eval.h"

namespace ember {

class AdamW;
class JoinDesk;

// Each worker's arrays under /ranks/<r>, in this order.
inline std::vector<std::string> async_worker_arrays() { return {"exp_avg", "exp_avg_sq", "residual"}; }

struct AsyncJob {
  const World& world;
  const RunConfig& c;
  const std::string& config_ini;
  TrainLimits limits;
  // Workers are groups of K = async.ranks_per_worker ranks: group g is world ranks 1 + g K .. (g + 1) K, trains with
  // the sync path among its ranks, and its first rank (the leader) alone exchanges with the center, as worker g + 1
  // of the exchange. K = 1: every worker rank is a group of its own.
  int workers = 0;  // groups
  int K = 1;        // ranks per group
  int B = 0, T = 0, A = 0, H = 0;
  uint64_t samples_per_step = 0;  // samples of one sync-equivalent optimizer step: A x B x workers x K
  int64_t step_base = 0;          // the step and global sample index this invocation starts from (a resume may
  uint64_t sample_base = 0;       // have been written with another number of workers, hence another step size)
  uint64_t target_samples = 0;    // where training.steps is reached
  std::unique_ptr<Backend> backend{};
  DeviceChoice device{};                       // a worker rank's
  std::unique_ptr<SubWorld> exchange{};        // the center and the leaders: the exchange's communicator
  std::unique_ptr<SubWorld> group{};           // this rank's group (the center: itself)
  std::unique_ptr<Communicator> group_comm{};  // a worker's, over its group: the gradients' all-reduce
  bool gpu_shared = false;                     // workers share this GPU (EMBER_SHARE_GPU=1)
  std::unique_ptr<GPT> model{};
  std::string resume{};                               // "" for a fresh start
  CheckpointMeta meta{};                              // of `resume`
  CheckpointTokenizer tokenizer{};                    // the run's, recorded in every checkpoint
  std::shared_ptr<const Tokenizer> text_tokenizer{};  // the same, to decode with (bits per byte)
  std::unique_ptr<TaskEval> task{};                   // eval.task's items, on the center (which scores them)
  AsyncShape shape{};
  std::vector<std::string> hosts{};  // by rank: where each rank runs, for messages
  // The center's port and the requests of hosts that ask to join: made by the center once the run has started, and
  // kept over the passes of the run (run_async).
  std::unique_ptr<JoinDesk>* desk = nullptr;
  // Set by a join barrier: the World of the members and the ranks taken in, which start the run again from the
  // checkpoint that barrier wrote.
  std::optional<World> joined{};
  std::unique_ptr<MetricsWriter> metrics{};  // the center's, opened with the run's start (run_async_job)

  // The ranks that join a checkpoint: world itself while no worker was dropped, else a communicator of the ranks
  // still in the job (`members`, ascending, rank 0 first), made once per change of members (the one before is freed).
  const World& members_world(const std::vector<int>& members);
  std::vector<int> member_ranks{};
  std::optional<World> member_world{};

  // The sync-equivalent step at global sample index `samples` (at least sample_base).
  int64_t step_of(uint64_t samples) const {
    return step_base + int64_t((samples - std::min(samples, sample_base)) / samples_per_step);
  }
  // Tokens of a full round of one worker (a group): H local steps of A micro-batches of B x T on each of K ranks.
  double round_tokens() const { return double(H) * A * B * T * K; }
  int leader_rank(int worker) const { return 1 + worker * K; }  // the world rank of worker (group) `worker`, 0-based
  bool leader() const { return world.rank > 0 && (world.rank - 1) % K == 0; }
  // The world ranks of the center and of the groups whose leaders (exchange ranks) are listed in `members`.
  std::vector<int> world_ranks(const std::vector<int>& members) const;
};

// One collective checkpoint over `members` (AsyncJob::members_world). The center passes the global parameters (n
// floats, host) and its momentum; a worker passes any n floats (it writes no weights), its AdamW and its exchange (the
// error-feedback residual). Every rank learns the counters (version, tokens, samples) from the center first, so the
// metadata (which parallel HDF5 needs identical everywhere) agrees. Returns the path written.
std::string save_async(AsyncJob& job, const World& members, const float* params, float* momentum, AdamW* adam,
                       AsyncWorker* worker, uint64_t counters[3]);

// The two roles: rank 0 serves, ranks 1.. train.
TrainResult run_center(AsyncJob& job);
TrainResult run_worker(AsyncJob& job);

// Where a rank of an async run writes its metrics: rank 0 metrics.jsonl, worker r metrics_rank<r>.jsonl.
std::string async_metrics_path(const RunConfig& c, int rank);

}  // namespace ember
