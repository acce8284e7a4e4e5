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
#include "train/task_eval.h"

namespace ember {

struct SyncTrainer::State {
  World world;
  CheckpointTokenizer tokenizer;   // recorded in every checkpoint
  std::unique_ptr<TaskEval> task;  // eval.task's items, where it is set
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
  // Host copies of the weights and moments a save writes, made at the first save and reused (not where the host reads
  // them in place: a host-addressable backend, or moments offloaded to the host).
  std::unique_ptr<float[]> saved_params, saved_m, saved_v;

  // The loop's state (run()): the metrics file (rank 0), the all-reduces launched while backward runs, when this
  // invocation started and at which step.
  std::unique_ptr<MetricsWriter> metrics;
  std::vector<std::unique_ptr<PendingCollective>> pending;
  double first_launch = 0.0;  // when the first bucket of this step was launched
  std::function<void(int)> on_layer_done;
  double run_start = 0.0;
  int64_t first_step = 0;

  bool zero() const { return cfg.training.zero == 1; }
  Backend& backend() { return *tb.backend; }
  // The checkpoint range this rank writes: its share, clipped to the real parameters.
  size_t write_begin() const { return std::min(shard_begin, model->table().total_numel()); }
  size_t write_end() const { return std::min(shard_end, model->table().total_numel()); }

  // The checkpoint's tensor sets over host copies of the weights (whole arena, or with `params_as_moments` the
  // optimizer's range as the moments are: an offloaded optimizer's masters) and the moments (the whole arena, or under
  // ZeRO-1 this rank's shard).
  std::vector<TensorSet> tensor_sets(float* params, float* m, float* v, bool params_as_moments = false) const {
    const size_t begin = zero() ? write_begin() : 0, end = zero() ? write_end() : SIZE_MAX;
    const TensorSet weights =
        params_as_moments ? TensorSet{SET_MODEL, params, begin, end} : TensorSet{SET_MODEL, params};
    return {weights, {SET_EXP_AVG, m, begin, end}, {SET_EXP_AVG_SQ, v, begin, end}};
  }
  // Sets the model's weights and the optimizer's masters from a host arena.
  void load_weights(const float* host);
  void resume_from(const std::string& path);
  void init_from(const std::string& path);
  std::string save();
  void gather_weights();
  double evaluate();

  // What one optimizer step did, for its record and log line.
  struct StepStats {
    double loss = 0.0, comm_ms = 0.0, exposed_ms = 0.0, seconds = 0.0;
    float grad_norm = 0.0f, lr = 0.0f;
    bool stop_requested = false;
  };
  void start_metrics();
  void hook_buckets();
  StepStats train_step(TokenBatch& batch);
  // Records, evaluates, logs and saves after a step; true when the run ends with it.
  bool finish_step(const StepStats& st, const StepClock& clock, TrainResult& result);
  int64_t tokens_per_step() const {
    return int64_t(cfg.training.batch_size) * cfg.training.seq_len * cfg.training.grad_accum_steps * world.size;
  }
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
  const std::shared_ptr<const Tokenizer> text_tokenizer = agree_run_tokenizer(world, c);
  s.tokenizer = checkpoint_tokenizer(*text_tokenizer);
  if (c.eval.task) s.task = std::make_unique<TaskEval>(c, *text_tokenizer);
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
  s.evaluator = std::make_unique<Evaluator>(c, *text_tokenizer);
  // The data is checked above; the model and optimizer, the large allocations, only once they are known to fit.
  require_memory("training", estimate_training_memory(c, world.size, be.matmul_precision()), be, world.local_size,
                 training_memory_hint());
  s.model = std::make_unique<GPT>(c.model, be, c.training.batch_size, c.training.seq_len, /*with_grads=*/true,
                                  c.training.recompute, offload_weight_home(c, be.matmul_precision()));
  s.model->set_dither_seed(c.training.seed);
  const ParamTable& table = s.model->table();
  const size_t arena = s.model->arena_numel(), share = arena / size_t(world.size);
  s.shard_begin = share * size_t(world.rank);
  s.shard_end = s.shard_begin + share;
  if (s.zero()) {
    s.optimizer = std::make_unique<AdamW>(be, table, c.optimizer, s.shard_begin, s.shard_end, c.training.offload,
                                          /*handoff=*/false, s.model->device_weights());
    s.shard_grads = static_cast<float*>(be.alloc(share * sizeof(float)));
  } else {
    s.optimizer = std::make_unique<AdamW>(be, table, c.optimizer, 0, arena, c.training.offload,
                                          offload_hands_off(c, world.size), s.model->device_weights());
    if (world.size > 1) s.buckets = gradient_buckets(table, c.model.n_layer, arena, c.training.bucket_mb);
  }
  if (s.model->home() == WeightHome::host_dense) s.model->set_host_weight_copy(s.optimizer->host_bf16());
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
    s.load_weights(s.model->initial_weights(c.training.seed).data());
    log_info("starting from scratch (seed %llu)", (unsigned long long)c.training.seed);
  }
}

void SyncTrainer::State::load_weights(const float* host) {
  model->set_weights(host);
  optimizer->weights_loaded(host);
}

// Only the weights: step, tokens, data cursor, AdamW moments and its step count stay as a fresh start has them.
void SyncTrainer::State::init_from(const std::string& path) {
  std::vector<float> params(model->arena_numel(), 0.0f);
  load_init_weights(world, path, model->table(), params.data());
  load_weights(params.data());
  log_info("starting from the weights of %s (checkpoint.init_from) at step 0, with a fresh optimizer and data order",
           path.c_str());
}

void SyncTrainer::State::resume_from(const std::string& path) {
  const RunConfig& c = cfg;
  const ParamTable& table = model->table();
  std::vector<float> params(model->arena_numel(), 0.0f), m(optimizer->shard_end() - optimizer->shard_begin(), 0.0f),
      v(m.size(), 0.0f);
  CheckpointMeta meta;
  load_checkpoint(path, table, tensor_sets(params.data(), m.data(), v.data()), meta);
  check_resumable(path, meta, c);
  check_resume_tokenizer(path, meta, tokenizer);
  load_weights(params.data());
  optimizer->load_moments(m.data(), v.data());
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
  const std::string precision = matmul_precision_name(backend().matmul_precision());
  if (!meta.precision.empty() && meta.precision != precision)
    log_info(
        "notice: the checkpoint was trained in %s; this run goes on in %s (the fp32 masters and moments carry over)",
        meta.precision.c_str(), precision.c_str());
}

// Each rank writes its share of every tensor.
std::string SyncTrainer::State::save() {
  const RunConfig& c = cfg;
  Backend& be = backend();
  const size_t arena = model->arena_numel(), moments = optimizer->shard_end() - optimizer->shard_begin();
  const float* device_params = model->host_masters() ? nullptr : std::as_const(*model).params();
  // A save only reads the sets: arrays the host can read are written as they are, an offloaded optimizer's masters
  // (the weights, in the range this rank writes) among them.
  float *params = const_cast<float*>(device_params), *m = optimizer->exp_avg(), *v = optimizer->exp_avg_sq();
  const bool masters = optimizer->offloaded();
  if (masters)
    params = const_cast<float*>(optimizer->host_masters(device_params));
  else if (!be.host_addressable()) {
    if (!saved_params) saved_params = std::make_unique_for_overwrite<float[]>(arena);
    params = saved_params.get();
    be.copy_to_host(params, device_params, arena * sizeof(float));
  }
  if (!optimizer->moments_on_host()) {
    if (!saved_m) {
      saved_m = std::make_unique_for_overwrite<float[]>(moments);
      saved_v = std::make_unique_for_overwrite<float[]>(moments);
    }
    m = saved_m.get(), v = saved_v.get();
    optimizer->read_moments(m, v);
  }
  CheckpointMeta meta = run_checkpoint_meta(c, config_ini, tokenizer);
  meta.step = step;
  meta.tokens_seen = tokens_seen;
  meta.world_size = world.size;
  meta.precision = matmul_precision_name(be.matmul_precision());
  meta.optimizer_step = optimizer->step_count();
  meta.lr = lr_at_step(c, std::max<int64_t>(step - 1, 0));
  meta.ranks.assign(size_t(world.size), CheckpointMeta::RankState{train_data->cursor(), 0});
  CheckpointContents contents;
  contents.sets = tensor_sets(params, m, v, masters);
  contents.write_begin = write_begin();
  contents.write_end = write_end();
  return save_run_checkpoint(c, meta, model->table(), contents, world);
}

// ZeRO-1: every rank's updated shard to every rank, in place: the fp32 arena, or with host masters the bf16 copy and
// then each rank's packed fp32 tensors (a broadcast from each: the shards' packed parts differ in size).
void SyncTrainer::State::gather_weights() {
  GPT& m = *model;
  const size_t share = shard_end - shard_begin;
  if (!m.host_masters()) {
    comm->all_gather(m.params() + shard_begin, m.params(), share);
    return;
  }
  const DeviceWeights d = m.device_weights();
  // The bf16 pairs moved as floats, bits as they are: share is even (an aligned arena over a power-of-two world).
  comm->all_gather(reinterpret_cast<const float*>(d.bf16 + shard_begin), reinterpret_cast<float*>(d.bf16), share / 2);
  for (int r = 0; r < world.size; ++r) {
    const auto [p0, p1] = d.layout->range(share * size_t(r), share * size_t(r + 1));
    if (p1 > p0) comm->broadcast(d.fp32 + p0, (p1 - p0) * sizeof(float), r);
  }
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

// A resume reads the metrics file (and cuts it back to the checkpoint's step) before the run counts as started, so a
// file it cannot read stops the start with the run state as it was; a fresh start makes the file once the earlier
// results are moved aside (on_start).
void SyncTrainer::State::start_metrics() {
  auto open_metrics = [&] {
    if (world.rank == 0) metrics = std::make_unique<MetricsWriter>(cfg.run.dir + "/metrics.jsonl", step);
  };
  if (step > 0) open_metrics();
  if (limits.on_start) limits.on_start(step);
  if (step == 0) open_metrics();
}

// Bucketed all-reduce overlapped with backward: each bucket starts when its layers are final; every hook call also
// tests the pending requests, because MPI progresses non-blocking collectives only inside MPI calls.
void SyncTrainer::State::hook_buckets() {
  if (buckets.empty()) return;
  on_layer_done = [this](int stage) {
    for (const GradientBucket& b : buckets)
      if (b.stage == stage) {
        if (pending.empty()) first_launch = now_seconds();
        pending.push_back(comm->all_reduce_async(model->grads() + b.begin, b.end - b.begin, REDUCE_OP_AVG));
      }
    for (auto& p : pending) p->test();
  };
}

// Forward and backward over this rank's micro-batches, the gradients averaged over the ranks (with ZeRO-1 reduced
// onto each rank's shard), their global norm, the AdamW update and, with ZeRO-1, every shard to every rank.
SyncTrainer::State::StepStats SyncTrainer::State::train_step(TokenBatch& batch) {
  const RunConfig& c = cfg;
  const int B = c.training.batch_size, A = c.training.grad_accum_steps, N = world.size, r = world.rank;
  GPT& m = *model;
  Backend& be = backend();
  const size_t share = shard_end - shard_begin;
  StepStats st;
  world.watch->context = "step " + std::to_string(step + 1);
  const double t0 = now_seconds();
  const uint64_t cursor = train_data->cursor();
  // An offloaded optimizer takes each layer's gradients as the last micro-batch's backward finishes it.
  const std::function<void(int)> last_hook =
      optimizer->handoff_enabled() ? begin_handoff_step(*optimizer, m, c, step) : on_layer_done;
  double loss = accumulate_gradients(m, *train_data, batch, A, cursor + uint64_t(r) * B, uint64_t(N) * B, last_hook);
  train_data->set_cursor(cursor + uint64_t(A) * N * B);

  // Gradients: average over ranks, then the global norm (scalars reduced together with the loss and stop flag).
  float* grads = m.grads();
  size_t grad_n = m.arena_numel();
  const double t_sync = now_seconds();
  if (zero()) {
    comm->reduce_scatter(m.grads(), shard_grads, share, REDUCE_OP_AVG);
    grads = shard_grads;
    grad_n = share;
  } else {
    for (auto& p : pending) p->wait();
    if (!pending.empty()) st.comm_ms += 1e3 * (now_seconds() - first_launch);
    pending.clear();
  }
  st.exposed_ms += 1e3 * (now_seconds() - t_sync);
  const bool out_of_time = limits.max_runtime > 0 && r == 0 && now_seconds() - run_start >= limits.max_runtime;
  double scalars[3] = {loss, zero() ? be.sum_squares(grads, grad_n) : 0.0,
                       double(stop_signal_received() != 0 || out_of_time)};
  const double t_scalars = now_seconds();
  comm->all_reduce(scalars, 3, REDUCE_OP_SUM);
  st.exposed_ms += 1e3 * (now_seconds() - t_scalars);
  st.loss = scalars[0] / N;
  st.grad_norm = float(std::sqrt(zero() ? scalars[1] : be.sum_squares(grads, grad_n)));
  st.stop_requested = scalars[2] > 0.0;
  st.lr = apply_update(*optimizer, m.device_masters(), grads, st.grad_norm, c, step);
  if (zero()) {
    const double t_gather = now_seconds();
    gather_weights();
    st.exposed_ms += 1e3 * (now_seconds() - t_gather);
  }
  if (zero() || N == 1) st.comm_ms = st.exposed_ms;  // nothing overlaps: all communication is exposed
  be.synchronize();
  st.seconds = now_seconds() - t0;
  ++step;
  tokens_seen += tokens_per_step();
  if (step == first_step + 1) log_measured_memory(be, counted_bytes, tb.device.gpus_shared);
  require_finite_loss(st.loss, step, -1,
                      "lower optimizer.lr or raise optimizer.warmup_steps, then resume from the last checkpoint");
  return st;
}

bool SyncTrainer::State::finish_step(const StepStats& st, const StepClock& clock, TrainResult& result) {
  const RunConfig& c = cfg;
  const double tokens_per_s = double(tokens_per_step()) / st.seconds;
  nlohmann::json rec = {{"step", step},
                        {"loss", st.loss},
                        {"lr", st.lr},
                        {"grad_norm", st.grad_norm},
                        {"tokens_per_s", tokens_per_s},
                        {"ms_per_step", 1e3 * st.seconds},
                        {"tokens_seen", tokens_seen},
                        {"comm_ms", st.comm_ms},
                        {"comm_exposed_ms", st.exposed_ms},
                        {"elapsed_s", now_seconds() - run_start}};
  const bool limit_reached = limits.stop_after > 0 && step - first_step >= limits.stop_after;
  const bool last = step == c.training.steps || limit_reached || st.stop_requested;
  const bool save_due = (c.checkpoint.interval > 0 && step % c.checkpoint.interval == 0) || last;
  // A stop request saves first: under mpirun the ranks are killed about a second after SIGTERM, and the checkpoint is
  // what the requeued job resumes from. The validation comes after it.
  if (st.stop_requested) result.last_checkpoint = save();
  if ((c.eval.every > 0 && step % c.eval.every == 0) || last) {
    const double t1 = now_seconds();
    result.last_val_loss = evaluate();
    const double bpb = evaluator->bits_per_byte(result.last_val_loss);
    rec["val_loss"] = result.last_val_loss;
    rec["bits_per_byte"] = bpb;
    log_info("step %lld | val loss %.4f | %.4f bits/byte | %.0f ms", (long long)step, result.last_val_loss, bpb,
             1e3 * (now_seconds() - t1));
  }
  if (task && task->due(step, last)) {  // rank r scores items r, r + N, ...; the tallies add up
    const ChoiceTally mine = task->score(*model, world.rank, world.size);
    double sums[3] = {mine.items, mine.correct, mine.correct_norm};
    comm->all_reduce(sums, 3, REDUCE_OP_SUM);
    const ChoiceTally all{sums[0], sums[1], sums[2]};
    add_task_record(rec, task->name(), all);
    log_task(step, task->name(), all);
  }
  if (metrics) metrics->write(rec);
  result.last_loss = st.loss;
  result.step = step;
  if (step % c.run.log_every == 0 || step == first_step + 1 || last)
    log_info(
        "step %5lld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.1f ms (comm %.1f, exposed %.1f) | "
        "eta %s",
        (long long)step, c.training.steps, st.loss, st.lr, st.grad_norm, tokens_per_s, 1e3 * st.seconds, st.comm_ms,
        st.exposed_ms, format_hms(clock.eta_seconds(step)).c_str());
  if (save_due && !st.stop_requested) result.last_checkpoint = save();
  if (st.stop_requested && step < c.training.steps) {
    result.stopped_early = true;
    log_stopped_early(step);
  }
  return last;
}

TrainResult SyncTrainer::run() {
  State& s = *s_;
  const RunConfig& c = s.cfg;
  s.start_metrics();
  TokenBatch batch(c.training.batch_size, c.training.seq_len);
  TrainResult result;
  result.step = s.step;
  install_stop_signal_handlers();
  s.hook_buckets();
  s.run_start = now_seconds();
  s.first_step = s.step;
  StepClock clock(s.first_step, c.training.steps);
  while (s.step < c.training.steps) {
    const State::StepStats st = s.train_step(batch);
    clock.record(s.step, st.seconds);
    if (s.finish_step(st, clock, result)) break;
  }
  s.metrics.reset();
  if (clock.timed_steps() > 0)
    log_info("trained %lld steps: %.0f tokens/s on average (%.1f ms/step)", (long long)(s.step - s.first_step),
             double(s.tokens_per_step()) / clock.mean_seconds(), 1e3 * clock.mean_seconds());
  return result;
}

}  // namespace ember
