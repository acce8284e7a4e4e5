// The async center (rank 0): loops on the exchange window (so one-sided traffic always progresses), folds each delta
// in with the outer optimizer, publishes versions, evaluates, and decides barriers: periodic checkpoints, a stop
// (signal, --max-runtime, a worker's request) or the finish. A worker silent for async.worker_timeout is dropped and
// the job goes on without it.
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "train/async_job.h"
#include "train/async_join.h"
#include "train/background_eval.h"
#include "train/metrics.h"
#include "train/outer_optimizer.h"
#include "train/progress.h"
#include "train/signals.h"

namespace ember {
namespace {

int64_t next_multiple(int64_t step, int every) { return every > 0 ? (step / every + 1) * every : INT64_MAX; }

// Loads the resume checkpoint into the model and the outer optimizer's momentum; returns the counters
// (version, tokens, samples) it continues from. A sync checkpoint gives zero momentum and version 0.
void resume_center(AsyncJob& job, OuterOptimizer& outer, uint64_t& version, uint64_t& tokens, uint64_t& samples) {
  GPT& model = *job.model;
  std::vector<float> params(model.arena_numel(), 0.0f);
  const bool async_file = job.meta.mode == TrainingMode::async;
  std::vector<TensorSet> sets = {{SET_MODEL, params.data()}};
  if (async_file) sets.push_back({SET_MOMENTUM, outer.momentum().data()});
  CheckpointMeta meta;
  load_checkpoint(job.resume, model.table(), sets, meta);
  job.backend->copy_to_device(model.params(), params.data(), params.size() * sizeof(float));
  tokens = uint64_t(meta.tokens_seen);
  samples = meta.ranks.at(0).data_cursor;
  version = async_file ? meta.async_version : 0;
  const int old_workers = async_file ? meta.world_size - 1 : 0;  // worker ranks, as `workers` below
  const int workers = job.world.size - 1;
  const char* path = job.resume.c_str();
  if (!async_file)
    log_info(
        "notice: %s was written in %s mode: the workers start with fresh AdamW state, the center with zero "
        "momentum",
        path, training_mode_name(meta.mode));
  else if (old_workers < workers)
    log_info(
        "notice: %s holds the state of %d worker(s); worker rank(s) %d..%d start with fresh AdamW state and "
        "a zero error-feedback residual",
        path, old_workers, old_workers + 1, workers);
  else if (old_workers > workers)
    log_info(
        "notice: %s holds the state of %d workers; %d resume theirs, the state of worker rank(s) %d..%d is "
        "dropped (what their residuals still owed is lost)",
        path, old_workers, workers, workers + 1, old_workers);
  log_info("resumed from %s at step %lld (%llu tokens seen, version %llu)", path, (long long)job.step_of(samples),
           (unsigned long long)tokens, (unsigned long long)version);
}

// Drops workers that gave no sign of life for async.worker_timeout: the center takes nothing of them any more, and no
// barrier waits for them. The samples a dropped worker had reserved but never delivered (its round in flight) are
// skipped: they count towards the run's end as sync training counts a step, so the run still ends where it would.
class WorkerWatch {
 public:
  WorkerWatch(AsyncJob& job, AsyncCenter& center)
      : job_(job), center_(center), seen_(size_t(job.workers), now_seconds()), beat_(size_t(job.workers), 0) {}

  // After each take().
  void check() {
    const double now = now_seconds();
    for (int w = 0; w < job_.workers; ++w) {
      if (center_.dropped(w)) continue;
      const size_t k = size_t(w);
      if (center_.heartbeat(w) != beat_[k]) {
        beat_[k] = center_.heartbeat(w);
        seen_[k] = now;
      } else if (now - seen_[k] > job_.c.async.worker_timeout) {
        drop(w, now - seen_[k]);
      }
    }
  }

  // The center was busy elsewhere (saving) since `since`: the workers could not reach it meanwhile, so
  // that time counts for none of them.
  void excuse(double since) {
    const double away = now_seconds() - since;
    for (double& t : seen_) t += away;
  }

  // Samples reserved by dropped workers and never delivered.
  uint64_t skipped() const { return skipped_; }

 private:
  void drop(int w, double silent) {
    center_.drop(w);
    const uint64_t delivered = center_.tokens_taken(w) / uint64_t(job_.T);
    const uint64_t lost = center_.reserved(w) - std::min(center_.reserved(w), delivered);
    skipped_ += lost;
    const int rank = job_.leader_rank(w);
    const std::string group =
        job_.K > 1 ? " (the group of ranks " + std::to_string(rank) + ".." + std::to_string(rank + job_.K - 1) + ")"
                   : "";
    log_warn(
        "async center: worker rank %d%s on %s gave no sign of life for %.0f s (async.worker_timeout = %g s): "
        "dropped; %d worker(s) go on, and the %llu samples of its round in flight are skipped",
        rank, group.c_str(), job_.hosts.at(size_t(rank)).c_str(), silent, double(job_.c.async.worker_timeout),
        center_.live_workers(), (unsigned long long)lost);
    if (center_.live_workers() == 0) {
      leave_job();
      throw_error("async center: every worker is lost (the last, rank " + std::to_string(rank) + " on " +
                      job_.hosts.at(size_t(rank)) + ", after " + std::to_string(int(silent)) +
                      " s without a sign of life): nothing is left to train",
                  "bring the workers' hosts back, then resume with --resume auto from the last checkpoint");
    }
  }

  AsyncJob& job_;
  AsyncCenter& center_;
  std::vector<double> seen_;    // per worker: when its heartbeat last changed
  std::vector<uint64_t> beat_;  // per worker: its heartbeat then
  uint64_t skipped_ = 0;
};

}  // namespace

TrainResult run_center(AsyncJob& job) {
  const RunConfig& c = job.c;
  GPT& model = *job.model;
  Backend& be = *job.backend;
  const size_t n = model.table().total_numel();
  TrainResult result;
  OuterOptimizer outer(n, c.async);
  uint64_t version = 0, tokens = 0, samples = 0;
  if (!job.resume.empty()) {
    resume_center(job, outer, version, tokens, samples);
  } else {
    model.init_weights(c.training.seed);
    log_info("starting from scratch (seed %llu)", (unsigned long long)c.training.seed);
  }
  std::vector<float> global(n);
  be.copy_to_host(global.data(), std::as_const(model).params(), n * sizeof(float));
  AsyncCenter center(job.exchange->world().comm, job.shape, global.data(), version, tokens, samples);
  if (job.desk && !*job.desk) {  // the first pass: this launch's ranks alone
    const bool spans_hosts =
        std::any_of(job.hosts.begin(), job.hosts.end(), [&](const std::string& h) { return h != job.hosts[0]; });
    *job.desk = std::make_unique<JoinDesk>(c, job.config_ini, spans_hosts);
  }
  JoinDesk* desk = job.desk ? job.desk->get() : nullptr;
  WorkerWatch watch(job, center);

  // The center evaluates alone, on a snapshot of the global parameters, in the background: it goes on serving.
  BackgroundEval eval(c, model, be);
  auto record_val = [&](const BackgroundEval::Result& r, MetricsWriter& metrics) {
    result.last_val_loss = r.loss;
    metrics.write({{"step", r.step}, {"elapsed_s", r.elapsed_s}, {"tokens_seen", r.tokens_seen}, {"val_loss", r.loss}});
    log_info("step %lld | val loss %.4f | %.0f ms", (long long)r.step, r.loss, r.ms);
  };

  const int64_t first_step = job.step_of(samples);
  MetricsWriter metrics(async_metrics_path(c, 0), first_step);
  int64_t next_eval = next_multiple(first_step, c.eval.every);
  int64_t next_ckpt = next_multiple(first_step, c.checkpoint.interval);
  int64_t next_log = next_multiple(first_step, c.run.log_every);
  const uint64_t first_version = version;
  const double start = now_seconds();
  double loss_sum = 0.0;
  int loss_count = 0;
  uint64_t max_staleness = 0;
  std::vector<float> d(n), update(n);
  install_stop_signal_handlers();

  // A checkpoint holds exactly the deltas folded in up to its step: messages taken while a barrier is pending (the
  // workers go on training until they see it) wait in `queued`, and a version stops at the first message that
  // reaches the next checkpoint, the target or the step limit, so the barrier is asked for at that very step.
  std::deque<AsyncMessage> queued;
  auto boundary = [&](uint64_t tokens_after) {
    const uint64_t samples_after = tokens_after / uint64_t(job.T) + watch.skipped();
    const int64_t s = job.step_of(samples_after);
    return s >= next_ckpt || samples_after >= job.target_samples ||
           (job.limits.stop_after > 0 && s - first_step >= job.limits.stop_after);
  };

  for (;;) {
    std::vector<AsyncMessage> taken = center.take();
    const bool took = !taken.empty();
    watch.check();
    for (AsyncMessage& m : taken) queued.push_back(std::move(m));
    std::vector<AsyncMessage> msgs;
    for (uint64_t tokens_after = center.tokens_applied(); !center.barrier_pending() && !queued.empty();) {
      tokens_after += queued.front().tokens;
      msgs.push_back(std::move(queued.front()));
      queued.pop_front();
      if (boundary(tokens_after)) break;
    }
    if (!msgs.empty()) {
      outer.begin_version();
      uint64_t msg_tokens = 0;
      nlohmann::json deltas = nlohmann::json::array();
      for (const AsyncMessage& m : msgs) {
        center.decode(m, d.data());
        const float wgt = outer_weight(m.tokens, m.staleness, job.workers, job.round_tokens());
        outer.add_delta(d.data(), wgt);
        msg_tokens += m.tokens;
        result.last_loss = m.loss;
        loss_sum += m.loss;
        ++loss_count;
        max_staleness = std::max(max_staleness, m.staleness);
        deltas.push_back(
            {{"worker", job.leader_rank(m.worker)}, {"staleness", m.staleness}, {"weight", wgt}, {"loss", m.loss}});
      }
      outer.apply(global.data(), update.data());
      version = center.publish(msg_tokens, msgs);
      const double minutes = (now_seconds() - start) / 60.0;
      const int64_t step = job.step_of(center.tokens_applied() / uint64_t(job.T) + watch.skipped());
      metrics.write({{"step", step},
                     {"elapsed_s", now_seconds() - start},
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
    // The global samples done: trained and folded in, or skipped with a dropped worker.
    const uint64_t applied = center.tokens_applied() / uint64_t(job.T) + watch.skipped();
    const int64_t step = job.step_of(applied);
    if (step >= next_log && loss_count > 0) {
      const double now = now_seconds();
      const double eta =
          step > first_step ? (now - start) / double(step - first_step) * double(c.training.steps - step) : 0.0;
      log_info(
          "step %5lld/%d | loss %.4f | version %llu | %.0f versions/min | max staleness %llu | %.0f tok/s | "
          "eta %s",
          (long long)step, c.training.steps, loss_sum / loss_count, (unsigned long long)version,
          double(version - first_version) / std::max((now - start) / 60.0, 1e-9), (unsigned long long)max_staleness,
          double(center.tokens_applied() - tokens) / std::max(now - start, 1e-9), format_hms(eta).c_str());
      loss_sum = 0.0;
      loss_count = 0;
      max_staleness = 0;
      next_log = next_multiple(step, c.run.log_every);
    }
    // One evaluation at a time: one that falls due while another runs starts when that one has ended.
    if (std::optional<BackgroundEval::Result> r = eval.poll()) record_val(*r, metrics);
    if (step >= next_eval && applied < job.target_samples && !eval.running()) {
      eval.start(global.data(), n, step, center.tokens_applied(), now_seconds() - start);
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
      } else if (desk && desk->poll(job.K)) {
        center.request_barrier(AsyncBarrier::join);
      }
    } else if (center.barrier_reached()) {
      const AsyncBarrier kind = center.barrier_kind();
      uint64_t counters[3] = {version, center.tokens_applied(), applied};
      center.release_barrier();
      const double t0 = now_seconds();
      const World& members = job.members_world(job.world_ranks(center.members()));
      result.last_checkpoint =
          save_async(job, members, global.data(), outer.momentum().data(), nullptr, nullptr, counters);
      watch.excuse(t0);
      center.end_barrier();
      if (kind == AsyncBarrier::join) {
        job.joined = desk->accept(members, result.last_checkpoint, c.dist.timeout);
        if (job.joined) break;
        continue;
      }
      if (kind != AsyncBarrier::checkpoint) {
        result.stopped_early = kind == AsyncBarrier::stop && applied < job.target_samples;
        break;
      }
    }
    if (!took) usleep(200);
  }
  result.step = job.step_of(center.tokens_applied() / uint64_t(job.T) + watch.skipped());
  if (std::optional<BackgroundEval::Result> r = eval.wait()) record_val(*r, metrics);
  if (center.live_workers() < job.workers) leave_job();  // MPI_Finalize would wait for the dropped workers
  if (job.joined) {
    log_info("async center: %d worker(s) and the ranks taken in start again from %s", center.live_workers(),
             result.last_checkpoint.c_str());
    return result;
  }
  eval.start(global.data(), n, result.step, center.tokens_applied(), now_seconds() - start);
  record_val(*eval.wait(), metrics);
  const double minutes = (now_seconds() - start) / 60.0;
  log_info("center: %llu versions in %.1f min (%.0f/min), %llu deltas, %.1fx fewer bytes than fp32 deltas",
           (unsigned long long)(version - first_version), minutes, double(version - first_version) / minutes,
           (unsigned long long)center.messages_taken(),
           double(center.messages_taken()) * 4.0 * double(n) / double(std::max<uint64_t>(center.bytes_taken(), 1)));
  if (result.stopped_early) log_stopped_early(result.step);
  return result;
}

}  // namespace ember
