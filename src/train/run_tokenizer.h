// The run's tokenizer: data.tokenizer resolved against the shards' prep.json and the model (choose_training_tokenizer),
// agreed across ranks, and recorded in every checkpoint so that generate and eval decode with it.
#pragma once

#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "parallel/world.h"
#include "tokenizer/tokenizer.h"
#include "train/run_config.h"

namespace ember {

// choose_training_tokenizer for `config`, with what data.dir/prep.json records. Throws ember::Error, with a hint.
std::unique_ptr<Tokenizer> resolve_run_tokenizer(const RunConfig& config);

// resolve_run_tokenizer on every rank, with the outcome agreed: a failure on any rank is thrown on every rank. Logs
// the tokenizer. Collective over `world`.
std::shared_ptr<const Tokenizer> agree_run_tokenizer(const World& world, const RunConfig& config);

// What a checkpoint records of `t` (CheckpointMeta::tokenizer).
CheckpointTokenizer checkpoint_tokenizer(const Tokenizer& t);

// check_checkpoint_tokenizer for a checkpoint to resume (metadata `meta`), with the hint for that.
void check_resume_tokenizer(const std::string& path, const CheckpointMeta& meta, const TokenizerRecord& run);

}  // namespace ember
