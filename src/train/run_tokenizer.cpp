// The run's tokenizer (implementation): resolution of data.tokenizer and the start-up checks against the shards, the
// model and a checkpoint to resume.
#include "train/run_tokenizer.h"

#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "data/prep_manifest.h"
#include "parallel/host_collectives.h"

namespace ember {
namespace {

constexpr const char* AUTO = "auto";

// "bpe (50257 ids, fingerprint 0123456789abcdef)" from a prep.json or a checkpoint, as Tokenizer::describe() says it.
std::string describe_recorded(const std::string& kind, const std::string& fingerprint, int vocab_size) {
  if (kind == tokenizer_kind_name(TokenizerKind::bytes) && fingerprint == "bytes") return kind;
  return kind + " (" + std::to_string(vocab_size) + " ids, fingerprint " + fingerprint + ")";
}

std::unique_ptr<Tokenizer> tokenizer_for_auto(const RunConfig& c, const std::optional<PrepManifest>& prep) {
  const std::string& dir = c.data.dir;
  if (!prep) {
    if (c.model.vocab_size == 256) return std::make_unique<ByteTokenizer>();
    throw_error("data.dir " + dir + " has no " + PREP_MANIFEST_NAME +
                    " saying which tokenizer made its shards, and data.tokenizer = auto",
                "set data.tokenizer to the tokenizer's folder (for GPT-2 shards, a folder holding GPT-2's "
                "vocab.json and merges.txt), or to bytes for byte shards with model.vocab_size = 256");
  }
  if (prep->tokenizer_kind == tokenizer_kind_name(TokenizerKind::bytes)) return std::make_unique<ByteTokenizer>();
  return load_tokenizer(dir + "/" + PREP_TOKENIZER_DIR);
}

}  // namespace

std::unique_ptr<Tokenizer> resolve_run_tokenizer(const RunConfig& c) {
  const std::string& dir = c.data.dir;
  const std::optional<PrepManifest> prep = read_prep_manifest(dir);
  // Checked before the tokenizer is loaded: the shards' own ids must have rows, whatever data.tokenizer says.
  if (prep && prep->vocab_size > c.model.vocab_size)
    throw_error("shards in " + dir + " hold ids of a " + std::to_string(prep->vocab_size) + "-id tokenizer (" +
                    PREP_MANIFEST_NAME + ": " +
                    describe_recorded(prep->tokenizer_kind, prep->tokenizer_fingerprint, prep->vocab_size) +
                    ") but model.vocab_size is " + std::to_string(c.model.vocab_size),
                "set model.vocab_size to at least " + std::to_string(prep->vocab_size) +
                    " (a larger vocabulary is fine: the extra rows are padding)");
  std::unique_ptr<Tokenizer> t =
      c.data.tokenizer == AUTO ? tokenizer_for_auto(c, prep) : load_tokenizer(c.data.tokenizer);
  if (prep && prep->tokenizer_fingerprint != t->fingerprint())
    throw_error("shards in " + dir + " were made with tokenizer " +
                    describe_recorded(prep->tokenizer_kind, prep->tokenizer_fingerprint, prep->vocab_size) + " (its " +
                    PREP_MANIFEST_NAME + ") but data.tokenizer (" + c.data.tokenizer + ") is " + t->describe(),
                "set data.tokenizer = auto to use the tokenizer beside the shards, or re-prep the data with "
                "`ember prep --tokenizer " +
                    c.data.tokenizer + "`");
  if (t->vocab_size() > c.model.vocab_size)
    throw_error("tokenizer " + t->describe() + " has " + std::to_string(t->vocab_size()) +
                    " ids but model.vocab_size is " + std::to_string(c.model.vocab_size),
                "set model.vocab_size to at least " + std::to_string(t->vocab_size()) +
                    " (a larger vocabulary is fine: the extra rows are padding)");
  return t;
}

std::shared_ptr<const Tokenizer> agree_run_tokenizer(const World& world, const RunConfig& config) {
  std::shared_ptr<const Tokenizer> t;
  run_agreed(
      world, /*root_only=*/false, [&] { t = resolve_run_tokenizer(config); },
      "check data.tokenizer and data.dir on every node");
  log_info("tokenizer: %s (data.tokenizer = %s)", t->describe().c_str(), config.data.tokenizer.c_str());
  return t;
}

CheckpointTokenizer checkpoint_tokenizer(const Tokenizer& t) {
  return CheckpointTokenizer{tokenizer_kind_name(t.kind()), t.fingerprint(), t.vocab_size(), t.files()};
}

void check_checkpoint_tokenizer(const std::string& path, const CheckpointMeta& meta, const CheckpointTokenizer& run,
                                const std::string& hint) {
  const CheckpointTokenizer stored = meta.tokenizer.value_or(CheckpointTokenizer{});
  if (stored.fingerprint == run.fingerprint) return;
  throw_error("checkpoint " + path + " was trained with tokenizer " +
                  describe_recorded(stored.kind, stored.fingerprint, stored.vocab_size) + " but this run's is " +
                  describe_recorded(run.kind, run.fingerprint, run.vocab_size),
              hint);
}

void check_resume_tokenizer(const std::string& path, const CheckpointMeta& meta, const CheckpointTokenizer& run) {
  check_checkpoint_tokenizer(path, meta, run,
                             "resume with the data and data.tokenizer the checkpoint was trained with (`ember "
                             "inspect` shows its tokenizer), or start fresh");
}

}  // namespace ember
