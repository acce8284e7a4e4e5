// The checkpoint file layout, reading side: opening a file with a clear message for each way it can be unusable,
// the metadata with its checks, shape-checked tensors read as flat ranges, and the full scan behind verify/inspect.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <optional>

#include "checkpoint/folder.h"
#include "checkpoint/layout.h"
#include "checkpoint/meta_check.h"
#include "core/error.h"
#include "model/attention_schedule.h"

namespace ember::checkpoint_detail {
namespace {

std::string shape_str(const std::vector<hsize_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The attention schedule's attributes (written only where it is not GPT-2's), into `model`.
void read_attention_schedule(hid_t r, const std::string& file, const H5Context& ctx, ModelConfig* model) {
  const auto bad = [&](const char* name, const std::string& value, const std::string& problem) {
    throw Error("checkpoint " + file + ": attribute /" + name + " = \"" + value + "\" " + problem, HINT_DAMAGED);
  };
  if (attr_exists(r, "position", "/", ctx)) {
    const std::string text = read_attr_str(r, "position", "/", ctx);
    const std::optional<PositionEncoding> p = parse_position_encoding(text);
    if (!p) bad("position", text, "must be learned or rope");
    model->position = *p;
  }
  if (attr_exists(r, "rope_theta", "/", ctx)) model->rope_theta = read_attr_f32(r, "rope_theta", "/", ctx);
  if (attr_exists(r, "attention_windows", "/", ctx)) {
    const std::string text = read_attr_str(r, "attention_windows", "/", ctx);
    std::vector<float> unused;
    const std::string problem =
        parse_attention_windows(text, model->n_layer, model->block_size, &model->attention_windows, &unused);
    if (!problem.empty() || !unused.empty()) bad("attention_windows", text, problem.empty() ? "is a preset" : problem);
  }
  if (attr_exists(r, "alibi_slopes", "/", ctx)) {
    const std::string text = read_attr_str(r, "alibi_slopes", "/", ctx);
    if (const std::string problem = parse_alibi_slopes(text, model->n_layer, &model->alibi_slopes); !problem.empty())
      bad("alibi_slopes", text, problem);
  }
  if (const std::string problem = attention_schedule_problem(*model); !problem.empty())
    throw Error("checkpoint " + file + ": " + problem, HINT_DAMAGED);
}

// Hint for checkpoints whose tensors do not fit the model being built: the config they were written for.
std::string hint_other_config(const ModelConfig& c) {
  return "the checkpoint was written for a different model config (n_layer=" + std::to_string(c.n_layer) +
         ", n_head=" + std::to_string(c.n_head) + ", n_embd=" + std::to_string(c.n_embd) +
         ", block_size=" + std::to_string(c.block_size) + ", vocab_size=" + std::to_string(c.vocab_size) +
         "); use the same [model] settings or start fresh";
}

[[noreturn]] void fail_corrupt(const std::string& file, const std::string& path) {
  throw Error("checkpoint " + file + ": dataset " + path + " is corrupted (checksum mismatch)", HINT_CORRUPT);
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
  const std::string mode = read_attr_str(r, "mode", "/", ctx);
  const std::optional<TrainingMode> parsed = parse_training_mode(mode);
  if (!parsed)
    throw Error("checkpoint " + file + ": attribute /mode is \"" + mode + "\", expected \"sync\" or \"async\"",
                "the file was not written by this ember or was modified since; resume from another checkpoint or "
                "start fresh");
  m.mode = *parsed;
  m.created = read_attr_str(r, "created", "/", ctx);
  m.version = read_attr_str(r, "ember_version", "/", ctx);
  m.model.n_layer = read_attr_int(r, "n_layer", "/", ctx);
  m.model.n_head = read_attr_int(r, "n_head", "/", ctx);
  m.model.n_embd = read_attr_int(r, "n_embd", "/", ctx);
  m.model.block_size = read_attr_int(r, "block_size", "/", ctx);
  m.model.vocab_size = read_attr_int(r, "vocab_size", "/", ctx);
  read_attention_schedule(r, file, ctx, &m.model);
  if (attr_exists(r, "async_version", "/", ctx)) m.async_version = read_attr_u64(r, "async_version", "/", ctx);
  if (attr_exists(r, "precision", "/", ctx)) m.precision = read_attr_str(r, "precision", "/", ctx);

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
    throw Error("checkpoint " + file + ": attribute /world_size is " + std::to_string(m.world_size) + ", expected 1.." +
                    std::to_string(info.nlinks) + " (one group /ranks/<r> per rank of the run; /ranks holds " +
                    std::to_string(info.nlinks) + ")",
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
  m.tokenizer = read_tokenizer(file_id, file);
  check_meta(file_id, m, file);
  return m;
}

H5Handle open_tensor_checked(hid_t file_id, const std::string& path, const std::vector<hsize_t>& expected,
                             const CheckpointMeta& meta, const std::string& file) {
  const std::string hint_config = hint_other_config(meta.model);
  if (!path_exists(file_id, path, h5_context(file))) {
    auto under = [&](const char* prefix) { return path.rfind(prefix, 0) == 0; };
    // Weights missing: another model. Moments missing: a weights-only save. Anything else (an extra set such as
    // /optimizer/momentum_buffer): state of a training mode other than the one that wrote the file.
    std::string hint = "the checkpoint (mode " + std::string(training_mode_name(meta.mode)) +
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
  H5Handle mspace = flat_range_memory_space(dims, lo, hi);
  if (H5Dread(dset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), H5P_DEFAULT, dst) < 0) {
    if (last_h5_failure().checksum) fail_corrupt(file, path);
    fail_io(file, "cannot read dataset " + path, HINT_DAMAGED);
  }
  // Checked while the values are still in cache: a NaN weight would otherwise surface as a NaN loss much later.
  if (const uint64_t bad = count_non_finite(dst, size_t(n)); bad > 0)
    throw Error("checkpoint " + file + ": dataset " + path + " holds " + std::to_string(bad) +
                    " non-finite value(s) (NaN or inf) among the " + std::to_string(n) + " read",
                HINT_NON_FINITE);
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
    uint64_t non_finite = 0;
    r.ok = read_dataset_fully(dset.get(), why, &non_finite);
    if (!r.ok) failed("cannot be read", why);
    if (r.ok && non_finite > 0) {
      r.ok = false;
      r.problem = "holds " + std::to_string(non_finite) + " non-finite value(s) (NaN or inf)";
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ember::checkpoint_detail