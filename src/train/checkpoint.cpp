// HDF5 checkpoints (implementation): the layout of docs/checkpoint-format.md written with the plain HDF5 C API,
// made atomic by a temp file, fsync and rename; every HDF5 call is checked and every handle closed on every path.
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
#include "core/log.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

// Largest chunk in elements: 1M fp32 = 4 MiB, big enough that per-chunk overhead (index entry, checksum, one
// read/write call) is negligible, small enough that Fletcher32's 4 GiB chunk limit and the memory a reader needs
// for one chunk never matter (GPT-2 124M's wte [50257, 768] becomes 37 chunks of 1365 rows).
constexpr hsize_t MAX_CHUNK_ELEMS = hsize_t(1) << 20;

// ---------------------------------------------------------------------------------------------------------------
// HDF5 plumbing

// Owns one HDF5 identifier (file, group, dataset, dataspace, datatype, attribute, property list) and closes it with
// the matching H5?close. Destruction closes silently (it may run while unwinding); close() reports the result for
// the places where a failed close means lost data (the file).
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() = default;
  H5Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() { reset(); }

  hid_t get() const { return id_; }
  herr_t close() {
    herr_t rc = id_ >= 0 ? closer_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return rc;
  }

 private:
  void reset() {
    if (id_ >= 0) (void)closer_(id_);  // nothing useful to do with a failed close while unwinding
    id_ = H5I_INVALID_HID;
  }
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Wraps an id-returning call; a negative id fails like EMBER_H5_CHECK (statement, file:line, HDF5's message).
H5Handle own_h5(hid_t id, H5Handle::Closer closer, const char* stmt, const char* file, int line) {
  if (id < 0)
    fail_check("HDF5", stmt, hdf5_error_string(), file, line, "check the file path, permissions and free disk space");
  return H5Handle(id, closer);
}
#define EMBER_H5_OWN(stmt, closer) own_h5((stmt), (closer), #stmt, __FILE__, __LINE__)

// Turns off HDF5's automatic error-stack printing for one scope (restored afterwards): failures become one clean
// ember::Error line instead of a screenful of HDF5 frames. The stack itself is still recorded and read below.
class H5Quiet {
 public:
  H5Quiet() {
    EMBER_H5_CHECK(H5Eget_auto2(H5E_DEFAULT, &func_, &data_));
    EMBER_H5_CHECK(H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr));
  }
  ~H5Quiet() { (void)H5Eset_auto2(H5E_DEFAULT, func_, data_); }  // restoring cannot usefully fail
  H5Quiet(const H5Quiet&) = delete;
  H5Quiet& operator=(const H5Quiet&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// What the HDF5 error stack says about the last failure: the innermost (most specific) reason, and whether any
// frame reports a checksum mismatch (Fletcher32 on raw data, or the metadata checksums of the v1.8 format).
struct H5Failure {
  std::string reason;
  bool checksum = false;
};

// HDF5's file-driver messages span lines and list every syscall argument ("file write failed: time = ...\n, filename
// = ..., errno = 28, error message = 'No space left on device', ..."); keep the summary and the OS message.
std::string one_line_reason(const std::string& desc) {
  std::string r = desc;
  const std::string key = "error message = '";
  const size_t at = desc.find(key);
  if (at != std::string::npos) {
    const size_t end = desc.find('\'', at + key.size());
    const size_t colon = desc.find(':');
    r = (colon != std::string::npos && colon < at ? desc.substr(0, colon) + ": " : std::string()) +
        desc.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
  }
  std::replace(r.begin(), r.end(), '\n', ' ');
  return r;
}

herr_t collect_frame(unsigned, const H5E_error2_t* err, void* client) {
  auto* f = static_cast<H5Failure*>(client);
  const std::string desc = err->desc ? err->desc : "";
  if (!desc.empty()) f->reason = one_line_reason(desc);  // walking downward: the last frame seen is the innermost
  if (desc.find("checksum") != std::string::npos || desc.find("Fletcher32") != std::string::npos) f->checksum = true;
  return 0;
}

H5Failure last_h5_failure() {
  H5Failure f;
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_frame, &f) < 0 || f.reason.empty())
    f.reason = "no detail from HDF5";
  return f;
}

const char* const HINT_DAMAGED =
    "the file is damaged or incomplete (interrupted copy, full disk?); resume from an earlier checkpoint "
    "(--resume <folder>/step_XXXXXXXX.h5) or start fresh";
const char* const HINT_CORRUPT =
    "the file was damaged after it was written (disk, copy, transfer); resume from an earlier checkpoint "
    "(--resume <folder>/step_XXXXXXXX.h5)";
const char* const HINT_WRITE = "check that the checkpoint folder is writable and that the disk has free space";

// Failure of an I/O call on checkpoint `file`: names the file and what was being done, adds HDF5's reason.
[[noreturn]] void fail_io(const std::string& file, const std::string& what, const char* hint) {
  const H5Failure f = last_h5_failure();
  throw Error("checkpoint " + file + ": " + what + ": " + f.reason, hint);
}

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
// Attributes

H5Handle scalar_space() { return EMBER_H5_OWN(H5Screate(H5S_SCALAR), H5Sclose); }

void write_attr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* value,
                const std::string& file) {
  H5Handle space = scalar_space();
  H5Handle attr(H5Acreate2(obj, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (attr.get() < 0) fail_io(file, std::string("cannot create attribute ") + name, HINT_WRITE);
  if (H5Awrite(attr.get(), mem_type, value) < 0) fail_io(file, std::string("cannot write attribute ") + name, HINT_WRITE);
  if (attr.close() < 0) fail_io(file, std::string("cannot close attribute ") + name, HINT_WRITE);
}

void write_attr_i64(hid_t obj, const char* name, int64_t v, const std::string& file) {
  write_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, file);
}
void write_attr_u64(hid_t obj, const char* name, uint64_t v, const std::string& file) {
  write_attr(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v, file);
}
void write_attr_f32(hid_t obj, const char* name, float v, const std::string& file) {
  write_attr(obj, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &v, file);
}

// Variable-length UTF-8 strings: h5py reads them as str, h5dump prints them as text.
H5Handle vlen_string_type() {
  H5Handle t = EMBER_H5_OWN(H5Tcopy(H5T_C_S1), H5Tclose);
  EMBER_H5_CHECK(H5Tset_size(t.get(), H5T_VARIABLE));
  EMBER_H5_CHECK(H5Tset_cset(t.get(), H5T_CSET_UTF8));
  return t;
}

void write_attr_str(hid_t obj, const char* name, const std::string& v, const std::string& file) {
  H5Handle t = vlen_string_type();
  const char* p = v.c_str();
  write_attr(obj, name, t.get(), t.get(), &p, file);
}

// Reads a string stored either variable- or fixed-length (other tools may write either) from an attribute or a
// scalar dataset, given its type; `read` performs the H5Aread/H5Dread into the memory type and buffer given.
template <typename ReadFn>
std::string read_string(hid_t file_type, ReadFn read, const std::string& file, const std::string& where) {
  if (H5Tget_class(file_type) != H5T_STRING)
    throw Error("checkpoint " + file + ": " + where + " is not a string", HINT_DAMAGED);
  H5Handle mem = EMBER_H5_OWN(H5Tcopy(file_type), H5Tclose);
  const htri_t is_vlen = H5Tis_variable_str(file_type);
  EMBER_H5_CHECK(is_vlen);
  if (is_vlen) {
    char* p = nullptr;
    if (read(mem.get(), static_cast<void*>(&p)) < 0) fail_io(file, "cannot read " + where, HINT_DAMAGED);
    std::string s = p ? p : "";
    if (p) EMBER_H5_CHECK(H5free_memory(p));
    return s;
  }
  const size_t n = H5Tget_size(file_type);
  if (n == 0) fail_io(file, "cannot read the size of " + where, HINT_DAMAGED);
  std::string buf(n, '\0');
  if (read(mem.get(), static_cast<void*>(buf.data())) < 0) fail_io(file, "cannot read " + where, HINT_DAMAGED);
  buf.resize(strnlen(buf.data(), n));
  return buf;
}

// Opens attribute `name` of `obj` (described by `where` for messages), which must exist and hold one value.
H5Handle open_attr(hid_t obj, const char* name, const std::string& where, const std::string& file) {
  const htri_t exists = H5Aexists(obj, name);
  if (exists < 0) fail_io(file, "cannot look up attribute " + where + name, HINT_DAMAGED);
  if (exists == 0)
    throw Error("checkpoint " + file + ": attribute " + where + name + " is missing", HINT_DAMAGED);
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (attr.get() < 0) fail_io(file, "cannot open attribute " + where + name, HINT_DAMAGED);
  H5Handle space(H5Aget_space(attr.get()), H5Sclose);
  if (space.get() < 0) fail_io(file, "cannot read attribute " + where + name, HINT_DAMAGED);
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    throw Error("checkpoint " + file + ": attribute " + where + name + " is not a single value", HINT_DAMAGED);
  return attr;
}

template <typename T>
T read_attr_num(hid_t obj, const char* name, hid_t mem_type, const std::string& where, const std::string& file) {
  H5Handle attr = open_attr(obj, name, where, file);
  T v{};
  if (H5Aread(attr.get(), mem_type, &v) < 0) fail_io(file, "cannot read attribute " + where + name, HINT_DAMAGED);
  return v;
}

int64_t read_attr_i64(hid_t obj, const char* name, const std::string& where, const std::string& file) {
  return read_attr_num<int64_t>(obj, name, H5T_NATIVE_INT64, where, file);
}
uint64_t read_attr_u64(hid_t obj, const char* name, const std::string& where, const std::string& file) {
  return read_attr_num<uint64_t>(obj, name, H5T_NATIVE_UINT64, where, file);
}
float read_attr_f32(hid_t obj, const char* name, const std::string& where, const std::string& file) {
  return read_attr_num<float>(obj, name, H5T_NATIVE_FLOAT, where, file);
}

std::string read_attr_str(hid_t obj, const char* name, const std::string& where, const std::string& file) {
  H5Handle attr = open_attr(obj, name, where, file);
  H5Handle type(H5Aget_type(attr.get()), H5Tclose);
  if (type.get() < 0) fail_io(file, "cannot read the type of attribute " + where + name, HINT_DAMAGED);
  return read_string(
      type.get(), [&](hid_t mem, void* buf) { return H5Aread(attr.get(), mem, buf); }, file,
      "attribute " + where + name);
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

// True when every component of the absolute `path` exists (H5Lexists alone fails on a missing intermediate group).
bool path_exists(hid_t file_id, const std::string& path, const std::string& file) {
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    const htri_t e = H5Lexists(file_id, prefix.c_str(), H5P_DEFAULT);
    if (e < 0) fail_io(file, "cannot look up " + prefix, HINT_DAMAGED);
    if (e == 0) return false;
  }
  return true;
}

// Opens the dataset at `path` and checks it is a float tensor of exactly `expected` dims.
H5Handle open_tensor_checked(hid_t file_id, const std::string& path, const std::vector<hsize_t>& expected,
                             const CheckpointMeta& meta, const std::string& file) {
  const std::string hint_config = hint_other_config(meta.model);
  if (!path_exists(file_id, path, file))
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

H5Handle create_group(hid_t parent, const char* name, const std::string& file) {
  H5Handle g(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (g.get() < 0) fail_io(file, std::string("cannot create group ") + name, HINT_WRITE);
  return g;
}

// Everything inside the open file; all handles opened here are closed before it returns.
void write_contents(hid_t file_id, const CheckpointMeta& meta, const ParamTable& table,
                    const CheckpointTensors& tensors, const std::string& file) {
  H5Handle root(H5Gopen2(file_id, "/", H5P_DEFAULT), H5Gclose);
  if (root.get() < 0) fail_io(file, "cannot open the root group", HINT_WRITE);
  const hid_t r = root.get();
  write_attr_str(r, "format", CHECKPOINT_FORMAT, file);
  write_attr_i64(r, "format_version", CHECKPOINT_FORMAT_VERSION, file);
  write_attr_i64(r, "step", meta.step, file);
  write_attr_i64(r, "tokens_seen", meta.tokens_seen, file);
  write_attr_i64(r, "world_size", meta.world_size, file);
  write_attr_str(r, "mode", meta.mode, file);
  write_attr_str(r, "created", meta.created, file);
  write_attr_str(r, "ember_version", meta.version, file);
  write_attr_i64(r, "n_layer", meta.model.n_layer, file);
  write_attr_i64(r, "n_head", meta.model.n_head, file);
  write_attr_i64(r, "n_embd", meta.model.n_embd, file);
  write_attr_i64(r, "block_size", meta.model.block_size, file);
  write_attr_i64(r, "vocab_size", meta.model.vocab_size, file);

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

  H5Handle opt = create_group(file_id, "/optimizer", file);
  write_attr_i64(opt.get(), "step", meta.optimizer_step, file);
  write_attr_f32(opt.get(), "beta1", meta.beta1, file);
  write_attr_f32(opt.get(), "beta2", meta.beta2, file);
  write_attr_f32(opt.get(), "eps", meta.eps, file);
  write_attr_f32(opt.get(), "weight_decay", meta.weight_decay, file);
  write_attr_f32(opt.get(), "lr", meta.lr, file);
  // A weights-only save (no optimizer arenas) leaves out the moment tensors; loading them then says so clearly.
  if (tensors.exp_avg)
    for (const ParamInfo& p : table.params())
      write_tensor(file_id, tensor_path("/optimizer/exp_avg", p.name), p, tensors.exp_avg, lcpl.get(), file);
  if (tensors.exp_avg_sq)
    for (const ParamInfo& p : table.params())
      write_tensor(file_id, tensor_path("/optimizer/exp_avg_sq", p.name), p, tensors.exp_avg_sq, lcpl.get(), file);

  H5Handle ranks = create_group(file_id, "/ranks", file);
  H5Handle rank0 = create_group(ranks.get(), "0", file);
  write_attr_u64(rank0.get(), "data_cursor", meta.data_cursor, file);
  write_attr_u64(rank0.get(), "rng_offset", meta.rng_offset, file);
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

H5Handle open_group(hid_t file_id, const char* path, const std::string& file) {
  if (!path_exists(file_id, path, file))
    throw Error("checkpoint " + file + ": group " + path + " is missing", HINT_DAMAGED);
  H5Handle g(H5Gopen2(file_id, path, H5P_DEFAULT), H5Gclose);
  if (g.get() < 0) fail_io(file, std::string("cannot open group ") + path, HINT_DAMAGED);
  return g;
}

int read_attr_int(hid_t obj, const char* name, const std::string& where, const std::string& file) {
  const int64_t v = read_attr_i64(obj, name, where, file);
  if (v < 0 || v > INT32_MAX)
    throw Error("checkpoint " + file + ": attribute " + where + name + " = " + std::to_string(v) + " is out of range",
                HINT_DAMAGED);
  return int(v);
}

CheckpointMeta read_meta(hid_t file_id, const std::string& file) {
  CheckpointMeta m;
  H5Handle root(H5Gopen2(file_id, "/", H5P_DEFAULT), H5Gclose);
  if (root.get() < 0) fail_io(file, "cannot open the root group", HINT_DAMAGED);
  const hid_t r = root.get();
  const char* const hint_not_ours = "pass a checkpoint written by ember (step_XXXXXXXX.h5 in the checkpoint folder)";
  const htri_t has_format = H5Aexists(r, "format");
  if (has_format < 0) fail_io(file, "cannot read the root attributes", HINT_DAMAGED);
  if (has_format == 0) throw Error("checkpoint " + file + ": not an ember checkpoint (format attribute missing)", hint_not_ours);
  const std::string format = read_attr_str(r, "format", "/", file);
  if (format != CHECKPOINT_FORMAT)
    throw Error("checkpoint " + file + ": not an ember checkpoint (format is \"" + format + "\", expected \"" +
                    CHECKPOINT_FORMAT + "\")",
                hint_not_ours);
  const int64_t version = read_attr_i64(r, "format_version", "/", file);
  if (version < 1 || version > CHECKPOINT_FORMAT_VERSION) {
    std::string writer = "unknown";
    if (H5Aexists(r, "ember_version") > 0) writer = read_attr_str(r, "ember_version", "/", file);
    throw Error("checkpoint " + file + ": format_version " + std::to_string(version) +
                    " is not supported (this ember reads version " + std::to_string(CHECKPOINT_FORMAT_VERSION) + ")",
                "it was written by ember " + writer + "; use that version or a newer ember to read it");
  }
  m.step = read_attr_i64(r, "step", "/", file);
  m.tokens_seen = read_attr_i64(r, "tokens_seen", "/", file);
  m.world_size = read_attr_int(r, "world_size", "/", file);
  m.mode = read_attr_str(r, "mode", "/", file);
  m.created = read_attr_str(r, "created", "/", file);
  m.version = read_attr_str(r, "ember_version", "/", file);
  m.model.n_layer = read_attr_int(r, "n_layer", "/", file);
  m.model.n_head = read_attr_int(r, "n_head", "/", file);
  m.model.n_embd = read_attr_int(r, "n_embd", "/", file);
  m.model.block_size = read_attr_int(r, "block_size", "/", file);
  m.model.vocab_size = read_attr_int(r, "vocab_size", "/", file);

  if (!path_exists(file_id, "/config", file))
    throw Error("checkpoint " + file + ": dataset /config is missing", HINT_DAMAGED);
  H5Handle cfg(H5Dopen2(file_id, "/config", H5P_DEFAULT), H5Dclose);
  if (cfg.get() < 0) fail_io(file, "cannot open dataset /config", HINT_DAMAGED);
  H5Handle cfg_space(H5Dget_space(cfg.get()), H5Sclose);
  if (cfg_space.get() < 0 || H5Sget_simple_extent_npoints(cfg_space.get()) != 1)
    throw Error("checkpoint " + file + ": dataset /config is not a single string", HINT_DAMAGED);
  H5Handle cfg_type(H5Dget_type(cfg.get()), H5Tclose);
  if (cfg_type.get() < 0) fail_io(file, "cannot read the type of dataset /config", HINT_DAMAGED);
  m.config_ini = read_string(
      cfg_type.get(), [&](hid_t mem, void* buf) { return H5Dread(cfg.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf); },
      file, "dataset /config");

  H5Handle opt = open_group(file_id, "/optimizer", file);
  m.optimizer_step = read_attr_i64(opt.get(), "step", "/optimizer:", file);
  m.beta1 = read_attr_f32(opt.get(), "beta1", "/optimizer:", file);
  m.beta2 = read_attr_f32(opt.get(), "beta2", "/optimizer:", file);
  m.eps = read_attr_f32(opt.get(), "eps", "/optimizer:", file);
  m.weight_decay = read_attr_f32(opt.get(), "weight_decay", "/optimizer:", file);
  m.lr = read_attr_f32(opt.get(), "lr", "/optimizer:", file);

  H5Handle rank0 = open_group(file_id, "/ranks/0", file);
  m.data_cursor = read_attr_u64(rank0.get(), "data_cursor", "/ranks/0:", file);
  m.rng_offset = read_attr_u64(rank0.get(), "rng_offset", "/ranks/0:", file);
  return m;
}

}  // namespace

std::string checkpoint_path(const std::string& folder, int64_t step) {
  char name[40];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return folder.empty() ? std::string(name) : (fs::path(folder) / name).string();
}

std::string save_checkpoint(const std::string& folder, const CheckpointMeta& meta, const ParamTable& table,
                            const CheckpointTensors& tensors, int keep_latest_k) {
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
