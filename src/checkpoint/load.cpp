// HDF5 checkpoints, reading: the metadata, any arena range of any tensor set (so a file loads at any world size),
// one rank's own arrays, and the full scan and verification behind `ember inspect` and --resume.
#include <hdf5.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/folder.h"
#include "checkpoint/h5.h"
#include "checkpoint/layout.h"
#include "checkpoint/meta_check.h"
#include "core/error.h"

namespace ember {

using namespace checkpoint_detail;

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  H5Quiet quiet;
  H5Handle file = open_checkpoint(path);
  return read_meta(file.get(), path);
}

std::optional<CheckpointTokenizer> read_checkpoint_tokenizer(const std::string& path) {
  return read_checkpoint_meta(path).tokenizer;
}

void load_checkpoint(const std::string& path, const ParamTable& table, const std::vector<TensorSet>& sets,
                     CheckpointMeta& meta) {
  const size_t total = table.total_numel();
  for (const TensorSet& set : sets)
    EMBER_ASSERT(set.begin <= std::min(set.end, total),
                 "TensorSet \"" + set.prefix + "\" range is reversed or starts past the arena");
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
  for (const TensorSet& set : sets) {
    if (!set.data) continue;
    const size_t begin = set.begin, end = std::min(set.end, total);
    for (const ParamInfo& p : table.params()) {
      const std::string ds = tensor_path(set.prefix, p.name);
      std::vector<hsize_t> dims = to_dims(p.shape);
      H5Handle dset = open_tensor_checked(file.get(), ds, dims, m, path);
      const size_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
      if (lo < hi)
        loads.push_back(
            Load{ds, std::move(dset), std::move(dims), lo - p.offset, hi - p.offset, set.data + (lo - begin)});
    }
  }

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

bool load_rank_arrays(const std::string& path, int rank, const std::vector<RankArray>& arrays) {
  EMBER_ASSERT(rank >= 0, "load_rank_arrays needs a rank >= 0");
  for (const RankArray& a : arrays) EMBER_ASSERT(a.data != nullptr, "load_rank_arrays needs a buffer for " + a.name);
  H5Quiet quiet;
  H5Handle file = open_checkpoint(path);
  const CheckpointMeta m = read_meta(file.get(), path);
  const H5Context ctx = h5_context(path);
  const std::string group = "/ranks/" + std::to_string(rank);
  if (!path_exists(file.get(), group, ctx)) return false;
  for (const RankArray& a : arrays)
    if (!path_exists(file.get(), group + "/" + a.name, ctx)) return false;
  // Every dataset is checked before any buffer is written.
  std::vector<H5Handle> dsets;
  for (const RankArray& a : arrays)
    dsets.push_back(open_tensor_checked(file.get(), group + "/" + a.name, {hsize_t(a.len)}, m, path));
  for (size_t i = 0; i < arrays.size(); ++i) {
    read_tensor_range(dsets[i].get(), {hsize_t(arrays[i].len)}, 0, arrays[i].len, arrays[i].data,
                      group + "/" + arrays[i].name, path);
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
  for (const CheckpointDatasetReport& r : scan_datasets(file.get(), path)) {
    if (r.ok) continue;
    const bool corrupt = r.problem.rfind("corrupted", 0) == 0, non_finite = r.problem.rfind("holds", 0) == 0;
    throw Error("checkpoint " + path + ": dataset " + r.path + " " + (corrupt ? "is " : "") + r.problem,
                corrupt      ? HINT_CORRUPT
                : non_finite ? HINT_NON_FINITE
                             : HINT_DAMAGED);
  }
}

std::vector<float> load_model_weights(const std::string& path, const ModelConfig& model) {
  const ParamTable table(model);
  std::vector<float> weights(table.total_numel());
  CheckpointMeta meta;
  load_checkpoint(path, table, {TensorSet{SET_MODEL, weights.data()}}, meta);
  return weights;
}

}  // namespace ember
