// HDF5 checkpoints (layout in docs/checkpoint-format.md): fp32 weights under Hugging Face GPT-2 paths, AdamW state,
// run metadata and per-rank state. Written atomically (temp file, fsync, rename, then `latest`), newest K kept.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/model_config.h"
#include "model/param_table.h"

namespace ember {

constexpr const char* CHECKPOINT_FORMAT = "ember-checkpoint";
constexpr int CHECKPOINT_FORMAT_VERSION = 1;

// Everything in a checkpoint except the big tensors.
struct CheckpointMeta {
  int64_t step = 0;  // optimizer steps completed
  int64_t tokens_seen = 0;
  int world_size = 1;
  std::string mode = "sync";
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
  uint64_t async_version = 0;  // async mode: version of the center's parameters (stored only when mode == "async")
};

// Host-side views of the arenas. params always holds the whole arena (ParamTable::total_numel() floats).
// The optimizer state may be a ZeRO-1 shard: exp_avg and exp_avg_sq then hold only the arena's flat element range
// [shard_begin, shard_end) (their element 0 is arena element shard_begin); by default they hold the whole arena.
// m and v may be null when only weights are needed (eval, generate).
// Saving over several ranks, [shard_begin, shard_end) is also the range this rank WRITES, of the weights and of both
// moments alike, and the ranges of all ranks must partition [0, total_numel()) (checked; the alignment padding
// between tensors inside a range is simply not written). ZeRO-1 passes its shard; plain data parallel passes an
// equal contiguous split with exp_avg/exp_avg_sq offset to it (m.data() + shard_begin), or the default whole range
// on every rank, which the writer then splits evenly itself. Loading reads the weights whole and the moments of
// [shard_begin, shard_end) only, whatever split wrote the file. A rank may write nothing of the arena
// ([total, total)), as the workers of an async run do, while another writes it all.
struct CheckpointTensors {
  float* params = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  size_t shard_begin = 0;
  size_t shard_end = SIZE_MAX;  // SIZE_MAX: the end of the arena
  // Further arena-shaped tensor sets, written like /model (same per-rank write range, same Hugging Face paths)
  // under their own prefix, e.g. {"/optimizer/momentum_buffer", ptr}; base holds the whole arena (element 0 =
  // arena element 0). Every rank of a save passes the same prefixes in the same order; a rank whose write range
  // is empty may pass nullptr. A prefix may not be /model, /config, /optimizer or lie under /model, /ranks,
  // /optimizer/exp_avg or /optimizer/exp_avg_sq. On load, each listed set is read whole (shape-checked like /model);
  // a nullptr base is skipped.
  std::vector<std::pair<std::string, float*>> extra_sets{};
  // Per-rank flat arrays /ranks/<r>/<name>, float32, length rank_array_len each: this rank's own arrays (names
  // must equal meta.ranks[r].arrays for this rank r). Other ranks' arrays are created collectively but written
  // only by their owner. Each rank passes the length of its own arrays (a rank without arrays may pass 0); with
  // arrays it must be positive.
  std::vector<std::pair<std::string, const float*>> rank_arrays{};
  size_t rank_array_len = 0;
};

// Path of the checkpoint for `step` inside `folder`: folder/step_00001000.h5.
std::string checkpoint_path(const std::string& folder, int64_t step);

// Writes folder/step_<8 digits>.h5 via a .tmp file (flushed, closed, fsynced, renamed), points folder/latest at it
// atomically, and deletes all but the newest `keep_latest_k` step_*.h5. On failure (unwritable folder, full disk)
// throws ember::Error and leaves earlier checkpoints and `latest` untouched. Returns the path written.
// Collective over `comm`: every rank calls it with the same meta (meta.ranks holds every rank's state, and
// meta.ranks.size() == meta.world_size) and its own tensors; with several ranks the file is written once through
// MPI-IO, each rank writing its optimizer shard (and a share of the weights and extra sets) into the full logical
// datasets, and its own /ranks/<r> arrays, with collective transfers. Only ranks of the save can own arrays: entry r
// of meta.ranks may list arrays only when r < the size of `comm`. A failure on any rank fails the save on every rank
// with the same ember::Error, and every rank returns the same path. With one rank (MPI_COMM_SELF) the file is
// written serially and nothing is communicated.
std::string save_checkpoint(const std::string& folder, const CheckpointMeta& meta, const ParamTable& table,
                            const CheckpointTensors& tensors, int keep_latest_k, MPI_Comm comm = MPI_COMM_SELF);

// Reads and validates format name, version and metadata (throws ember::Error naming the file, with a hint).
CheckpointMeta read_checkpoint_meta(const std::string& path);

// Loads the tensors after checking that every dataset of `table` exists with its exact shape (mismatch: an error
// naming the dataset, both shapes and a hint); the Fletcher32 filter turns corruption into an error too.
// Fills `meta` as read_checkpoint_meta does. The optimizer shard [shard_begin, shard_end) is read out of the full
// datasets, so a checkpoint written by N ranks loads at any other world size (resharding). Each of
// tensors.extra_sets is read whole; one the file lacks is a "missing dataset" error. rank_arrays are not read here
// (load_rank_arrays).
void load_checkpoint(const std::string& path, const ParamTable& table, const CheckpointTensors& tensors,
                     CheckpointMeta& meta);

// Reads /ranks/<rank>/<name> for each name into dst (len floats each). Returns false when the file has no
// /ranks/<rank> group or that group lacks any of the names (a restart with more workers than the writer had);
// a dataset of the wrong length or a corrupted one throws ember::Error naming file and dataset, with a hint.
// Every dataset is checked before any is read, so on false or a shape error no dst is written.
bool load_rank_arrays(const std::string& path, int rank, const std::vector<std::pair<std::string, float*>>& dst,
                      size_t len);

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
  bool ok = false;              // read in full without error (Fletcher32 verified every chunk)
  std::string problem;          // when !ok: "corrupted (checksum mismatch)" or HDF5's reason
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
