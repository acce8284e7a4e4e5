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
#include "train/async/job.h"
#include "train/async/join.h"
#include "train/async/outer_optimizer.h"
#include "train/background_eval.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/signals.h"

namespace ember {
namespace {

int64_t next_multiple(int64_t step, int every) { return every > 0 ? (step / every + 1) * every : INT64_MAX; }

// Where the center starts: the version, tokens and samples a resume continues from (all 0 for a fresh start).
struct CenterStart {
  uint64_t version = 0, tokens = 0, samples = 0;
};

// Loads the resume checkpoint into the model and the outer optimizer's momentum; returns where it continues from. A
// sync checkpoint gives zero momentum and version 0.
CenterStart resume_center(AsyncJob& job, OuterOptimizer& outer) {
  GPT& model = *job.model;
  std::vector<float> params(model.arena_numel(), 0.0f);
  const bool async_file = job.meta.mode == TrainingMode::async;
  std::vector<TensorSet> sets = {{SET_MODEL, params.data()}};
  if (async_file) sets.push_back({SET_MOMENTUM, outer.momentum().data()});
  CheckpointMeta meta;
  load_checkpoint(job.resume, model.table(), sets, meta);
  job.backend->copy_to_device(model.params(), params.data(), params.size() * sizeof(float));
  const CenterStart at{async_file ? meta.async_version : 0, uint64_t(meta.tokens_seen), meta.ranks.at(0).data_cursor};
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
  log_info("resumed from %s at step %lld (%llu tokens seen, version %llu)", path, (long long)job.step_of(at.samples),
           (unsigned long long)at.tokens, (unsigned long long)at.version);
  return at;
}

// Resumes, or initialises the model's weights for a fresh start.
CenterStart start_center(AsyncJob& job, OuterOptimizer& outer) {
  if (!job.resume.empty()) return resume_center(job, outer);
  job.model->init_weights(job.c.training.seed);
  log_info("starting from scratch (seed %llu)", (unsigned long long)job.c.training.seed);
  return {};
}

// The model's weights on the host: the global parameters the center serves.
std::vector<float> host_weights(AsyncJob& job) {
  std::vector<float> global(job.model->table().total_numel());
  job.backend->copy_to_host(global.data(), std::as_const(*job.model).params(), global.size() * sizeof(float));
  return global;
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

// The center's loop and the state its phases share.
class CenterLoop {
 public:
  explicit CenterLoop(AsyncJob& job);
  TrainResult run();

 private:
  // The global samples done: trained and folded in, or skipped with a dropped worker. Never past the target: a worker
  // dropped while the run finishes may have counted a round it reserved past it, which no worker trains.
  uint64_t applied() const {
    return std::min(center_.tokens_applied() / uint64_t(job_.T) + watch_.skipped(), job_.target_samples);
  }
  int64_t step() const { return job_.step_of(applied()); }
  // True when a version taking in `tokens_after` tokens reaches the next checkpoint, the target or the step limit.
  bool boundary(uint64_t tokens_after) const;
  // Folds the messages taken (and those queued while a barrier was pending) into the next version(s).
  void fold(std::vector<AsyncMessage> taken);
  void log_progress();
  void evaluate_when_due();
  // Asks for the barrier that is due, or runs the one every worker has reached; true when the loop ends with it.
  bool barrier();
  void record_val(const BackgroundEval::Result& r);
  TrainResult finish();

  AsyncJob& job_;
  const RunConfig& c_;
  const size_t n_;
  OuterOptimizer outer_;
  const CenterStart begin_;    // where this start of the run begins
  std::vector<float> global_;  // the parameters the center serves
  std::unique_ptr<AsyncCenter> center_ptr_;
  AsyncCenter& center_;
  JoinDesk* desk_ = nullptr;
  WorkerWatch watch_;
  // The center evaluates alone, on a snapshot of the global parameters, in the background: it goes on serving.
  BackgroundEval eval_;
  MetricsWriter& metrics_;
  TrainResult result_;
  int64_t first_step_ = 0, next_eval_ = 0, next_ckpt_ = 0, next_log_ = 0;
  int64_t next_task_ = 0;  // eval.task goes with the first validation at or after it
  double start_ = 0.0;
  double loss_sum_ = 0.0;  // the workers' training losses since the last log line
  int loss_count_ = 0;
  uint64_t max_staleness_ = 0;
  std::vector<float> d_, update_;
  // A checkpoint holds exactly the deltas folded in up to its step: messages taken while a barrier is pending (the
  // workers go on training until they see it) wait here, and a version stops at the first message that reaches the
  // next checkpoint, the target or the step limit, so the barrier is asked for at that very step.
  std::deque<AsyncMessage> queued_;
};

CenterLoop::CenterLoop(AsyncJob& job)
    : job_(job),
      c_(job.c),
      n_(job.model->table().total_numel()),
      outer_(n_, job.c.async),
      begin_(start_center(job, outer_)),
      global_(host_weights(job)),
      center_ptr_(std::make_unique<AsyncCenter>(job.exchange->world().comm, job.shape, global_.data(), begin_.version,
                                                begin_.tokens, begin_.samples)),
      center_(*center_ptr_),
      watch_(job, center_),
      eval_(job.c, *job.text_tokenizer, job.task.get(), *job.model, *job.backend),
      metrics_(*job.metrics),
      d_(n_),
      update_(n_) {
  if (job.desk && !*job.desk) {  // the first pass: this launch's ranks alone
    const bool spans_hosts =
        std::any_of(job.hosts.begin(), job.hosts.end(), [&](const std::string& h) { return h != job.hosts[0]; });
    *job.desk = std::make_unique<JoinDesk>(c_, job.config_ini, spans_hosts);
  }
  desk_ = job.desk ? job.desk->get() : nullptr;
  first_step_ = job.step_of(begin_.samples);
  next_eval_ = next_multiple(first_step_, c_.eval.every);
  next_task_ = next_multiple(first_step_, c_.eval.task_every);
  next_ckpt_ = next_multiple(first_step_, c_.checkpoint.interval);
  next_log_ = next_multiple(first_step_, c_.run.log_every);
  start_ = now_seconds();
}

void CenterLoop::record_val(const BackgroundEval::Result& r) {
  result_.last_val_loss = r.loss;
  nlohmann::json rec = {{"step", r.step},
                        {"elapsed_s", r.elapsed_s},
                        {"tokens_seen", r.tokens_seen},
                        {"val_loss", r.loss},
                        {"bits_per_byte", r.bits_per_byte}};
  if (r.task) add_task_record(rec, job_.task->name(), *r.task);
  metrics_.write(rec);
  log_info("step %lld | val loss %.4f | %.4f bits/byte | %.0f ms", (long long)r.step, r.loss, r.bits_per_byte, r.ms);
  if (r.task) log_task(r.step, job_.task->name(), *r.task);
}

bool CenterLoop::boundary(uint64_t tokens_after) const {
  const uint64_t samples_after = tokens_after / uint64_t(job_.T) + watch_.skipped();
  const int64_t s = job_.step_of(samples_after);
  return s >= next_ckpt_ || samples_after >= job_.target_samples ||
         (job_.limits.stop_after > 0 && s - first_step_ >= job_.limits.stop_after);
}

void CenterLoop::fold(std::vector<AsyncMessage> taken) {
  for (AsyncMessage& m : taken) queued_.push_back(std::move(m));
  std::vector<AsyncMessage> msgs;
  for (uint64_t tokens_after = center_.tokens_applied(); !center_.barrier_pending() && !queued_.empty();) {
    tokens_after += queued_.front().tokens;
    msgs.push_back(std::move(queued_.front()));
    queued_.pop_front();
    if (boundary(tokens_after)) break;
  }
  if (msgs.empty()) return;
  outer_.begin_version();
  uint64_t msg_tokens = 0;
  nlohmann::json deltas = nlohmann::json::array();
  for (const AsyncMessage& m : msgs) {
    center_.decode(m, d_.data());
    const float wgt = outer_weight(m.tokens, m.staleness, job_.workers, job_.round_tokens());
    outer_.add_delta(d_.data(), wgt);
    msg_tokens += m.tokens;
    result_.last_loss = m.loss;
    loss_sum_ += m.loss;
    ++loss_count_;
    max_staleness_ = std::max(max_staleness_, m.staleness);
    deltas.push_back(
        {{"worker", job_.leader_rank(m.worker)}, {"staleness", m.staleness}, {"weight", wgt}, {"loss", m.loss}});
  }
  outer_.apply(global_.data(), update_.data());
  const uint64_t version = center_.publish(msg_tokens, msgs);
  const double minutes = (now_seconds() - start_) / 60.0;
  metrics_.write({{"step", step()},
                  {"elapsed_s", now_seconds() - start_},
                  {"version", version},
                  {"tokens_seen", center_.tokens_applied()},
                  {"deltas", deltas},
                  {"versions_per_min", minutes > 0 ? double(version - begin_.version) / minutes : 0.0},
                  {"bytes_ratio", double(center_.messages_taken()) * 4.0 * double(n_) /
                                      double(std::max<uint64_t>(center_.bytes_taken(), 1))}});
  if (c_.async.test_center_stall > 0 && version >= uint64_t(c_.async.test_center_stall)) {
    log_info("test: the center stops serving at version %llu (async.test_center_stall)", (unsigned long long)version);
    for (;;) sleep(60);  // no MPI call ever again: the workers must notice on their own
  }
}

void CenterLoop::log_progress() {
  const int64_t s = step();
  if (s < next_log_ || loss_count_ == 0) return;
  const double now = now_seconds();
  const double eta = s > first_step_ ? (now - start_) / double(s - first_step_) * double(c_.training.steps - s) : 0.0;
  log_info(
      "step %5lld/%d | loss %.4f | version %llu | %.0f versions/min | max staleness %llu | %.0f tok/s | "
      "eta %s",
      (long long)s, c_.training.steps, loss_sum_ / loss_count_, (unsigned long long)center_.version(),
      double(center_.version() - begin_.version) / std::max((now - start_) / 60.0, 1e-9),
      (unsigned long long)max_staleness_,
      double(center_.tokens_applied() - begin_.tokens) / std::max(now - start_, 1e-9), format_hms(eta).c_str());
  loss_sum_ = 0.0;
  loss_count_ = 0;
  max_staleness_ = 0;
  next_log_ = next_multiple(s, c_.run.log_every);
}

// One evaluation at a time: one that falls due while another runs starts when that one has ended.
void CenterLoop::evaluate_when_due() {
  if (std::optional<BackgroundEval::Result> r = eval_.poll()) record_val(*r);
  const int64_t s = step();
  if (s >= next_eval_ && applied() < job_.target_samples && !eval_.running()) {
    const bool task = c_.eval.task_every > 0 && s >= next_task_;
    eval_.start(global_.data(), n_, s, center_.tokens_applied(), now_seconds() - start_, task);
    next_eval_ = next_multiple(s, c_.eval.every);
    if (task) next_task_ = next_multiple(s, c_.eval.task_every);
  }
}

bool CenterLoop::barrier() {
  const int64_t s = step();
  if (!center_.barrier_pending()) {
    const bool out_of_time = job_.limits.max_runtime > 0 && now_seconds() - start_ >= job_.limits.max_runtime;
    const bool limit = job_.limits.stop_after > 0 && s - first_step_ >= job_.limits.stop_after;
    if (applied() >= job_.target_samples || limit)
      center_.request_barrier(AsyncBarrier::finish);
    else if (stop_signal_received() != 0 || out_of_time || center_.stop_requested())
      center_.request_barrier(AsyncBarrier::stop);
    else if (s >= next_ckpt_) {
      center_.request_barrier(AsyncBarrier::checkpoint);
      next_ckpt_ = next_multiple(s, c_.checkpoint.interval);
    } else if (desk_ && desk_->poll(job_.K)) {
      center_.request_barrier(AsyncBarrier::join);
    }
    return false;
  }
  if (!center_.barrier_reached()) return false;
  const AsyncBarrier kind = center_.barrier_kind();
  uint64_t counters[3] = {center_.version(), center_.tokens_applied(), applied()};
  center_.release_barrier();
  const double t0 = now_seconds();
  const World& members = job_.members_world(job_.world_ranks(center_.members()));
  result_.last_checkpoint =
      save_async(job_, members, global_.data(), outer_.momentum().data(), nullptr, nullptr, counters);
  watch_.excuse(t0);
  center_.end_barrier();
  if (kind == AsyncBarrier::join) {
    job_.joined = desk_->accept(members, result_.last_checkpoint, c_.dist.timeout);
    return job_.joined.has_value();
  }
  if (kind == AsyncBarrier::checkpoint) return false;
  result_.stopped_early = kind == AsyncBarrier::stop && applied() < job_.target_samples;
  return true;
}

TrainResult CenterLoop::finish() {
  result_.step = step();
  if (std::optional<BackgroundEval::Result> r = eval_.wait()) record_val(*r);
  if (center_.live_workers() < job_.workers) leave_job();  // MPI_Finalize would wait for the dropped workers
  if (job_.joined) {
    log_info("async center: %d worker(s) and the ranks taken in start again from %s", center_.live_workers(),
             result_.last_checkpoint.c_str());
    return result_;
  }
  eval_.start(global_.data(), n_, result_.step, center_.tokens_applied(), now_seconds() - start_, /*with_task=*/true);
  record_val(*eval_.wait());
  const double minutes = (now_seconds() - start_) / 60.0;
  const uint64_t versions = center_.version() - begin_.version;
  log_info("center: %llu versions in %.1f min (%.0f/min), %llu deltas, %.1fx fewer bytes than fp32 deltas",
           (unsigned long long)versions, minutes, double(versions) / minutes,
           (unsigned long long)center_.messages_taken(),
           double(center_.messages_taken()) * 4.0 * double(n_) / double(std::max<uint64_t>(center_.bytes_taken(), 1)));
  if (result_.stopped_early) log_stopped_early(result_.step);
  return result_;
}

TrainResult CenterLoop::run() {
  install_stop_signal_handlers();
  for (;;) {
    std::vector<AsyncMessage> taken = center_.take();
    const bool took = !taken.empty();
    watch_.check();
    fold(std::move(taken));
    log_progress();
    evaluate_when_due();
    if (barrier()) break;
    if (!took) usleep(200);
  }
  return finish();
}

}  // namespace

TrainResult run_center(AsyncJob& job) {
  CenterLoop loop(job);
  return loop.run();
}

}  // namespace ember
