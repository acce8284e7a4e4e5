// HDF5 checkpoints (layout in docs/checkpoint-format.md): fp32 weights under Hugging Face GPT-2 paths, AdamW state,
// run metadata and per-rank state. Written atomically (temp file, fsync, rename, then `latest`), newest K kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/training_mode.h"
#include "model/model_config.h"
#include "model/param_table.h"
#include "parallel/world.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_choice.h"

namespace ember {

constexpr const char* CHECKPOINT_FORMAT = "ember-checkpoint";
constexpr int CHECKPOINT_FORMAT_VERSION = 1;

// The tokenizer the model was trained with (/tokenizer): its record and enough to rebuild it (recorded_tokenizer)
// without the data folder it came from.
struct CheckpointTokenizer : TokenizerRecord {
  TokenizerFiles files{};  // Tokenizer::files(): names without '/', any bytes as contents; empty for bytes
  bool operator==(const CheckpointTokenizer&) const = default;
};

// Everything in a checkpoint except the big tensors.
struct CheckpointMeta {
  int64_t step = 0;  // optimizer steps completed
  int64_t tokens_seen = 0;
  int world_size = 1;
  TrainingMode mode = TrainingMode::sync;
  std::string created;     // ISO 8601 time, filled in by save
  std::string version;     // ember version, filled in by save
  std::string config_ini;  // the resolved run configuration
  ModelConfig model;       // also stored as root attributes, so readers need not parse config_ini
  // AdamW hyper-parameters and its step counter (root of /optimizer).
  int64_t optimizer_step = 0;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f, lr = 0.0f;
  // Per-rank state, one entry per rank of the run that wrote the checkpoint (/ranks/<r>); its size is world_size.
  struct RankState {
    uint64_t data_cursor = 0;    // next global sample index of the training DataLoader
    uint64_t rng_offset = 0;     // Philox counter offset of the rank's RNG stream
    std::string role{};          // "" in sync mode; "center" or "worker" in async mode
    int64_t optimizer_step = 0;  // async worker: its own AdamW step counter (stored only when role is set)
    uint64_t seq = 0;            // async worker: messages it has sent to the center (stored only when role is set)
    // Names of the flat float datasets /ranks/<r>/<name> (e.g. exp_avg, exp_avg_sq, residual). A save writes them
    // in this order; reading lists the float datasets found in /ranks/<r> in natural order (h2 before h10), so pass
    // them sorted that way for a read to give back exactly what was saved.
    std::vector<std::string> arrays{};
  };
  std::vector<RankState> ranks = std::vector<RankState>(1);
  uint64_t async_version = 0;  // async mode: version of the center's parameters (stored only in async mode)
  // The matmul precision the run trained with, as resolved (training.precision = auto is stored as given in
  // config_ini): "fp32", "bf16", "int8" or "fp8"; "" where not recorded (files written before it was).
  std::string precision;
  // The tokenizer. A save writes it, or the byte tokenizer when unset, so every file written now records one; a read
  // leaves it unset for files written before /tokenizer existed (their config_ini's data.tokenizer says "bytes").
  std::optional<CheckpointTokenizer> tokenizer{};
};

// One arena-shaped set of tensors: the dataset <prefix>/<Hugging Face path> of every parameter of the table
// ("/model", "/optimizer/exp_avg", "/optimizer/exp_avg_sq", "/optimizer/momentum_buffer").
// data holds the arena elements [begin, end): data[0] is arena element `begin`.
struct TensorSet {
  std::string prefix;
  float* data = nullptr;
  size_t begin = 0;
  size_t end = SIZE_MAX;  // SIZE_MAX: the end of the arena (table.total_numel())
};

// A flat float array of this rank's own: /ranks/<r>/<name>.
struct RankArray {
  std::string name;
  float* data = nullptr;
  size_t len = 0;
};

// The tensor sets ember writes: the weights, AdamW's moments (sync mode) and the center's momentum (async mode).
inline constexpr const char* SET_MODEL = "/model";
inline constexpr const char* SET_EXP_AVG = "/optimizer/exp_avg";
inline constexpr const char* SET_EXP_AVG_SQ = "/optimizer/exp_avg_sq";
inline constexpr const char* SET_MOMENTUM = "/optimizer/momentum_buffer";

// What one rank writes into a checkpoint.
// Saving over several ranks, the ranges of all ranks must partition [0, total_numel()) (checked; the alignment
// padding between tensors inside a range is simply not written). ZeRO-1 passes its shard; plain data parallel
// passes an equal contiguous split, or the default whole range on every rank, which the save then splits evenly
// itself. A rank may write nothing of the arena ([total, total)), as the workers of an async run do, while another
// writes it all. A prefix must be an absolute path clear of /config, /optimizer itself, /ranks and of every other
// set's prefix.
struct CheckpointContents {
  std::vector<TensorSet> sets;         // every rank lists the same prefixes in the same order; /model first
  size_t write_begin = 0;              // the arena range this rank writes of every set; the ranges of all ranks
  size_t write_end = SIZE_MAX;         // partition the arena, or every rank passes the whole arena and the save
                                       // splits it evenly; a set's [begin, end) must cover the write range
                                       // (data may be null where the write range is empty)
  std::vector<RankArray> rank_arrays;  // this rank's arrays, named as meta.ranks[rank].arrays, in that order
};

// Path of the checkpoint for `step` inside `folder`: folder/step_00001000.h5.
std::string checkpoint_path(const std::string& folder, int64_t step);

// Writes folder/step_<8 digits>.h5 via a .tmp file (flushed, closed, fsynced, renamed), points folder/latest at it
// atomically, and deletes all but the newest `keep_latest_k` step_*.h5. On failure (unwritable folder, full disk)
// throws ember::Error and leaves earlier checkpoints and `latest` untouched. Returns the path written.
// Collective over `world`: every rank calls it with the same meta (meta.ranks holds every rank's state, and
// meta.ranks.size() == meta.world_size), the same set prefixes and its own contents; with several ranks the file is
// written once through MPI-IO, each rank writing its write range of every set into the full logical datasets, and
// its own /ranks/<r> arrays, with collective transfers. Only ranks of the save can own arrays: entry r of meta.ranks
// may list arrays only when r < world.size. A failure on any rank fails the save on every rank with the same
// ember::Error, and every rank returns the same path. With one rank (self_world()) the file is written serially and
// nothing is communicated.
std::string save_checkpoint(const std::string& folder, const CheckpointMeta& meta, const ParamTable& table,
                            const CheckpointContents& contents, int keep_latest_k, const World& world);

// Reads and validates format name, version and metadata: every attribute in its domain and consistent with the
// others and with the tensors it sizes (docs/checkpoint-format.md, "Checks on read"). Throws ember::Error naming the
// file and the attribute with its value and what it should be, with a hint.
CheckpointMeta read_checkpoint_meta(const std::string& path);

// The tokenizer recorded in the checkpoint at `path` (read_checkpoint_meta(path).tokenizer): nothing for a file
// written before checkpoints recorded it. A malformed /tokenizer group is an error naming the attribute or dataset.
std::optional<CheckpointTokenizer> read_checkpoint_tokenizer(const std::string& path);

// Reads each set's arena range [begin, end) out of the full datasets, after checking that every dataset of `table`
// under each set's prefix exists with its exact shape (mismatch: an error naming the dataset, both shapes and a
// hint; a set the file lacks is a "missing dataset" error); the Fletcher32 filter turns corruption into an error
// too, and so does a NaN or inf among the values read (naming the dataset and the count). A set with null data is
// skipped. Because ranges are read out of the full datasets, a checkpoint written by N
// ranks loads at any other world size (resharding). Fills `meta` as read_checkpoint_meta does.
void load_checkpoint(const std::string& path, const ParamTable& table, const std::vector<TensorSet>& sets,
                     CheckpointMeta& meta);

// The /model weights of the checkpoint at `path`, in the arena layout of ParamTable(model), read as load_checkpoint
// reads them (every dataset checked); what eval, generate, serve and export start from.
std::vector<float> load_model_weights(const std::string& path, const ModelConfig& model);

// Reads /ranks/<rank>/<name> into each array's data (len floats). Returns false when the file has no /ranks/<rank>
// group or that group lacks any of the names (a restart with more workers than the writer had); a dataset of the
// wrong length or a corrupted one throws ember::Error naming file and dataset, with a hint. Every dataset is checked
// before any is read, so on false or a shape error no data is written.
bool load_rank_arrays(const std::string& path, int rank, const std::vector<RankArray>& arrays);

// Resolves a --resume value: "" -> "" (fresh start); "auto" -> the checkpoint `latest` names in `folder`, or the
// newest step_*.h5 if `latest` is missing, or "" if the folder has none; anything else must be an existing file.
// Every candidate is verified in full (verify_checkpoint). With "auto", an unreadable one (missing, truncated,
// corrupted) is skipped with a warning naming it and the reason, falling back to the next older step_*.h5; none
// valid -> ember::Error (never a silent fresh start). An explicit path that fails verification throws its Error.
std::string resolve_resume(const std::string& folder, const std::string& resume);

// One dataset of a checkpoint file as a full read found it (ember inspect).
struct CheckpointDatasetReport {
  std::string path;             // e.g. /model/transformer/wte/weight
  std::vector<uint64_t> shape;  // empty for a scalar
  std::string dtype;            // float32, string, ...
  bool ok = false;              // read in full without error (Fletcher32 verified every chunk), no NaN or inf
  std::string problem;          // when !ok: "corrupted (checksum mismatch)", "holds N non-finite value(s) (NaN or
                                // inf)" or HDF5's reason
};

// Reads every dataset of the checkpoint at `path` in full and reports each, in natural path order (h/2 before h/10);
// a damaged dataset is reported and the scan goes on. Throws ember::Error only when the file cannot be opened or
// listed.
std::vector<CheckpointDatasetReport> scan_checkpoint(const std::string& path);

// Full verification: the metadata reads and validates (read_checkpoint_meta), every weight dataset of the model it
// describes is present with its shape, and every dataset in the file reads back in full (Fletcher32 checksums).
// Throws ember::Error naming the file and the first problem. Reads the whole file once.
void verify_checkpoint(const std::string& path);

}  // namespace ember
