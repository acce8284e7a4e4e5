// Async training (implementation of the entry): checks the job, gives the center a CPU backend and the workers their
// devices (chosen among the workers only), reads the resume checkpoint's metadata on every rank, then runs the role.
// Also the checkpoint save that both roles join.
#include "train/async/run.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/comm_select.h"
#include "parallel/host_collectives.h"
#include "train/adamw.h"
#include "train/async/job.h"
#include "train/async/join.h"
#include "train/async/onebit_codec.h"
#include "train/async/pass_limits.h"
#include "train/memory_estimate.h"
#include "train/run_checkpoint.h"
#include "train/run_setup.h"
#include "train/run_tokenizer.h"

namespace ember {
namespace {

void check_async_job(const World& world, const RunConfig& c) {
  if (world.size < 2)
    throw_error(
        "training.mode = async needs at least 2 ranks (rank 0 serves as the center, ranks 1.. train); this "
        "job has " +
            std::to_string(world.size),
        "launch 1 + N ranks, e.g. mpirun -n 3 ember train ... for 2 workers, or use training.mode = sync");
  if (c.training.zero != 0)
    throw_error("config: training.zero = " + std::to_string(c.training.zero) + " applies to sync mode only",
                "set training.zero = 0 with training.mode = async (each worker keeps its own AdamW state)");
  const int K = c.async.ranks_per_worker;
  if ((world.size - 1) % K != 0)
    throw_error("config: async.ranks_per_worker = " + std::to_string(K) + " does not divide the " +
                    std::to_string(world.size - 1) + " worker ranks of this job (ranks 1.." +
                    std::to_string(world.size - 1) + "; rank 0 is the center)",
                "launch 1 + G x " + std::to_string(K) + " ranks for G workers of " + std::to_string(K) +
                    " ranks each, or set async.ranks_per_worker to a divisor of " + std::to_string(world.size - 1));
  if (c.async.test_slow_worker >= world.size)
    throw_error("config: async.test_slow_worker = " + std::to_string(c.async.test_slow_worker) +
                    " is not a worker rank of this job (1.." + std::to_string(world.size - 1) + ")",
                "name a worker rank, or 0 for none");
}

}  // namespace

std::string async_metrics_path(const RunConfig& c, int rank) {
  return rank == 0 ? c.run.dir + "/metrics.jsonl" : c.run.dir + "/metrics_rank" + std::to_string(rank) + ".jsonl";
}

std::vector<int> AsyncJob::world_ranks(const std::vector<int>& members) const {
  std::vector<int> ranks = {0};
  for (int m : members)
    if (m > 0)
      for (int k = 0; k < K; ++k) ranks.push_back(leader_rank(m - 1) + k);
  return ranks;
}

const World& AsyncJob::members_world(const std::vector<int>& members) {
  if (int(members.size()) == world.size) return world;
  if (member_world && members == member_ranks) return *member_world;
  if (member_world) free_sub_world(*member_world);  // no other rank takes part: a member it had may be gone
  member_world = make_sub_world(world, members, /*tag=*/int(members.size()));
  member_ranks = members;
  return *member_world;
}

std::string save_async(AsyncJob& job, const World& w, const float* params, float* momentum, AdamW* adam,
                       AsyncWorker* worker, uint64_t counters[3]) {
  const RunConfig& c = job.c;
  broadcast_values(w, counters, 3, 0);
  const uint64_t version = counters[0], tokens = counters[1], samples = counters[2];
  const int64_t mine[3] = {adam ? int64_t(adam->step_count()) : 0, worker ? int64_t(worker->seq()) : 0,
                           worker ? int64_t(job.backend->matmul_precision()) : -1};
  const std::vector<int64_t> all = all_gather_values(w, mine, 3);

  const ParamTable& table = job.model->table();
  const size_t total = table.total_numel();
  CheckpointMeta meta = run_checkpoint_meta(c, job.config_ini, job.tokenizer);
  meta.step = job.step_of(samples);
  meta.tokens_seen = int64_t(tokens);
  meta.world_size = w.size;
  meta.mode = TrainingMode::async;
  meta.async_version = version;
  meta.optimizer_step = int64_t(version);
  meta.lr = c.async.outer_lr;
  meta.beta1 = c.async.inner_beta1;  // the workers' AdamW moments were taken with it
  // The workers' precisions (each resolves training.precision on its own device), each named once.
  for (MatmulPrecision p : kMatmulPrecisions)
    for (int r = 1; r < w.size; ++r)
      if (all[3 * size_t(r) + 2] == int64_t(p)) {
        meta.precision += (meta.precision.empty() ? "" : ",") + matmul_precision_name(p);
        break;
      }
  meta.ranks.assign(size_t(w.size), CheckpointMeta::RankState{});
  for (int r = 0; r < w.size; ++r) {
    CheckpointMeta::RankState& rs = meta.ranks[size_t(r)];
    rs.data_cursor = samples;
    rs.role = r == 0 ? "center" : "worker";
    rs.optimizer_step = all[3 * size_t(r)];
    rs.seq = uint64_t(all[3 * size_t(r) + 1]);
    if (r > 0) rs.arrays = async_worker_arrays();
  }
  CheckpointContents contents;
  std::vector<float> m, v, residual;
  if (w.rank == 0) {
    contents.sets = {{SET_MODEL, const_cast<float*>(params)}, {SET_MOMENTUM, momentum}};  // only read by a save
  } else {
    contents.sets = {{SET_MODEL, nullptr}, {SET_MOMENTUM, nullptr}};
    contents.write_begin = contents.write_end = total;  // the center writes every tensor
    // The flat arrays leave the arena's vocabulary padding out (ParamTable::to_unpadded): the file's layout is the
    // same for any padding.
    const size_t flat = table.unpadded_numel();
    auto unpadded = [&](const float* arena, std::vector<float>& out) {
      out.resize(flat);
      table.to_unpadded(arena, out.data());
    };
    std::vector<float> arena_m(adam->shard_end()), arena_v(arena_m.size());  // the whole arena, from element 0
    adam->read_moments(arena_m.data(), arena_v.data());
    unpadded(arena_m.data(), m);
    unpadded(arena_v.data(), v);
    std::vector<float> r(total, 0.0f);  // a group's other ranks keep none: only the leader compresses
    if (worker) r = worker->feedback().residual();
    unpadded(r.data(), residual);
    const std::vector<std::string> names = async_worker_arrays();
    contents.rank_arrays = {{names[0], m.data(), flat}, {names[1], v.data(), flat}, {names[2], residual.data(), flat}};
  }
  return save_run_checkpoint(c, meta, table, contents, w);
}

namespace {

// One pass of the run over `world`: until the end, or until a join barrier takes ranks in (then `joined` is set).
TrainResult run_async_job(const World& world, const RunConfig& c, const std::string& config_ini, TrainLimits limits,
                          std::unique_ptr<JoinDesk>* desk, std::optional<World>& joined) {
  check_async_job(world, c);
  // dist.timeout bounds the collectives every rank takes together (start-up, checkpoints); the one-sided traffic
  // with the center has async.center_timeout.
  world.watch->timeout_seconds = c.dist.timeout;
  set_training_threads(c.training);
  AsyncJob job{world, c, config_ini, limits};
  // The tokenizer first: a mismatch with the shards or the model is refused before any heavy work.
  job.text_tokenizer = agree_run_tokenizer(world, c);
  job.tokenizer = checkpoint_tokenizer(*job.text_tokenizer);
  // Only the center scores eval.task: it reads the items, and every rank exits with its error where it fails.
  if (c.eval.task)
    run_agreed(
        world, /*root_only=*/true, [&] { job.task = std::make_unique<TaskEval>(c, *job.text_tokenizer); },
        "check eval.task_data: a JSONL file of the eval.task format");
  job.K = c.async.ranks_per_worker;
  job.workers = (world.size - 1) / job.K;
  job.hosts = all_gather_strings(world, world.host);
  job.B = c.training.batch_size;
  job.T = c.training.seq_len;
  job.A = c.training.grad_accum_steps;
  job.H = c.async.local_steps;
  job.samples_per_step = uint64_t(job.A) * job.B * job.workers * job.K;
  // Workers pick their device among themselves (one GPU per worker by its rank among the workers on its node); the
  // center only serves and evaluates, on the CPU.
  {
    const SubWorld role(world, world.rank == 0 ? 0 : 1);
    if (world.rank == 0) {
      job.backend = make_cpu_backend();
    } else {
      TrainingBackend tb = make_training_backend(role.world(), c.training);
      job.backend = std::move(tb.backend);
      job.device = tb.device;
      job.gpu_shared = tb.device.gpus_shared;
    }
  }
  // The exchange's communicator (the center and the leaders, in world order: leader of group g is its rank g + 1)
  // and each group's. Within a group the gradients are averaged as sync training averages them.
  job.exchange = std::make_unique<SubWorld>(world, world.rank == 0 || job.leader() ? 0 : 1);
  job.group = std::make_unique<SubWorld>(world, world.rank == 0 ? 0 : 1 + (world.rank - 1) / job.K);
  job.group->world().watch->timeout_seconds = c.dist.timeout;
  job.group->world().watch->hint =
      "this worker's group leaves the job, which goes on without it once the center drops the group "
      "(async.worker_timeout); the rank whose log ends without this error, or with another one, is the one that "
      "failed";
  if (world.rank != 0 && job.K > 1)
    job.group_comm = make_communicator(job.group->world(), job.device, c.training.comm, *job.backend);
  if (world.rank != 0)  // a worker trains as a sync rank without ZeRO-1 does; the center holds far less
    require_memory("training", estimate_training_memory(c, 1, job.backend->matmul_precision()), *job.backend,
                   world.local_size, training_memory_hint());
  job.model =
      std::make_unique<GPT>(c.model, *job.backend, job.B, job.T, /*with_grads=*/world.rank != 0, c.training.recompute);
  job.model->set_dither_seed(c.training.seed);
  job.shape.n = job.model->table().total_numel();
  job.shape.block_size = size_t(c.async.block_size);
  job.shape.workers = job.workers;
  job.shape.error_feedback = c.async.error_feedback;
  job.shape.compression = c.async.compression;
  log_info(
      "world: %d rank(s) | async: center on rank 0 (%s), %d worker(s) of %d rank(s) | %d local steps per sync | "
      "outer lr %g, "
      "momentum %g | workers' beta1 %g | %.1fx fewer bytes per delta than fp32 | global batch equivalent %d x %d "
      "tokens x %d accumulation x %d",
      world.size, world.host.c_str(), job.workers, job.K, job.H, double(c.async.outer_lr),
      double(c.async.outer_momentum), double(c.async.inner_beta1),
      4.0 * double(job.shape.n) /
          double(DeltaCodec(job.shape.compression, job.shape.n, job.shape.block_size).packed_bytes()),
      job.B, job.T, job.A, job.workers * job.K);

  // Rank 0 picks the checkpoint (falling back past damaged ones); every rank reads its metadata.
  job.resume = choose_resume(world, c);
  // The center initialises the weights the workers fetch and has no way yet to take them from a file; a resume wins
  // over init_from as in sync mode (choose_init_from logs that).
  if (job.resume.empty() && !c.checkpoint.init_from.empty())
    throw_error("config: checkpoint.init_from = " + c.checkpoint.init_from +
                    " is supported in sync mode only (an async run can resume from a checkpoint, not start from one)",
                "start with training.mode = sync from the checkpoint, then resume that run's checkpoint with "
                "training.mode = async (an async run resumes a sync checkpoint)");
  (void)choose_init_from(world, c, job.resume, job.tokenizer);
  if (!job.resume.empty()) {
    job.meta = read_checkpoint_meta(job.resume);
    check_resumable(job.resume, job.meta, c);
    check_resume_tokenizer(job.resume, job.meta, job.tokenizer);
    job.step_base = job.meta.step;
    job.sample_base = job.meta.ranks.at(0).data_cursor;
  }
  // As in sync mode, a resume reads the center's metrics file (and cuts it back to the checkpoint's step) before the
  // run counts as started, so a file it cannot read stops the start with the run state as it was; a fresh start makes
  // the file once the earlier results are moved aside (on_start).
  auto open_metrics = [&] {
    if (world.rank == 0) job.metrics = std::make_unique<MetricsWriter>(async_metrics_path(c, 0), job.step_base);
  };
  if (job.step_base > 0) open_metrics();
  if (limits.on_start) limits.on_start(job.step_base);
  if (job.step_base == 0) open_metrics();
  job.target_samples = job.sample_base + uint64_t(c.training.steps - job.step_base) * job.samples_per_step;
  job.desk = desk;
  TrainResult result = world.rank == 0 ? run_center(job) : run_worker(job);
  joined = std::move(job.joined);
  return result;
}

}  // namespace

TrainResult run_async(const World& world, const RunConfig& config, const std::string& config_ini, TrainLimits limits) {
  RunConfig c = config;
  std::string ini = config_ini;
  std::optional<World> current;
  if (c.async.join) {  // this start's ranks join a running job, as workers after the job's ranks
    world.watch->timeout_seconds = c.dist.timeout;
    std::string checkpoint;
    current = join_running_job(world, c, ini, checkpoint);
    c.checkpoint.resume = checkpoint;
    limits.on_start = nullptr;  // the job's rank 0 keeps the run state
  }
  std::unique_ptr<JoinDesk> desk;  // the center's, made once the run has started (run_center)
  PassLimits passes(std::move(limits));
  for (;;) {
    if (current) ini = broadcast_string(*current, ini, 0);  // the job's config text, which every checkpoint records
    std::optional<World> next;
    const TrainResult r = run_async_job(current ? *current : world, c, ini, passes.next(), &desk, next);
    if (!next) return r;
    passes.ended(r.step);
    current = std::move(next);
    // Every rank, the ones taken in last, starts again from the join barrier's checkpoint.
    c.checkpoint.resume = r.last_checkpoint;
  }
}

}  // namespace ember
