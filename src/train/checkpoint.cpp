// HDF5 checkpoints (implementation): the layout of docs/checkpoint-format.md written with the plain HDF5 C API
// (handles and attribute helpers in core/h5.h), made atomic by a temp file, fsync and rename.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "core/h5.h"
#include "core/log.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

// Largest chunk in elements: 1M fp32 = 4 MiB, big enough that per-chunk overhead (index entry, checksum, one
// read/write call) is negligible, small enough that Fletcher32's 4 GiB chunk limit and the memory a reader needs
// for one chunk never matter (GPT-2 124M's wte [50257, 768] becomes 37 chunks of 1365 rows).
constexpr hsize_t MAX_CHUNK_ELEMS = hsize_t(1) << 20;

// ---------------------------------------------------------------------------------------------------------------
// Messages and paths

const char* const HINT_DAMAGED =
    "the file is damaged or incomplete (interrupted copy, full disk?); resume from an earlier checkpoint "
    "(--resume <folder>/step_XXXXXXXX.h5) or start fresh";
const char* const HINT_CORRUPT =
    "the file was damaged after it was written (disk, copy, transfer); resume from an earlier checkpoint "
    "(--resume <folder>/step_XXXXXXXX.h5)";
const char* const HINT_WRITE = "check that the checkpoint folder is writable and that the disk has free space";

// Failure of an I/O call on checkpoint `file`: names the file and what was being done, adds HDF5's reason.
[[noreturn]] void fail_io(const std::string& file, const std::string& what, const char* hint) {
  throw_h5_failure("checkpoint " + file, what, hint);
}

// How the core/h5.h helpers word failures in checkpoint `file`: the same form and hints as fail_io.
H5Context h5_context(const std::string& file) { return H5Context{"checkpoint " + file, HINT_DAMAGED, HINT_WRITE}; }

std::string shape_str(const std::vector<hsize_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Hint for checkpoints whose tensors do not fit the model being built: the config they were written for.
std::string hint_other_config(const ModelConfig& c) {
  return "the checkpoint was written for a different model config (n_layer=" + std::to_string(c.n_layer) +
         ", n_head=" + std::to_string(c.n_head) + ", n_embd=" + std::to_string(c.n_embd) +
         ", block_size=" + std::to_string(c.block_size) + ", vocab_size=" + std::to_string(c.vocab_size) +
         "); use the same [model] settings or start fresh";
}

std::vector<hsize_t> to_dims(const std::vector<int64_t>& shape) {
  return std::vector<hsize_t>(shape.begin(), shape.end());
}

// Dataset path of a parameter: the Hugging Face key with '.' -> '/', under `prefix` ("/model", "/optimizer/exp_avg").
std::string tensor_path(const std::string& prefix, const std::string& hf_name) {
  std::string p = hf_name;
  std::replace(p.begin(), p.end(), '.', '/');
  return prefix + "/" + p;
}

// File access for both writing and reading. File locking is off: the temp-file-and-rename protocol already keeps
// readers away from a file being written, and HDF5 1.10's flock() fails outright on many NFS/Lustre mounts where
// checkpoints of cluster jobs live.
H5Handle make_fapl() {
  H5Handle fapl = EMBER_H5_OWN(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
  EMBER_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true));
#endif
  return fapl;
}

// ---------------------------------------------------------------------------------------------------------------
// Tensors

// Rows of dimension 0 that one write covers: the whole tensor for a single rank today. Collective MPI-IO writes of
// ZeRO shards will pass each rank's part here and select it as a hyperslab of the full logical dataset.
struct RowRange {
  hsize_t begin = 0;
  hsize_t count = 0;
};

// Chunk = whole rows, as many as fit in MAX_CHUNK_ELEMS (at least one row).
std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims) {
  hsize_t row = 1;
  for (size_t i = 1; i < dims.size(); ++i) row *= dims[i];
  std::vector<hsize_t> chunk = dims;
  chunk[0] = std::clamp<hsize_t>(MAX_CHUNK_ELEMS / std::max<hsize_t>(row, 1), 1, std::max<hsize_t>(dims[0], 1));
  return chunk;
}

// Creates the fp32 dataset at `path` (parent groups included) with its full logical shape: chunked, Fletcher32.
H5Handle create_tensor(hid_t file_id, const std::string& path, const std::vector<hsize_t>& dims, hid_t lcpl,
                       const std::string& file) {
  H5Handle space = EMBER_H5_OWN(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  H5Handle dcpl = EMBER_H5_OWN(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const std::vector<hsize_t> chunk = chunk_dims(dims);
  EMBER_H5_CHECK(H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data()));
  EMBER_H5_CHECK(H5Pset_fletcher32(dcpl.get()));
  // Every element is written, so filling chunks with zeros first would only cost time.
  EMBER_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
  // No modification times in object headers: identical checkpoints give identical files (apart from `created`).
  EMBER_H5_CHECK(H5Pset_obj_track_times(dcpl.get(), false));
  // No chunk cache: each chunk goes straight to the file inside H5Dwrite (no extra copy), so a write error is
  // reported there, naming the dataset, and never surfaces later inside a close.
  H5Handle dapl = EMBER_H5_OWN(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  EMBER_H5_CHECK(H5Pset_chunk_cache(dapl.get(), 0, 0, 1.0));
  H5Handle dset(H5Dcreate2(file_id, path.c_str(), H5T_IEEE_F32LE, space.get(), lcpl, dcpl.get(), dapl.get()),
                H5Dclose);
  if (dset.get() < 0) fail_io(file, "cannot create dataset " + path, HINT_WRITE);
  return dset;
}

// Writes `rows` of the tensor from `data` (which holds exactly those rows, row-major) into `dset`.
void write_tensor_rows(hid_t dset, const std::vector<hsize_t>& dims, RowRange rows, const float* data,
                       const std::string& path, const std::string& file) {
  H5Handle fspace = EMBER_H5_OWN(H5Dget_space(dset), H5Sclose);
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = rows.begin;
  count[0] = rows.count;
  EMBER_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
  H5Handle mspace = EMBER_H5_OWN(H5Screate_simple(int(count.size()), count.data(), nullptr), H5Sclose);
  if (H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), H5P_DEFAULT, data) < 0)
    fail_io(file, "cannot write dataset " + path, HINT_WRITE);
}

void write_tensor(hid_t file_id, const std::string& path, const ParamInfo& p, const float* arena, hid_t lcpl,
                  const std::string& file) {
  const std::vector<hsize_t> dims = to_dims(p.shape);
  H5Handle dset = create_tensor(file_id, path, dims, lcpl, file);
  write_tensor_rows(dset.get(), dims, RowRange{0, dims[0]}, arena + p.offset, path, file);
  if (dset.close() < 0) fail_io(file, "cannot close dataset " + path, HINT_WRITE);
}

// Opens the dataset at `path` and checks it is a float tensor of exactly `expected` dims.
H5Handle open_tensor_checked(hid_t file_id, const std::string& path, const std::vector<hsize_t>& expected,
                             const CheckpointMeta& meta, const std::string& file) {
  const std::string hint_config = hint_other_config(meta.model);
  if (!path_exists(file_id, path, h5_context(file)))
    throw Error("checkpoint " + file + ": dataset " + path + " is missing (the model expects shape " +
                    shape_str(expected) + ")",
                path.rfind("/optimizer", 0) == 0
                    ? "the checkpoint holds no optimizer state; load it for eval/generate, or start training fresh"
                    : hint_config);
  H5Handle dset(H5Dopen2(file_id, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (dset.get() < 0) {
    if (last_h5_failure().checksum)
      throw Error("checkpoint " + file + ": dataset " + path + " is corrupted (checksum mismatch)", HINT_CORRUPT);
    fail_io(file, "cannot open dataset " + path, HINT_DAMAGED);
  }
  H5Handle space(H5Dget_space(dset.get()), H5Sclose);
  if (space.get() < 0) fail_io(file, "cannot read the shape of dataset " + path, HINT_DAMAGED);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail_io(file, "cannot read the shape of dataset " + path, HINT_DAMAGED);
  std::vector<hsize_t> dims(size_t(rank), 0);
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
    fail_io(file, "cannot read the shape of dataset " + path, HINT_DAMAGED);
  if (dims != expected)
    throw Error("checkpoint " + file + ": dataset " + path + " has shape " + shape_str(dims) +
                    " but the model expects " + shape_str(expected),
                hint_config);
  H5Handle type(H5Dget_type(dset.get()), H5Tclose);
  if (type.get() < 0) fail_io(file, "cannot read the type of dataset " + path, HINT_DAMAGED);
  if (H5Tget_class(type.get()) != H5T_FLOAT)
    throw Error("checkpoint " + file + ": dataset " + path + " is not floating point", HINT_DAMAGED);
  return dset;
}

void read_tensor(hid_t dset, float* dst, const std::string& path, const std::string& file) {
  if (H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0) {
    if (last_h5_failure().checksum)
      throw Error("checkpoint " + file + ": dataset " + path + " is corrupted (checksum mismatch)", HINT_CORRUPT);
    fail_io(file, "cannot read dataset " + path, HINT_DAMAGED);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Writing one file

// Everything inside the open file; all handles opened here are closed before it returns.
void write_contents(hid_t file_id, const CheckpointMeta& meta, const ParamTable& table,
                    const CheckpointTensors& tensors, const std::string& file) {
  H5Handle root(H5Gopen2(file_id, "/", H5P_DEFAULT), H5Gclose);
  if (root.get() < 0) fail_io(file, "cannot open the root group", HINT_WRITE);
  const hid_t r = root.get();
  const H5Context ctx = h5_context(file);
  write_attr_str(r, "format", CHECKPOINT_FORMAT, ctx);
  write_attr_i64(r, "format_version", CHECKPOINT_FORMAT_VERSION, ctx);
  write_attr_i64(r, "step", meta.step, ctx);
  write_attr_i64(r, "tokens_seen", meta.tokens_seen, ctx);
  write_attr_i64(r, "world_size", meta.world_size, ctx);
  write_attr_str(r, "mode", meta.mode, ctx);
  write_attr_str(r, "created", meta.created, ctx);
  write_attr_str(r, "ember_version", meta.version, ctx);
  write_attr_i64(r, "n_layer", meta.model.n_layer, ctx);
  write_attr_i64(r, "n_head", meta.model.n_head, ctx);
  write_attr_i64(r, "n_embd", meta.model.n_embd, ctx);
  write_attr_i64(r, "block_size", meta.model.block_size, ctx);
  write_attr_i64(r, "vocab_size", meta.model.vocab_size, ctx);

  {  // /config: one scalar string, the resolved INI text
    H5Handle type = vlen_string_type();
    H5Handle space = scalar_space();
    H5Handle dset(H5Dcreate2(file_id, "/config", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                  H5Dclose);
    if (dset.get() < 0) fail_io(file, "cannot create dataset /config", HINT_WRITE);
    const char* p = meta.config_ini.c_str();
    if (H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) < 0)
      fail_io(file, "cannot write dataset /config", HINT_WRITE);
  }

  H5Handle lcpl = EMBER_H5_OWN(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  EMBER_H5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1));
  for (const ParamInfo& p : table.params())
    write_tensor(file_id, tensor_path("/model", p.name), p, tensors.params, lcpl.get(), file);

  H5Handle opt = create_group(file_id, "/optimizer", ctx);
  write_attr_i64(opt.get(), "step", meta.optimizer_step, ctx);
  write_attr_f32(opt.get(), "beta1", meta.beta1, ctx);
  write_attr_f32(opt.get(), "beta2", meta.beta2, ctx);
  write_attr_f32(opt.get(), "eps", meta.eps, ctx);
  write_attr_f32(opt.get(), "weight_decay", meta.weight_decay, ctx);
  write_attr_f32(opt.get(), "lr", meta.lr, ctx);
  // A weights-only save (no optimizer arenas) leaves out the moment tensors; loading them then says so clearly.
  if (tensors.exp_avg)
    for (const ParamInfo& p : table.params())
      write_tensor(file_id, tensor_path("/optimizer/exp_avg", p.name), p, tensors.exp_avg, lcpl.get(), file);
  if (tensors.exp_avg_sq)
    for (const ParamInfo& p : table.params())
      write_tensor(file_id, tensor_path("/optimizer/exp_avg_sq", p.name), p, tensors.exp_avg_sq, lcpl.get(), file);

  H5Handle ranks = create_group(file_id, "/ranks", ctx);
  for (size_t r = 0; r < meta.ranks.size(); ++r) {
    H5Handle g = create_group(ranks.get(), std::to_string(r).c_str(), ctx);
    write_attr_u64(g.get(), "data_cursor", meta.ranks[r].data_cursor, ctx);
    write_attr_u64(g.get(), "rng_offset", meta.ranks[r].rng_offset, ctx);
  }
}

void write_file(const std::string& path, const CheckpointMeta& meta, const ParamTable& table,
                const CheckpointTensors& tensors) {
  H5Handle fapl = make_fapl();
  // v1.8 object headers and superblock carry metadata checksums too; any HDF5 >= 1.8 (h5py, h5dump) reads them.
  EMBER_H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST));
  H5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  if (file.get() < 0) fail_io(path, "cannot create the file", HINT_WRITE);
  try {
    write_contents(file.get(), meta, table, tensors, path);
    if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) fail_io(path, "cannot flush the file", HINT_WRITE);
  } catch (...) {
    // The file is going away. Emptying it first gives a full disk back the blocks written so far, so that the
    // metadata flush inside the close below succeeds: HDF5 1.10 cannot release a file whose close failed and then
    // crashes at exit on it.
    (void)::truncate(path.c_str(), 0);
    throw;
  }
  if (file.close() < 0) fail_io(path, "cannot close the file", HINT_WRITE);
}

// ---------------------------------------------------------------------------------------------------------------
// Files and folders

// Closes a POSIX descriptor on every path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) (void)::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

std::string errno_str() { return std::strerror(errno); }

// Removes a temp file unless the save succeeded. unlink(), not remove(): it never deletes a directory that
// happens to carry the temp name.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    if (!path_.empty()) (void)::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  void release() { path_.clear(); }

 private:
  std::string path_;
};

void fsync_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error("checkpoint " + path + ": cannot reopen to fsync: " + errno_str(), HINT_WRITE);
  if (::fsync(fd.get()) != 0) throw Error("checkpoint " + path + ": fsync failed: " + errno_str(), HINT_WRITE);
  if (fd.close() != 0) throw Error("checkpoint " + path + ": close failed: " + errno_str(), HINT_WRITE);
}

// Makes a rename inside `dir` durable. File systems that cannot fsync a directory (EINVAL) order renames anyway.
void fsync_dir(const fs::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0)
    throw Error("checkpoint folder " + dir.string() + ": cannot open to fsync: " + errno_str(), HINT_WRITE);
  if (::fsync(fd.get()) != 0 && errno != EINVAL && errno != ENOTSUP)
    throw Error("checkpoint folder " + dir.string() + ": fsync failed: " + errno_str(), HINT_WRITE);
}

void rename_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw Error("checkpoint " + to + ": cannot rename " + from + " to it: " + errno_str(),
                "check that " + to + " is not a directory and that the folder is writable");
}

fs::path folder_path(const std::string& folder) { return folder.empty() ? fs::path(".") : fs::path(folder); }

void make_folder(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec && !fs::is_directory(dir, ec)) ec = std::make_error_code(std::errc::not_a_directory);
  if (ec)
    throw Error("checkpoint folder " + dir.string() + " cannot be created: " + ec.message(),
                "check that every part of the path is a directory you can write to (permissions, free disk "
                "space), or set checkpoint.folder to another place");
}

// Step number of a file named step_<digits>.h5, or -1 for any other name.
int64_t parse_step(const std::string& name) {
  const std::string head = "step_", tail = ".h5";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

// (step, file name) of every step_*.h5 regular file in `dir`, newest (highest step) first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const fs::path& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const int64_t step = parse_step(name);
    std::error_code type_ec;
    if (step >= 0 && it->is_regular_file(type_ec)) out.emplace_back(step, name);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

void write_latest(const fs::path& dir, const std::string& name) {
  const std::string tmp = (dir / "latest.tmp").string(), final = (dir / "latest").string();
  TempFile guard(tmp);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw Error("checkpoint folder " + dir.string() + ": cannot create " + tmp + ": " + errno_str(), HINT_WRITE);
  const std::string text = name + "\n";
  if (::write(fd.get(), text.data(), text.size()) != ssize_t(text.size()) || ::fsync(fd.get()) != 0 ||
      fd.close() != 0)
    throw Error("checkpoint folder " + dir.string() + ": cannot write " + tmp + ": " + errno_str(), HINT_WRITE);
  rename_file(tmp, final);
  guard.release();
  fsync_dir(dir);
}

// Deletes all but the newest `keep` checkpoints by step number; the one just written always stays (it is what
// `latest` names, even when a resumed run saves a lower step than files left over from a longer run). Temp files of
// interrupted saves go too. Failures only warn: the new checkpoint is already safe.
void prune(const fs::path& dir, int keep, const std::string& current) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 && parse_step(name.substr(0, name.size() - 4)) >= 0)
      if (::unlink(it->path().c_str()) != 0)
        log_warn("checkpoint: cannot delete stale %s: %s", it->path().c_str(), errno_str().c_str());
  }
  if (keep <= 0) return;
  const auto all = list_checkpoints(dir);
  for (size_t i = size_t(keep); i < all.size(); ++i) {
    if (all[i].second == current) continue;
    const fs::path p = dir / all[i].second;
    if (::unlink(p.c_str()) != 0) log_warn("checkpoint: cannot delete old %s: %s", p.c_str(), errno_str().c_str());
  }
}

// Bytes a checkpoint takes: the tensors, a Fletcher32 word per chunk, and 8 KiB of metadata per dataset (object
// header, chunk index, link; ~3 KiB measured) plus 1 MiB for groups, attributes and the config text.
uint64_t estimated_file_bytes(const ParamTable& table, const CheckpointTensors& tensors, size_t config_bytes) {
  const uint64_t copies = 1 + (tensors.exp_avg ? 1 : 0) + (tensors.exp_avg_sq ? 1 : 0);
  uint64_t per_copy = 0;
  for (const ParamInfo& p : table.params()) {
    const std::vector<hsize_t> dims = to_dims(p.shape), chunk = chunk_dims(dims);
    const uint64_t chunks = (dims[0] + chunk[0] - 1) / chunk[0];
    per_copy += p.numel * sizeof(float) + chunks * 4 + 8192;
  }
  return copies * per_copy + config_bytes + (uint64_t(1) << 20);
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

// Refuses a save that cannot fit before writing a byte, so that the usual failure (a full disk, a `ulimit -f`) is
// one clear message, and the rarer mid-write failure paths of HDF5 are seldom reached.
void check_room(const fs::path& dir, const std::string& file, uint64_t need) {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && need > uint64_t(lim.rlim_cur))
    throw Error("checkpoint " + file + ": needs about " + mib(need) + " but the file size limit (ulimit -f) is " +
                    mib(uint64_t(lim.rlim_cur)),
                "raise the limit (ulimit -f unlimited in the job script) or save a smaller model");
  struct statvfs vfs {};
  // Only trust file systems that report their size; some network mounts report zeros.
  if (::statvfs(dir.c_str(), &vfs) == 0 && vfs.f_blocks > 0) {
    const uint64_t free_bytes = uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);
    if (need > free_bytes)
      throw Error("checkpoint " + file + ": not enough free disk space in " + dir.string() + " (needs about " +
                      mib(need) + ", " + mib(free_bytes) + " free)",
                  "free some space, or set checkpoint.folder to a larger disk; old checkpoints are deleted only "
                  "after the new one is written, so the folder needs room for keep_latest_k + 1 of them");
  }
}

std::string iso_time_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---------------------------------------------------------------------------------------------------------------
// Reading

// Opens an existing checkpoint read-only; missing, non-HDF5 and unreadable (truncated) files get their own message.
H5Handle open_checkpoint(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error("checkpoint " + path + " cannot be opened: " + errno_str(),
                "check the path; checkpoints are <checkpoint folder>/step_XXXXXXXX.h5 (or use --resume auto)");
  if (!S_ISREG(st.st_mode))
    throw Error("checkpoint " + path + " is not a regular file",
                "pass a step_XXXXXXXX.h5 file, or --resume auto to pick the newest in the checkpoint folder");
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 < 0) fail_io(path, "cannot be read", "check the file's permissions");
  if (is_hdf5 == 0)
    throw Error("checkpoint " + path + ": not an HDF5 file",
                "pass a step_XXXXXXXX.h5 written by ember; a truncated or overwritten file cannot be used, resume "
                "from an earlier checkpoint");
  H5Handle fapl = make_fapl();
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (file.get() < 0) {
    // HDF5 compares the file's size with the end-of-file address its superblock records.
    const std::string reason = last_h5_failure().reason;
    unsigned long long have = 0, want = 0;
    const size_t at = reason.find("truncated file: eof = ");
    const size_t stored = reason.find("stored_eof = ");
    if (at != std::string::npos && stored != std::string::npos &&
        std::sscanf(reason.c_str() + at, "truncated file: eof = %llu", &have) == 1 &&
        std::sscanf(reason.c_str() + stored, "stored_eof = %llu", &want) == 1)
      throw Error("checkpoint " + path + " is truncated (" + std::to_string(have) + " of " + std::to_string(want) +
                      " bytes)",
                  HINT_DAMAGED);
    fail_io(path, "cannot be opened", HINT_DAMAGED);
  }
  return file;
}

CheckpointMeta read_meta(hid_t file_id, const std::string& file) {
  CheckpointMeta m;
  H5Handle root(H5Gopen2(file_id, "/", H5P_DEFAULT), H5Gclose);
  if (root.get() < 0) fail_io(file, "cannot open the root group", HINT_DAMAGED);
  const hid_t r = root.get();
  const H5Context ctx = h5_context(file);
  const char* const hint_not_ours = "pass a checkpoint written by ember (step_XXXXXXXX.h5 in the checkpoint folder)";
  const htri_t has_format = H5Aexists(r, "format");
  if (has_format < 0) fail_io(file, "cannot read the root attributes", HINT_DAMAGED);
  if (has_format == 0) throw Error("checkpoint " + file + ": not an ember checkpoint (format attribute missing)", hint_not_ours);
  const std::string format = read_attr_str(r, "format", "/", ctx);
  if (format != CHECKPOINT_FORMAT)
    throw Error("checkpoint " + file + ": not an ember checkpoint (format is \"" + format + "\", expected \"" +
                    CHECKPOINT_FORMAT + "\")",
                hint_not_ours);
  const int64_t version = read_attr_i64(r, "format_version", "/", ctx);
  if (version < 1 || version > CHECKPOINT_FORMAT_VERSION) {
    std::string writer = "unknown";
    if (H5Aexists(r, "ember_version") > 0) writer = read_attr_str(r, "ember_version", "/", ctx);
    throw Error("checkpoint " + file + ": format_version " + std::to_string(version) +
                    " is not supported (this ember reads version " + std::to_string(CHECKPOINT_FORMAT_VERSION) + ")",
                "it was written by ember " + writer + "; use that version or a newer ember to read it");
  }
  m.step = read_attr_i64(r, "step", "/", ctx);
  m.tokens_seen = read_attr_i64(r, "tokens_seen", "/", ctx);
  m.world_size = read_attr_int(r, "world_size", "/", ctx);
  m.mode = read_attr_str(r, "mode", "/", ctx);
  m.created = read_attr_str(r, "created", "/", ctx);
  m.version = read_attr_str(r, "ember_version", "/", ctx);
  m.model.n_layer = read_attr_int(r, "n_layer", "/", ctx);
  m.model.n_head = read_attr_int(r, "n_head", "/", ctx);
  m.model.n_embd = read_attr_int(r, "n_embd", "/", ctx);
  m.model.block_size = read_attr_int(r, "block_size", "/", ctx);
  m.model.vocab_size = read_attr_int(r, "vocab_size", "/", ctx);

  if (!path_exists(file_id, "/config", ctx))
    throw Error("checkpoint " + file + ": dataset /config is missing", HINT_DAMAGED);
  H5Handle cfg(H5Dopen2(file_id, "/config", H5P_DEFAULT), H5Dclose);
  if (cfg.get() < 0) fail_io(file, "cannot open dataset /config", HINT_DAMAGED);
  H5Handle cfg_space(H5Dget_space(cfg.get()), H5Sclose);
  if (cfg_space.get() < 0 || H5Sget_simple_extent_npoints(cfg_space.get()) != 1)
    throw Error("checkpoint " + file + ": dataset /config is not a single string", HINT_DAMAGED);
  m.config_ini = read_dataset_str(cfg.get(), "dataset /config", ctx);

  H5Handle opt = open_group(file_id, "/optimizer", ctx);
  m.optimizer_step = read_attr_i64(opt.get(), "step", "/optimizer:", ctx);
  m.beta1 = read_attr_f32(opt.get(), "beta1", "/optimizer:", ctx);
  m.beta2 = read_attr_f32(opt.get(), "beta2", "/optimizer:", ctx);
  m.eps = read_attr_f32(opt.get(), "eps", "/optimizer:", ctx);
  m.weight_decay = read_attr_f32(opt.get(), "weight_decay", "/optimizer:", ctx);
  m.lr = read_attr_f32(opt.get(), "lr", "/optimizer:", ctx);

  m.ranks.assign(size_t(std::max(m.world_size, 1)), CheckpointMeta::RankState{});
  for (size_t r = 0; r < m.ranks.size(); ++r) {
    const std::string g = "/ranks/" + std::to_string(r);
    H5Handle rg = open_group(file_id, g.c_str(), ctx);
    m.ranks[r].data_cursor = read_attr_u64(rg.get(), "data_cursor", g + ":", ctx);
    m.ranks[r].rng_offset = read_attr_u64(rg.get(), "rng_offset", g + ":", ctx);
  }
  return m;
}

}  // namespace

std::string checkpoint_path(const std::string& folder, int64_t step) {
  char name[40];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return folder.empty() ? std::string(name) : (fs::path(folder) / name).string();
}

std::string save_checkpoint(const std::string& folder, const CheckpointMeta& meta, const ParamTable& table,
                            const CheckpointTensors& tensors, int keep_latest_k, MPI_Comm comm) {
  (void)comm;
  EMBER_ASSERT(tensors.params != nullptr, "save_checkpoint needs the parameter arena");
  EMBER_ASSERT(meta.step >= 0, "checkpoint step must be non-negative");
  {  // the root attributes describe the datasets, so they must agree with the table being written
    const ParamTable expected(meta.model);
    EMBER_ASSERT(expected.params().size() == table.params().size() && expected.total_numel() == table.total_numel(),
                 "CheckpointMeta::model does not match the ParamTable being saved");
  }
  H5Quiet quiet;
  const fs::path dir = folder_path(folder);
  make_folder(dir);
  const std::string final_path = checkpoint_path(folder, meta.step);
  const std::string tmp_path = final_path + ".tmp";
  const std::string name = fs::path(final_path).filename().string();

  CheckpointMeta full = meta;
  full.created = iso_time_utc();
  full.version = EMBER_VERSION;

  check_room(dir, final_path, estimated_file_bytes(table, tensors, meta.config_ini.size()));
  TempFile guard(tmp_path);
  write_file(tmp_path, full, table, tensors);
  fsync_file(tmp_path);
  rename_file(tmp_path, final_path);
  guard.release();
  fsync_dir(dir);
  // Only now, with the new file complete and durable, does `latest` move and do old checkpoints go.
  write_latest(dir, name);
  prune(dir, keep_latest_k, name);
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
  H5Quiet quiet;
  H5Handle file = open_checkpoint(path);
  CheckpointMeta m = read_meta(file.get(), path);

  // Check every shape first, so a wrong model config fails before any arena is overwritten.
  struct Load {
    std::string path;
    H5Handle dset;
    float* dst;
  };
  std::vector<Load> loads;
  auto plan = [&](const std::string& prefix, float* arena) {
    if (!arena) return;
    for (const ParamInfo& p : table.params()) {
      const std::string ds = tensor_path(prefix, p.name);
      loads.push_back(Load{ds, open_tensor_checked(file.get(), ds, to_dims(p.shape), m, path), arena + p.offset});
    }
  };
  plan("/model", tensors.params);
  plan("/optimizer/exp_avg", tensors.exp_avg);
  plan("/optimizer/exp_avg_sq", tensors.exp_avg_sq);

  // Every dataset of the table matched; a deeper checkpoint would still hold blocks the model has no room for.
  int table_layers = 0;
  for (const ParamInfo& p : table.params()) table_layers = std::max(table_layers, p.layer + 1);
  if (m.model.n_layer != table_layers)
    throw Error("checkpoint " + path + " has n_layer=" + std::to_string(m.model.n_layer) + " but the model has n_layer=" +
                    std::to_string(table_layers),
                hint_other_config(m.model));

  for (Load& l : loads) {
    read_tensor(l.dset.get(), l.dst, l.path, path);
    (void)l.dset.close();  // read-only: a failed close loses nothing
  }
  meta = std::move(m);
}

std::string resolve_resume(const std::string& folder, const std::string& resume) {
  if (resume.empty()) return "";
  if (resume == "auto") {
    const fs::path dir = folder_path(folder);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return "";
    // `latest` is written last, so it names a complete checkpoint unless someone deleted that file since.
    if (FILE* f = std::fopen((dir / "latest").c_str(), "r")) {
      char buf[256] = {0};
      const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
      std::fclose(f);
      std::string name(buf, n);
      while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
      if (!name.empty() && name.find('/') == std::string::npos && fs::is_regular_file(dir / name, ec))
        return (folder.empty() ? fs::path(name) : dir / name).string();
    }
    const auto all = list_checkpoints(dir);
    if (all.empty()) return "";
    return (folder.empty() ? fs::path(all.front().second) : dir / all.front().second).string();
  }
  std::error_code ec;
  if (!fs::exists(resume, ec))
    throw Error("resume checkpoint " + resume + " does not exist",
                "pass an existing step_XXXXXXXX.h5, --resume auto for the newest checkpoint in " +
                    folder_path(folder).string() + ", or no --resume to start fresh");
  if (!fs::is_regular_file(resume, ec))
    throw Error("resume checkpoint " + resume + " is not a file",
                "pass a step_XXXXXXXX.h5 file, or --resume auto with checkpoint.folder set to this folder");
  return resume;
}

}  // namespace ember
