// Async-mode training (implementation). The center loops on the exchange window (so one-sided traffic always
// progresses), folds each delta in with Nesterov momentum weighted by tokens and staleness, and decides barriers:
// periodic checkpoints, a stop (signal, --max-runtime) or the finish. Workers run rounds: reserve samples, train,
// send, fetch, rebase; at a barrier every rank joins one collective checkpoint save.
#include "train/async_trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/data_loader.h"
#include "dist/async_exchange.h"
#include "dist/device_select.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/signals.h"

namespace ember {
namespace {

const std::vector<std::string> kWorkerArrays = {"exp_avg", "exp_avg_sq", "residual"};
constexpr const char* kMomentumSet = "/optimizer/momentum_buffer";

// What every rank of the job knows and holds.
struct Job {
  const World& world;
  const RunConfig& c;
  const std::string& config_ini;
  TrainLimits limits;
  int workers = 0;
  int B = 0, T = 0, A = 0, H = 0;
  uint64_t samples_per_step = 0;  // samples of one sync-equivalent optimizer step: A x B x workers
  int64_t step_base = 0;          // the step and global sample index this invocation starts from (a resume may
  uint64_t sample_base = 0;       // have been written with another number of workers, hence another step size)
  uint64_t target_samples = 0;    // where training.steps is reached
  std::unique_ptr<Backend> backend{};
  bool gpu_shared = false;  // workers share this GPU (EMBER_SHARE_GPU=1)
  std::unique_ptr<GPT> model{};
  std::string resume{};   // "" for a fresh start
  CheckpointMeta meta{};  // of `resume`
  AsyncShape shape{};

  // The sync-equivalent step at global sample index `samples` (at least sample_base).
  int64_t step_of(uint64_t samples) const {
    return step_base + int64_t((samples - std::min(samples, sample_base)) / samples_per_step);
  }
};

// The outer weight of one delta: its share of a sync step's tokens among `workers` deltas, down-weighted by the
// staleness beyond what a round-robin of the workers implies anyway (workers - 1 versions): a delta taken against
// parameters that k extra versions have since moved counts 1 / (1 + k).
float outer_weight(const Job& job, const AsyncMessage& m) {
  const double round_tokens = double(job.H) * job.A * job.B * job.T;
  const uint64_t expected = uint64_t(job.workers - 1);
  const double extra = m.staleness > expected ? double(m.staleness - expected) : 0.0;
  return float(double(m.tokens) / round_tokens / double(job.workers) / (1.0 + extra));
}

std::string metrics_path(const RunConfig& c, int rank) {
  return rank == 0 ? c.run.dir + "/metrics.jsonl" : c.run.dir + "/metrics_rank" + std::to_string(rank) + ".jsonl";
}

// One collective checkpoint over the whole world. The center passes the global parameters (n floats, host) and its
// momentum; a worker any n floats (it writes no weights), its AdamW moments and error-feedback residual. Every rank
// learns the counters from the center first, so the metadata (which parallel HDF5 needs identical everywhere) agrees.
std::string save_async(Job& job, const float* params, float* momentum, AdamW* adam, AsyncWorker* worker,
                       uint64_t counters[3]) {
  const World& w = job.world;
  const RunConfig& c = job.c;
  EMBER_MPI_CHECK(MPI_Bcast(counters, 3, MPI_UINT64_T, 0, w.comm));
  const uint64_t version = counters[0], tokens = counters[1], samples = counters[2];
  const int64_t mine[2] = {adam ? int64_t(adam->step_count()) : 0, worker ? int64_t(worker->seq()) : 0};
  std::vector<int64_t> all(2 * size_t(w.size));
  EMBER_MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, w.comm));

  const ParamTable& table = job.model->table();
  const size_t total = table.total_numel();
  CheckpointMeta meta;
  meta.step = job.step_of(samples);
  meta.tokens_seen = int64_t(tokens);
  meta.world_size = w.size;
  meta.mode = "async";
  meta.async_version = version;
  meta.config_ini = job.config_ini;
  meta.model = c.model;
  meta.optimizer_step = int64_t(version);
  meta.beta1 = c.optimizer.beta1;
  meta.beta2 = c.optimizer.beta2;
  meta.eps = c.optimizer.eps;
  meta.weight_decay = c.optimizer.weight_decay;
  meta.lr = c.async.outer_lr;
  meta.ranks.assign(size_t(w.size), CheckpointMeta::RankState{});
  for (int r = 0; r < w.size; ++r) {
    CheckpointMeta::RankState& rs = meta.ranks[size_t(r)];
    rs.data_cursor = samples;
    rs.role = r == 0 ? "center" : "worker";
    rs.optimizer_step = all[2 * size_t(r)];
    rs.seq = uint64_t(all[2 * size_t(r) + 1]);
    if (r > 0) rs.arrays = kWorkerArrays;
  }
  CheckpointTensors t;
  t.params = const_cast<float*>(params);  // only read by a save
  t.rank_array_len = total;
  std::vector<float> m, v;
  if (w.rank == 0) {
    t.shard_begin = 0;
    t.shard_end = total;
    t.extra_sets = {{kMomentumSet, momentum}};
  } else {
    t.shard_begin = t.shard_end = total;  // the center writes every tensor
    t.extra_sets = {{kMomentumSet, nullptr}};
    m.resize(total);
    v.resize(total);
    job.backend->copy_to_host(m.data(), adam->exp_avg(), total * sizeof(float));
    job.backend->copy_to_host(v.data(), adam->exp_avg_sq(), total * sizeof(float));
    t.rank_arrays = {
        {"exp_avg", m.data()}, {"exp_avg_sq", v.data()}, {"residual", worker->feedback().residual().data()}};
  }
  const double t0 = now_seconds();
  const std::string path = save_checkpoint(c.checkpoint_folder(), meta, table, t, c.checkpoint.keep_latest_k, w.comm);
  log_info("checkpoint %s (%.0f ms)", path.c_str(), 1e3 * (now_seconds() - t0));
  return path;
}

// ---------------------------------------------------------------------------------------------------------------------
// The center (rank 0)

TrainResult run_center(Job& job) {
  const RunConfig& c = job.c;
  GPT& model = *job.model;
  Backend& be = *job.backend;
  const size_t n = model.table().total_numel();
  TrainResult result;
  std::vector<float> momentum(n, 0.0f);
  uint64_t version = 0, tokens = 0, samples = 0;
  if (!job.resume.empty()) {
    std::vector<float> params(model.arena_numel(), 0.0f);
    CheckpointTensors t;
    t.params = params.data();
    const bool async_file = job.meta.mode == "async";
    if (async_file) t.extra_sets = {{kMomentumSet, momentum.data()}};
    CheckpointMeta meta;
    load_checkpoint(job.resume, model.table(), t, meta);
    be.copy_to_device(model.params(), params.data(), params.size() * sizeof(float));
    tokens = uint64_t(meta.tokens_seen);
    samples = meta.ranks.at(0).data_cursor;
    version = async_file ? meta.async_version : 0;
    const int old_workers = async_file ? meta.world_size - 1 : 0;
    if (!async_file)
      log_info(
          "notice: %s was written in %s mode: the workers start with fresh AdamW state, the center with zero "
          "momentum",
          job.resume.c_str(), meta.mode.c_str());
    else if (old_workers < job.workers)
      log_info(
          "notice: %s holds the state of %d worker(s); worker rank(s) %d..%d start with fresh AdamW state and "
          "a zero error-feedback residual",
          job.resume.c_str(), old_workers, old_workers + 1, job.workers);
    else if (old_workers > job.workers)
      log_info(
          "notice: %s holds the state of %d workers; %d resume theirs, the state of worker rank(s) %d..%d is "
          "dropped (what their residuals still owed is lost)",
          job.resume.c_str(), old_workers, job.workers, job.workers + 1, old_workers);
    log_info("resumed from %s at step %lld (%llu tokens seen, version %llu)", job.resume.c_str(),
             (long long)job.step_of(samples), (unsigned long long)tokens, (unsigned long long)version);
  } else {
    model.init_weights(c.training.seed);
    log_info("starting from scratch (seed %llu)", (unsigned long long)c.training.seed);
  }
  std::vector<float> global(n);
  be.copy_to_host(global.data(), std::as_const(model).params(), n * sizeof(float));
  AsyncCenter center(job.world.comm, job.shape, global.data(), version, tokens, samples);

  DataLoader val(c.data.dir, "val", job.T, c.model.vocab_size, c.training.seed, /*shuffle=*/false);
  std::vector<int32_t> inputs(size_t(job.B) * job.T), targets(inputs.size());
  auto evaluate = [&] {
    be.copy_to_device(model.params(), global.data(), n * sizeof(float));
    const uint64_t available = val.num_samples() / uint64_t(job.B);
    const int batches = int(std::min<uint64_t>(uint64_t(c.eval.batches), std::max<uint64_t>(available, 1)));
    double sum = 0.0;
    for (int k = 0; k < batches; ++k) {
      val.batch_at(uint64_t(k) * job.B, inputs.data(), targets.data(), job.B);
      sum += model.forward(inputs.data(), targets.data(), job.B, job.T);
    }
    return sum / batches;
  };

  const int64_t first_step = job.step_of(samples);
  MetricsWriter metrics(metrics_path(c, 0), first_step);
  auto next_multiple = [](int64_t step, int every) { return every > 0 ? (step / every + 1) * every : INT64_MAX; };
  int64_t next_eval = next_multiple(first_step, c.eval.every),
          next_ckpt = next_multiple(first_step, c.checkpoint.interval);
  int64_t next_log = next_multiple(first_step, c.run.log_every);
  const uint64_t first_version = version;
  const double start = now_seconds();
  double loss_sum = 0.0;
  int loss_count = 0;
  uint64_t max_staleness = 0;
  std::vector<float> d(n), g(n), update(n);
  install_stop_signal_handlers();

  for (;;) {
    std::vector<AsyncMessage> msgs = center.take();
    if (!msgs.empty()) {
      std::fill(g.begin(), g.end(), 0.0f);
      uint64_t msg_tokens = 0;
      nlohmann::json deltas = nlohmann::json::array();
      for (const AsyncMessage& m : msgs) {
        center.decode(m, d.data());
        const float wgt = outer_weight(job, m);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; ++i) g[i] += wgt * d[i];
        msg_tokens += m.tokens;
        result.last_loss = m.loss;
        loss_sum += m.loss;
        ++loss_count;
        max_staleness = std::max(max_staleness, m.staleness);
        deltas.push_back({{"worker", m.worker + 1}, {"staleness", m.staleness}, {"weight", wgt}, {"loss", m.loss}});
      }
      // Nesterov momentum on the weighted sum of deltas (the negative of a pseudo-gradient).
      const float lr = c.async.outer_lr, mu = c.async.outer_momentum;
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; ++i) {
        momentum[i] = mu * momentum[i] + g[i];
        update[i] = lr * (g[i] + mu * momentum[i]);
        global[i] += update[i];
      }
      version = center.publish(update.data(), msg_tokens, msgs);
      const double minutes = (now_seconds() - start) / 60.0;
      const int64_t step = job.step_of(center.tokens_applied() / uint64_t(job.T));
      metrics.write({{"step", step},
                     {"version", version},
                     {"tokens_seen", center.tokens_applied()},
                     {"deltas", deltas},
                     {"versions_per_min", minutes > 0 ? double(version - first_version) / minutes : 0.0},
                     {"bytes_ratio", double(center.messages_taken()) * 4.0 * double(n) /
                                         double(std::max<uint64_t>(center.bytes_taken(), 1))}});
      if (c.async.test_center_stall > 0 && version >= uint64_t(c.async.test_center_stall)) {
        log_info("test: the center stops serving at version %llu (async.test_center_stall)",
                 (unsigned long long)version);
        for (;;) sleep(60);  // no MPI call ever again: the workers must notice on their own
      }
    }
    const uint64_t applied = center.tokens_applied() / uint64_t(job.T);
    const int64_t step = job.step_of(applied);
    if (step >= next_log && loss_count > 0) {
      const double now = now_seconds();
      const double eta =
          step > first_step ? (now - start) / double(step - first_step) * double(c.training.steps - step) : 0.0;
      log_info(
          "step %5lld/%d | loss %.4f | version %llu | %.0f versions/min | max staleness %llu | %.0f tok/s | "
          "eta %02d:%02d:%02d",
          (long long)step, c.training.steps, loss_sum / loss_count, (unsigned long long)version,
          double(version - first_version) / std::max((now - start) / 60.0, 1e-9), (unsigned long long)max_staleness,
          double(center.tokens_applied() - tokens) / std::max(now - start, 1e-9), int(eta) / 3600, int(eta) / 60 % 60,
          int(eta) % 60);
      loss_sum = 0.0;
      loss_count = 0;
      max_staleness = 0;
      next_log = next_multiple(step, c.run.log_every);
    }
    if (step >= next_eval && applied < job.target_samples) {
      const double t0 = now_seconds();
      result.last_val_loss = evaluate();
      metrics.write({{"step", step}, {"tokens_seen", center.tokens_applied()}, {"val_loss", result.last_val_loss}});
      log_info("step %lld | val loss %.4f | %.0f ms", (long long)step, result.last_val_loss,
               1e3 * (now_seconds() - t0));
      next_eval = next_multiple(step, c.eval.every);
    }
    if (!center.barrier_pending()) {
      const bool out_of_time = job.limits.max_runtime > 0 && now_seconds() - start >= job.limits.max_runtime;
      const bool limit = job.limits.stop_after > 0 && step - first_step >= job.limits.stop_after;
      if (applied >= job.target_samples || limit)
        center.request_barrier(AsyncBarrier::finish);
      else if (stop_signal_received() != 0 || out_of_time || center.stop_requested())
        center.request_barrier(AsyncBarrier::stop);
      else if (step >= next_ckpt) {
        center.request_barrier(AsyncBarrier::checkpoint);
        next_ckpt = next_multiple(step, c.checkpoint.interval);
      }
    } else if (center.barrier_reached()) {
      const AsyncBarrier kind = center.barrier_kind();
      uint64_t counters[3] = {version, center.tokens_applied(), applied};
      result.last_checkpoint = save_async(job, global.data(), momentum.data(), nullptr, nullptr, counters);
      center.end_barrier();
      if (kind != AsyncBarrier::checkpoint) {
        result.stopped_early = kind == AsyncBarrier::stop && applied < job.target_samples;
        break;
      }
    }
    if (msgs.empty()) usleep(200);
  }
  result.step = job.step_of(center.tokens_applied() / uint64_t(job.T));
  const double t0 = now_seconds();
  result.last_val_loss = evaluate();
  metrics.write({{"step", result.step}, {"tokens_seen", center.tokens_applied()}, {"val_loss", result.last_val_loss}});
  log_info("step %lld | val loss %.4f | %.0f ms", (long long)result.step, result.last_val_loss,
           1e3 * (now_seconds() - t0));
  const double minutes = (now_seconds() - start) / 60.0;
  log_info("center: %llu versions in %.1f min (%.0f/min), %llu deltas, %.1fx fewer bytes than fp32 deltas",
           (unsigned long long)(version - first_version), minutes, double(version - first_version) / minutes,
           (unsigned long long)center.messages_taken(),
           double(center.messages_taken()) * 4.0 * double(n) / double(std::max<uint64_t>(center.bytes_taken(), 1)));
  if (result.stopped_early)
    log_info("stopping early at step %lld: checkpoint written; rerun with --resume auto to continue",
             (long long)result.step);
  return result;
}

// ---------------------------------------------------------------------------------------------------------------------
// A worker (ranks 1..N)

TrainResult run_worker(Job& job) {
  const RunConfig& c = job.c;
  const int rank = job.world.rank;
  GPT& model = *job.model;
  Backend& be = *job.backend;
  const ParamTable& table = model.table();
  const size_t n = table.total_numel(), arena = model.arena_numel();
  AdamW adam(be, table, c.optimizer, 0, arena);
  const size_t counted_bytes = log_model_memory(model, adam, be);
  DataLoader train(c.data.dir, "train", job.T, c.model.vocab_size, c.training.seed, /*shuffle=*/true);
  std::vector<float> residual;
  if (!job.resume.empty() && job.meta.mode == "async") {
    std::vector<float> m(n), v(n);
    residual.resize(n);
    if (load_rank_arrays(job.resume, rank,
                         {{"exp_avg", m.data()}, {"exp_avg_sq", v.data()}, {"residual", residual.data()}}, n)) {
      be.copy_to_device(adam.exp_avg(), m.data(), n * sizeof(float));
      be.copy_to_device(adam.exp_avg_sq(), v.data(), n * sizeof(float));
      adam.set_step_count(int(job.meta.ranks.at(size_t(rank)).optimizer_step));
    } else {
      residual.clear();
    }
  }
  AsyncWorker ex(job.world.comm, job.shape, rank, c.async.center_timeout);
  if (!residual.empty()) ex.feedback().set_residual(residual.data());

  // base: the published parameters as of the last fetch. origin: where this round starts, base plus this worker's
  // own newest delta while the center has not folded it in yet (it was sent just before the fetch), so a worker
  // never trains from parameters that lack its own last round.
  std::vector<float> base(n), origin(n), x(n), delta(n);
  AsyncWorker::Published p = ex.fetch(base.data());
  be.copy_to_device(model.params(), base.data(), n * sizeof(float));
  origin = base;
  const float own_weight = c.async.outer_lr / float(job.workers);  // what the center applies of a full round's delta
  uint64_t acked = p.barrier_seq;
  MetricsWriter metrics(metrics_path(c, rank), job.step_of(p.tokens_applied / uint64_t(job.T)));
  std::vector<int32_t> inputs(size_t(job.B) * job.T), targets(inputs.size());
  const uint64_t round_samples = uint64_t(job.H) * job.A * job.B;
  const bool slow = c.async.test_slow_worker == rank && c.async.test_slowdown > 1.0f;
  bool reserving = true, stop_sent = false;
  double train_seconds = 0.0, blocked_seconds = 0.0;
  int64_t round = 0;
  TrainResult result;
  install_stop_signal_handlers();

  for (;;) {
    if (p.barrier_seq > acked && p.barrier_kind != AsyncBarrier::none) {
      acked = p.barrier_seq;
      ex.ack_barrier(acked);
      uint64_t counters[3] = {0, 0, 0};
      result.last_checkpoint = save_async(job, base.data(), nullptr, &adam, &ex, counters);
      result.step = job.step_of(counters[2]);
      if (p.barrier_kind != AsyncBarrier::checkpoint) {
        result.stopped_early = p.barrier_kind == AsyncBarrier::stop && counters[2] < job.target_samples;
        break;
      }
      continue;
    }
    if (stop_signal_received() != 0 && !stop_sent) {
      ex.request_stop();
      stop_sent = true;
    }
    if (!reserving) {  // every sample is handed out: wait for the center's finish (not counted as blocked)
      usleep(1000);
      p = ex.fetch(base.data());
      continue;
    }
    const double t_round = now_seconds(), blocked_before = ex.blocked_seconds();
    const uint64_t first = ex.reserve(round_samples);
    if (first >= job.target_samples) {
      reserving = false;
      continue;
    }
    const int steps =
        int(std::min<uint64_t>(uint64_t(job.H), (job.target_samples - first) / (uint64_t(job.A) * job.B)));
    double loss_sum = 0.0;
    float lr = 0.0f;
    for (int i = 0; i < steps; ++i) {
      const double t_step = now_seconds();
      const uint64_t at = first + uint64_t(i) * job.A * job.B;
      model.zero_grad();
      double loss = 0.0;
      for (int m = 0; m < job.A; ++m) {
        train.batch_at(at + uint64_t(m) * job.B, inputs.data(), targets.data(), job.B);
        loss += model.forward(inputs.data(), targets.data(), job.B, job.T) / job.A;
        model.backward(1.0f / float(job.A));
      }
      if (!std::isfinite(loss))
        throw_error("training diverged on worker rank " + std::to_string(rank) + " at step " +
                        std::to_string(job.step_of(at)) + ": loss is " + std::to_string(loss),
                    "lower optimizer.lr or async.outer_lr, then resume from the last checkpoint");
      const float norm = float(std::sqrt(be.sum_squares(model.grads(), arena)));
      clip_grads(be, model.grads(), arena, norm, c.training.max_norm);
      lr = lr_at_step(c, job.step_of(at));
      adam.step(model.params(), model.grads(), lr);
      be.synchronize();
      if (round == 0 && i == 0) log_measured_memory(be, counted_bytes, job.gpu_shared);
      loss_sum += loss;
      if (slow) usleep(useconds_t((c.async.test_slowdown - 1.0f) * (now_seconds() - t_step) * 1e6));
    }
    be.copy_to_host(x.data(), std::as_const(model).params(), n * sizeof(float));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) delta[i] = x[i] - origin[i];
    const uint64_t tokens = uint64_t(steps) * job.A * job.B * job.T;
    const uint64_t put_before = ex.bytes_put(), got_before = ex.bytes_got();
    ex.send(delta.data(), p.version, tokens, loss_sum / steps);
    const uint64_t put_bytes = ex.bytes_put() - put_before;
    p = ex.fetch(base.data());
    origin = base;
    if (p.applied < ex.seq()) ex.add_last_message(own_weight * float(steps) / float(job.H), origin.data());
    be.copy_to_device(model.params(), origin.data(), n * sizeof(float));
    const double round_seconds = now_seconds() - t_round, blocked = ex.blocked_seconds() - blocked_before;
    train_seconds += round_seconds;
    blocked_seconds += blocked;
    ++round;
    result.last_loss = loss_sum / steps;
    result.step = job.step_of(first) + 1;
    metrics.write({{"step", job.step_of(first + uint64_t(steps) * job.A * job.B)},
                   {"round", round},
                   {"local_steps", steps},
                   {"optimizer_step", adam.step_count()},
                   {"loss", loss_sum / steps},
                   {"lr", lr},
                   {"tokens", tokens},
                   {"bytes_put", put_bytes},
                   {"bytes_got", ex.bytes_got() - got_before},
                   {"fp32_delta_bytes", n * sizeof(float)},
                   {"blocked_ms", 1e3 * blocked},
                   {"round_ms", 1e3 * round_seconds},
                   {"blocked_fraction", blocked_seconds / std::max(train_seconds, 1e-9)},
                   {"staleness", p.staleness},
                   {"version", p.version},
                   {"full_fetch", p.full}});
  }
  return result;
}

}  // namespace

TrainResult run_async(const World& world, const RunConfig& config, const std::string& config_ini, TrainLimits limits) {
  const RunConfig& c = config;
  if (world.size < 2)
    throw_error(
        "training.mode = async needs at least 2 ranks (rank 0 serves as the center, ranks 1.. train); this "
        "job has " +
            std::to_string(world.size),
        "launch 1 + N ranks, e.g. mpirun -n 3 ember train ... for 2 workers, or use training.mode = sync");
  if (c.training.zero != 0)
    throw_error("config: training.zero = " + std::to_string(c.training.zero) + " applies to sync mode only",
                "set training.zero = 0 with training.mode = async (each worker keeps its own AdamW state)");
  if (c.async.test_slow_worker >= world.size)
    throw_error("config: async.test_slow_worker = " + std::to_string(c.async.test_slow_worker) +
                    " is not a worker rank of this job (1.." + std::to_string(world.size - 1) + ")",
                "name a worker rank, or 0 for none");
  if (c.training.threads > 0) omp_set_num_threads(c.training.threads);
  Job job{world, c, config_ini, limits};
  job.workers = world.size - 1;
  job.B = c.training.batch_size;
  job.T = c.training.seq_len;
  job.A = c.training.grad_accum_steps;
  job.H = c.async.local_steps;
  job.samples_per_step = uint64_t(job.A) * job.B * job.workers;
  // Workers pick their device among themselves (one GPU per worker by its rank among the workers on its node); the
  // center only serves and evaluates, on the CPU.
  MPI_Comm role_comm = MPI_COMM_NULL;
  EMBER_MPI_CHECK(MPI_Comm_split(world.comm, world.rank == 0 ? 0 : 1, world.rank, &role_comm));
  if (world.rank == 0) {
    job.backend = make_cpu_backend();
  } else {
    const World workers = make_world(role_comm);
    const DeviceChoice choice = select_device(workers, c.training.device);
    job.backend = make_backend(choice);
    job.gpu_shared = choice.gpus_shared;
    job.backend->set_matmul_precision(c.training.precision);
    job.backend->set_deterministic(c.training.deterministic);
  }
  EMBER_MPI_CHECK(MPI_Comm_free(&role_comm));
  job.model =
      std::make_unique<GPT>(c.model, *job.backend, job.B, job.T, /*with_grads=*/world.rank != 0, c.training.recompute);
  job.shape.n = job.model->table().total_numel();
  job.shape.block_size = size_t(c.async.block_size);
  job.shape.workers = job.workers;
  job.shape.error_feedback = c.async.error_feedback;
  log_info(
      "world: %d rank(s) | async: center on rank 0 (%s), %d worker(s) | %d local steps per sync | "
      "%.1fx fewer bytes per delta than fp32 | global batch equivalent %d x %d tokens x %d accumulation x %d",
      world.size, world.host.c_str(), job.workers, job.H,
      4.0 * double(job.shape.n) / double(onebit_packed_bytes(job.shape.n, job.shape.block_size)), job.B, job.T, job.A,
      job.workers);

  // Rank 0 picks the checkpoint (falling back past damaged ones); every rank reads its metadata.
  if (world.rank == 0) job.resume = resolve_resume(c.checkpoint_folder(), c.checkpoint.resume);
  uint64_t len = job.resume.size();
  EMBER_MPI_CHECK(MPI_Bcast(&len, 1, MPI_UINT64_T, 0, world.comm));
  job.resume.resize(len);
  if (len > 0) EMBER_MPI_CHECK(MPI_Bcast(job.resume.data(), int(len), MPI_CHAR, 0, world.comm));
  if (!job.resume.empty()) {
    job.meta = read_checkpoint_meta(job.resume);
    if (!(job.meta.model == c.model))
      throw_error("checkpoint " + job.resume + ": model config differs from the run's [model] section",
                  "use the [model] settings the checkpoint was written with (see `ember inspect`) or start fresh");
    if (job.meta.step >= c.training.steps)
      throw_error("checkpoint " + job.resume + ": already at step " + std::to_string(job.meta.step) +
                      " of training.steps = " + std::to_string(c.training.steps),
                  "raise training.steps to train further");
    job.step_base = job.meta.step;
    job.sample_base = job.meta.ranks.at(0).data_cursor;
  }
  job.target_samples = job.sample_base + uint64_t(c.training.steps - job.step_base) * job.samples_per_step;
  return world.rank == 0 ? run_center(job) : run_worker(job);
}

}  // namespace ember
