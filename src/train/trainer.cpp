// The Trainer (implementation). Order matters for "lose nothing": every input is opened and checked, and a resume
// checkpoint fully loaded, before the metrics file or any checkpoint is touched. Rank r of N takes micro-batch
// (m * N + r) of each global step, so N ranks see exactly the samples one rank with N times the accumulation would.
#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/data_loader.h"
#include "dist/comm_select.h"
#include "dist/communicator.h"
#include "dist/device_select.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/signals.h"

namespace ember {

namespace {

// A contiguous range of the gradient arena all-reduced as one message, launched once backward has finished the
// lowest layer it covers (stage as in GPT::set_backward_hook).
struct Bucket {
  size_t begin, end;
  int stage;
};

// Buckets from the last layer down, each at least bucket_bytes (the last may be smaller): layer l's parameters are
// contiguous in the arena and become final in the order n_layer-1, ..., 0, then wte and wpe (stage -1).
std::vector<Bucket> make_buckets(const ParamTable& table, int n_layer, size_t arena_numel, size_t bucket_floats) {
  std::vector<Bucket> buckets;
  size_t end = arena_numel;  // the first bucket also carries ln_f and the arena padding
  for (int l = n_layer - 1; l >= 0; --l) {
    const size_t begin = table.block(l, BlockParam(0)).offset;
    if (end - begin >= bucket_floats || l == 0) {
      buckets.push_back({begin, end, l});
      end = begin;
    }
  }
  buckets.push_back({0, end, -1});  // wte and wpe (and everything left when n_layer is 0)
  return buckets;
}

}  // namespace

struct Trainer::State {
  World world;
  RunConfig cfg;
  std::string config_ini;
  TrainLimits limits;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<GPT> model;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<DataLoader> train_data;
  std::unique_ptr<DataLoader> val_data;
  size_t shard_begin = 0, shard_end = 0;  // this rank's equal share of the arena (ZeRO-1 shard; checkpoint writes)
  float* shard_grads = nullptr;           // ZeRO-1: reduce-scattered gradients of the shard
  size_t counted_bytes = 0;               // backend memory counted at start-up (log_model_memory)
  bool gpu_shared = false;                // ranks share this GPU (EMBER_SHARE_GPU=1): its reported use counts theirs
  std::vector<Bucket> buckets;
  int64_t step = 0;  // optimizer steps completed
  int64_t tokens_seen = 0;
  std::vector<int32_t> inputs, targets;

  bool zero() const { return cfg.training.zero == 1; }
  // The checkpoint range this rank writes: its share, clipped to the real parameters.
  size_t write_begin() const { return std::min(shard_begin, model->table().total_numel()); }
  size_t write_end() const { return std::min(shard_end, model->table().total_numel()); }
};

Trainer::Trainer(const World& world, const RunConfig& config, std::string config_ini, TrainLimits limits)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.world = world;
  s.cfg = config;
  s.config_ini = std::move(config_ini);
  s.limits = limits;
  const RunConfig& c = s.cfg;
  if (c.training.threads > 0) omp_set_num_threads(c.training.threads);
  const DeviceChoice device = select_device(world, c.training.device);
  s.gpu_shared = device.gpus_shared;
  s.backend = make_backend(device);
  s.backend->set_matmul_precision(c.training.precision);
  s.backend->set_deterministic(c.training.deterministic);
  if (!c.training.deterministic)
    log_info(
        "training.deterministic = false: GPU GEMMs may accumulate with atomics, so losses need not repeat "
        "bitwise");
  s.comm = make_communicator(world, device, c.training.comm, *s.backend);

  s.train_data = std::make_unique<DataLoader>(c.data.dir, "train", c.training.seq_len, c.model.vocab_size,
                                              c.training.seed, /*shuffle=*/true);
  s.val_data = std::make_unique<DataLoader>(c.data.dir, "val", c.training.seq_len, c.model.vocab_size, c.training.seed,
                                            /*shuffle=*/false);
  Backend& be = *s.backend;
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
    if (world.size > 1)
      s.buckets = make_buckets(table, c.model.n_layer, arena, size_t(c.training.bucket_mb * 1048576.0 / 4.0));
  }
  s.counted_bytes = log_model_memory(*s.model, *s.optimizer, be, s.zero() ? share * sizeof(float) : 0);
  s.inputs.resize(size_t(c.training.batch_size) * c.training.seq_len);
  s.targets.resize(s.inputs.size());
  log_info("world: %d rank(s) | data parallel%s | global batch %d x %d tokens x %d accumulation x %d ranks", world.size,
           s.zero() ? " + ZeRO-1" : "", c.training.batch_size, c.training.seq_len, c.training.grad_accum_steps,
           world.size);

  // Rank 0 picks the checkpoint (falling back past damaged ones) so that every rank resumes from the same file.
  std::string resume;
  if (world.rank == 0) resume = resolve_resume(c.checkpoint_folder(), c.checkpoint.resume);
  uint64_t len = resume.size();
  s.comm->broadcast(&len, sizeof(len), 0);
  resume.resize(len);
  s.comm->broadcast(resume.data(), len, 0);
  if (resume.empty()) {
    s.model->init_weights(c.training.seed);
    log_info("starting from scratch (seed %llu)", (unsigned long long)c.training.seed);
    return;
  }
  std::vector<float> params(arena, 0.0f), m(s.optimizer->shard_end() - s.optimizer->shard_begin(), 0.0f),
      v(m.size(), 0.0f);
  CheckpointMeta meta;
  CheckpointTensors tensors{params.data(), m.data(), v.data(), 0, SIZE_MAX};
  if (s.zero()) tensors = {params.data(), m.data(), v.data(), s.write_begin(), s.write_end()};
  load_checkpoint(resume, table, tensors, meta);
  if (!(meta.model == c.model))
    throw_error("checkpoint " + resume + ": model config differs from the run's [model] section",
                "use the [model] settings the checkpoint was written with (see `ember inspect`) or start fresh");
  if (meta.step >= c.training.steps)
    throw_error("checkpoint " + resume + ": already at step " + std::to_string(meta.step) +
                    " of training.steps = " + std::to_string(c.training.steps),
                "raise training.steps to train further");
  be.copy_to_device(s.model->params(), params.data(), params.size() * sizeof(float));
  be.copy_to_device(s.optimizer->exp_avg(), m.data(), m.size() * sizeof(float));
  be.copy_to_device(s.optimizer->exp_avg_sq(), v.data(), v.size() * sizeof(float));
  s.optimizer->set_step_count(int(meta.optimizer_step));
  s.step = meta.step;
  s.tokens_seen = meta.tokens_seen;
  const uint64_t cursor = meta.ranks.at(0).data_cursor;  // global: the same on every rank of a sync run
  s.train_data->set_cursor(cursor);
  if (meta.world_size != world.size)
    log_info(
        "notice: checkpoint written by %d rank(s), resuming on %d: parameters and optimizer state resharded, "
        "data continues at global sample %llu",
        meta.world_size, world.size, (unsigned long long)cursor);
  log_info("resumed from %s at step %lld (%lld tokens seen)", resume.c_str(), (long long)meta.step,
           (long long)meta.tokens_seen);
}

size_t log_model_memory(const GPT& model, const AdamW& optimizer, const Backend& backend, size_t extra_bytes) {
  const double mib = 1.0 / 1048576.0;
  const size_t moments = 2 * (optimizer.shard_end() - optimizer.shard_begin()) * sizeof(float);
  const size_t total = model.weight_bytes() + moments + model.activation_bytes() + extra_bytes;
  char shard[64] = "";
  if (extra_bytes) snprintf(shard, sizeof(shard), ", ZeRO-1 gradient shard %.1f MiB", double(extra_bytes) * mib);
  log_info(
      "memory on %s: parameters + gradients%s %.1f MiB, AdamW moments %.1f MiB, activations %.1f MiB "
      "(recompute = %s, matmul precision %s)%s; %.1f MiB in all",
      backend.name().c_str(), model.bf16_storage() ? " + bf16 weight copy" : "", double(model.weight_bytes()) * mib,
      double(moments) * mib, double(model.activation_bytes()) * mib, recompute_name(model.recompute()),
      matmul_precision_name(backend.matmul_precision()).c_str(), shard, double(total) * mib);
  return total;
}

void log_measured_memory(const Backend& backend, size_t counted_bytes, bool gpu_shared) {
  const double mib = 1.0 / 1048576.0;
  char device[200] = "";
  size_t used = 0, total = 0;
  if (backend.device_memory(&used, &total))
    snprintf(device, sizeof(device),
             "; the device reports %.1f of %.1f MiB in use (CUDA context and library "
             "workspaces included%s)",
             double(used) * mib, double(total) * mib, gpu_shared ? ", and the other ranks sharing this GPU" : "");
  log_info("memory measured after the first step on %s: peak %.1f MiB allocated (%.1f MiB counted at start-up)%s",
           backend.name().c_str(), double(backend.peak_allocated_bytes()) * mib, double(counted_bytes) * mib, device);
}

Trainer::~Trainer() {
  if (s_ && s_->shard_grads) s_->backend->free(s_->shard_grads);
}

TrainResult Trainer::run() {
  State& s = *s_;
  const RunConfig& c = s.cfg;
  const int B = c.training.batch_size, T = c.training.seq_len, A = c.training.grad_accum_steps;
  const int N = s.world.size, r = s.world.rank;
  const int64_t tokens_per_step = int64_t(B) * T * A * N;
  std::unique_ptr<MetricsWriter> metrics;
  if (r == 0) metrics = std::make_unique<MetricsWriter>(c.run.dir + "/metrics.jsonl", s.step);
  GPT& model = *s.model;
  Backend& be = *s.backend;
  Communicator& comm = *s.comm;
  const ParamTable& table = model.table();
  const size_t arena = model.arena_numel(), share = s.shard_end - s.shard_begin;
  TrainResult result;
  result.step = s.step;
  install_stop_signal_handlers();

  auto save = [&]() {
    std::vector<float> params(arena), m(s.optimizer->shard_end() - s.optimizer->shard_begin()), v(m.size());
    be.copy_to_host(params.data(), std::as_const(model).params(), params.size() * sizeof(float));
    be.copy_to_host(m.data(), s.optimizer->exp_avg(), m.size() * sizeof(float));
    be.copy_to_host(v.data(), s.optimizer->exp_avg_sq(), v.size() * sizeof(float));
    CheckpointMeta meta;
    meta.step = s.step;
    meta.tokens_seen = s.tokens_seen;
    meta.world_size = N;
    meta.config_ini = s.config_ini;
    meta.model = c.model;
    meta.optimizer_step = s.optimizer->step_count();
    meta.beta1 = c.optimizer.beta1;
    meta.beta2 = c.optimizer.beta2;
    meta.eps = c.optimizer.eps;
    meta.weight_decay = c.optimizer.weight_decay;
    meta.lr = lr_at_step(c, std::max<int64_t>(s.step - 1, 0));
    meta.ranks.assign(size_t(N), CheckpointMeta::RankState{s.train_data->cursor(), 0});
    // Each rank writes its share of every tensor; m and v point at that share's first element.
    const size_t m_offset = s.zero() ? 0 : s.write_begin();
    const CheckpointTensors tensors{params.data(), m.data() + m_offset, v.data() + m_offset, s.write_begin(),
                                    s.write_end()};
    const double t0 = now_seconds();
    result.last_checkpoint =
        save_checkpoint(c.checkpoint_folder(), meta, table, tensors, c.checkpoint.keep_latest_k, s.world.comm);
    log_info("checkpoint %s (%.0f ms)", result.last_checkpoint.c_str(), 1e3 * (now_seconds() - t0));
  };

  // Validation: rank r evaluates batches r, r + N, ...; the sum is all-reduced.
  auto evaluate = [&]() {
    const uint64_t available = s.val_data->num_samples() / uint64_t(B);
    const int n = int(std::min<uint64_t>(uint64_t(c.eval.batches), std::max<uint64_t>(available, 1)));
    double sum = 0.0;
    for (int k = r; k < n; k += N) {
      s.val_data->batch_at(uint64_t(k) * B, s.inputs.data(), s.targets.data(), B);
      sum += model.forward(s.inputs.data(), s.targets.data(), B, T);
    }
    comm.all_reduce(&sum, 1, REDUCE_OP_SUM);
    return sum / n;
  };

  // Bucketed all-reduce overlapped with backward: each bucket starts when its layers are final; every hook call
  // also tests the pending requests, because MPI progresses non-blocking collectives only inside MPI calls.
  std::vector<std::unique_ptr<PendingCollective>> pending;
  double first_launch = 0.0;
  auto on_layer_done = [&](int stage) {
    for (const Bucket& b : s.buckets)
      if (b.stage == stage) {
        if (pending.empty()) first_launch = now_seconds();
        pending.push_back(comm.all_reduce_async(model.grads() + b.begin, b.end - b.begin, REDUCE_OP_AVG));
      }
    for (auto& p : pending) p->test();
  };

  const double run_start = now_seconds();
  const int64_t first_step = s.step;
  double elapsed_sum = 0.0;
  int64_t timed_steps = 0;
  while (s.step < c.training.steps) {
    const double t0 = now_seconds();
    double comm_ms = 0.0, exposed_ms = 0.0;
    model.zero_grad();
    double loss = 0.0;
    const uint64_t cursor = s.train_data->cursor();
    for (int m = 0; m < A; ++m) {
      s.train_data->batch_at(cursor + (uint64_t(m) * N + r) * B, s.inputs.data(), s.targets.data(), B);
      loss += model.forward(s.inputs.data(), s.targets.data(), B, T) / A;
      model.set_backward_hook(m == A - 1 && !s.buckets.empty() ? std::function<void(int)>(on_layer_done) : nullptr);
      model.backward(1.0f / float(A));
    }
    model.set_backward_hook(nullptr);
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
    clip_grads(be, grads, grad_n, grad_norm, c.training.max_norm);
    const float lr = lr_at_step(c, s.step);
    s.optimizer->step(model.params(), grads, lr);
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
    if (s.step == first_step + 1) log_measured_memory(be, s.counted_bytes, s.gpu_shared);
    if (!std::isfinite(loss))
      throw_error("training diverged at step " + std::to_string(s.step) + ": loss is " + std::to_string(loss),
                  "lower optimizer.lr or raise optimizer.warmup_steps, then resume from the last checkpoint");
    // The first step of an invocation pays for page faults and thread start-up; leave it out of the average.
    if (s.step > first_step + 1 || c.training.steps - first_step == 1) {
      elapsed_sum += dt;
      ++timed_steps;
    }
    const double avg = timed_steps > 0 ? elapsed_sum / timed_steps : dt;
    const double tokens_per_s = tokens_per_step / dt;
    nlohmann::json rec = {{"step", s.step},
                          {"loss", loss},
                          {"lr", lr},
                          {"grad_norm", grad_norm},
                          {"tokens_per_s", tokens_per_s},
                          {"ms_per_step", 1e3 * dt},
                          {"tokens_seen", s.tokens_seen},
                          {"comm_ms", comm_ms},
                          {"comm_exposed_ms", exposed_ms}};
    const bool limit_reached = s.limits.stop_after > 0 && s.step - first_step >= s.limits.stop_after;
    const bool last = s.step == c.training.steps || limit_reached || stop_requested;
    if ((c.eval.every > 0 && s.step % c.eval.every == 0) || last) {
      const double t1 = now_seconds();
      result.last_val_loss = evaluate();
      rec["val_loss"] = result.last_val_loss;
      log_info("step %lld | val loss %.4f | %.0f ms", (long long)s.step, result.last_val_loss,
               1e3 * (now_seconds() - t1));
    }
    if (metrics) metrics->write(rec);
    result.last_loss = loss;
    result.step = s.step;
    if (s.step % c.run.log_every == 0 || s.step == first_step + 1 || last) {
      const double eta = avg * double(c.training.steps - s.step);
      log_info(
          "step %5lld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.1f ms (comm %.1f, exposed %.1f) | "
          "eta %02d:%02d:%02d",
          (long long)s.step, c.training.steps, loss, lr, grad_norm, tokens_per_s, 1e3 * dt, comm_ms, exposed_ms,
          int(eta) / 3600, int(eta) / 60 % 60, int(eta) % 60);
    }
    if ((c.checkpoint.interval > 0 && s.step % c.checkpoint.interval == 0) || last) save();
    if (stop_requested && s.step < c.training.steps) {
      result.stopped_early = true;
      const int sig = stop_signal_received();
      log_info("stopping early at step %lld (%s): checkpoint written; rerun with --resume auto to continue",
               (long long)s.step,
               sig == SIGUSR1   ? "SIGUSR1"
               : sig == SIGTERM ? "SIGTERM"
                                : "stop request or --max-runtime");
    }
    if (last) break;
  }
  if (timed_steps > 0)
    log_info("trained %lld steps: %.0f tokens/s on average (%.1f ms/step)", (long long)(s.step - first_step),
             tokens_per_step / (elapsed_sum / timed_steps), 1e3 * elapsed_sum / timed_steps);
  return result;
}

}  // namespace ember
