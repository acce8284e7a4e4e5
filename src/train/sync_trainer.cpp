// Sync training (implementation). Order matters for "lose nothing": every input is opened and checked, and a resume
// checkpoint fully loaded, before the metrics file or any checkpoint is touched. Rank r of N takes micro-batch
// (m * N + r) of each global step, so N ranks see exactly the samples one rank with N times the accumulation would.
#include "train/sync_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/log.h"
#include "core/timer.h"
#include "data/data_loader.h"
#include "model/gpt.h"
#include "parallel/comm_select.h"
#include "parallel/communicator.h"
#include "train/adamw.h"
#include "train/evaluate.h"
#include "train/local_step.h"
#include "train/lr_schedule.h"
#include "train/memory_estimate.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/run_checkpoint.h"
#include "train/run_setup.h"
#include "train/run_tokenizer.h"
#include "train/signals.h"

namespace ember {

namespace {}  // namespace

struct SyncTrainer::State {
  World world;
  CheckpointTokenizer tokenizer;  // recorded in every checkpoint
  RunConfig cfg;
  std::string config_ini;
  TrainLimits limits;
  TrainingBackend tb;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<GPT> model;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<DataLoader> train_data;
  std::unique_ptr<Evaluator> evaluator;
  size_t shard_begin = 0, shard_end = 0;  // this rank's equal share of the arena (ZeRO-1 shard; checkpoint writes)
  float* shard_grads = nullptr;           // ZeRO-1: reduce-scattered gradients of the shard
  size_t counted_bytes = 0;               // backend memory counted at start-up (log_model_memory)
  std::vector<GradientBucket> buckets;
  int64_t step = 0;  // optimizer steps completed
  int64_t tokens_seen = 0;

  bool zero() const { return cfg.training.zero == 1; }
  Backend& backend() { return *tb.backend; }
  // The checkpoint range this rank writes: its share, clipped to the real parameters.
  size_t write_begin() const { return std::min(shard_begin, model->table().total_numel()); }
  size_t write_end() const { return std::min(shard_end, model->table().total_numel()); }

  // The checkpoint's tensor sets over host copies of the weights (whole arena) and the moments (the whole arena, or
  // under ZeRO-1 this rank's shard).
  std::vector<TensorSet> tensor_sets(float* params, float* m, float* v) const {
    const size_t begin = zero() ? write_begin() : 0, end = zero() ? write_end() : SIZE_MAX;
    return {{SET_MODEL, params}, {SET_EXP_AVG, m, begin, end}, {SET_EXP_AVG_SQ, v, begin, end}};
  }
  void resume_from(const std::string& path);
  void init_from(const std::string& path);
  std::string save();
  double evaluate();
};

SyncTrainer::SyncTrainer(const World& world, const RunConfig& config, std::string config_ini, TrainLimits limits)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.world = world;
  s.cfg = config;
  s.config_ini = std::move(config_ini);
  s.limits = limits;
  const RunConfig& c = s.cfg;
  // The tokenizer first: a mismatch with the shards or the model is refused before any heavy work.
  s.tokenizer = checkpoint_tokenizer(*agree_run_tokenizer(world, c));
  s.tb = make_training_backend(world, c.training);
  if (!c.training.deterministic)
    log_info(
        "training.deterministic = false: GPU GEMMs may accumulate with atomics, so losses need not repeat "
        "bitwise");
  Backend& be = s.backend();
  // dist.timeout bounds every collective wait from here on: the communicator's and the host collectives'.
  world.watch->timeout_seconds = c.dist.timeout;
  s.comm = make_communicator(world, s.tb.device, c.training.comm, be);

  s.train_data = std::make_unique<DataLoader>(c.data.dir, "train", c.training.seq_len, c.model.vocab_size,
                                              c.training.seed, /*shuffle=*/true);
  s.evaluator = std::make_unique<Evaluator>(c);
  // The data is checked above; the model and optimizer, the large allocations, only once they are known to fit.
  require_memory("training", estimate_training_memory(c, world.size, be.matmul_precision()), be, world.local_size,
                 training_memory_hint());
  s.model = std::make_unique<GPT>(c.model, be, c.training.batch_size, c.training.seq_len, /*with_grads=*/true,
                                  c.training.recompute);
  const ParamTable& table = s.model->table();
  const size_t arena = s.model->arena_numel(), share = arena / size_t(world.size);
  s.shard_begin = share * size_t(world.rank);
  s.shard_end = s.shard_begin + share;
  if (s.zero()) {
    s.optimizer = std::make_unique<AdamW>(be, table, c.optimizer, s.shard_begin, s.shard_end);
    s.shard_grads = static_cast<float*>(be.alloc(share * sizeof(float)));
  } else {
    s.optimizer = std::make_unique<AdamW>(be, table, c.optimizer, 0, arena);
    if (world.size > 1) s.buckets = gradient_buckets(table, c.model.n_layer, arena, c.training.bucket_mb);
  }
  s.counted_bytes = log_model_memory(*s.model, *s.optimizer, be, s.zero() ? share * sizeof(float) : 0);
  log_info("world: %d rank(s) | data parallel%s | global batch %d x %d tokens x %d accumulation x %d ranks", world.size,
           s.zero() ? " + ZeRO-1" : "", c.training.batch_size, c.training.seq_len, c.training.grad_accum_steps,
           world.size);

  const std::string resume = choose_resume(world, c);
  const std::string init = choose_init_from(world, c, resume, s.tokenizer);
  if (!resume.empty()) {
    s.resume_from(resume);
  } else if (!init.empty()) {
    s.init_from(init);
  } else {
    s.model->init_weights(c.training.seed);
    log_info("starting from scratch (seed %llu)", (unsigned long long)c.training.seed);
  }
}

// Only the weights: step, tokens, data cursor, AdamW moments and its step count stay as a fresh start has them.
void SyncTrainer::State::init_from(const std::string& path) {
  std::vector<float> params(model->arena_numel(), 0.0f);
  load_init_weights(world, path, model->table(), params.data());
  backend().copy_to_device(model->params(), params.data(), params.size() * sizeof(float));
  log_info("starting from the weights of %s (checkpoint.init_from) at step 0, with a fresh optimizer and data order",
           path.c_str());
}

void SyncTrainer::State::resume_from(const std::string& path) {
  const RunConfig& c = cfg;
  Backend& be = backend();
  const ParamTable& table = model->table();
  std::vector<float> params(model->arena_numel(), 0.0f), m(optimizer->shard_end() - optimizer->shard_begin(), 0.0f),
      v(m.size(), 0.0f);
  CheckpointMeta meta;
  load_checkpoint(path, table, tensor_sets(params.data(), m.data(), v.data()), meta);
  check_resumable(path, meta, c);
  check_resume_tokenizer(path, meta, tokenizer);
  be.copy_to_device(model->params(), params.data(), params.size() * sizeof(float));
  be.copy_to_device(optimizer->exp_avg(), m.data(), m.size() * sizeof(float));
  be.copy_to_device(optimizer->exp_avg_sq(), v.data(), v.size() * sizeof(float));
  optimizer->set_step_count(int(meta.optimizer_step));
  step = meta.step;
  tokens_seen = meta.tokens_seen;
  const uint64_t cursor = meta.ranks.at(0).data_cursor;  // global: the same on every rank of a sync run
  train_data->set_cursor(cursor);
  if (meta.world_size != world.size)
    log_info(
        "notice: checkpoint written by %d rank(s), resuming on %d: parameters and optimizer state resharded, "
        "data continues at global sample %llu",
        meta.world_size, world.size, (unsigned long long)cursor);
  log_info("resumed from %s at step %lld (%lld tokens seen)", path.c_str(), (long long)meta.step,
           (long long)meta.tokens_seen);
}

// Each rank writes its share of every tensor.
std::string SyncTrainer::State::save() {
  const RunConfig& c = cfg;
  Backend& be = backend();
  std::vector<float> params(model->arena_numel()), m(optimizer->shard_end() - optimizer->shard_begin()), v(m.size());
  be.copy_to_host(params.data(), std::as_const(*model).params(), params.size() * sizeof(float));
  be.copy_to_host(m.data(), optimizer->exp_avg(), m.size() * sizeof(float));
  be.copy_to_host(v.data(), optimizer->exp_avg_sq(), v.size() * sizeof(float));
  CheckpointMeta meta = run_checkpoint_meta(c, config_ini, tokenizer);
  meta.step = step;
  meta.tokens_seen = tokens_seen;
  meta.world_size = world.size;
  meta.optimizer_step = optimizer->step_count();
  meta.lr = lr_at_step(c, std::max<int64_t>(step - 1, 0));
  meta.ranks.assign(size_t(world.size), CheckpointMeta::RankState{train_data->cursor(), 0});
  CheckpointContents contents;
  contents.sets = tensor_sets(params.data(), m.data(), v.data());
  contents.write_begin = write_begin();
  contents.write_end = write_end();
  return save_run_checkpoint(c, meta, model->table(), contents, world);
}

// Rank r evaluates batches r, r + N, ...; the sum is all-reduced.
double SyncTrainer::State::evaluate() {
  double sum = evaluator->loss_sum(*model, world.rank, world.size);
  comm->all_reduce(&sum, 1, REDUCE_OP_SUM);
  return sum / evaluator->batches();
}

SyncTrainer::~SyncTrainer() {
  if (s_ && s_->shard_grads) s_->backend().free(s_->shard_grads);
}

TrainResult SyncTrainer::run() {
  State& s = *s_;
  const RunConfig& c = s.cfg;
  const int B = c.training.batch_size, T = c.training.seq_len, A = c.training.grad_accum_steps;
  const int N = s.world.size, r = s.world.rank;
  const int64_t tokens_per_step = int64_t(B) * T * A * N;
  // A resume reads the metrics file (and cuts it back to the checkpoint's step) before the run counts as started, so
  // a file it cannot read stops the start with the run state as it was; a fresh start makes the file once the
  // earlier results are moved aside (on_start).
  std::unique_ptr<MetricsWriter> metrics;
  auto open_metrics = [&] {
    if (r == 0) metrics = std::make_unique<MetricsWriter>(c.run.dir + "/metrics.jsonl", s.step);
  };
  if (s.step > 0) open_metrics();
  if (s.limits.on_start) s.limits.on_start(s.step);
  if (s.step == 0) open_metrics();
  GPT& model = *s.model;
  Backend& be = s.backend();
  Communicator& comm = *s.comm;
  const size_t arena = model.arena_numel(), share = s.shard_end - s.shard_begin;
  TokenBatch batch(B, T);
  TrainResult result;
  result.step = s.step;
  install_stop_signal_handlers();

  // Bucketed all-reduce overlapped with backward: each bucket starts when its layers are final; every hook call
  // also tests the pending requests, because MPI progresses non-blocking collectives only inside MPI calls.
  std::vector<std::unique_ptr<PendingCollective>> pending;
  double first_launch = 0.0;
  std::function<void(int)> on_layer_done;
  if (!s.buckets.empty())
    on_layer_done = [&](int stage) {
      for (const GradientBucket& b : s.buckets)
        if (b.stage == stage) {
          if (pending.empty()) first_launch = now_seconds();
          pending.push_back(comm.all_reduce_async(model.grads() + b.begin, b.end - b.begin, REDUCE_OP_AVG));
        }
      for (auto& p : pending) p->test();
    };

  const double run_start = now_seconds();
  const int64_t first_step = s.step;
  StepClock clock(first_step, c.training.steps);
  while (s.step < c.training.steps) {
    s.world.watch->context = "step " + std::to_string(s.step + 1);
    const double t0 = now_seconds();
    double comm_ms = 0.0, exposed_ms = 0.0;
    const uint64_t cursor = s.train_data->cursor();
    double loss =
        accumulate_gradients(model, *s.train_data, batch, A, cursor + uint64_t(r) * B, uint64_t(N) * B, on_layer_done);
    s.train_data->set_cursor(cursor + uint64_t(A) * N * B);

    // Gradients: average over ranks, then the global norm (scalars reduced together with the loss and stop flag).
    float* grads = model.grads();
    size_t grad_n = arena;
    const double t_sync = now_seconds();
    if (s.zero()) {
      comm.reduce_scatter(model.grads(), s.shard_grads, share, REDUCE_OP_AVG);
      grads = s.shard_grads;
      grad_n = share;
    } else {
      for (auto& p : pending) p->wait();
      if (!pending.empty()) comm_ms += 1e3 * (now_seconds() - first_launch);
      pending.clear();
    }
    exposed_ms += 1e3 * (now_seconds() - t_sync);
    const bool out_of_time = s.limits.max_runtime > 0 && r == 0 && now_seconds() - run_start >= s.limits.max_runtime;
    double scalars[3] = {loss, s.zero() ? be.sum_squares(grads, grad_n) : 0.0,
                         double(stop_signal_received() != 0 || out_of_time)};
    const double t_scalars = now_seconds();
    comm.all_reduce(scalars, 3, REDUCE_OP_SUM);
    exposed_ms += 1e3 * (now_seconds() - t_scalars);
    loss = scalars[0] / N;
    const float grad_norm = float(std::sqrt(s.zero() ? scalars[1] : be.sum_squares(grads, grad_n)));
    const bool stop_requested = scalars[2] > 0.0;
    const float lr = apply_update(*s.optimizer, model.params(), grads, grad_norm, c, s.step);
    if (s.zero()) {
      // Every rank's updated shard to every rank, in place.
      const double t_gather = now_seconds();
      comm.all_gather(model.params() + s.shard_begin, model.params(), share);
      exposed_ms += 1e3 * (now_seconds() - t_gather);
    }
    if (s.zero() || N == 1) comm_ms = exposed_ms;  // nothing overlaps: all communication is exposed
    be.synchronize();
    const double dt = now_seconds() - t0;
    ++s.step;
    s.tokens_seen += tokens_per_step;
    if (s.step == first_step + 1) log_measured_memory(be, s.counted_bytes, s.tb.device.gpus_shared);
    require_finite_loss(loss, s.step, -1,
                        "lower optimizer.lr or raise optimizer.warmup_steps, then resume from the last checkpoint");
    clock.record(s.step, dt);
    const double tokens_per_s = tokens_per_step / dt;
    nlohmann::json rec = {{"step", s.step},
                          {"loss", loss},
                          {"lr", lr},
                          {"grad_norm", grad_norm},
                          {"tokens_per_s", tokens_per_s},
                          {"ms_per_step", 1e3 * dt},
                          {"tokens_seen", s.tokens_seen},
                          {"comm_ms", comm_ms},
                          {"comm_exposed_ms", exposed_ms},
                          {"elapsed_s", now_seconds() - run_start}};
    const bool limit_reached = s.limits.stop_after > 0 && s.step - first_step >= s.limits.stop_after;
    const bool last = s.step == c.training.steps || limit_reached || stop_requested;
    const bool save_due = (c.checkpoint.interval > 0 && s.step % c.checkpoint.interval == 0) || last;
    // A stop request saves first: under mpirun the ranks are killed about a second after SIGTERM, and the checkpoint
    // is what the requeued job resumes from. The validation comes after it.
    if (stop_requested) result.last_checkpoint = s.save();
    if ((c.eval.every > 0 && s.step % c.eval.every == 0) || last) {
      const double t1 = now_seconds();
      result.last_val_loss = s.evaluate();
      rec["val_loss"] = result.last_val_loss;
      log_info("step %lld | val loss %.4f | %.0f ms", (long long)s.step, result.last_val_loss,
               1e3 * (now_seconds() - t1));
    }
    if (metrics) metrics->write(rec);
    result.last_loss = loss;
    result.step = s.step;
    if (s.step % c.run.log_every == 0 || s.step == first_step + 1 || last)
      log_info(
          "step %5lld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.1f ms (comm %.1f, exposed %.1f) | "
          "eta %s",
          (long long)s.step, c.training.steps, loss, lr, grad_norm, tokens_per_s, 1e3 * dt, comm_ms, exposed_ms,
          format_hms(clock.eta_seconds(s.step)).c_str());
    if (save_due && !stop_requested) result.last_checkpoint = s.save();
    if (stop_requested && s.step < c.training.steps) {
      result.stopped_early = true;
      log_stopped_early(s.step);
    }
    if (last) break;
  }
  if (clock.timed_steps() > 0)
    log_info("trained %lld steps: %.0f tokens/s on average (%.1f ms/step)", (long long)(s.step - first_step),
             tokens_per_step / clock.mean_seconds(), 1e3 * clock.mean_seconds());
  return result;
}

}  // namespace ember
