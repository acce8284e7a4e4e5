// Checkpoints as every kind of training run uses them (implementation).
#include "train/run_checkpoint.h"

#include <filesystem>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/host_collectives.h"
#include "parallel/stall_watchdog.h"
#include "train/run_tokenizer.h"

namespace ember {

namespace {

constexpr const char* HINT_COUNTERS =
    "the file was modified after ember wrote it, or was not written by ember; resume from another checkpoint "
    "(--resume <folder>/step_XXXXXXXX.h5) or start fresh";

[[noreturn]] void fail_counter(const std::string& path, const std::string& attr, const std::string& value,
                               const std::string& expected) {
  throw_error("checkpoint " + path + ": attribute " + attr + " is " + value + ", expected " + expected, HINT_COUNTERS);
}

// The relations between a file's counters that every run keeps, whatever its mode, world size or history.
void check_counters(const std::string& path, const CheckpointMeta& meta) {
  // Every step trains at least one sample of at least one token, whatever the batch shape of each stretch of the
  // run was; the counters of a run started from a file only grow from the file's.
  if (meta.tokens_seen < meta.step)
    fail_counter(path, "/tokens_seen", std::to_string(meta.tokens_seen),
                 ">= /step = " + std::to_string(meta.step) + " (every step trains at least one token)");
  // One global cursor, stored by every rank alike in both modes; a sample is at least one token.
  const uint64_t cursor = meta.ranks.at(0).data_cursor;
  if (cursor > uint64_t(meta.tokens_seen))
    fail_counter(path, "/ranks/0:data_cursor", std::to_string(cursor),
                 "<= /tokens_seen = " + std::to_string(meta.tokens_seen) + " (every sample is at least one token)");
  for (size_t r = 1; r < meta.ranks.size(); ++r)
    if (meta.ranks[r].data_cursor != cursor)
      fail_counter(path, "/ranks/" + std::to_string(r) + ":data_cursor", std::to_string(meta.ranks[r].data_cursor),
                   std::to_string(cursor) + ", the /ranks/0:data_cursor (every rank stores the run's one cursor)");
  // Sync: one AdamW step per step (a sync run only resumes sync files). Async: the center's step count is its
  // version.
  if (meta.mode == TrainingMode::sync && meta.optimizer_step != meta.step)
    fail_counter(path, "/optimizer:step", std::to_string(meta.optimizer_step),
                 std::to_string(meta.step) + ", the /step (a sync run takes one AdamW step per step)");
  if (meta.mode == TrainingMode::async && uint64_t(meta.optimizer_step) != meta.async_version)
    fail_counter(path, "/optimizer:step", std::to_string(meta.optimizer_step),
                 std::to_string(meta.async_version) + ", the /async_version (the center's version count)");
}

// The model keys of `file` that differ from the run's, "model.n_layer = 12 (the run has 2)", comma-separated.
std::string model_differences(const ModelConfig& file, const ModelConfig& run) {
  const struct {
    const char* key;
    int file, run;
  } keys[] = {{"n_layer", file.n_layer, run.n_layer},
              {"n_head", file.n_head, run.n_head},
              {"n_embd", file.n_embd, run.n_embd},
              {"block_size", file.block_size, run.block_size},
              {"vocab_size", file.vocab_size, run.vocab_size}};
  std::string out;
  for (const auto& k : keys)
    if (k.file != k.run)
      out += (out.empty() ? "" : ", ") + std::string("model.") + k.key + " = " + std::to_string(k.file) +
             " (the run has " + std::to_string(k.run) + ")";
  return out;
}

// The checks rank 0 makes on an init_from file before any rank reads its weights.
void check_init_from(const std::string& path, const RunConfig& config, const CheckpointTokenizer& run_tokenizer) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw_error("init_from checkpoint " + path + " does not exist",
                "pass an existing checkpoint (.h5) to --init-from (checkpoint.init_from), e.g. a step_XXXXXXXX.h5 of "
                "another run, or leave it unset to start from random weights");
  if (!fs::is_regular_file(path, ec))
    throw_error("init_from checkpoint " + path + " is not a file",
                "pass a checkpoint file (.h5) to --init-from (checkpoint.init_from)");
  verify_checkpoint(path);
  const CheckpointMeta meta = read_checkpoint_meta(path);
  if (!(meta.model == config.model))
    throw_error("init_from checkpoint " + path +
                    ": its model differs from the run's [model]: " + model_differences(meta.model, config.model),
                "set model.* to the checkpoint's values (see `ember inspect " + path + "`)");
  check_checkpoint_tokenizer(path, meta.tokenizer, run_tokenizer,
                             "train on data made with the checkpoint's tokenizer (`ember inspect " + path +
                                 "` shows it; `ember prep --tokenizer ...`), and set data.tokenizer to it");
}

}  // namespace

std::string choose_resume(const World& world, const RunConfig& config) {
  std::string resume;
  if (world.rank == 0) resume = resolve_resume(config.checkpoint_folder(), config.checkpoint.resume);
  resume = broadcast_string(world, resume, 0);
  // The mode before any data is read, so that a sync run refuses an async file by saying so.
  if (!resume.empty() && config.training.mode == TrainingMode::sync &&
      read_checkpoint_meta(resume).mode == TrainingMode::async)
    throw_error("checkpoint " + resume +
                    " was written in async mode (/mode = \"async\") and this run has training.mode = sync: a sync "
                    "run cannot resume it (its AdamW moments are each async worker's own, under /ranks/<r>)",
                "resume it with training.mode = async (any number of workers), start the sync run fresh, or use "
                "its weights with ember eval / ember generate");
  return resume;
}

void check_resumable(const std::string& path, const CheckpointMeta& meta, const RunConfig& config) {
  check_counters(path, meta);
  if (!(meta.model == config.model))
    throw_error("checkpoint " + path + ": model config differs from the run's [model] section",
                "use the [model] settings the checkpoint was written with (see `ember inspect`) or start fresh");
  if (meta.step >= config.training.steps)
    throw_error("checkpoint " + path + ": already at step " + std::to_string(meta.step) +
                    " of training.steps = " + std::to_string(config.training.steps),
                "raise training.steps to train further");
}

std::string choose_init_from(const World& world, const RunConfig& config, const std::string& resume,
                             const CheckpointTokenizer& run_tokenizer) {
  const std::string& path = config.checkpoint.init_from;
  if (path.empty()) return "";
  if (!resume.empty()) {
    log_info("checkpoint.init_from = %s ignored: the run resumes from %s", path.c_str(), resume.c_str());
    return "";
  }
  run_agreed(
      world, /*root_only=*/true, [&] { check_init_from(path, config, run_tokenizer); },
      "check checkpoint.init_from (--init-from)");
  return path;
}

void load_init_weights(const World& world, const std::string& path, const ParamTable& table, float* params) {
  run_agreed(
      world, /*root_only=*/false,
      [&] {
        CheckpointMeta meta;
        load_checkpoint(path, table, {{SET_MODEL, params}}, meta);
      },
      "every rank must be able to read checkpoint.init_from (a path on a file system all nodes share)");
}

CheckpointMeta run_checkpoint_meta(const RunConfig& config, const std::string& config_ini,
                                   const CheckpointTokenizer& tokenizer) {
  CheckpointMeta meta;
  meta.config_ini = config_ini;
  meta.tokenizer = tokenizer;
  meta.model = config.model;
  meta.beta1 = config.optimizer.beta1;
  meta.beta2 = config.optimizer.beta2;
  meta.eps = config.optimizer.eps;
  meta.weight_decay = config.optimizer.weight_decay;
  return meta;
}

std::string save_run_checkpoint(const RunConfig& config, const CheckpointMeta& meta, const ParamTable& table,
                                const CheckpointContents& contents, const World& world) {
  const double t0 = now_seconds();
  // Parallel HDF5's collective writes wait inside MPI-IO for every rank: a rank that died, froze or lost its link
  // mid-save would hold the others for ever. The save goes to a temporary file, so earlier checkpoints stay intact.
  std::optional<StallGuard> guard;
  if (world.size > 1 && world.watch->timeout_seconds > 0)
    guard.emplace(world.watch->timeout_seconds,
                  "the checkpoint of step " + std::to_string(meta.step) +
                      " was not written within dist.timeout = " + std::to_string(int(world.watch->timeout_seconds)) +
                      " s: a rank died, froze or lost its link, or the file system stalls",
                  "resume with --resume auto once every host is back (earlier checkpoints are intact); raise "
                  "dist.timeout if the file system is that slow");
  const std::string path =
      save_checkpoint(config.checkpoint_folder(), meta, table, contents, config.checkpoint.keep_latest_k, world);
  guard.reset();
  log_info("checkpoint %s (%.0f ms)", path.c_str(), 1e3 * (now_seconds() - t0));
  return path;
}

}  // namespace ember
