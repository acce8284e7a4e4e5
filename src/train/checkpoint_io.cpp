// The checkpoint file layout (implementation): plain HDF5 C API, every call checked; tensors are written and read as
// flat element ranges of their full logical datasets, which is what makes ZeRO shards and resharding work.
#include "train/checkpoint_io.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "train/checkpoint_files.h"

namespace ember::checkpoint_detail {
namespace {

// Largest chunk in elements: 1M fp32 = 4 MiB, big enough that per-chunk overhead (index entry, checksum, one
// read/write call) is negligible, small enough that Fletcher32's 4 GiB chunk limit and the memory a reader needs
// for one chunk never matter (GPT-2 124M's wte [50257, 768] becomes 37 chunks of 1365 rows).
constexpr hsize_t MAX_CHUNK_ELEMS = hsize_t(1) << 20;

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

// Chunk = whole rows, as many as fit in MAX_CHUNK_ELEMS (at least one row).
std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims) {
  hsize_t row = 1;
  for (size_t i = 1; i < dims.size(); ++i) row *= dims[i];
  std::vector<hsize_t> chunk = dims;
  chunk[0] = std::clamp<hsize_t>(MAX_CHUNK_ELEMS / std::max<hsize_t>(row, 1), 1, std::max<hsize_t>(dims[0], 1));
  return chunk;
}

[[noreturn]] void fail_corrupt(const std::string& file, const std::string& path) {
  throw Error("checkpoint " + file + ": dataset " + path + " is corrupted (checksum mismatch)", HINT_CORRUPT);
}

// Creates the fp32 dataset at `path` (parent groups included) with its full logical shape: chunked, Fletcher32.
H5Handle create_tensor(hid_t file_id, const std::string& path, const std::vector<hsize_t>& dims,
                       const std::string& file) {
  H5Handle space = EMBER_H5_OWN(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  H5Handle lcpl = EMBER_H5_OWN(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  EMBER_H5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1));
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
  H5Handle dset(H5Dcreate2(file_id, path.c_str(), H5T_IEEE_F32LE, space.get(), lcpl.get(), dcpl.get(), dapl.get()),
                H5Dclose);
  if (dset.get() < 0) fail_io(file, "cannot create dataset " + path, HINT_WRITE);
  return dset;
}

// Creates the float dataset `path` of shape `dims` and writes this rank's part of it: its flat elements [lo, hi),
// from data[0 .. hi - lo). A rank with nothing to write (lo >= hi; data may then be null) still calls H5Dwrite, with
// empty selections: in a parallel file the write is collective.
void write_flat(hid_t file_id, const std::string& path, const std::vector<hsize_t>& dims, size_t lo, size_t hi,
                const float* data, hid_t dxpl, const std::string& file) {
  H5Handle dset = create_tensor(file_id, path, dims, file);
  H5Handle fspace = EMBER_H5_OWN(H5Dget_space(dset.get()), H5Sclose);
  const hsize_t n = lo < hi ? hsize_t(hi - lo) : 1;
  H5Handle mspace = EMBER_H5_OWN(H5Screate_simple(1, &n, nullptr), H5Sclose);
  static const float nothing = 0.0f;  // HDF5 wants a buffer even for an empty selection
  if (lo < hi) {
    select_flat_range(fspace.get(), dims, lo, hi);
  } else {
    EMBER_H5_CHECK(H5Sselect_none(fspace.get()));
    EMBER_H5_CHECK(H5Sselect_none(mspace.get()));
    data = &nothing;
  }
  if (H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), dxpl, data) < 0)
    fail_io(file, "cannot write dataset " + path, HINT_WRITE);
  if (dset.close() < 0) fail_io(file, "cannot close dataset " + path, HINT_WRITE);
}

// Creates the dataset of parameter `p` under `prefix` and writes this rank's part of it: the arena elements of
// src.write that fall inside the tensor, taken from `base` (whose element 0 is arena element `base_index`).
void write_tensor(hid_t file_id, const std::string& prefix, const ParamInfo& p, const float* base, size_t base_index,
                  ArenaRange write, hid_t dxpl, const std::string& file) {
  const size_t lo = std::max(write.begin, p.offset), hi = std::min(write.end, p.offset + p.numel);
  EMBER_ASSERT(lo >= hi || base != nullptr, "a tensor set with elements in the write range needs its data");
  write_flat(file_id, tensor_path(prefix, p.name), to_dims(p.shape), lo < hi ? lo - p.offset : 0,
             lo < hi ? hi - p.offset : 0, lo < hi ? base + (lo - base_index) : nullptr, dxpl, file);
}

// "h/10" after "h/2": digit runs compare as numbers, everything else by character.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      const size_t za = na.find_first_not_of('0'), zb = nb.find_first_not_of('0');
      const std::string ta = za == std::string::npos ? "" : na.substr(za),
                        tb = zb == std::string::npos ? "" : nb.substr(zb);
      if (ta.size() != tb.size()) return ta.size() < tb.size();
      if (ta != tb) return ta < tb;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// Names of the float datasets directly inside the group `group` (at path `where`), in natural order.
std::vector<std::string> float_datasets_in(hid_t group, const std::string& where, const std::string& file) {
  std::vector<std::string> names;
  for (const std::string& rel : list_datasets(group, h5_context(file))) {
    // rel is relative to the group ("/exp_avg"); deeper names lie inside a subgroup.
    const std::string name = rel.substr(1);
    if (name.find('/') != std::string::npos) continue;
    H5Handle dset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (dset.get() < 0) fail_io(file, "cannot open dataset " + where + "/" + name, HINT_DAMAGED);
    H5Handle type(H5Dget_type(dset.get()), H5Tclose);
    if (type.get() < 0) fail_io(file, "cannot read the type of dataset " + where + "/" + name, HINT_DAMAGED);
    if (H5Tget_class(type.get()) == H5T_FLOAT) names.push_back(name);
  }
  std::sort(names.begin(), names.end(), natural_less);
  return names;
}

}  // namespace

H5Context h5_context(const std::string& file) { return H5Context{"checkpoint " + file, HINT_DAMAGED, HINT_WRITE}; }

void fail_io(const std::string& file, const std::string& what, const char* hint) {
  throw_h5_failure("checkpoint " + file, what, hint);
}

std::vector<hsize_t> to_dims(const std::vector<int64_t>& shape) {
  return std::vector<hsize_t>(shape.begin(), shape.end());
}

std::string tensor_path(const std::string& prefix, const std::string& hf_name) {
  std::string p = hf_name;
  std::replace(p.begin(), p.end(), '.', '/');
  return prefix + "/" + p;
}

// The tensors, a Fletcher32 word per chunk, and 8 KiB of metadata per dataset (object header, chunk index, link;
// ~3 KiB measured) plus 1 MiB for groups, attributes and the config text.
uint64_t estimated_file_bytes(const ParamTable& table, size_t arena_copies, const std::vector<uint64_t>& flat_lens,
                              size_t config_bytes) {
  auto dataset_bytes = [](const std::vector<hsize_t>& dims) {
    const std::vector<hsize_t> chunk = chunk_dims(dims);
    uint64_t numel = 1;
    for (hsize_t d : dims) numel *= d;
    return numel * sizeof(float) + (dims[0] + chunk[0] - 1) / chunk[0] * 4 + 8192;
  };
  uint64_t per_copy = 0;
  for (const ParamInfo& p : table.params()) per_copy += dataset_bytes(to_dims(p.shape));
  uint64_t flat = 0;
  for (uint64_t n : flat_lens) flat += dataset_bytes({hsize_t(n)});
  return arena_copies * per_copy + flat + config_bytes + (uint64_t(1) << 20);
}

// File locking is off: the temp-file-and-rename protocol already keeps readers away from a file being written, and
// HDF5 1.10's flock() fails outright on many NFS/Lustre mounts where checkpoints of cluster jobs live.
H5Handle checkpoint_fapl(bool for_writing) {
  H5Handle fapl = EMBER_H5_OWN(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
  EMBER_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true));
#endif
  // v1.8 object headers and superblock carry metadata checksums too; any HDF5 >= 1.8 (h5py, h5dump) reads them.
  if (for_writing) EMBER_H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST));
  return fapl;
}

std::vector<std::function<void()>> content_steps(hid_t file_id, const CheckpointMeta& meta, const ParamTable& table,
                                                 const WriteSource& src, hid_t dxpl, bool parallel,
                                                 const std::string& file) {
  std::vector<std::function<void()>> steps;
  steps.push_back([=, &meta] {
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
    if (meta.mode == "async") write_attr_u64(r, "async_version", meta.async_version, ctx);
    if (!parallel) write_config(file_id, meta.config_ini, file);
  });
  for (const ParamInfo& p : table.params())
    steps.push_back([=, &p, &src] { write_tensor(file_id, "/model", p, src.params, 0, src.write, dxpl, file); });
  steps.push_back([=, &meta] {
    const H5Context ctx = h5_context(file);
    H5Handle opt = create_group(file_id, "/optimizer", ctx);
    write_attr_i64(opt.get(), "step", meta.optimizer_step, ctx);
    write_attr_f32(opt.get(), "beta1", meta.beta1, ctx);
    write_attr_f32(opt.get(), "beta2", meta.beta2, ctx);
    write_attr_f32(opt.get(), "eps", meta.eps, ctx);
    write_attr_f32(opt.get(), "weight_decay", meta.weight_decay, ctx);
    write_attr_f32(opt.get(), "lr", meta.lr, ctx);
  });
  // A weights-only save (no moment arenas) leaves out the moment tensors; loading them then says so clearly.
  const size_t moments_base = src.moments_base;
  const ArenaRange write = src.write;
  for (const auto& moment :
       {std::pair{"/optimizer/exp_avg", src.exp_avg}, std::pair{"/optimizer/exp_avg_sq", src.exp_avg_sq}}) {
    const char* prefix = moment.first;
    const float* base = moment.second;
    if (!base) continue;
    for (const ParamInfo& p : table.params())
      steps.push_back([=, &p] { write_tensor(file_id, prefix, p, base, moments_base, write, dxpl, file); });
  }
  // After /optimizer exists: an extra set under it (/optimizer/momentum_buffer) goes into that group.
  for (const std::pair<std::string, const float*>& set : src.extra_sets)
    for (const ParamInfo& p : table.params())
      steps.push_back(
          [=, &p, &set, &src] { write_tensor(file_id, set.first, p, set.second, 0, src.write, dxpl, file); });
  steps.push_back([=, &meta] {
    const H5Context ctx = h5_context(file);
    H5Handle ranks = create_group(file_id, "/ranks", ctx);
    for (size_t r = 0; r < meta.ranks.size(); ++r) {
      const CheckpointMeta::RankState& state = meta.ranks[r];
      H5Handle g = create_group(ranks.get(), std::to_string(r).c_str(), ctx);
      write_attr_u64(g.get(), "data_cursor", state.data_cursor, ctx);
      write_attr_u64(g.get(), "rng_offset", state.rng_offset, ctx);
      if (!state.role.empty()) {  // sync-mode files keep exactly their old attributes
        write_attr_str(g.get(), "role", state.role, ctx);
        write_attr_i64(g.get(), "optimizer_step", state.optimizer_step, ctx);
        write_attr_u64(g.get(), "seq", state.seq, ctx);
      }
    }
  });
  // Rank r's arrays: created by every rank (identical metadata operations), written by rank r alone.
  for (size_t r = 0; r < meta.ranks.size(); ++r)
    for (size_t k = 0; k < meta.ranks[r].arrays.size(); ++k)
      steps.push_back([=, &meta, &src] {
        const std::string path = "/ranks/" + std::to_string(r) + "/" + meta.ranks[r].arrays[k];
        const size_t len = size_t(src.rank_array_lens.at(r));
        const bool mine = r == size_t(src.rank);
        write_flat(file_id, path, {hsize_t(len)}, 0, mine ? len : 0, mine ? src.rank_arrays.at(k).second : nullptr,
                   dxpl, file);
      });
  return steps;
}

void write_config(hid_t file_id, const std::string& config_ini, const std::string& file) {
  H5Handle type = vlen_string_type();
  H5Handle space = scalar_space();
  H5Handle dset(H5Dcreate2(file_id, "/config", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
  if (dset.get() < 0) fail_io(file, "cannot create dataset /config", HINT_WRITE);
  const char* p = config_ini.c_str();
  if (H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) < 0)
    fail_io(file, "cannot write dataset /config", HINT_WRITE);
  if (dset.close() < 0) fail_io(file, "cannot close dataset /config", HINT_WRITE);
}

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
  H5Handle fapl = checkpoint_fapl(false);
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
      throw Error(
          "checkpoint " + path + " is truncated (" + std::to_string(have) + " of " + std::to_string(want) + " bytes)",
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
  if (has_format == 0)
    throw Error("checkpoint " + file + ": not an ember checkpoint (format attribute missing)", hint_not_ours);
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
  if (attr_exists(r, "async_version", "/", ctx)) m.async_version = read_attr_u64(r, "async_version", "/", ctx);

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

  // One /ranks/<r> per rank of the writing run. The group count bounds world_size before anything is allocated
  // from it, so a damaged attribute cannot ask for billions of entries.
  H5Handle ranks = open_group(file_id, "/ranks", ctx);
  H5G_info_t info{};
  if (H5Gget_info(ranks.get(), &info) < 0) fail_io(file, "cannot list group /ranks", HINT_DAMAGED);
  if (m.world_size < 1 || hsize_t(m.world_size) > info.nlinks)
    throw Error("checkpoint " + file + ": world_size is " + std::to_string(m.world_size) + " but /ranks holds " +
                    std::to_string(info.nlinks) + " rank groups",
                HINT_DAMAGED);
  m.ranks.assign(size_t(m.world_size), CheckpointMeta::RankState{});
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    const std::string g = "/ranks/" + std::to_string(i);
    H5Handle rank = open_group(file_id, g.c_str(), ctx);
    CheckpointMeta::RankState& state = m.ranks[i];
    state.data_cursor = read_attr_u64(rank.get(), "data_cursor", g + ":", ctx);
    state.rng_offset = read_attr_u64(rank.get(), "rng_offset", g + ":", ctx);
    if (attr_exists(rank.get(), "role", g + ":", ctx)) state.role = read_attr_str(rank.get(), "role", g + ":", ctx);
    if (attr_exists(rank.get(), "optimizer_step", g + ":", ctx))
      state.optimizer_step = read_attr_i64(rank.get(), "optimizer_step", g + ":", ctx);
    if (attr_exists(rank.get(), "seq", g + ":", ctx)) state.seq = read_attr_u64(rank.get(), "seq", g + ":", ctx);
    state.arrays = float_datasets_in(rank.get(), g, file);
  }
  return m;
}

H5Handle open_tensor_checked(hid_t file_id, const std::string& path, const std::vector<hsize_t>& expected,
                             const CheckpointMeta& meta, const std::string& file) {
  const std::string hint_config = hint_other_config(meta.model);
  if (!path_exists(file_id, path, h5_context(file))) {
    auto under = [&](const char* prefix) { return path.rfind(prefix, 0) == 0; };
    // Weights missing: another model. Moments missing: a weights-only save. Anything else (an extra set such as
    // /optimizer/momentum_buffer): state of a training mode other than the one that wrote the file.
    std::string hint = "the checkpoint (mode " + meta.mode +
                       ") holds no such state; resume it in the training mode that wrote it, or start training fresh";
    if (under("/model/")) hint = hint_config;
    if (under("/optimizer/exp_avg/") || under("/optimizer/exp_avg_sq/"))
      hint = "the checkpoint holds no optimizer state; load it for eval/generate, or start training fresh";
    throw Error("checkpoint " + file + ": dataset " + path + " is missing (the model expects shape " +
                    shape_str(expected) + ")",
                hint);
  }
  H5Handle dset(H5Dopen2(file_id, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (dset.get() < 0) {
    if (last_h5_failure().checksum) fail_corrupt(file, path);
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

void read_tensor_range(hid_t dset, const std::vector<hsize_t>& dims, hsize_t lo, hsize_t hi, float* dst,
                       const std::string& path, const std::string& file) {
  if (lo >= hi) return;
  H5Handle fspace(H5Dget_space(dset), H5Sclose);
  if (fspace.get() < 0) fail_io(file, "cannot read the shape of dataset " + path, HINT_DAMAGED);
  select_flat_range(fspace.get(), dims, lo, hi);
  const hsize_t n = hi - lo;
  H5Handle mspace = EMBER_H5_OWN(H5Screate_simple(1, &n, nullptr), H5Sclose);
  if (H5Dread(dset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), H5P_DEFAULT, dst) < 0) {
    if (last_h5_failure().checksum) fail_corrupt(file, path);
    fail_io(file, "cannot read dataset " + path, HINT_DAMAGED);
  }
}

std::vector<CheckpointDatasetReport> scan_datasets(hid_t file_id, const std::string& file) {
  std::vector<std::string> paths = list_datasets(file_id, h5_context(file));
  std::sort(paths.begin(), paths.end(), natural_less);
  std::vector<CheckpointDatasetReport> out;
  for (const std::string& path : paths) {
    CheckpointDatasetReport r;
    r.path = path;
    auto failed = [&](const std::string& what, const H5Failure& f) {
      r.problem = f.checksum ? "corrupted (checksum mismatch)" : what + ": " + f.reason;
    };
    H5Handle dset(H5Dopen2(file_id, path.c_str(), H5P_DEFAULT), H5Dclose);
    if (dset.get() < 0) {
      failed("cannot be opened", last_h5_failure());
      out.push_back(std::move(r));
      continue;
    }
    H5Handle type(H5Dget_type(dset.get()), H5Tclose);
    H5Handle space(H5Dget_space(dset.get()), H5Sclose);
    const int ndims = space.get() < 0 ? -1 : H5Sget_simple_extent_ndims(space.get());
    if (type.get() < 0 || ndims < 0) {
      failed("type and shape cannot be read", last_h5_failure());
      out.push_back(std::move(r));
      continue;
    }
    r.dtype = h5_type_name(type.get());
    std::vector<hsize_t> dims(size_t(ndims), 0);
    if (ndims > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
      failed("shape cannot be read", last_h5_failure());
      out.push_back(std::move(r));
      continue;
    }
    r.shape.assign(dims.begin(), dims.end());
    H5Failure why;
    r.ok = read_dataset_fully(dset.get(), why);
    if (!r.ok) failed("cannot be read", why);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ember::checkpoint_detail
