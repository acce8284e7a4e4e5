// HDF5 checkpoints (public API): the save protocol across ranks, in phases whose outcome all ranks agree on so that
// every rank returns the same path or throws the same error, loading of any shard, verification and --resume.
#include "train/checkpoint.h"

#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/h5.h"
#include "core/log.h"
#include "dist/mpi_check.h"
#include "train/checkpoint_files.h"
#include "train/checkpoint_io.h"

namespace ember {
namespace {

using namespace checkpoint_detail;

// Runs `fn`; returns the ember::Error it threw, if any (any other exception is turned into one).
std::optional<Error> attempt(const std::function<void()>& fn) {
  try {
    fn();
    return std::nullopt;
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    return Error(std::string("checkpoint save failed: ") + e.what(), HINT_WRITE);
  }
}

// The ranks of one save. Each phase ends in agree(): if any rank failed, every rank learns the error of the lowest
// failing rank and throws it, so that no rank goes on into a collective call (an HDF5 create or write, a close) that
// a failed rank will never make, which would hang the job. With one rank nothing is communicated.
class SaveGroup {
 public:
  explicit SaveGroup(MPI_Comm comm) : comm_(comm) {
    if (comm == MPI_COMM_SELF) return;  // needs no MPI at all (tools that never initialise it)
    EMBER_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    EMBER_MPI_CHECK(MPI_Comm_size(comm, &size_));
  }
  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool parallel() const { return size_ > 1; }
  bool root() const { return rank_ == 0; }

  std::optional<Error> agree(std::optional<Error> local) const {
    if (!parallel()) return local;
    int mine = local ? rank_ : INT_MAX, first = INT_MAX;
    EMBER_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm_));
    if (first == INT_MAX) return std::nullopt;
    std::string what = rank_ == first ? local->what() : "", hint = rank_ == first ? local->hint() : "";
    broadcast(what, first);
    broadcast(hint, first);
    return Error(what, hint);
  }

  // Runs `fn` on every rank (or on rank 0 only) and throws the agreed error, if any, on every rank.
  void phase(bool root_only, const std::function<void()>& fn) const {
    std::optional<Error> local;
    if (!root_only || root()) local = attempt(fn);
    if (std::optional<Error> e = agree(std::move(local))) throw *e;
  }

  void broadcast(std::string& s, int from) const {
    if (!parallel()) return;
    uint64_t n = s.size();
    EMBER_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, from, comm_));
    s.resize(size_t(n));
    if (n > 0) EMBER_MPI_CHECK(MPI_Bcast(s.data(), int(n), MPI_CHAR, from, comm_));
  }

  void barrier() const {
    if (parallel()) EMBER_MPI_CHECK(MPI_Barrier(comm_));
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

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

uint64_t save_digest(const std::string& folder, const CheckpointMeta& m, const CheckpointTensors& t, size_t total,
                     int keep_latest_k) {
  Digest d;
  d.add(folder).add(keep_latest_k).add(total).add(t.exp_avg != nullptr).add(t.exp_avg_sq != nullptr);
  d.add(m.step).add(m.tokens_seen).add(m.world_size).add(m.mode).add(m.config_ini);
  d.add(m.model.n_layer).add(m.model.n_head).add(m.model.n_embd).add(m.model.block_size).add(m.model.vocab_size);
  d.add(m.optimizer_step).add(m.beta1).add(m.beta2).add(m.eps).add(m.weight_decay).add(m.lr).add(m.async_version);
  for (const CheckpointMeta::RankState& r : m.ranks) {
    d.add(r.data_cursor).add(r.rng_offset).add(r.role).add(r.optimizer_step).add(r.seq).add(r.arrays.size());
    for (const std::string& name : r.arrays) d.add(name);
  }
  d.add(t.extra_sets.size());
  for (const auto& set : t.extra_sets) d.add(set.first);
  return d.value();
}

// True when `path` is `prefix` or lies under it.
bool under(const std::string& path, const std::string& prefix) {
  return path == prefix || path.rfind(prefix + "/", 0) == 0;
}

// Checks the async additions of one rank's save arguments (the caller's mistakes, so assertions): extra-set
// prefixes that stay clear of the fixed layout, and rank arrays that match the metadata of this rank and of a
// rank that takes part in the save (anything else would leave a dataset unwritten).
void check_async_arguments(const CheckpointMeta& meta, const CheckpointTensors& tensors, int rank, int size) {
  for (const auto& [prefix, base] : tensors.extra_sets)
    EMBER_ASSERT(prefix.size() > 1 && prefix[0] == '/' && prefix.back() != '/' &&
                     prefix.find("//") == std::string::npos && prefix != "/config" && prefix != "/optimizer" &&
                     !under(prefix, "/model") && !under(prefix, "/ranks") && !under(prefix, "/optimizer/exp_avg") &&
                     !under(prefix, "/optimizer/exp_avg_sq"),
                 "CheckpointTensors::extra_sets prefix \"" + prefix + "\" is not an absolute path of its own");
  for (size_t r = 0; r < meta.ranks.size(); ++r) {
    for (const std::string& name : meta.ranks[r].arrays)
      EMBER_ASSERT(!name.empty() && name != "." && name.find('/') == std::string::npos,
                   "CheckpointMeta::ranks[" + std::to_string(r) + "].arrays holds the invalid name \"" + name + "\"");
    EMBER_ASSERT(meta.ranks[r].arrays.empty() || r < size_t(size),
                 "CheckpointMeta::ranks[" + std::to_string(r) + "] lists arrays but no rank " + std::to_string(r) +
                     " takes part in the save to write them");
  }
  std::vector<std::string> names;
  for (const auto& [name, data] : tensors.rank_arrays) {
    EMBER_ASSERT(data != nullptr, "CheckpointTensors::rank_arrays entry \"" + name + "\" has no data");
    names.push_back(name);
  }
  const std::vector<std::string> none;
  EMBER_ASSERT(names == (size_t(rank) < meta.ranks.size() ? meta.ranks[size_t(rank)].arrays : none),
               "CheckpointTensors::rank_arrays must be named as CheckpointMeta::ranks[" + std::to_string(rank) +
                   "].arrays, in the same order");
  EMBER_ASSERT(names.empty() || tensors.rank_array_len > 0, "CheckpointTensors::rank_array_len must be positive");
}

// The arena range this rank writes: its shard, after checking on the gathered shards of all ranks that the arguments
// agree and the shards partition the arena (every rank sees the same data, so all reach the same verdict; a rank may
// hold an empty range). When every rank passes the whole arena, rank r writes the r-th of `size` equal contiguous
// pieces. Also gathers each rank's rank_array_len into `array_lens` (one entry per rank of the save).
ArenaRange agree_write_range(const SaveGroup& group, ArenaRange held, size_t total, uint64_t digest, uint64_t array_len,
                             std::vector<uint64_t>& array_lens) {
  const char* const hint_bug = "this is a bug in ember; please report it";
  if (!group.parallel()) {
    if (held.begin != 0 || held.end != total)
      throw Error("checkpoint save: a single rank must write the whole parameter arena [0, " + std::to_string(total) +
                      ") but was given [" + std::to_string(held.begin) + ", " + std::to_string(held.end) + ")",
                  hint_bug);
    array_lens = {array_len};
    return held;
  }
  const int n = group.size();
  constexpr size_t K = 4;  // values gathered per rank
  const uint64_t mine[K] = {held.begin, held.end, digest, array_len};
  std::vector<uint64_t> all(K * size_t(n));
  EMBER_MPI_CHECK(MPI_Allgather(mine, int(K), MPI_UINT64_T, all.data(), int(K), MPI_UINT64_T, group.comm()));
  array_lens.assign(size_t(n), 0);
  bool whole = true;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (int r = 0; r < n; ++r) {
    const uint64_t b = all[K * size_t(r)], e = all[K * size_t(r) + 1];
    array_lens[size_t(r)] = all[K * size_t(r) + 3];
    if (all[K * size_t(r) + 2] != all[2])
      throw Error("checkpoint save: rank " + std::to_string(r) +
                      " was called with other metadata than rank 0 (step, "
                      "config, per-rank state, folder, keep_latest_k, the moment arenas or the extra sets differ)",
                  hint_bug);
    whole = whole && b == 0 && e == total;
    ranges.emplace_back(b, e);
  }
  if (whole)
    return ArenaRange{size_t(uint64_t(total) * uint64_t(group.rank()) / uint64_t(n)),
                      size_t(uint64_t(total) * uint64_t(group.rank() + 1) / uint64_t(n))};
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

// Creates the .tmp file and writes its contents. With several ranks the file is opened through MPI-IO and every
// step is collective; after each step the ranks agree, so a failure stops them all at the same step and the file is
// still closed by all of them together. Throws the agreed error on every rank.
void write_file(const SaveGroup& group, const std::string& path, const CheckpointMeta& meta, const ParamTable& table,
                const WriteSource& src) {
  H5Handle file, dxpl;
  std::optional<Error> failed = group.agree(attempt([&] {
    H5Handle fapl = checkpoint_fapl(true);
    dxpl = EMBER_H5_OWN(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
    if (group.parallel()) {
      EMBER_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), group.comm(), MPI_INFO_NULL));
      // Metadata leaves in a few collective writes instead of many small ones from each rank.
      EMBER_H5_CHECK(H5Pset_coll_metadata_write(fapl.get(), true));
      // Parallel HDF5 1.10 writes filtered (Fletcher32) chunked datasets only with collective transfers.
      EMBER_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
    }
    file = H5Handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    if (file.get() < 0) fail_io(path, "cannot create the file", HINT_WRITE);
  }));
  if (failed) {
    (void)file.close();  // only where the collective create succeeded, which MPI-IO makes all or none
    throw *failed;
  }
  for (const std::function<void()>& step :
       content_steps(file.get(), meta, table, src, dxpl.get(), group.parallel(), path))
    if ((failed = group.agree(attempt(step)))) break;
  if (!failed)
    failed = group.agree(attempt([&] {
      if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) fail_io(path, "cannot flush the file", HINT_WRITE);
    }));
  if (failed) {
    // The file is going away. Emptying it first gives a full disk back the blocks written so far, so that the
    // metadata flush inside the close below succeeds: HDF5 1.10 cannot release a file whose close failed and then
    // crashes at exit on it.
    if (group.root()) (void)::truncate(path.c_str(), 0);
    group.barrier();
    (void)file.close();
    throw *failed;
  }
  failed = group.agree(attempt([&] {
    if (file.close() < 0) fail_io(path, "cannot close the file", HINT_WRITE);
  }));
  if (failed) throw *failed;
}

// Adds /config to a file written in parallel, reopened by one process with the serial driver: parallel HDF5 1.10
// cannot write variable-length data ("Parallel IO does not support writing VL datatypes yet"), and keeping /config a
// variable-length string keeps files written by any number of ranks identical in layout.
void add_config(const std::string& path, const std::string& config_ini) {
  H5Handle fapl = checkpoint_fapl(true);
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose);
  if (file.get() < 0) fail_io(path, "cannot reopen the file to add /config", HINT_WRITE);
  write_config(file.get(), config_ini, path);
  if (file.close() < 0) fail_io(path, "cannot close the file", HINT_WRITE);
}

// The reason part of a checkpoint error about `path`: "checkpoint P: dataset D is corrupted" -> "dataset D is
// corrupted", "checkpoint P is truncated (...)" -> "truncated (...)".
std::string reason_of(const std::string& what, const std::string& path) {
  const std::string head = "checkpoint " + path;
  if (what.rfind(head, 0) != 0) return what;
  std::string r = what.substr(head.size());
  for (const char* lead : {": ", " is ", " "})
    if (r.rfind(lead, 0) == 0) return r.substr(std::char_traits<char>::length(lead));
  return r;
}

}  // namespace

std::string checkpoint_path(const std::string& folder, int64_t step) {
  char name[40];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return folder.empty() ? std::string(name) : (fs::path(folder) / name).string();
}

std::string save_checkpoint(const std::string& folder, const CheckpointMeta& meta, const ParamTable& table,
                            const CheckpointTensors& tensors, int keep_latest_k, MPI_Comm comm) {
  const SaveGroup group(comm);
  H5Quiet quiet;
  const size_t total = table.total_numel();
  const ArenaRange held{tensors.shard_begin, std::min(tensors.shard_end, total)};
  // Arguments are checked on every rank and the verdict agreed: a caller's mistake on one rank fails all of them.
  group.phase(false, [&] {
    EMBER_ASSERT(tensors.params != nullptr, "save_checkpoint needs the parameter arena");
    EMBER_ASSERT(meta.step >= 0, "checkpoint step must be non-negative");
    EMBER_ASSERT(meta.world_size >= 1 && meta.ranks.size() == size_t(meta.world_size),
                 "CheckpointMeta::ranks must hold one entry per rank (world_size)");
    const ParamTable expected(meta.model);  // the root attributes describe the datasets, so they must agree
    EMBER_ASSERT(expected.params().size() == table.params().size() && expected.total_numel() == total,
                 "CheckpointMeta::model does not match the ParamTable being saved");
    EMBER_ASSERT(held.begin <= held.end, "CheckpointTensors shard range is reversed or starts past the arena");
    check_async_arguments(meta, tensors, group.rank(), group.size());
  });
  std::vector<uint64_t> array_lens;
  const uint64_t digest = save_digest(folder, meta, tensors, total, keep_latest_k);
  const ArenaRange write = agree_write_range(group, held, total, digest, tensors.rank_array_len, array_lens);
  WriteSource src{tensors.params, tensors.exp_avg, tensors.exp_avg_sq, held.begin, write};
  src.extra_sets.assign(tensors.extra_sets.begin(), tensors.extra_sets.end());
  src.rank = group.rank();
  src.rank_arrays = tensors.rank_arrays;
  src.rank_array_lens = array_lens;
  group.phase(false, [&] {
    for (const auto& [prefix, base] : tensors.extra_sets)
      EMBER_ASSERT(base != nullptr || write.begin == write.end,
                   "CheckpointTensors::extra_sets \"" + prefix + "\" needs the arena on a rank with a write range");
  });

  const fs::path dir = folder_path(folder);
  const std::string final_path = checkpoint_path(folder, meta.step);
  const std::string tmp_path = final_path + ".tmp";
  const std::string name = fs::path(final_path).filename().string();
  CheckpointMeta full = meta;
  full.created = group.root() ? iso_time_utc() : "";  // rank 0's clock: the attribute must be identical everywhere
  group.broadcast(full.created, 0);
  full.version = EMBER_VERSION;

  std::optional<TempFile> guard;  // on rank 0: removes the temp file unless the save completes
  group.phase(true, [&] {
    make_folder(dir);
    std::vector<uint64_t> flat_lens;  // ranks that list arrays are ranks of the save (checked above)
    for (size_t r = 0; r < meta.ranks.size(); ++r)
      if (!meta.ranks[r].arrays.empty()) flat_lens.insert(flat_lens.end(), meta.ranks[r].arrays.size(), array_lens[r]);
    const size_t arena_copies = 1 + (src.exp_avg ? 1 : 0) + (src.exp_avg_sq ? 1 : 0) + src.extra_sets.size();
    check_room(dir, final_path, estimated_file_bytes(table, arena_copies, flat_lens, meta.config_ini.size()));
    guard.emplace(tmp_path);
  });
  write_file(group, tmp_path, full, table, src);
  // Only now, with the new file complete and durable, does `latest` move and do old checkpoints go.
  group.phase(true, [&] {
    if (group.parallel()) add_config(tmp_path, full.config_ini);
    fsync_file(tmp_path);
    rename_file(tmp_path, final_path);
    guard->release();
    fsync_dir(dir);
    write_latest(dir, name);
    prune(dir, keep_latest_k, name);
  });
  return final_path;
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  H5Quiet quiet;
  H5Handle file = open_checkpoint(path);
  return read_meta(file.get(), path);
}

void load_checkpoint(const std::string& path, const ParamTable& table, const CheckpointTensors& tensors,
                     CheckpointMeta& meta) {
  EMBER_ASSERT(tensors.params != nullptr, "load_checkpoint needs the parameter arena");
  const size_t total = table.total_numel();
  const ArenaRange shard{tensors.shard_begin, std::min(tensors.shard_end, total)};
  EMBER_ASSERT(shard.begin <= shard.end, "CheckpointTensors shard range is reversed or starts past the arena");
  H5Quiet quiet;
  H5Handle file = open_checkpoint(path);
  CheckpointMeta m = read_meta(file.get(), path);

  // Check every shape first, so a wrong model config fails before any arena is overwritten.
  struct Load {
    std::string path;
    H5Handle dset;
    std::vector<hsize_t> dims;
    hsize_t lo, hi;  // flat element range of the tensor to read
    float* dst;
  };
  std::vector<Load> loads;
  // `base` holds the arena elements `range`, its element 0 being arena element range.begin.
  auto plan = [&](const std::string& prefix, float* base, ArenaRange range) {
    if (!base) return;
    for (const ParamInfo& p : table.params()) {
      const std::string ds = tensor_path(prefix, p.name);
      std::vector<hsize_t> dims = to_dims(p.shape);
      H5Handle dset = open_tensor_checked(file.get(), ds, dims, m, path);
      const size_t lo = std::max(range.begin, p.offset), hi = std::min(range.end, p.offset + p.numel);
      if (lo < hi)
        loads.push_back(
            Load{ds, std::move(dset), std::move(dims), lo - p.offset, hi - p.offset, base + (lo - range.begin)});
    }
  };
  plan("/model", tensors.params, ArenaRange{0, total});
  plan("/optimizer/exp_avg", tensors.exp_avg, shard);
  plan("/optimizer/exp_avg_sq", tensors.exp_avg_sq, shard);
  for (const auto& [prefix, base] : tensors.extra_sets) plan(prefix, base, ArenaRange{0, total});

  // Every dataset of the table matched; a deeper checkpoint would still hold blocks the model has no room for.
  int table_layers = 0;
  for (const ParamInfo& p : table.params()) table_layers = std::max(table_layers, p.layer + 1);
  if (m.model.n_layer != table_layers)
    throw Error("checkpoint " + path + " has n_layer=" + std::to_string(m.model.n_layer) +
                    " but the model has n_layer=" + std::to_string(table_layers),
                "the checkpoint was written for a different model config; use the same [model] settings or start "
                "fresh");

  for (Load& l : loads) {
    read_tensor_range(l.dset.get(), l.dims, l.lo, l.hi, l.dst, l.path, path);
    (void)l.dset.close();  // read-only: a failed close loses nothing
  }
  meta = std::move(m);
}

bool load_rank_arrays(const std::string& path, int rank, const std::vector<std::pair<std::string, float*>>& dst,
                      size_t len) {
  EMBER_ASSERT(rank >= 0, "load_rank_arrays needs a rank >= 0");
  for (const auto& [name, data] : dst) EMBER_ASSERT(data != nullptr, "load_rank_arrays needs a buffer for " + name);
  H5Quiet quiet;
  H5Handle file = open_checkpoint(path);
  const CheckpointMeta m = read_meta(file.get(), path);
  const H5Context ctx = h5_context(path);
  const std::string group = "/ranks/" + std::to_string(rank);
  if (!path_exists(file.get(), group, ctx)) return false;
  for (const auto& [name, data] : dst)
    if (!path_exists(file.get(), group + "/" + name, ctx)) return false;
  // Every dataset is checked before any buffer is written.
  const std::vector<hsize_t> dims = {hsize_t(len)};
  std::vector<H5Handle> dsets;
  for (const auto& [name, data] : dst)
    dsets.push_back(open_tensor_checked(file.get(), group + "/" + name, dims, m, path));
  for (size_t i = 0; i < dst.size(); ++i) {
    read_tensor_range(dsets[i].get(), dims, 0, len, dst[i].second, group + "/" + dst[i].first, path);
    (void)dsets[i].close();  // read-only: a failed close loses nothing
  }
  return true;
}

std::vector<CheckpointDatasetReport> scan_checkpoint(const std::string& path) {
  H5Quiet quiet;
  H5Handle file = open_checkpoint(path);
  return scan_datasets(file.get(), path);
}

void verify_checkpoint(const std::string& path) {
  H5Quiet quiet;
  H5Handle file = open_checkpoint(path);
  const CheckpointMeta m = read_meta(file.get(), path);
  const ParamTable table(m.model);
  for (const ParamInfo& p : table.params())
    (void)open_tensor_checked(file.get(), tensor_path("/model", p.name), to_dims(p.shape), m, path);
  for (const CheckpointDatasetReport& r : scan_datasets(file.get(), path))
    if (!r.ok)
      throw Error("checkpoint " + path + ": dataset " + r.path + " " +
                      (r.problem.rfind("corrupted", 0) == 0 ? "is " : "") + r.problem,
                  r.problem.rfind("corrupted", 0) == 0 ? HINT_CORRUPT : HINT_DAMAGED);
}

std::string resolve_resume(const std::string& folder, const std::string& resume) {
  if (resume.empty()) return "";
  if (resume != "auto") {
    std::error_code ec;
    if (!fs::exists(resume, ec))
      throw Error("resume checkpoint " + resume + " does not exist",
                  "pass an existing step_XXXXXXXX.h5, --resume auto for the newest checkpoint in " +
                      folder_path(folder).string() + ", or no --resume to start fresh");
    if (!fs::is_regular_file(resume, ec))
      throw Error("resume checkpoint " + resume + " is not a file",
                  "pass a step_XXXXXXXX.h5 file, or --resume auto with checkpoint.folder set to this folder");
    verify_checkpoint(resume);
    return resume;
  }
  const fs::path dir = folder_path(folder);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  auto in_folder = [&](const std::string& name) { return (folder.empty() ? fs::path(name) : dir / name).string(); };

  // `latest` is written last, so it names a complete checkpoint unless that file was deleted or damaged since.
  // Fallbacks are the checkpoints older than it: newer step numbers can only be leftovers of an earlier, longer run.
  std::vector<std::string> candidates;
  int64_t older_than = INT64_MAX;
  const std::string latest = read_latest(dir);
  if (!latest.empty() && fs::is_regular_file(dir / latest, ec)) {
    candidates.push_back(latest);
    if (parse_step(latest) >= 0) older_than = parse_step(latest);
  } else if (!latest.empty()) {
    log_warn("checkpoint folder %s: `latest` names %s, which does not exist; trying the newest step_*.h5", dir.c_str(),
             latest.c_str());
  }
  for (const auto& [step, name] : list_checkpoints(dir))
    if (step < older_than && name != latest) candidates.push_back(name);

  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string path = in_folder(candidates[i]);
    try {
      verify_checkpoint(path);
      return path;
    } catch (const std::exception& e) {
      if (i + 1 < candidates.size())
        log_warn("checkpoint %s is unreadable (%s); falling back to %s", path.c_str(),
                 reason_of(e.what(), path).c_str(), in_folder(candidates[i + 1]).c_str());
      else
        log_warn("checkpoint %s is unreadable (%s)", path.c_str(), reason_of(e.what(), path).c_str());
    }
  }
  // Starting over silently would throw away the run (and its new checkpoints would be pruned against the damaged
  // ones): with checkpoints present but none readable, stop and let the user decide.
  if (!candidates.empty())
    throw_error("checkpoint folder " + dir.string() + ": none of its " + std::to_string(candidates.size()) +
                    " checkpoints is readable",
                "restore a checkpoint from a backup, or move the folder away and run without --resume to start over");
  return "";
}

}  // namespace ember
