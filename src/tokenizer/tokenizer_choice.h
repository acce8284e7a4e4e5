// Which tokenizer a command uses, decided in one place: training's data.tokenizer ("auto", "bytes" or files) against
// what the shards' prep.json records and the model's vocab_size; the tokenizer a checkpoint records, for eval,
// generate, serve and export; and the checks that shards, a run and a checkpoint agree on it. The callers read
// prep.json and checkpoints; what those record arrives here as a TokenizerRecord.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tokenizer/tokenizer.h"

namespace ember {

// What prep.json and a checkpoint record of the tokenizer that made their ids. The defaults are the byte tokenizer.
struct TokenizerRecord {
  std::string kind = tokenizer_kind_name(TokenizerKind::bytes);  // "bytes" or "bpe"
  std::string fingerprint = "bytes";                             // Tokenizer::fingerprint()
  int vocab_size = 256;                                          // Tokenizer::vocab_size()
  bool operator==(const TokenizerRecord&) const = default;
};

// The record of `t`.
TokenizerRecord record_of(const Tokenizer& t);

// For messages, as Tokenizer::describe() says it: "bytes", or "bpe (50257 ids, fingerprint 0123456789abcdef)".
std::string describe(const TokenizerRecord& r);

// Where a training run's tokenizer can come from.
struct TrainingTokenizerSources {
  std::string setting;                    // data.tokenizer: "auto", "bytes", or a tokenizer folder or file
  std::string data_dir;                   // data.dir, named in errors
  std::string manifest;                   // the file in data.dir that records the shards' tokenizer (prep.json)
  std::optional<TokenizerRecord> shards;  // what that file records; nothing without one
  std::string shards_tokenizer;           // the folder beside the shards holding that tokenizer's files
  int model_vocab_size = 0;               // model.vocab_size
};

// The tokenizer data.tokenizer names: "bytes", a tokenizer folder or file (load_tokenizer), or "auto": the one the
// shards' prep.json records (its folder beside the shards for BPE), or for shards without prep.json the byte
// tokenizer when model.vocab_size is 256. Then checks that it made the shards (the recorded fingerprint, when there is
// one) and that the model has a row for each of its ids. Throws ember::Error naming both sides, with a hint.
std::unique_ptr<Tokenizer> choose_training_tokenizer(const TrainingTokenizerSources& s);

// The tokenizer a checkpoint was trained with (`origin`, e.g. "checkpoint PATH", names it in errors): rebuilt from
// the files it stores, which must make the fingerprint it records; or, for a checkpoint written before checkpoints
// recorded their tokenizer (`recorded` empty), the byte tokenizer, the only one there was: its stored configuration's
// data.tokenizer (`configured`) must then say bytes, since any other value means the record was lost. Either way the
// model (`model_vocab_size`) must have a row for each of its ids.
std::unique_ptr<Tokenizer> recorded_tokenizer(const std::string& origin, const std::optional<TokenizerRecord>& recorded,
                                              const TokenizerFiles& files, const std::string& configured,
                                              int model_vocab_size);

// Throws ember::Error naming both, with `hint`, unless the checkpoint at `path`, which records `recorded`, was trained
// with the run's tokenizer `run` (same fingerprint). A checkpoint written before checkpoints recorded their tokenizer
// (`recorded` empty) was trained with the byte tokenizer, the only one there was.
void check_checkpoint_tokenizer(const std::string& path, const std::optional<TokenizerRecord>& recorded,
                                const TokenizerRecord& run, const std::string& hint);

// Throws ember::Error naming both, with `hint`, unless the shards in `data_dir`, whose `manifest` (prep.json) records
// `shards`, were made with the tokenizer `t`. `whose` says where `t` comes from, completing "... but <whose> <t>",
// e.g. "checkpoint PATH was trained with".
void check_shards_tokenizer(const std::string& data_dir, const std::string& manifest, const TokenizerRecord& shards,
                            const std::string& whose, const Tokenizer& t, const std::string& hint);

}  // namespace ember
