// Which tokenizer a command uses (implementation): training's choice, a checkpoint's tokenizer, and the agreement
// checks between shards, runs and checkpoints.
#include "tokenizer/tokenizer_choice.h"

#include "core/error.h"

namespace ember {
namespace {

constexpr const char* AUTO = "auto";

std::string padding_hint(int vocab_size) {
  return "set model.vocab_size to at least " + std::to_string(vocab_size) +
         " (a larger vocabulary is fine: the extra rows are padding)";
}

std::unique_ptr<Tokenizer> tokenizer_for_auto(const TrainingTokenizerSources& s) {
  if (!s.shards) {
    if (s.model_vocab_size == 256) return std::make_unique<ByteTokenizer>();
    throw_error("data.dir " + s.data_dir + " has no " + s.manifest +
                    " saying which tokenizer made its shards, and data.tokenizer = auto",
                "set data.tokenizer to the tokenizer's folder (for GPT-2 shards, a folder holding GPT-2's "
                "vocab.json and merges.txt), or to bytes for byte shards with model.vocab_size = 256");
  }
  if (s.shards->kind == tokenizer_kind_name(TokenizerKind::bytes)) return std::make_unique<ByteTokenizer>();
  return load_tokenizer(s.shards_tokenizer);
}

}  // namespace

TokenizerRecord record_of(const Tokenizer& t) {
  return TokenizerRecord{tokenizer_kind_name(t.kind()), t.fingerprint(), t.vocab_size()};
}

std::string describe(const TokenizerRecord& r) {
  if (r.kind == tokenizer_kind_name(TokenizerKind::bytes) && r.fingerprint == "bytes") return r.kind;
  return r.kind + " (" + std::to_string(r.vocab_size) + " ids, fingerprint " + r.fingerprint + ")";
}

std::unique_ptr<Tokenizer> choose_training_tokenizer(const TrainingTokenizerSources& s) {
  // Checked before the tokenizer is loaded: the shards' own ids must have rows, whatever data.tokenizer says.
  if (s.shards && s.shards->vocab_size > s.model_vocab_size)
    throw_error("shards in " + s.data_dir + " hold ids of a " + std::to_string(s.shards->vocab_size) +
                    "-id tokenizer (" + s.manifest + ": " + describe(*s.shards) + ") but model.vocab_size is " +
                    std::to_string(s.model_vocab_size),
                padding_hint(s.shards->vocab_size));
  std::unique_ptr<Tokenizer> t = s.setting == AUTO ? tokenizer_for_auto(s) : load_tokenizer(s.setting);
  // With auto the tokenizer came from beside the shards: a disagreement is between the two files there, and the
  // advice for a run's setting below would send the user in a circle.
  if (s.shards && s.setting == AUTO && t->kind() != TokenizerKind::bytes && s.shards->fingerprint != t->fingerprint())
    throw_error("shards in " + s.data_dir + ": " + s.manifest + " records tokenizer " + describe(*s.shards) +
                    " but the tokenizer files beside it (" + s.shards_tokenizer + ") are " + t->describe(),
                "one of them was changed after prep wrote them; prepare the data again with `ember prep --output " +
                    s.data_dir + " --overwrite` and the same --input and --tokenizer");
  if (s.shards)
    check_shards_tokenizer(s.data_dir, s.manifest, *s.shards, "data.tokenizer (" + s.setting + ") is", *t,
                           "set data.tokenizer = auto to use the tokenizer beside the shards, or re-prep the data "
                           "with `ember prep --tokenizer " +
                               s.setting + "`");
  if (t->vocab_size() > s.model_vocab_size)
    throw_error("tokenizer " + t->describe() + " has " + std::to_string(t->vocab_size()) +
                    " ids but model.vocab_size is " + std::to_string(s.model_vocab_size),
                padding_hint(t->vocab_size()));
  return t;
}

std::unique_ptr<Tokenizer> recorded_tokenizer(const std::string& origin, const std::optional<TokenizerRecord>& recorded,
                                              const TokenizerFiles& files, const std::string& configured,
                                              int model_vocab_size) {
  const std::string modified = "the file was modified after ember wrote it; use another checkpoint of the run";
  std::unique_ptr<Tokenizer> t;
  if (recorded) {
    t = tokenizer_from_files(files, origin);
    if (t->fingerprint() != recorded->fingerprint)
      throw_error(origin + ": the tokenizer files in /tokenizer make " + t->describe() +
                      ", not the recorded fingerprint " + recorded->fingerprint,
                  modified);
  } else if (configured == tokenizer_kind_name(TokenizerKind::bytes)) {
    t = std::make_unique<ByteTokenizer>();
  } else {
    // data.tokenizer took "auto" and paths only when checkpoints began to record their tokenizer: such a file without
    // the record lost it, and reading its ids as bytes would print noise.
    throw_error(origin + " has no /tokenizer group, though its configuration (data.tokenizer = " + configured +
                    ") comes from an ember that records one",
                modified);
  }
  if (t->vocab_size() > model_vocab_size)
    throw_error(origin + ": vocab_size " + std::to_string(model_vocab_size) + " is smaller than its tokenizer's " +
                    std::to_string(t->vocab_size()) + " ids (" + t->describe() + ")",
                modified);
  return t;
}

void check_checkpoint_tokenizer(const std::string& path, const std::optional<TokenizerRecord>& recorded,
                                const TokenizerRecord& run, const std::string& hint) {
  const TokenizerRecord stored = recorded.value_or(TokenizerRecord{});
  if (stored.fingerprint == run.fingerprint) return;
  throw_error(
      "checkpoint " + path + " was trained with tokenizer " + describe(stored) + " but this run's is " + describe(run),
      hint);
}

void check_shards_tokenizer(const std::string& data_dir, const std::string& manifest, const TokenizerRecord& shards,
                            const std::string& whose, const Tokenizer& t, const std::string& hint) {
  if (shards.fingerprint == t.fingerprint()) return;
  throw_error("shards in " + data_dir + " were made with tokenizer " + describe(shards) + " (their " + manifest +
                  ") but " + whose + " " + t.describe(),
              hint);
}

}  // namespace ember
