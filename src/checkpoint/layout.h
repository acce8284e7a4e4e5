// The checkpoint file layout (internal to src/checkpoint): writing the datasets and attributes of
// docs/checkpoint-format.md, one rank's part of each at a time (layout_write.cpp), and reading them back whole or
// as a flat range (layout_read.cpp).
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/h5.h"

namespace ember::checkpoint_detail {

// A range [begin, end) of flat element indices of the parameter arena.
struct ArenaRange {
  size_t begin = 0;
  size_t end = 0;
};

// What one rank writes: the elements of `write` in every set, and its own /ranks/<rank>/<name> arrays. Every
// rank lists the same set prefixes; a set's data covers `write` (it may be null when `write` is empty).
struct WriteSource {
  std::vector<TensorSet> sets;
  ArenaRange write;
  int rank = 0;                                     // this rank's index in the save
  std::vector<RankArray> rank_arrays;               // named as meta.ranks[rank].arrays
  std::vector<std::vector<uint64_t>> array_lens{};  // [r][k]: length of meta.ranks[r].arrays[k], every rank r
};

// How checkpoint/h5.h helpers word failures in checkpoint `file`.
H5Context h5_context(const std::string& file);

// Failure of an HDF5 call on checkpoint `file`: "checkpoint F: <what>: <HDF5's reason>" with `hint`.
[[noreturn]] void fail_io(const std::string& file, const std::string& what, const char* hint);

// Test-only fault injection, for the tests of failed saves; nothing else sets it. EMBER_TEST_FAIL_WRITE=<rank>:<what>
// makes rank <rank> fail, as a full disk (ENOSPC) would, the first time it reaches a write whose name contains
// <what>: a dataset path ("/model/", "exp_avg_sq"), "flush" (the flush of the whole file) or "close" (its close).
// The rank fails without entering the HDF5 call, as a rank does that leaves a collective call early: the other ranks
// are left inside it. Returns the injected error's reason, or "" where no fault is asked for.
std::string injected_fault(int rank, const std::string& what);

// Dataset path of a parameter: the Hugging Face key with '.' -> '/', under `prefix` ("/model", "/optimizer/exp_avg").
std::string tensor_path(const std::string& prefix, const std::string& hf_name);

// Bytes a checkpoint of `table` takes on disk (tensors, checksums, metadata), for the free-space check:
// `arena_copies` arena-shaped tensor sets (/model, each moment, the momentum), one flat dataset per entry of
// `flat_lens` (its length in floats: the /ranks/<r>/<name> arrays) and `config_bytes` of configuration text.
uint64_t estimated_file_bytes(const ParamTable& table, size_t arena_copies, const std::vector<uint64_t>& flat_lens,
                              size_t config_bytes);

// File access properties for checkpoints: no file locking, and v1.8 object format (metadata checksums) for writes.
H5Handle checkpoint_fapl(bool for_writing);

// The writing of one file's contents as a sequence of steps (root attributes, /optimizer, /ranks, one dataset
// each); the sets outside /optimizer come before that group is created, the sets inside it after. Every step closes
// what it opens. In a parallel file (`parallel`: opened with the MPI-IO driver) each step is collective: all ranks run
// the same steps in the same order, with identical metadata, each writing only `src.write` of every tensor, and of the
// /ranks/<r> arrays only its own, through `dxpl`; /config is then left out (parallel HDF5 1.10 cannot write
// variable-length data) and written afterwards by write_config on a serial reopen of the file. `src` must outlive the
// steps.
std::vector<std::function<void()>> content_steps(hid_t file_id, const CheckpointMeta& meta, const ParamTable& table,
                                                 const WriteSource& src, hid_t dxpl, bool parallel,
                                                 const std::string& file);

// Creates and writes /config (a scalar variable-length string) in the open serial file.
void write_config(hid_t file_id, const std::string& config_ini, const std::string& file);

// Creates and writes the group /tokenizer (layout_tokenizer.cpp): attributes kind, fingerprint and vocab_size, and
// one 1-d uint8 dataset per file holding its bytes verbatim. Written with /config, in the serial part of a save.
void write_tokenizer(hid_t file_id, const CheckpointTokenizer& tokenizer, const std::string& file);

// Reads /tokenizer back; nothing when the file has no such group (written before it existed). Checks the kind, a
// non-empty fingerprint, vocab_size >= 1 and that every member is a 1-d uint8 dataset.
std::optional<CheckpointTokenizer> read_tokenizer(hid_t file_id, const std::string& file);

// Bytes the tokenizer's files take (for the free-space estimate).
size_t tokenizer_bytes(const CheckpointTokenizer& tokenizer);

// Opens an existing checkpoint read-only (sec2 driver); missing, non-HDF5 and truncated files get their own message.
H5Handle open_checkpoint(const std::string& path);

// Reads and validates the root attributes, /config, /optimizer and every /ranks/<r> (attributes added after the
// first files, such as async_version and role, default when absent).
CheckpointMeta read_meta(hid_t file_id, const std::string& file);

// Opens the dataset at `path` and checks it is a float tensor of exactly `expected` dims (missing or mismatched:
// an error naming the dataset, both shapes and the model config the file was written for, or for a missing optimizer
// set the mode it was written in).
H5Handle open_tensor_checked(hid_t file_id, const std::string& path, const std::vector<hsize_t>& expected,
                             const CheckpointMeta& meta, const std::string& file);

// Reads the flat element range [lo, hi) of the float dataset `dset` (shape `dims`) into dst[0 .. hi - lo); a
// checksum failure is reported as "dataset D is corrupted (checksum mismatch)".
void read_tensor_range(hid_t dset, const std::vector<hsize_t>& dims, hsize_t lo, hsize_t hi, float* dst,
                       const std::string& path, const std::string& file);

// Reads every dataset of the open file in full and reports each (CheckpointDatasetReport), in natural order
// (h/2 before h/10); a damaged dataset is reported and the scan goes on.
std::vector<CheckpointDatasetReport> scan_datasets(hid_t file_id, const std::string& file);

std::vector<hsize_t> to_dims(const std::vector<int64_t>& shape);

}  // namespace ember::checkpoint_detail
