// The run's tokenizer: data.tokenizer resolved against the shards' prep.json, checked against the shards, the model
// and a checkpoint to resume, and recorded in every checkpoint so that generate and eval decode with it.
#pragma once

#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "parallel/world.h"
#include "tokenizer/tokenizer.h"
#include "train/run_config.h"

namespace ember {

// The tokenizer data.tokenizer names: "bytes", a tokenizer folder or file (load_tokenizer), or "auto": the one
// data.dir/prep.json records (its tokenizer/ folder for BPE), or for shards without prep.json the byte tokenizer when
// model.vocab_size is 256. Then checks that it made the shards (prep.json's fingerprint, when there is one) and that
// the model has a row for each of its ids. Throws ember::Error naming both sides, with a hint.
std::unique_ptr<Tokenizer> resolve_run_tokenizer(const RunConfig& config);

// resolve_run_tokenizer on every rank, with the outcome agreed: a failure on any rank is thrown on every rank. Logs
// the tokenizer. Collective over `world`.
std::shared_ptr<const Tokenizer> agree_run_tokenizer(const World& world, const RunConfig& config);

// What a checkpoint records of `t` (CheckpointMeta::tokenizer).
CheckpointTokenizer checkpoint_tokenizer(const Tokenizer& t);

// Throws ember::Error naming both, with `hint`, unless the checkpoint at `path` (metadata `meta`) was trained with the
// run's tokenizer `run` (same fingerprint). A file written before checkpoints recorded their tokenizer was trained
// with the byte tokenizer, the only one there was.
void check_checkpoint_tokenizer(const std::string& path, const CheckpointMeta& meta, const CheckpointTokenizer& run,
                                const std::string& hint);

// check_checkpoint_tokenizer for a checkpoint to resume, with the hint for that.
void check_resume_tokenizer(const std::string& path, const CheckpointMeta& meta, const CheckpointTokenizer& run);

}  // namespace ember
