// The run's tokenizer (implementation): what prep.json records handed to choose_training_tokenizer, and the outcome
// agreed across ranks.
#include "train/run_tokenizer.h"

#include <optional>

#include "core/log.h"
#include "data/prep_manifest.h"
#include "parallel/host_collectives.h"

namespace ember {

std::unique_ptr<Tokenizer> resolve_run_tokenizer(const RunConfig& c) {
  const std::optional<PrepManifest> prep = read_prep_manifest(c.data.dir);
  TrainingTokenizerSources s;
  s.setting = c.data.tokenizer;
  s.data_dir = c.data.dir;
  s.manifest = PREP_MANIFEST_NAME;
  if (prep) s.shards = prep->tokenizer;
  s.shards_tokenizer = c.data.dir + "/" + PREP_TOKENIZER_DIR;
  s.model_vocab_size = c.model.vocab_size;
  return choose_training_tokenizer(s);
}

std::shared_ptr<const Tokenizer> agree_run_tokenizer(const World& world, const RunConfig& config) {
  std::shared_ptr<const Tokenizer> t;
  run_agreed(
      world, /*root_only=*/false, [&] { t = resolve_run_tokenizer(config); },
      "check data.tokenizer and data.dir on every node");
  log_info("tokenizer: %s (data.tokenizer = %s)", t->describe().c_str(), config.data.tokenizer.c_str());
  return t;
}

CheckpointTokenizer checkpoint_tokenizer(const Tokenizer& t) { return CheckpointTokenizer{record_of(t), t.files()}; }

void check_resume_tokenizer(const std::string& path, const CheckpointMeta& meta, const TokenizerRecord& run) {
  check_checkpoint_tokenizer(path, meta.tokenizer, run,
                             "resume with the data and data.tokenizer the checkpoint was trained with (`ember "
                             "inspect` shows its tokenizer), or start fresh");
}

}  // namespace ember
