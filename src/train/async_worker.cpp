// An async worker (ranks 1..N): runs rounds of reserve samples, train async.local_steps local steps, send the 1-bit
// delta, fetch and rebase; at a barrier the center announces it joins the collective checkpoint save. A worker the
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
#include "dist/host_collectives.h"
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

}  // namespace

TrainResult run_worker(AsyncJob& job) {
  const RunConfig& c = job.c;
  const int rank = job.world.rank, K = job.K;
  const bool leader = job.leader();
  const World& group = job.group->world();
  const int member = group.rank;  // 0: the leader
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
  if (K > 1) {  // a group's ranks start alike, whatever the file held for each of them: from the leader's state
    job.group_comm->broadcast(adam.exp_avg(), arena * sizeof(float), 0);
    job.group_comm->broadcast(adam.exp_avg_sq(), arena * sizeof(float), 0);
    uint64_t steps = uint64_t(adam.step_count());
    broadcast_values(group, &steps, 1, 0);
    adam.set_step_count(int(steps));
  }
  // Only the leader reaches the center; the others of its group follow what it broadcasts.
  std::unique_ptr<AsyncWorker> exchange;
  if (leader) {
    exchange = std::make_unique<AsyncWorker>(job.exchange->world().comm, job.shape, job.exchange->world().rank,
                                             c.async.center_timeout);
    if (!residual.empty()) exchange->feedback().set_residual(residual.data());
  }
  AsyncWorker* ex = exchange.get();

  // base: the published parameters as of the last fetch. origin: where this round starts, base plus this worker's
  // own newest delta while the center has not folded it in yet (it was sent just before the fetch), so a worker
  // never trains from parameters that lack its own last round. A group's other ranks hold origin on the device only.
  std::vector<float> base(n), origin(n), x(n), delta(n);
  AsyncWorker::Published p;
  if (leader) {
    p = ex->fetch(base.data());
    if (p.dropped) dropped(job);
    be.copy_to_device(model.params(), base.data(), n * sizeof(float));
  }
  uint64_t start[2] = {p.barrier_seq, p.tokens_applied};
  broadcast_values(group, start, 2, 0);
  if (K > 1) job.group_comm->broadcast(model.params(), n * sizeof(float), 0);
  origin = base;
  uint64_t acked = start[0];
  std::unique_ptr<MetricsWriter> metrics;
  if (leader)
    metrics = std::make_unique<MetricsWriter>(async_metrics_path(c, rank), job.step_of(start[1] / uint64_t(job.T)));
  TokenBatch batch(job.B, job.T);
  const uint64_t step_samples = uint64_t(job.A) * job.B * K;  // one local step of the group
  const uint64_t round_samples = uint64_t(job.H) * step_samples;
  const bool slow = c.async.test_slow_worker == rank && c.async.test_slowdown > 1.0f;
  bool reserving = true, stop_sent = false;
  double train_seconds = 0.0, blocked_seconds = 0.0;
  int64_t round = 0;
  TrainResult result;
  install_stop_signal_handlers();
  const double sign_interval = std::min(1.0, double(c.async.worker_timeout) / 8);
  double last_sign = now_seconds();

  // Within a group: each local step's gradients are averaged over its ranks, in buckets launched while backward
  // still runs (as sync training does), before the AdamW update every rank takes alike.
  std::vector<std::unique_ptr<PendingCollective>> pending;
  std::function<void(int)> on_layer_done;
  std::vector<GradientBucket> buckets;
  if (K > 1) {
    buckets = gradient_buckets(table, c.model.n_layer, arena, c.training.bucket_mb);
    on_layer_done = [&](int stage) {
      for (const GradientBucket& b : buckets)
        if (b.stage == stage)
          pending.push_back(job.group_comm->all_reduce_async(model.grads() + b.begin, b.end - b.begin, REDUCE_OP_AVG));
      for (auto& q : pending) q->test();
    };
  }

  // A failure of a worker (its center lost, its loss diverged) or inside a group (a rank of it lost, its
  // collectives timed out) ends that worker only: its ranks leave without MPI_Abort, which would take the job down
  // (and can itself hang when the link is cut). Under a launcher that ends the job on a non-zero exit, as mpirun
  // does by default, that still ends it; otherwise the center drops the worker as it drops any silent one.
  try {
    for (;;) {
      // The leader decides the group's next step: {what, first sample, samples, barrier kind}.
      uint64_t next[4] = {uint64_t(GroupStep::idle), 0, 0, 0};
      double t_round = now_seconds(), blocked_before = 0.0;
      if (leader) {
        if (p.barrier_seq > acked && p.barrier_kind != AsyncBarrier::none) {
          acked = p.barrier_seq;
          ex->ack_barrier(acked);
          // The center lets the barrier go once every worker still in the job has reached it: its members are final.
          while (p.barrier_go < acked) {
            usleep(1000);
            p = ex->fetch(base.data());
            if (p.dropped) dropped(job);
          }
          next[0] = uint64_t(GroupStep::barrier);
          next[3] = uint64_t(p.barrier_kind);
        } else {
          if (stop_signal_received() != 0 && !stop_sent) {
            ex->request_stop();
            stop_sent = true;
          }
          if (!reserving) {  // every sample is handed out: wait for the center's finish (not counted as blocked)
            usleep(1000);
            p = ex->fetch(base.data());
            if (p.dropped) dropped(job);
          } else {
            t_round = now_seconds();
            blocked_before = ex->blocked_seconds();
            const AsyncWorker::Reservation r = ex->reserve(round_samples, step_samples, job.target_samples);
            if (r.count == 0)
              reserving = false;
            else
              next[0] = uint64_t(GroupStep::train), next[1] = r.first, next[2] = r.count;
          }
        }
      }
      if (K > 1) broadcast_values(group, next, 4, 0);

      if (GroupStep(next[0]) == GroupStep::idle) continue;
      if (GroupStep(next[0]) == GroupStep::barrier) {
        const AsyncBarrier kind = AsyncBarrier(next[3]);
        // The members (the center and the live groups' ranks) from the leader's roster, to every rank of the group.
        std::vector<uint64_t> roster(size_t(job.workers) + 1, 0);
        if (leader)
          for (int m : ex->members()) roster[size_t(m)] = 1;
        if (K > 1) broadcast_values(group, roster.data(), int(roster.size()), 0);
        std::vector<int> members;
        for (size_t m = 0; m < roster.size(); ++m)
          if (roster[m] != 0) members.push_back(int(m));
        if (K > 1) require_same_replicas(job, model.params(), n);
        if (!leader) be.copy_to_host(base.data(), std::as_const(model).params(), n * sizeof(float));
        uint64_t counters[3] = {0, 0, 0};
        result.last_checkpoint =
            save_async(job, job.members_world(job.world_ranks(members)), base.data(), nullptr, &adam, ex, counters);
        result.step = job.step_of(counters[2]);
        if (members.size() < size_t(job.workers) + 1) leave_job();  // MPI_Finalize would wait for the dropped
        if (kind != AsyncBarrier::checkpoint) {
          result.stopped_early = kind == AsyncBarrier::stop && counters[2] < job.target_samples;
          break;
        }
        continue;
      }

      const uint64_t first = next[1];
      const int steps = int(next[2] / step_samples);
      double loss_sum = 0.0;
      float lr = 0.0f;
      for (int i = 0; i < steps; ++i) {
        const double t_step = now_seconds();
        const uint64_t at = first + uint64_t(i) * step_samples;
        // Rank m of the group takes micro-batch samples at + m B, then every K B further, as sync ranks do.
        double loss = accumulate_gradients(model, train, batch, job.A, at + uint64_t(member) * job.B,
                                           uint64_t(K) * job.B, on_layer_done);
        if (K > 1) {
          for (auto& q : pending) q->wait();
          pending.clear();
          job.group_comm->all_reduce(&loss, 1, REDUCE_OP_AVG);
        }
        require_finite_loss(loss, job.step_of(at), rank,
                            "lower optimizer.lr or async.outer_lr, then resume from the last checkpoint");
        const float norm = float(std::sqrt(be.sum_squares(model.grads(), arena)));
        lr = apply_update(adam, model.params(), model.grads(), norm, c, job.step_of(at));
        be.synchronize();
        if (round == 0 && i == 0) log_measured_memory(be, counted_bytes, job.gpu_shared);
        loss_sum += loss;
        if (slow) usleep(useconds_t((c.async.test_slowdown - 1.0f) * (now_seconds() - t_step) * 1e6));
        // A sign of life between fetches, at most a few per worker_timeout (each is a round trip to the center).
        if (leader && i + 1 < steps && now_seconds() - last_sign >= sign_interval) {
          ex->heartbeat();
          last_sign = now_seconds();
        }
      }
      ++round;
      result.last_loss = loss_sum / steps;
      result.step = job.step_of(first) + 1;
      if (!leader) {  // the leader sends, fetches and rebases; the group starts the next round from its origin
        job.group_comm->broadcast(model.params(), n * sizeof(float), 0);
        continue;
      }
      be.copy_to_host(x.data(), std::as_const(model).params(), n * sizeof(float));
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; ++i) delta[i] = x[i] - origin[i];
      const uint64_t tokens = uint64_t(steps) * step_samples * job.T;
      const uint64_t put_before = ex->bytes_put(), got_before = ex->bytes_got();
      // What the center applies at once of this delta (before momentum and any staleness discount).
      const float own_weight = c.async.outer_lr * outer_weight(tokens, 0, job.workers, job.round_tokens());
      ex->send(delta.data(), p.version, tokens, loss_sum / steps, own_weight);
      const uint64_t put_bytes = ex->bytes_put() - put_before;
      p = ex->fetch(base.data());
      last_sign = now_seconds();
      if (p.dropped) dropped(job);
      origin = base;
      ex->add_pending(origin.data());
      be.copy_to_device(model.params(), origin.data(), n * sizeof(float));
      if (K > 1) job.group_comm->broadcast(model.params(), n * sizeof(float), 0);
      const double round_seconds = now_seconds() - t_round, blocked = ex->blocked_seconds() - blocked_before;
      train_seconds += round_seconds;
      blocked_seconds += blocked;
      metrics->write({{"step", job.step_of(first + uint64_t(steps) * step_samples)},
                      {"round", round},
                      {"local_steps", steps},
                      {"optimizer_step", adam.step_count()},
                      {"loss", loss_sum / steps},
                      {"lr", lr},
                      {"tokens", tokens},
                      {"bytes_put", put_bytes},
                      {"bytes_got", ex->bytes_got() - got_before},
                      {"fp32_delta_bytes", n * sizeof(float)},
                      {"blocked_ms", 1e3 * blocked},
                      {"round_ms", 1e3 * round_seconds},
                      {"blocked_fraction", blocked_seconds / std::max(train_seconds, 1e-9)},
                      {"staleness", p.staleness},
                      {"version", p.version},
                      {"behind", p.newest - p.version},
                      {"downloaded", p.downloaded},
                      {"pending", ex->pending()},
                      {"full_fetch", p.full}});
    }
  } catch (const Error&) {
    leave_job();
    throw;
  }
  if (ex && !ex->intact()) leave_job();  // MPI_Finalize would wait for the dropped workers
  return result;
}

}  // namespace ember
