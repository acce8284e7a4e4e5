// The checkpoint file layout, writing side: plain HDF5 C API, every call checked; tensors are written as flat
// element ranges of their full logical datasets, which is what makes ZeRO shards and resharding work.
#include "checkpoint/layout.h"

#include <algorithm>
#include <cstdlib>

#include "checkpoint/folder.h"
#include "core/error.h"
#include "model/attention_schedule.h"

namespace ember::checkpoint_detail {
namespace {

// Largest chunk in elements: 1M fp32 = 4 MiB, big enough that per-chunk overhead (index entry, checksum, one
// read/write call) is negligible, small enough that Fletcher32's 4 GiB chunk limit and the memory a reader needs
// for one chunk never matter (GPT-2 124M's wte [50257, 768] becomes 37 chunks of 1365 rows).
constexpr hsize_t MAX_CHUNK_ELEMS = hsize_t(1) << 20;

// Chunk = whole rows, as many as fit in MAX_CHUNK_ELEMS (at least one row).
std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims) {
  hsize_t row = 1;
  for (size_t i = 1; i < dims.size(); ++i) row *= dims[i];
  std::vector<hsize_t> chunk = dims;
  chunk[0] = std::clamp<hsize_t>(MAX_CHUNK_ELEMS / std::max<hsize_t>(row, 1), 1, std::max<hsize_t>(dims[0], 1));
  return chunk;
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
                const float* data, hid_t dxpl, int rank, const std::string& file) {
  H5Handle dset = create_tensor(file_id, path, dims, file);
  const std::string fault = injected_fault(rank, path);
  if (!fault.empty()) throw Error("checkpoint " + file + ": cannot write dataset " + path + ": " + fault, HINT_WRITE);
  H5Handle fspace = EMBER_H5_OWN(H5Dget_space(dset.get()), H5Sclose);
  const hsize_t one = 1;
  H5Handle mspace =
      lo < hi ? flat_range_memory_space(dims, lo, hi) : EMBER_H5_OWN(H5Screate_simple(1, &one, nullptr), H5Sclose);
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
                  ArenaRange write, hid_t dxpl, int rank, const std::string& file) {
  const size_t lo = std::max(write.begin, p.offset), hi = std::min(write.end, p.offset + p.numel);
  EMBER_ASSERT(lo >= hi || base != nullptr, "a tensor set with elements in the write range needs its data");
  write_flat(file_id, tensor_path(prefix, p.name), to_dims(p.shape), lo < hi ? lo - p.offset : 0,
             lo < hi ? hi - p.offset : 0, lo < hi ? base + (lo - base_index) : nullptr, dxpl, rank, file);
}

}  // namespace

std::string injected_fault(int rank, const std::string& what) {
  static const std::string spec = [] {
    const char* v = std::getenv("EMBER_TEST_FAIL_WRITE");
    return std::string(v ? v : "");
  }();
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || colon + 1 == spec.size() || spec.substr(0, colon) != std::to_string(rank) ||
      what.find(spec.substr(colon + 1)) == std::string::npos)
    return "";
  return "No space left on device (injected by EMBER_TEST_FAIL_WRITE)";
}

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
    write_attr_str(r, "mode", training_mode_name(meta.mode), ctx);
    write_attr_str(r, "created", meta.created, ctx);
    write_attr_str(r, "ember_version", meta.version, ctx);
    write_attr_i64(r, "n_layer", meta.model.n_layer, ctx);
    write_attr_i64(r, "n_head", meta.model.n_head, ctx);
    write_attr_i64(r, "n_embd", meta.model.n_embd, ctx);
    write_attr_i64(r, "block_size", meta.model.block_size, ctx);
    write_attr_i64(r, "vocab_size", meta.model.vocab_size, ctx);
    // The attention schedule, only where it is not GPT-2's (so that a GPT-2 model's file is as it always was).
    if (meta.model.position == PositionEncoding::rope) {
      write_attr_str(r, "position", position_encoding_name(meta.model.position), ctx);
      write_attr_f32(r, "rope_theta", meta.model.rope_theta, ctx);
    }
    if (!meta.model.attention_windows.empty())
      write_attr_str(r, "attention_windows", format_attention_windows(meta.model.attention_windows), ctx);
    if (!meta.model.alibi_slopes.empty())
      write_attr_str(r, "alibi_slopes", format_alibi_slopes(meta.model.alibi_slopes), ctx);
    if (meta.mode == TrainingMode::async) write_attr_u64(r, "async_version", meta.async_version, ctx);
    if (!meta.precision.empty()) write_attr_str(r, "precision", meta.precision, ctx);
    if (!parallel) {
      write_config(file_id, meta.config_ini, file);
      write_tokenizer(file_id, meta.tokenizer.value_or(CheckpointTokenizer{}), file);
    }
  });
  // Every set is written like /model; those under /optimizer (the moments, the momentum) once that group exists.
  const ArenaRange write = src.write;
  const int rank = src.rank;
  auto add_sets = [&](bool in_optimizer) {
    for (const TensorSet& set : src.sets) {
      if ((set.prefix.rfind("/optimizer/", 0) == 0) != in_optimizer) continue;
      for (const ParamInfo& p : table.params())
        steps.push_back(
            [=, &p] { write_tensor(file_id, set.prefix, p, set.data, set.begin, write, dxpl, rank, file); });
    }
  };
  add_sets(false);
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
  add_sets(true);
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
        const size_t len = size_t(src.array_lens.at(r).at(k));
        const bool mine = r == size_t(src.rank);
        write_flat(file_id, path, {hsize_t(len)}, 0, mine ? len : 0, mine ? src.rank_arrays.at(k).data : nullptr, dxpl,
                   src.rank, file);
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

}  // namespace ember::checkpoint_detail
