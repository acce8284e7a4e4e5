// An async worker (ranks 1..N): runs rounds of reserve samples, train async.local_steps local steps, send the 1-bit
// delta, fetch and rebase; at a barrier the center announces it joins the collective checkpoint save. A worker the
// center dropped (it was silent too long) leaves the job on its own.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/log.h"
#include "core/timer.h"
#include "data/data_loader.h"
#include "train/adamw.h"
#include "train/async_job.h"
#include "train/local_step.h"
#include "train/metrics.h"
#include "train/outer_optimizer.h"
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
  job.backend->copy_to_device(adam.exp_avg(), m.data(), n * sizeof(float));
  job.backend->copy_to_device(adam.exp_avg_sq(), v.data(), n * sizeof(float));
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

}  // namespace

TrainResult run_worker(AsyncJob& job) {
  const RunConfig& c = job.c;
  const int rank = job.world.rank;
  GPT& model = *job.model;
  Backend& be = *job.backend;
  const ParamTable& table = model.table();
  const size_t n = table.total_numel(), arena = model.arena_numel();
  OptimizerConfig inner = c.optimizer;  // the inner optimizer: sync's AdamW with async.inner_beta1
  inner.beta1 = c.async.inner_beta1;
  AdamW adam(be, table, inner, 0, arena);
  const size_t counted_bytes = log_model_memory(model, adam, be);
  DataLoader train(c.data.dir, "train", job.T, c.model.vocab_size, c.training.seed, /*shuffle=*/true);
  const std::vector<float> residual = resume_worker(job, adam);
  AsyncWorker ex(job.world.comm, job.shape, rank, c.async.center_timeout);
  if (!residual.empty()) ex.feedback().set_residual(residual.data());

  // base: the published parameters as of the last fetch. origin: where this round starts, base plus this worker's
  // own newest delta while the center has not folded it in yet (it was sent just before the fetch), so a worker
  // never trains from parameters that lack its own last round.
  std::vector<float> base(n), origin(n), x(n), delta(n);
  AsyncWorker::Published p = ex.fetch(base.data());
  if (p.dropped) dropped(job);
  be.copy_to_device(model.params(), base.data(), n * sizeof(float));
  origin = base;
  uint64_t acked = p.barrier_seq;
  MetricsWriter metrics(async_metrics_path(c, rank), job.step_of(p.tokens_applied / uint64_t(job.T)));
  TokenBatch batch(job.B, job.T);
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
      // The center lets the barrier go once every worker still in the job has reached it: its members are final.
      while (p.barrier_go < acked) {
        usleep(1000);
        p = ex.fetch(base.data());
        if (p.dropped) dropped(job);
      }
      uint64_t counters[3] = {0, 0, 0};
      const World& members = job.members_world(ex.members());
      result.last_checkpoint = save_async(job, members, base.data(), nullptr, &adam, &ex, counters);
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
      if (p.dropped) dropped(job);
      continue;
    }
    const double t_round = now_seconds(), blocked_before = ex.blocked_seconds();
    const uint64_t step_samples = uint64_t(job.A) * job.B;
    const AsyncWorker::Reservation r = ex.reserve(round_samples, step_samples, job.target_samples);
    if (r.count == 0) {
      reserving = false;
      continue;
    }
    const uint64_t first = r.first;
    const int steps = int(r.count / step_samples);
    double loss_sum = 0.0;
    float lr = 0.0f;
    for (int i = 0; i < steps; ++i) {
      const double t_step = now_seconds();
      const uint64_t at = first + uint64_t(i) * job.A * job.B;
      const double loss = accumulate_gradients(model, train, batch, job.A, at, uint64_t(job.B));
      require_finite_loss(loss, job.step_of(at), rank,
                          "lower optimizer.lr or async.outer_lr, then resume from the last checkpoint");
      const float norm = float(std::sqrt(be.sum_squares(model.grads(), arena)));
      lr = apply_update(adam, model.params(), model.grads(), norm, c, job.step_of(at));
      be.synchronize();
      if (round == 0 && i == 0) log_measured_memory(be, counted_bytes, job.gpu_shared);
      loss_sum += loss;
      if (slow) usleep(useconds_t((c.async.test_slowdown - 1.0f) * (now_seconds() - t_step) * 1e6));
      if (i + 1 < steps) ex.heartbeat();  // the fetch after the last step's send is one too
    }
    be.copy_to_host(x.data(), std::as_const(model).params(), n * sizeof(float));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) delta[i] = x[i] - origin[i];
    const uint64_t tokens = uint64_t(steps) * job.A * job.B * job.T;
    const uint64_t put_before = ex.bytes_put(), got_before = ex.bytes_got();
    // What the center applies at once of this delta (before momentum and any staleness discount).
    const float own_weight = c.async.outer_lr * outer_weight(tokens, 0, job.workers, job.round_tokens());
    ex.send(delta.data(), p.version, tokens, loss_sum / steps, own_weight);
    const uint64_t put_bytes = ex.bytes_put() - put_before;
    p = ex.fetch(base.data());
    if (p.dropped) dropped(job);
    origin = base;
    ex.add_pending(origin.data());
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
                   {"behind", p.newest - p.version},
                   {"downloaded", p.downloaded},
                   {"pending", ex.pending()},
                   {"full_fetch", p.full}});
  }
  if (!ex.intact()) leave_job();  // MPI_Finalize would wait for the dropped workers
  return result;
}

}  // namespace ember
