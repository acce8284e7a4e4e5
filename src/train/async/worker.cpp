// An async worker (ranks 1..N): runs rounds of reserve samples, train async.local_steps local steps, fetch, send the
// 1-bit delta and rebase; at a barrier the center announces it joins the collective checkpoint save. A worker the
// center dropped (it was silent too long) leaves the job on its own.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/data_loader.h"
#include "parallel/host_collectives.h"
#include "train/adamw.h"
#include "train/async/job.h"
#include "train/async/join.h"
#include "train/async/outer_optimizer.h"
#include "train/local_step.h"
#include "train/metrics.h"
#include "train/run_setup.h"
#include "train/signals.h"

namespace ember {
namespace {

// Loads this worker's AdamW moments and error-feedback residual from an async resume checkpoint; returns the residual
// (empty when the file holds no state for this rank, which then starts fresh).
std::vector<float> resume_worker(AsyncJob& job, AdamW& adam) {
  const int rank = job.world.rank;
  const ParamTable& table = job.model->table();
  const size_t n = table.total_numel(), flat = table.unpadded_numel();
  if (job.resume.empty() || job.meta.mode != TrainingMode::async) return {};
  // The file's flat arrays leave the vocabulary padding out (ParamTable::to_unpadded).
  std::vector<float> fm(flat), fv(flat), fr(flat), m(n), v(n), residual(n);
  const std::vector<std::string> names = async_worker_arrays();
  if (!load_rank_arrays(job.resume, rank,
                        {{names[0], fm.data(), flat}, {names[1], fv.data(), flat}, {names[2], fr.data(), flat}}))
    return {};
  table.from_unpadded(fm.data(), m.data());
  table.from_unpadded(fv.data(), v.data());
  table.from_unpadded(fr.data(), residual.data());
  adam.load_moments(m.data(), v.data());
  adam.set_step_count(int(job.meta.ranks.at(size_t(rank)).optimizer_step));
  return residual;
}

// What a worker the center dropped reports as it leaves: the run goes on without it.
[[noreturn]] void dropped(const AsyncJob& job) {
  leave_job();  // MPI_Abort would end the job that goes on without this worker
  throw_error("async worker rank " + std::to_string(job.world.rank) + " on " + job.world.host +
                  ": the center dropped this worker, which gave no sign of life for async.worker_timeout = " +
                  std::to_string(int(job.c.async.worker_timeout)) +
                  " s (it was frozen, or its link was down); the run goes on without it",
              "nothing is lost but this worker's last round; if its host is sound again, start it into the next run "
              "(--resume auto), or raise async.worker_timeout when rounds are slow");
}

// What a group's leader tells its other ranks at the top of each pass (K > 1): what they do next.
enum class GroupStep : uint64_t { idle = 0, train = 1, barrier = 2 };

// A 64-bit FNV-1a of n floats' bytes: the group's replicas compare their parameters at every checkpoint.
uint64_t params_hash(const float* x, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const uint8_t*>(x);
  for (size_t i = 0; i < n * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// Every rank of the group holds the same parameters (they take the same averaged gradients): checked at each
// checkpoint, so that a divergence is found where it starts.
void require_same_replicas(const AsyncJob& job, const float* params, size_t n) {
  const World& group = job.group->world();
  const uint64_t mine = params_hash(params, n);
  const std::vector<uint64_t> all = all_gather_values(group, &mine, 1);
  for (int r = 1; r < group.size; ++r)
    if (all[size_t(r)] != all[0])
      throw_error("async worker group of ranks " + std::to_string(job.world.rank - group.rank) + "..: rank " +
                      std::to_string(job.world.rank - group.rank + r) + "'s parameters differ from its leader's",
                  "the ranks of a group must train identically: check that they run the same build on the same kind "
                  "of device, and set training.deterministic = true");
}

// One worker's rounds. The leader of a group (K > 1) decides each next step and the group's other ranks follow what
// it broadcasts; with K = 1 every worker rank is a leader of its own.
class WorkerLoop {
 public:
  explicit WorkerLoop(AsyncJob& job);
  TrainResult run();

 private:
  // What the group does next: {what, first sample, samples, barrier kind}, decided by the leader.
  struct Next {
    GroupStep what = GroupStep::idle;
    uint64_t first = 0, count = 0;
    AsyncBarrier kind = AsyncBarrier::none;
  };
  Next decide();
  // Joins the barrier's collective checkpoint; true when the loop ends with it (a stop, the finish, a join).
  bool barrier(AsyncBarrier kind);
  // Trains `count` samples from `first` as local steps; the leader then fetches, sends the delta and rebases.
  void train_round(uint64_t first, uint64_t count);
  void send_and_rebase(uint64_t first, int steps, double loss_sum, float lr);
  void broadcast_moments();  // the leader's AdamW moments to its group

  AsyncJob& job_;
  const RunConfig& c_;
  const int rank_, K_;
  const bool leader_;
  const World& group_;
  GPT& model_;
  Backend& be_;
  const size_t n_, arena_;
  AdamW adam_;
  size_t counted_bytes_ = 0;
  DataLoader train_;
  TokenBatch batch_;
  std::unique_ptr<AsyncWorker> exchange_;  // the leader's: only the leader reaches the center
  AsyncWorker* ex_ = nullptr;
  std::unique_ptr<MetricsWriter> metrics_;
  // base: the published parameters as of the last fetch. origin: where this round starts, base plus this worker's
  // own deltas the center has not folded into it (always the newest: it is sent just after the fetch), so a worker
  // never trains from parameters that lack its own last round. A group's other ranks hold origin on the device only.
  std::vector<float> base_, origin_, x_, delta_;
  AsyncWorker::Published p_{};
  uint64_t acked_ = 0;
  const uint64_t step_samples_;  // one local step of the group
  const bool slow_;
  bool reserving_ = true, stop_sent_ = false;
  double train_seconds_ = 0.0, blocked_seconds_ = 0.0, t_round_ = 0.0, blocked_before_ = 0.0;
  int64_t round_ = 0;
  const double sign_interval_;
  double last_sign_ = 0.0;
  // Within a group: each local step's gradients are averaged over its ranks, in buckets launched while backward
  // still runs (as sync training does), before the AdamW update every rank takes alike.
  std::vector<std::unique_ptr<PendingCollective>> pending_;
  std::function<void(int)> on_layer_done_;
  std::vector<GradientBucket> buckets_;
  TrainResult result_;
};

OptimizerConfig inner_optimizer(const RunConfig& c) {  // sync's AdamW with async.inner_beta1
  OptimizerConfig inner = c.optimizer;
  inner.beta1 = c.async.inner_beta1;
  return inner;
}

WorkerLoop::WorkerLoop(AsyncJob& job)
    : job_(job),
      c_(job.c),
      rank_(job.world.rank),
      K_(job.K),
      leader_(job.leader()),
      group_(job.group->world()),
      model_(*job.model),
      be_(*job.backend),
      n_(model_.table().total_numel()),
      arena_(model_.arena_numel()),
      adam_(be_, model_.table(), inner_optimizer(job.c), 0, arena_, job.c.training.offload,
            offload_hands_off(job.c, 1)),
      train_(c_.data.dir, "train", job.T, c_.model.vocab_size, c_.training.seed, /*shuffle=*/true),
      batch_(job.B, job.T),
      base_(n_),
      origin_(n_),
      x_(n_),
      delta_(n_),
      step_samples_(uint64_t(job.A) * job.B * job.K),
      slow_(c_.async.test_slow_worker == rank_ && c_.async.test_slowdown > 1.0f),
      sign_interval_(std::min(1.0, double(c_.async.worker_timeout) / 8)) {
  counted_bytes_ = log_model_memory(model_, adam_, be_);
  const std::vector<float> residual = resume_worker(job, adam_);
  if (K_ > 1) {  // a group's ranks start alike, whatever the file held for each of them: from the leader's state
    broadcast_moments();
    uint64_t steps = uint64_t(adam_.step_count());
    broadcast_values(group_, &steps, 1, 0);
    adam_.set_step_count(int(steps));
  }
  if (leader_) {
    exchange_ = std::make_unique<AsyncWorker>(job.exchange->world().comm, job.shape, job.exchange->world().rank,
                                              c_.async.center_timeout);
    if (!residual.empty()) exchange_->feedback().set_residual(residual.data());
    ex_ = exchange_.get();
    p_ = ex_->fetch(base_.data());
    if (p_.dropped) dropped(job);
    be_.copy_to_device(model_.params(), base_.data(), n_ * sizeof(float));
  }
  uint64_t start[2] = {p_.barrier_seq, p_.tokens_applied};
  broadcast_values(group_, start, 2, 0);
  if (K_ > 1) job.group_comm->broadcast(model_.params(), n_ * sizeof(float), 0);
  origin_ = base_;
  acked_ = start[0];
  if (leader_)
    metrics_ = std::make_unique<MetricsWriter>(async_metrics_path(c_, rank_), job.step_of(start[1] / uint64_t(job.T)));
  last_sign_ = now_seconds();
  if (K_ > 1) {
    buckets_ = gradient_buckets(model_.table(), c_.model.n_layer, arena_, c_.training.bucket_mb);
    on_layer_done_ = [this](int stage) {
      for (const GradientBucket& b : buckets_)
        if (b.stage == stage)
          pending_.push_back(
              job_.group_comm->all_reduce_async(model_.grads() + b.begin, b.end - b.begin, REDUCE_OP_AVG));
      for (auto& q : pending_) q->test();
    };
  }
}

WorkerLoop::Next WorkerLoop::decide() {
  uint64_t next[4] = {uint64_t(GroupStep::idle), 0, 0, 0};
  t_round_ = now_seconds();
  blocked_before_ = 0.0;
  if (leader_) {
    if (p_.barrier_seq > acked_ && p_.barrier_kind != AsyncBarrier::none) {
      acked_ = p_.barrier_seq;
      ex_->ack_barrier(acked_);
      // The center lets the barrier go once every worker still in the job has reached it: its members are final.
      while (p_.barrier_go < acked_) {
        usleep(1000);
        p_ = ex_->fetch(base_.data());
        if (p_.dropped) dropped(job_);
      }
      next[0] = uint64_t(GroupStep::barrier);
      next[3] = uint64_t(p_.barrier_kind);
    } else {
      if (stop_signal_received() != 0 && !stop_sent_) {
        ex_->request_stop();
        stop_sent_ = true;
      }
      if (!reserving_) {  // every sample is handed out: wait for the center's finish (not counted as blocked)
        usleep(1000);
        p_ = ex_->fetch(base_.data());
        if (p_.dropped) dropped(job_);
      } else {
        blocked_before_ = ex_->blocked_seconds();
        const uint64_t round_samples = uint64_t(job_.H) * step_samples_;
        const AsyncWorker::Reservation r = ex_->reserve(round_samples, step_samples_, job_.target_samples);
        if (r.count == 0)
          reserving_ = false;
        else
          next[0] = uint64_t(GroupStep::train), next[1] = r.first, next[2] = r.count;
      }
    }
  }
  if (K_ > 1) broadcast_values(group_, next, 4, 0);
  return Next{GroupStep(next[0]), next[1], next[2], AsyncBarrier(next[3])};
}

bool WorkerLoop::barrier(AsyncBarrier kind) {
  // The members (the center and the live groups' ranks) from the leader's roster, to every rank of the group.
  std::vector<uint64_t> roster(size_t(job_.workers) + 1, 0);
  if (leader_)
    for (int m : ex_->members()) roster[size_t(m)] = 1;
  if (K_ > 1) broadcast_values(group_, roster.data(), int(roster.size()), 0);
  std::vector<int> members;
  for (size_t m = 0; m < roster.size(); ++m)
    if (roster[m] != 0) members.push_back(int(m));
  if (K_ > 1) require_same_replicas(job_, model_.params(), n_);
  if (!leader_) be_.copy_to_host(base_.data(), std::as_const(model_).params(), n_ * sizeof(float));
  uint64_t counters[3] = {0, 0, 0};
  const World& members_world = job_.members_world(job_.world_ranks(members));
  result_.last_checkpoint = save_async(job_, members_world, base_.data(), nullptr, &adam_, ex_, counters);
  result_.step = job_.step_of(counters[2]);
  if (members.size() < size_t(job_.workers) + 1) leave_job();  // MPI_Finalize would wait for the dropped
  if (kind == AsyncBarrier::join) {
    job_.joined = accept_joiners_as_member(members_world, c_.dist.timeout);
    return job_.joined.has_value();
  }
  if (kind == AsyncBarrier::checkpoint) return false;
  result_.stopped_early = kind == AsyncBarrier::stop && counters[2] < job_.target_samples;
  return true;
}

void WorkerLoop::train_round(uint64_t first, uint64_t count) {
  const int steps = int(count / step_samples_);
  double loss_sum = 0.0;
  float lr = 0.0f;
  adam_.params_changed();  // every round starts from weights set from outside: the start, a rebase, the group's
  for (int i = 0; i < steps; ++i) {
    const double t_step = now_seconds();
    const uint64_t at = first + uint64_t(i) * step_samples_;
    // An offloaded optimizer takes each layer's gradients as the last micro-batch's backward finishes it (K = 1).
    const std::function<void(int)> last_hook =
        adam_.handoff_enabled() ? begin_handoff_step(adam_, model_, c_, job_.step_of(at)) : on_layer_done_;
    // Rank m of the group takes micro-batch samples at + m B, then every K B further, as sync ranks do.
    double loss = accumulate_gradients(model_, train_, batch_, job_.A, at + uint64_t(group_.rank) * job_.B,
                                       uint64_t(K_) * job_.B, last_hook);
    if (K_ > 1) {
      for (auto& q : pending_) q->wait();
      pending_.clear();
      job_.group_comm->all_reduce(&loss, 1, REDUCE_OP_AVG);
    }
    require_finite_loss(loss, job_.step_of(at), rank_,
                        "lower optimizer.lr or async.outer_lr, then resume from the last checkpoint");
    const float norm = float(std::sqrt(be_.sum_squares(model_.grads(), arena_)));
    lr = apply_update(adam_, model_.params(), model_.grads(), norm, c_, job_.step_of(at));
    be_.synchronize();
    if (round_ == 0 && i == 0) log_measured_memory(be_, counted_bytes_, job_.gpu_shared);
    loss_sum += loss;
    if (slow_) usleep(useconds_t((c_.async.test_slowdown - 1.0f) * (now_seconds() - t_step) * 1e6));
    // A sign of life between fetches, at most a few per worker_timeout (each is a round trip to the center).
    if (leader_ && i + 1 < steps && now_seconds() - last_sign_ >= sign_interval_) {
      ex_->heartbeat();
      last_sign_ = now_seconds();
    }
  }
  ++round_;
  result_.last_loss = loss_sum / steps;
  result_.step = job_.step_of(first) + 1;
  if (leader_)
    send_and_rebase(first, steps, loss_sum, lr);
  else  // the leader fetches, sends and rebases; the group starts the next round from its origin
    job_.group_comm->broadcast(model_.params(), n_ * sizeof(float), 0);
}

void WorkerLoop::broadcast_moments() {
  const size_t bytes = arena_ * sizeof(float);
  if (!adam_.offloaded()) {
    job_.group_comm->broadcast(adam_.exp_avg(), bytes, 0);
    job_.group_comm->broadcast(adam_.exp_avg_sq(), bytes, 0);
    return;
  }
  // Host memory, which the group's communicator need not reach (NCCL): through the gradient arena, which no step
  // holds yet.
  std::vector<float> m(arena_), v(arena_);
  adam_.read_moments(m.data(), v.data());
  for (std::vector<float>* a : {&m, &v}) {
    be_.copy_to_device(model_.grads(), a->data(), bytes);
    job_.group_comm->broadcast(model_.grads(), bytes, 0);
    be_.copy_to_host(a->data(), model_.grads(), bytes);
  }
  adam_.load_moments(m.data(), v.data());
}

void WorkerLoop::send_and_rebase(uint64_t first, int steps, double loss_sum, float lr) {
  be_.copy_to_host(x_.data(), std::as_const(model_).params(), n_ * sizeof(float));
  float* delta = delta_.data();
  const float *x = x_.data(), *origin = origin_.data();
  const size_t n = n_;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) delta[i] = x[i] - origin[i];
  const uint64_t tokens = uint64_t(steps) * step_samples_ * job_.T;
  const uint64_t got_before = ex_->bytes_got();
  // What the center applies at once of this delta (before momentum and any staleness discount).
  const float own_weight = c_.async.outer_lr * outer_weight(tokens, 0, job_.workers, job_.round_tokens());
  // Fetch first, then send: the parameters fetched never hold this delta, however fast the center folds it in, so
  // the next round always starts from them plus this delta at own_weight. Sent first, the delta would be in them
  // or not depending on how the one-sided component moves the put (osc/sm at once, osc/pt2pt only when the center
  // polls): over TCP the round would start from it at the center's damped first weight, which trained worse.
  const uint64_t delta_version = p_.version;
  p_ = ex_->fetch(base_.data());
  last_sign_ = now_seconds();
  if (p_.dropped) dropped(job_);
  const uint64_t put_before = ex_->bytes_put();
  ex_->send(delta_.data(), delta_version, tokens, loss_sum / steps, own_weight);
  const uint64_t put_bytes = ex_->bytes_put() - put_before;
  origin_ = base_;
  ex_->add_pending(origin_.data());
  be_.copy_to_device(model_.params(), origin_.data(), n_ * sizeof(float));
  if (K_ > 1) job_.group_comm->broadcast(model_.params(), n_ * sizeof(float), 0);
  const double round_seconds = now_seconds() - t_round_, blocked = ex_->blocked_seconds() - blocked_before_;
  train_seconds_ += round_seconds;
  blocked_seconds_ += blocked;
  metrics_->write({{"step", job_.step_of(first + uint64_t(steps) * step_samples_)},
                   {"round", round_},
                   {"local_steps", steps},
                   {"optimizer_step", adam_.step_count()},
                   {"loss", loss_sum / steps},
                   {"lr", lr},
                   {"tokens", tokens},
                   {"bytes_put", put_bytes},
                   {"bytes_got", ex_->bytes_got() - got_before},
                   {"fp32_delta_bytes", n_ * sizeof(float)},
                   {"blocked_ms", 1e3 * blocked},
                   {"round_ms", 1e3 * round_seconds},
                   {"blocked_fraction", blocked_seconds_ / std::max(train_seconds_, 1e-9)},
                   {"staleness", p_.staleness},
                   {"version", p_.version},
                   {"behind", p_.newest - p_.version},
                   {"downloaded", p_.downloaded},
                   {"pending", ex_->pending()},
                   {"full_fetch", p_.full}});
}

TrainResult WorkerLoop::run() {
  install_stop_signal_handlers();
  for (;;) {
    const Next next = decide();
    if (next.what == GroupStep::barrier && barrier(next.kind)) break;
    if (next.what == GroupStep::train) train_round(next.first, next.count);
  }
  if (ex_ && !ex_->intact()) leave_job();  // MPI_Finalize would wait for the dropped workers
  return result_;
}

}  // namespace

TrainResult run_worker(AsyncJob& job) {
  // A failure of a worker (its center lost, its loss diverged) or inside a group (a rank of it lost, its
  // collectives timed out) ends that worker only: its ranks leave without MPI_Abort, which would take the job down
  // (and can itself hang when the link is cut). Under a launcher that ends the job on a non-zero exit, as mpirun
  // does by default, that still ends it; otherwise the center drops the worker as it drops any silent one.
  WorkerLoop loop(job);  // set-up: a failure there still ends the whole job
  try {
    return loop.run();
  } catch (const Error&) {
    leave_job();
    throw;
  }
}

}  // namespace ember
