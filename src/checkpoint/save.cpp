// HDF5 checkpoints, saving: the protocol across ranks, in phases whose outcome all ranks agree on so that every
// rank returns the same path or throws the same error, and the checks of what each rank was asked to write.
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "checkpoint/checkpoint.h"
#include "checkpoint/folder.h"
#include "checkpoint/h5.h"
#include "checkpoint/layout.h"
#include "core/error.h"
#include "core/timer.h"
#include "parallel/host_collectives.h"

namespace ember {
namespace {

using namespace checkpoint_detail;

// `fn` with any exception other than ember::Error turned into one that says the save failed, for the phases of a
// save (run_agreed, attempt) whose failures all ranks agree on.
std::function<void()> save_step(std::function<void()> fn) {
  return [fn = std::move(fn)] {
    try {
      fn();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(std::string("checkpoint save failed: ") + e.what(), HINT_WRITE);
    }
  };
}

// A phase of the save on every rank (or on rank 0 only); every rank throws the agreed error, if any.
void phase(const World& world, bool root_only, std::function<void()> fn) {
  run_agreed(world, root_only, save_step(std::move(fn)), HINT_WRITE);
}

// FNV-1a over everything that must be identical on all ranks of a save: parallel HDF5 requires identical metadata
// operations, and a rank writing different attributes would corrupt the file silently.
class Digest {
 public:
  template <typename T>
  Digest& add(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes(&v, sizeof(T));
    return *this;
  }
  Digest& add(const std::string& s) {
    add(s.size());
    bytes(s.data(), s.size());
    return *this;
  }
  uint64_t value() const { return h_; }

 private:
  void bytes(const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  }
  uint64_t h_ = 14695981039346656037ull;
};

uint64_t save_digest(const std::string& folder, const CheckpointMeta& m, const CheckpointContents& c, size_t total,
                     int keep_latest_k) {
  Digest d;
  d.add(folder).add(keep_latest_k).add(total);
  d.add(m.step).add(m.tokens_seen).add(m.world_size).add(m.mode).add(m.config_ini);
  d.add(m.model.n_layer).add(m.model.n_head).add(m.model.n_embd).add(m.model.block_size).add(m.model.vocab_size);
  d.add(m.optimizer_step).add(m.beta1).add(m.beta2).add(m.eps).add(m.weight_decay).add(m.lr).add(m.async_version);
  d.add(m.precision);
  d.add(int(m.model.position)).add(m.model.rope_theta).add(m.model.attention_windows.size());
  for (int w : m.model.attention_windows) d.add(w);
  d.add(m.model.alibi_slopes.size());
  for (float s : m.model.alibi_slopes) d.add(s);
  for (const CheckpointMeta::RankState& r : m.ranks) {
    d.add(r.data_cursor).add(r.rng_offset).add(r.role).add(r.optimizer_step).add(r.seq).add(r.arrays.size());
    for (const std::string& name : r.arrays) d.add(name);
  }
  const CheckpointTokenizer tok = m.tokenizer.value_or(CheckpointTokenizer{});
  d.add(tok.kind).add(tok.fingerprint).add(tok.vocab_size).add(tok.files.size());
  for (const auto& [name, contents] : tok.files) d.add(name).add(contents);
  d.add(c.sets.size());
  for (const TensorSet& set : c.sets) d.add(set.prefix);
  return d.value();
}

// True when `path` is `prefix` or lies under it.
bool under(const std::string& path, const std::string& prefix) {
  return path == prefix || path.rfind(prefix + "/", 0) == 0;
}

// Checks that the set prefixes name datasets of their own (the caller's mistakes, so assertions): /model first,
// each an absolute path clear of the fixed layout (/config, the /optimizer group's attributes, /ranks) and of every
// other set, which it would otherwise overwrite or nest in.
void check_set_prefixes(const std::vector<TensorSet>& sets) {
  EMBER_ASSERT(!sets.empty() && sets[0].prefix == SET_MODEL,
               "CheckpointContents::sets must start with the weights (/model): a file without them does not verify");
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::string& prefix = sets[i].prefix;
    EMBER_ASSERT(prefix.size() > 1 && prefix[0] == '/' && prefix.back() != '/' &&
                     prefix.find("//") == std::string::npos && prefix != "/config" && prefix != "/optimizer" &&
                     !under(prefix, "/ranks"),
                 "CheckpointContents::sets prefix \"" + prefix + "\" is not an absolute path of its own");
    for (size_t j = 0; j < i; ++j)
      EMBER_ASSERT(!under(prefix, sets[j].prefix) && !under(sets[j].prefix, prefix),
                   "CheckpointContents::sets prefix \"" + prefix + "\" overlaps the set \"" + sets[j].prefix + "\"");
  }
}

// Checks the per-rank arrays: valid dataset names, listed only for ranks that take part in the save (anything else
// would leave a dataset unwritten), and this rank's arrays named as its entry of meta.ranks, with data.
void check_rank_arrays(const CheckpointMeta& meta, const std::vector<RankArray>& arrays, int rank, int size) {
  for (size_t r = 0; r < meta.ranks.size(); ++r) {
    for (const std::string& name : meta.ranks[r].arrays)
      EMBER_ASSERT(!name.empty() && name != "." && name.find('/') == std::string::npos,
                   "CheckpointMeta::ranks[" + std::to_string(r) + "].arrays holds the invalid name \"" + name + "\"");
    EMBER_ASSERT(meta.ranks[r].arrays.empty() || r < size_t(size),
                 "CheckpointMeta::ranks[" + std::to_string(r) + "] lists arrays but no rank " + std::to_string(r) +
                     " takes part in the save to write them");
  }
  std::vector<std::string> names;
  for (const RankArray& a : arrays) {
    EMBER_ASSERT(a.data != nullptr, "CheckpointContents::rank_arrays entry \"" + a.name + "\" has no data");
    EMBER_ASSERT(a.len > 0, "CheckpointContents::rank_arrays entry \"" + a.name + "\" needs a positive len");
    names.push_back(a.name);
  }
  const std::vector<std::string> none;
  EMBER_ASSERT(names == (size_t(rank) < meta.ranks.size() ? meta.ranks[size_t(rank)].arrays : none),
               "CheckpointContents::rank_arrays must be named as CheckpointMeta::ranks[" + std::to_string(rank) +
                   "].arrays, in the same order");
}

// Checks that every set holds the arena range this rank writes.
void check_sets_cover(const std::vector<TensorSet>& sets, ArenaRange write, size_t total) {
  if (write.begin == write.end) return;
  for (const TensorSet& set : sets)
    EMBER_ASSERT(set.data != nullptr && set.begin <= write.begin && write.end <= std::min(set.end, total),
                 "CheckpointContents::sets \"" + set.prefix + "\" must hold the write range [" +
                     std::to_string(write.begin) + ", " + std::to_string(write.end) + ") of the parameter arena");
}

// The arena range this rank writes, after checking on the gathered ranges of all ranks that the arguments agree and
// the ranges partition the arena (every rank sees the same data, so all reach the same verdict; a rank may hold an
// empty range). When every rank passes the whole arena, rank r writes the r-th of `size` equal contiguous pieces.
ArenaRange agree_write_range(const World& world, ArenaRange held, size_t total, uint64_t digest) {
  const char* const hint_bug = "this is a bug in ember; please report it";
  if (world.size == 1) {
    if (held.begin != 0 || held.end != total)
      throw Error("checkpoint save: a single rank must write the whole parameter arena [0, " + std::to_string(total) +
                      ") but was given [" + std::to_string(held.begin) + ", " + std::to_string(held.end) + ")",
                  hint_bug);
    return held;
  }
  const int n = world.size;
  constexpr size_t K = 3;  // values gathered per rank
  const uint64_t mine[K] = {held.begin, held.end, digest};
  const std::vector<uint64_t> all = all_gather_values(world, mine, int(K));
  bool whole = true;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (int r = 0; r < n; ++r) {
    const uint64_t b = all[K * size_t(r)], e = all[K * size_t(r) + 1];
    if (all[K * size_t(r) + 2] != all[2])
      throw Error("checkpoint save: rank " + std::to_string(r) +
                      " was called with other metadata than rank 0 (step, "
                      "config, per-rank state, folder, keep_latest_k or the set prefixes differ)",
                  hint_bug);
    whole = whole && b == 0 && e == total;
    ranges.emplace_back(b, e);
  }
  if (whole)
    return ArenaRange{size_t(uint64_t(total) * uint64_t(world.rank) / uint64_t(n)),
                      size_t(uint64_t(total) * uint64_t(world.rank + 1) / uint64_t(n))};
  std::vector<std::pair<uint64_t, uint64_t>> sorted = ranges;
  std::sort(sorted.begin(), sorted.end());
  uint64_t next = 0;
  for (const auto& [b, e] : sorted) {
    if (b != next) {
      std::string list;
      for (int r = 0; r < n; ++r)
        list += (r ? ", " : "") + std::to_string(r) + ": [" + std::to_string(ranges[size_t(r)].first) + ", " +
                std::to_string(ranges[size_t(r)].second) + ")";
      throw Error("checkpoint save: the ranks' shard ranges do not partition the parameter arena [0, " +
                      std::to_string(total) + ") (rank " + list + ")",
                  hint_bug);
    }
    next = e;
  }
  if (next != total)
    throw Error("checkpoint save: the ranks' shard ranges end at " + std::to_string(next) +
                    ", not at the end of the "
                    "parameter arena " +
                    std::to_string(total),
                hint_bug);
  return held;
}

// The length of every rank's arrays, [r][k] for meta.ranks[r].arrays[k]: each rank knows only its own, but every
// rank creates every dataset. Collective; called once the digest has shown that meta is the same on every rank, so
// every rank gathers the same count.
std::vector<std::vector<uint64_t>> gather_array_lens(const World& world, const CheckpointMeta& meta,
                                                     const std::vector<RankArray>& arrays) {
  size_t most = 0;
  for (const CheckpointMeta::RankState& r : meta.ranks) most = std::max(most, r.arrays.size());
  std::vector<std::vector<uint64_t>> lens(meta.ranks.size());
  if (most == 0) return lens;
  std::vector<uint64_t> mine(most, 0);
  for (size_t k = 0; k < arrays.size(); ++k) mine[k] = arrays[k].len;
  const std::vector<uint64_t> all = all_gather_values(world, mine.data(), int(most));
  for (size_t r = 0; r < lens.size() && r < size_t(world.size); ++r)
    lens[r].assign(all.begin() + std::ptrdiff_t(r * most),
                   all.begin() + std::ptrdiff_t(r * most + meta.ranks[r].arrays.size()));
  return lens;
}

// How long a rank that failed while the file was being written waits for the other ranks to agree on the step before
// it takes one of them to be stuck in a collective call it left, and ends the job. A healthy rank reaches the agreement
// as soon as its own part of the step is done: one dataset's range or a flush, into space checked beforehand; that
// takes well under a second for the tensors of a GPT-2 XL split over a handful of ranks on a 100 MB/s disk.
constexpr double STUCK_AFTER_S = 15.0;

// Creates the .tmp file and writes its contents. With several ranks the file is opened through MPI-IO and every step
// is a collective HDF5 operation, followed by an agreement of all ranks on its outcome.
//
// Why no rank is left waiting. A rank can only be blocked inside a collective call of HDF5 or MPI-IO that another rank
// left early, after a local failure (HDF5 returns from its error paths at once, skipping the collective calls that
// would have followed). The protocol keeps that from happening where it can, and bounds it where it cannot:
//  - Every rank has checked the free space, with a margin, before the file is created (save_checkpoint): a full disk
//    normally stops the save before a byte is written.
//  - The raw data of every dataset goes to the file through independent MPI-IO writes (H5FD_MPIO_INDIVIDUAL_IO).
//    HDF5 1.10 still runs the chunk bookkeeping of the filtered (Fletcher32) datasets collectively, but the write that
//    meets a full or failing disk is local: it fails on its rank instead of stranding the others in the exchanges of
//    a two-phase collective write.
//  - Agreements take place only between HDF5 calls, on world.comm (HDF5 works on a duplicate of it), and a rank that
//    failed the step waits for the agreement at most STUCK_AFTER_S. A rank missing by then is inside a collective call
//    the failed rank left, and will never return from it: the failed rank removes the temp file, reports the save's
//    error and aborts the job (abort_job). It must not throw instead: unwinding would close the file, which is itself
//    a collective call the stuck ranks cannot join.
//  - After an agreed failure every rank is outside HDF5; the file is emptied, then closed under the same bounded
//    agreement, so that a close failing on one rank while the others stay in its collective metadata flush also ends
//    the job.
// A rank without an error waits for the others without bound: a slow disk is not a failure.
// Throws the agreed error on every rank.
void write_file(const World& world, const std::string& path, const CheckpointMeta& meta, const ParamTable& table,
                const WriteSource& src) {
  const bool parallel = world.size > 1;
  H5Handle file, dxpl;
  std::optional<Error> failed;
  const auto stuck = [&](const Error& local) {
    (void)::unlink(path.c_str());
    abort_job(world, failed ? *failed : local);
  };
  const auto agreed_step = [&](std::function<void()> fn) {
    return agree_on_error_within(world, attempt(save_step(std::move(fn)), HINT_WRITE), STUCK_AFTER_S, stuck);
  };
  failed = agreed_step([&] {
    H5Handle fapl = checkpoint_fapl(true);
    dxpl = EMBER_H5_OWN(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
    if (parallel) {
      EMBER_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), world.comm, MPI_INFO_NULL));
      // Metadata leaves in a few collective writes instead of many small ones from each rank.
      EMBER_H5_CHECK(H5Pset_coll_metadata_write(fapl.get(), true));
      // Parallel HDF5 1.10 writes filtered (Fletcher32) chunked datasets only with collective transfers; their data
      // still leaves each rank in independent writes, so that a failing disk fails the write on its own rank only.
      EMBER_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
      EMBER_H5_CHECK(H5Pset_dxpl_mpio_collective_opt(dxpl.get(), H5FD_MPIO_INDIVIDUAL_IO));
    }
    file = H5Handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    if (file.get() < 0) fail_io(path, "cannot create the file", HINT_WRITE);
  });
  if (!failed)
    for (const std::function<void()>& step : content_steps(file.get(), meta, table, src, dxpl.get(), parallel, path))
      if ((failed = agreed_step(step))) break;
  if (!failed)
    failed = agreed_step([&] {
      const std::string fault = injected_fault(world.rank, "flush");
      if (!fault.empty()) throw Error("checkpoint " + path + ": cannot flush the file: " + fault, HINT_WRITE);
      if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) fail_io(path, "cannot flush the file", HINT_WRITE);
    });
  if (failed) {
    // The file is going away. Emptying it first gives a full disk back the blocks written so far, so that the
    // metadata flush inside the close below succeeds: HDF5 1.10 cannot release a file whose close failed and then
    // crashes at exit on it. The barrier orders the truncation before every rank's close.
    const bool open = file.get() >= 0;
    if (world.rank == 0 && open) (void)::truncate(path.c_str(), 0);
    barrier(world);
    std::optional<Error> local = attempt([&] { (void)file.close(); }, HINT_WRITE);
    // A rank without the file (its create failed) holds the save's error too: were the create to have succeeded
    // elsewhere, the close there would wait for this rank forever.
    if (!open) local = failed;
    (void)agree_on_error_within(world, local, STUCK_AFTER_S, stuck);
    throw *failed;
  }
  failed = agreed_step([&] {
    const std::string fault = injected_fault(world.rank, "close");
    if (!fault.empty()) throw Error("checkpoint " + path + ": cannot close the file: " + fault, HINT_WRITE);
    if (file.close() < 0) fail_io(path, "cannot close the file", HINT_WRITE);
  });
  if (failed) throw *failed;
}

// Adds /config and /tokenizer to a file written in parallel, reopened by one process with the serial driver: parallel
// HDF5 1.10 cannot write variable-length data ("Parallel IO does not support writing VL datatypes yet"), and keeping
// /config a variable-length string keeps files written by any number of ranks identical in layout. /tokenizer goes
// with it, so that its small datasets are written in one place whatever the number of ranks.
void add_config(const std::string& path, const CheckpointMeta& meta) {
  H5Handle fapl = checkpoint_fapl(true);
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose);
  if (file.get() < 0) fail_io(path, "cannot reopen the file to add /config", HINT_WRITE);
  write_config(file.get(), meta.config_ini, path);
  write_tokenizer(file.get(), meta.tokenizer.value_or(CheckpointTokenizer{}), path);
  if (file.close() < 0) fail_io(path, "cannot close the file", HINT_WRITE);
}

}  // namespace

std::string save_checkpoint(const std::string& folder, const CheckpointMeta& meta, const ParamTable& table,
                            const CheckpointContents& contents, int keep_latest_k, const World& world) {
  H5Quiet quiet;
  const size_t total = table.total_numel();
  const ArenaRange held{contents.write_begin, std::min(contents.write_end, total)};
  // Arguments are checked on every rank and the verdict agreed: a caller's mistake on one rank fails all of them.
  phase(world, false, [&] {
    EMBER_ASSERT(meta.step >= 0, "checkpoint step must be non-negative");
    EMBER_ASSERT(meta.world_size >= 1 && meta.ranks.size() == size_t(meta.world_size),
                 "CheckpointMeta::ranks must hold one entry per rank (world_size)");
    const ParamTable expected(meta.model);  // the root attributes describe the datasets, so they must agree
    EMBER_ASSERT(expected.params().size() == table.params().size() && expected.total_numel() == total,
                 "CheckpointMeta::model does not match the ParamTable being saved");
    EMBER_ASSERT(held.begin <= held.end, "CheckpointContents write range is reversed or starts past the arena");
    if (meta.tokenizer)
      EMBER_ASSERT(parse_tokenizer_kind(meta.tokenizer->kind) && !meta.tokenizer->fingerprint.empty() &&
                       meta.tokenizer->vocab_size >= 1,
                   "CheckpointMeta::tokenizer needs a kind, a fingerprint and a vocab_size >= 1");
    check_set_prefixes(contents.sets);
    check_rank_arrays(meta, contents.rank_arrays, world.rank, world.size);
  });
  const uint64_t digest = save_digest(folder, meta, contents, total, keep_latest_k);
  const ArenaRange write = agree_write_range(world, held, total, digest);
  const WriteSource src{contents.sets, write, world.rank, contents.rank_arrays,
                        gather_array_lens(world, meta, contents.rank_arrays)};
  phase(world, false, [&] { check_sets_cover(contents.sets, write, total); });

  const fs::path dir = folder_path(folder);
  const std::string final_path = checkpoint_path(folder, meta.step);
  const std::string tmp_path = final_path + ".tmp";
  const std::string name = fs::path(final_path).filename().string();
  CheckpointMeta full = meta;
  // rank 0's clock: the attribute must be identical everywhere
  full.created = broadcast_string(world, world.rank == 0 ? utc_timestamp() : "", 0);
  full.version = EMBER_VERSION;

  std::optional<TempFile> guard;  // on rank 0: removes the temp file unless the save completes
  phase(world, true, [&] { make_folder(dir); });
  // Every rank checks the room before any rank writes (its own `ulimit -f`, and the disk as it sees it), with a margin
  // of a tenth over the estimate for whatever else writes to the same disk meanwhile: a full disk stops the save here,
  // with one clear message, instead of inside a collective write.
  phase(world, false, [&] {
    std::vector<uint64_t> flat_lens;
    for (const std::vector<uint64_t>& lens : src.array_lens)
      flat_lens.insert(flat_lens.end(), lens.begin(), lens.end());
    const uint64_t need =
        estimated_file_bytes(table, src.sets.size(), flat_lens,
                             meta.config_ini.size() + tokenizer_bytes(meta.tokenizer.value_or(CheckpointTokenizer{})));
    check_room(dir, final_path, need + need / 10);
    if (world.rank == 0) guard.emplace(tmp_path);
  });
  write_file(world, tmp_path, full, table, src);
  // Only now, with the new file complete and durable, does `latest` move and do old checkpoints go.
  phase(world, true, [&] {
    if (world.size > 1) add_config(tmp_path, full);
    fsync_file(tmp_path);
    rename_file(tmp_path, final_path);
    guard->release();
    fsync_dir(dir);
    write_latest(dir, name);
    prune(dir, keep_latest_k, name);
  });
  return final_path;
}

}  // namespace ember
