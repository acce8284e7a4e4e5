// What every kind of training run reads from and writes to its checkpoints: the choice of the resume checkpoint (made
// once, on rank 0, for every rank), the checks that it can continue this run, the checkpoint a fresh run takes its
// weights from (checkpoint.init_from), the metadata every run fills alike, and a save with its log line.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/checkpoint.h"
#include "model/param_table.h"
#include "parallel/world.h"
#include "train/run_config.h"

namespace ember {

// The checkpoint every rank of `world` resumes from ("" for a fresh start): rank 0 resolves checkpoint.resume in the
// checkpoint folder (resolve_resume: falling back past damaged files) and broadcasts its choice. Collective. A sync
// run given an async checkpoint fails here, naming the mismatch (an async run may start from a sync checkpoint).
std::string choose_resume(const World& world, const RunConfig& config);

// Throws ember::Error naming the checkpoint unless it can continue this run: counters that agree with each other
// as every run keeps them (tokens_seen >= step, one data_cursor on every rank and <= tokens_seen, the AdamW step
// count equal to the step in sync mode and to async_version in async mode), the same [model] and a step before
// training.steps.
void check_resumable(const std::string& path, const CheckpointMeta& meta, const RunConfig& config);

// The checkpoint whose /model weights a fresh run starts from (checkpoint.init_from), or "" for random
// initialisation. "" as well when the run resumes (`resume` is not empty): a resume wins, with a log line saying so
// when init_from is set. Otherwise rank 0 verifies the file in full (verify_checkpoint) and checks that its model
// attributes equal the run's [model] (the error names every differing key with both values) and that it was trained
// with the run's tokenizer `run_tokenizer`. Collective: a failure is thrown on every rank.
std::string choose_init_from(const World& world, const RunConfig& config, const std::string& resume,
                             const CheckpointTokenizer& run_tokenizer);

// Reads the /model weights of `path` (from choose_init_from) into `params`, a host arena of `table`, on every rank,
// with the outcome agreed: a failure on any rank is thrown on every rank. Collective.
void load_init_weights(const World& world, const std::string& path, const ParamTable& table, float* params);

// The metadata every kind of run fills alike: the configuration (text and [model]), the tokenizer and the AdamW
// hyper-parameters. The caller adds the counters (step, tokens, optimizer step, lr), world size, mode and per-rank
// state.
CheckpointMeta run_checkpoint_meta(const RunConfig& config, const std::string& config_ini,
                                   const CheckpointTokenizer& tokenizer);

// save_checkpoint into the run's checkpoint folder, keeping checkpoint.keep_latest_k, then logs the path and the
// time it took. Collective over `world` as save_checkpoint is. Returns the path written.
std::string save_run_checkpoint(const RunConfig& config, const CheckpointMeta& meta, const ParamTable& table,
                                const CheckpointContents& contents, const World& world);

}  // namespace ember
