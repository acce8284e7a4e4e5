// The checks every checkpoint's metadata passes on read (implementation). Each limit is one that every file ember
// writes meets, whatever mode, world size or history (resumes, reshards) it has: see docs/checkpoint-format.md,
// "Checks on read".
#include "checkpoint/meta_check.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <vector>

#include "checkpoint/folder.h"
#include "checkpoint/layout.h"
#include "core/error.h"

namespace ember::checkpoint_detail {
namespace {

constexpr const char* HINT_META =
    "the file was modified after ember wrote it, or was not written by ember; resume from another checkpoint "
    "(--resume <folder>/step_XXXXXXXX.h5) or start fresh";

[[noreturn]] void fail_attr(const std::string& file, const std::string& attr, const std::string& value,
                            const std::string& expected) {
  throw Error("checkpoint " + file + ": attribute " + attr + " is " + value + ", expected " + expected, HINT_META);
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A counter the trainers keep in an int (steps, AdamW's step count): 0 .. INT_MAX.
void check_count(const std::string& file, const std::string& attr, int64_t v) {
  if (v < 0 || v > INT_MAX)
    fail_attr(file, attr, std::to_string(v), "0.." + std::to_string(INT_MAX) + " (a step count)");
}

// The dims of the dataset at `path`, or none when it is absent (the tensor checks report that later).
std::vector<hsize_t> dims_of(hid_t file_id, const std::string& path, const std::string& file) {
  if (!path_exists(file_id, path, h5_context(file))) return {};
  H5Handle dset(H5Dopen2(file_id, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (dset.get() < 0) return {};  // reported with its reason when the tensor is opened
  H5Handle space(H5Dget_space(dset.get()), H5Sclose);
  const int rank = space.get() < 0 ? -1 : H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(size_t(std::max(rank, 0)), 0);
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) return {};
  return dims;
}

// The model sizes: positive, heads that split n_embd, and the dimensions of the tensors that carry them.
void check_model(hid_t file_id, const ModelConfig& c, const std::string& file) {
  const std::pair<const char*, int> sizes[] = {{"/n_layer", c.n_layer},
                                               {"/n_head", c.n_head},
                                               {"/n_embd", c.n_embd},
                                               {"/block_size", c.block_size},
                                               {"/vocab_size", c.vocab_size}};
  for (const auto& [name, v] : sizes)
    if (v < 1) fail_attr(file, name, std::to_string(v), ">= 1");
  if (c.n_embd % c.n_head != 0)
    fail_attr(file, "/n_embd", std::to_string(c.n_embd),
              "a multiple of n_head = " + std::to_string(c.n_head) + " (each head is n_embd / n_head wide)");
  // Sizes that disagree with the tensors would size the model (and its allocations) wrongly before any shape check.
  auto check_dims = [&](const char* path, const char* rows_attr, int rows) {
    const std::vector<hsize_t> d = dims_of(file_id, path, file);
    if (d.size() != 2) return;
    if (d[0] != hsize_t(rows))
      fail_attr(file, rows_attr, std::to_string(rows),
                std::to_string(d[0]) + ", the rows of " + path + " [" + std::to_string(d[0]) + ", " +
                    std::to_string(d[1]) + "]");
    if (d[1] != hsize_t(c.n_embd))
      fail_attr(file, "/n_embd", std::to_string(c.n_embd),
                std::to_string(d[1]) + ", the columns of " + path + " [" + std::to_string(d[0]) + ", " +
                    std::to_string(d[1]) + "]");
  };
  check_dims("/model/transformer/wte/weight", "/vocab_size", c.vocab_size);
  check_dims("/model/transformer/wpe/weight", "/block_size", c.block_size);
  const H5Context ctx = h5_context(file);
  if (path_exists(file_id, "/model/transformer/h", ctx)) {
    H5Handle blocks = open_group(file_id, "/model/transformer/h", ctx);
    H5G_info_t info{};
    if (H5Gget_info(blocks.get(), &info) < 0) fail_io(file, "cannot list group /model/transformer/h", HINT_DAMAGED);
    if (info.nlinks != hsize_t(c.n_layer))
      fail_attr(file, "/n_layer", std::to_string(c.n_layer),
                std::to_string(info.nlinks) + ", the blocks under /model/transformer/h");
  }
}

}  // namespace

void check_meta(hid_t file_id, const CheckpointMeta& m, const std::string& file) {
  check_count(file, "/step", m.step);
  if (m.tokens_seen < 0) fail_attr(file, "/tokens_seen", std::to_string(m.tokens_seen), ">= 0");
  check_model(file_id, m.model, file);

  check_count(file, "/optimizer:step", m.optimizer_step);
  // The ranges the config accepts (app/option_table.cpp), so every file a run could write passes.
  const std::pair<const char*, float> betas[] = {{"/optimizer:beta1", m.beta1}, {"/optimizer:beta2", m.beta2}};
  for (const auto& [name, v] : betas)
    if (!(v > -1.0f && v < 1.0f)) fail_attr(file, name, num(v), "a value in (-1, 1) (AdamW decay rate)");
  if (!(std::isfinite(m.eps) && m.eps > 0.0f)) fail_attr(file, "/optimizer:eps", num(m.eps), "finite and > 0");
  if (!(std::isfinite(m.weight_decay) && m.weight_decay >= 0.0f))
    fail_attr(file, "/optimizer:weight_decay", num(m.weight_decay), "finite and >= 0");
  if (!(std::isfinite(m.lr) && m.lr >= 0.0f)) fail_attr(file, "/optimizer:lr", num(m.lr), "finite and >= 0");

  // Roles: none in sync mode. In async mode every rank has one, and only rank 0 can be the center (a save by one
  // process holds a single worker); the center keeps no AdamW state and sends no messages.
  const bool async = m.mode == TrainingMode::async;
  for (size_t r = 0; r < m.ranks.size(); ++r) {
    const CheckpointMeta::RankState& rs = m.ranks[r];
    const std::string g = "/ranks/" + std::to_string(r) + ":";
    if (!async) {
      if (!rs.role.empty())
        fail_attr(file, g + "role", "\"" + rs.role + "\"",
                  "no role in a checkpoint whose /mode is \"sync\" (roles belong to async mode)");
      continue;
    }
    if (rs.role == "center") {
      if (r != 0) fail_attr(file, g + "role", "\"center\"", "\"worker\" (the center is rank 0)");
      if (rs.optimizer_step != 0)
        fail_attr(file, g + "optimizer_step", std::to_string(rs.optimizer_step), "0 (the center has no AdamW)");
      if (rs.seq != 0) fail_attr(file, g + "seq", std::to_string(rs.seq), "0 (the center sends no messages)");
    } else if (rs.role == "worker") {
      check_count(file, g + "optimizer_step", rs.optimizer_step);
    } else {
      fail_attr(file, g + "role", "\"" + rs.role + "\"",
                std::string(r == 0 ? "\"center\" or \"worker\"" : "\"worker\"") +
                    " in a checkpoint whose /mode is \"async\"");
    }
  }
}

}  // namespace ember::checkpoint_detail
