// The Trainer (implementation). Order matters for "lose nothing": every input is opened and checked, and a resume
// checkpoint fully loaded, before the metrics file or any checkpoint is touched.
#include "train/trainer.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/data_loader.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"

namespace ember {

struct Trainer::State {
  RunConfig cfg;
  std::string config_ini;
  int stop_after = 0;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<GPT> model;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<DataLoader> train_data;
  std::unique_ptr<DataLoader> val_data;
  int64_t step = 0;  // optimizer steps completed
  int64_t tokens_seen = 0;
  std::vector<int32_t> inputs, targets;
};

Trainer::Trainer(const RunConfig& config, std::string config_ini, int stop_after) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.cfg = config;
  s.config_ini = std::move(config_ini);
  s.stop_after = stop_after;
  const RunConfig& c = s.cfg;
  // The CPU backend threads with OpenMP only (it keeps OpenBLAS single-threaded), so this sets its width.
  if (c.training.threads > 0) omp_set_num_threads(c.training.threads);

  s.train_data = std::make_unique<DataLoader>(c.data.dir, "train", c.training.seq_len, c.model.vocab_size,
                                              c.training.seed, /*shuffle=*/true);
  s.val_data = std::make_unique<DataLoader>(c.data.dir, "val", c.training.seq_len, c.model.vocab_size,
                                            c.training.seed, /*shuffle=*/false);
  s.backend = make_cpu_backend();
  s.model = std::make_unique<GPT>(c.model, *s.backend, c.training.batch_size, c.training.seq_len);
  s.optimizer = std::make_unique<AdamW>(*s.backend, s.model->table(), c.optimizer);
  s.inputs.resize(size_t(c.training.batch_size) * c.training.seq_len);
  s.targets.resize(s.inputs.size());

  const std::string resume = resolve_resume(c.checkpoint_folder(), c.checkpoint.resume);
  if (resume.empty()) {
    s.model->init_weights(c.training.seed);
    log_info("starting from scratch (seed %llu)", (unsigned long long)c.training.seed);
    return;
  }
  const ParamTable& table = s.model->table();
  std::vector<float> params(table.total_numel()), m(table.total_numel()), v(table.total_numel());
  CheckpointMeta meta;
  load_checkpoint(resume, table, {params.data(), m.data(), v.data()}, meta);
  if (!(meta.model == c.model))
    throw_error("checkpoint " + resume + ": model config differs from the run's [model] section",
                "use the [model] settings the checkpoint was written with (see `ember inspect`) or start fresh");
  if (meta.step >= c.training.steps)
    throw_error("checkpoint " + resume + ": already at step " + std::to_string(meta.step) + " of training.steps = " +
                    std::to_string(c.training.steps),
                "raise training.steps to train further");
  Backend& be = *s.backend;
  be.copy_to_device(s.model->params(), params.data(), params.size() * sizeof(float));
  be.copy_to_device(s.optimizer->exp_avg(), m.data(), m.size() * sizeof(float));
  be.copy_to_device(s.optimizer->exp_avg_sq(), v.data(), v.size() * sizeof(float));
  s.optimizer->set_step_count(int(meta.optimizer_step));
  s.step = meta.step;
  s.tokens_seen = meta.tokens_seen;
  s.train_data->set_cursor(meta.data_cursor);
  log_info("resumed from %s at step %lld (%lld tokens seen)", resume.c_str(), (long long)meta.step,
           (long long)meta.tokens_seen);
}

Trainer::~Trainer() = default;

static double evaluate(GPT& model, DataLoader& data, int B, int T, int batches, std::vector<int32_t>& inputs,
                       std::vector<int32_t>& targets) {
  const uint64_t available = data.num_samples() / uint64_t(B);
  const int n = int(std::min<uint64_t>(uint64_t(batches), std::max<uint64_t>(available, 1)));
  double sum = 0.0;
  for (int k = 0; k < n; ++k) {
    data.batch_at(uint64_t(k) * B, inputs.data(), targets.data(), B);
    sum += model.forward(inputs.data(), targets.data(), B, T);
  }
  return sum / n;
}


TrainResult Trainer::run() {
  State& s = *s_;
  const RunConfig& c = s.cfg;
  const int B = c.training.batch_size, T = c.training.seq_len, accum = c.training.grad_accum_steps;
  const int64_t tokens_per_step = int64_t(B) * T * accum;
  MetricsWriter metrics(c.run.dir + "/metrics.jsonl", s.step);
  GPT& model = *s.model;
  Backend& be = *s.backend;
  TrainResult result;
  result.step = s.step;

  auto save = [&]() {
    const ParamTable& table = model.table();
    std::vector<float> params(table.total_numel()), m(table.total_numel()), v(table.total_numel());
    be.copy_to_host(params.data(), model.params(), params.size() * sizeof(float));
    be.copy_to_host(m.data(), s.optimizer->exp_avg(), m.size() * sizeof(float));
    be.copy_to_host(v.data(), s.optimizer->exp_avg_sq(), v.size() * sizeof(float));
    CheckpointMeta meta;
    meta.step = s.step;
    meta.tokens_seen = s.tokens_seen;
    meta.config_ini = s.config_ini;
    meta.model = c.model;
    meta.optimizer_step = s.optimizer->step_count();
    meta.beta1 = c.optimizer.beta1;
    meta.beta2 = c.optimizer.beta2;
    meta.eps = c.optimizer.eps;
    meta.weight_decay = c.optimizer.weight_decay;
    meta.lr = lr_at_step(int(std::max<int64_t>(s.step - 1, 0)), c.training.steps, c.optimizer.warmup_steps,
                         c.optimizer.lr, c.optimizer.min_lr);
    meta.data_cursor = s.train_data->cursor();
    const double t0 = now_seconds();
    result.last_checkpoint = save_checkpoint(c.checkpoint_folder(), meta, table, {params.data(), m.data(), v.data()},
                                             c.checkpoint.keep_latest_k);
    log_info("checkpoint %s (%.0f ms)", result.last_checkpoint.c_str(), 1e3 * (now_seconds() - t0));
  };

  const int64_t first_step = s.step;
  double elapsed_sum = 0.0;
  int64_t timed_steps = 0;
  while (s.step < c.training.steps) {
    const double t0 = now_seconds();
    model.zero_grad();
    double loss = 0.0;
    for (int micro = 0; micro < accum; ++micro) {
      s.train_data->next_batch(s.inputs.data(), s.targets.data(), B);
      loss += model.forward(s.inputs.data(), s.targets.data(), B, T) / accum;
      model.backward(1.0f / float(accum));
    }
    const float grad_norm = clip_grad_norm(be, model.grads(), model.table().total_numel(), c.training.max_norm);
    const float lr = lr_at_step(int(s.step), c.training.steps, c.optimizer.warmup_steps, c.optimizer.lr,
                                c.optimizer.min_lr);
    s.optimizer->step(model.params(), model.grads(), lr);
    be.synchronize();
    const double dt = now_seconds() - t0;
    ++s.step;
    s.tokens_seen += tokens_per_step;
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
    nlohmann::json rec = {{"step", s.step},          {"loss", loss},
                          {"lr", lr},                {"grad_norm", grad_norm},
                          {"tokens_per_s", tokens_per_s}, {"ms_per_step", 1e3 * dt},
                          {"tokens_seen", s.tokens_seen}};
    const bool last = s.step == c.training.steps || (s.stop_after > 0 && s.step - first_step >= s.stop_after);
    if ((c.eval.every > 0 && s.step % c.eval.every == 0) || last) {
      const double t1 = now_seconds();
      result.last_val_loss = evaluate(model, *s.val_data, B, T, c.eval.batches, s.inputs, s.targets);
      rec["val_loss"] = result.last_val_loss;
      log_info("step %lld | val loss %.4f | %.0f ms", (long long)s.step, result.last_val_loss,
               1e3 * (now_seconds() - t1));
    }
    metrics.write(rec);
    result.last_loss = loss;
    result.step = s.step;
    if (s.step % c.run.log_every == 0 || s.step == first_step + 1 || last) {
      const double eta = avg * double(c.training.steps - s.step);
      log_info("step %5lld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.1f ms | eta %02d:%02d:%02d",
               (long long)s.step, c.training.steps, loss, lr, grad_norm, tokens_per_s, 1e3 * dt, int(eta) / 3600,
               int(eta) / 60 % 60, int(eta) % 60);
    }
    if ((c.checkpoint.interval > 0 && s.step % c.checkpoint.interval == 0) || last) save();
    if (last) break;
  }
  if (timed_steps > 0)
    log_info("trained %lld steps: %.0f tokens/s on average (%.1f ms/step)", (long long)(s.step - first_step),
             tokens_per_step / (elapsed_sum / timed_steps), 1e3 * elapsed_sum / timed_steps);
  return result;
}

}  // namespace ember
