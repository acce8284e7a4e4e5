// `ember inspect`: a checkpoint's metadata, per-rank state and stored config, and a full read of every dataset in
// the file, so that any checksum or shape problem shows up here (and in the exit code) rather than at resume time.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "core/error.h"
#include "model/attention_schedule.h"
#include "model/param_table.h"

namespace po = boost::program_options;

namespace ember {
namespace {

std::string shape_str(const std::vector<uint64_t>& shape) {
  if (shape.empty()) return "scalar";
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Dataset path -> shape for every tensor the model described by the metadata has, under /model and both moments.
std::map<std::string, std::vector<uint64_t>> expected_tensors(const ModelConfig& model) {
  std::map<std::string, std::vector<uint64_t>> out;
  const ParamTable table(model);
  for (const char* prefix : {SET_MODEL, SET_EXP_AVG, SET_EXP_AVG_SQ})
    for (const ParamInfo& p : table.params()) {
      std::string path = std::string(prefix) + "/" + p.name;  // Hugging Face key with '.' -> '/'
      std::replace(path.begin(), path.end(), '.', '/');
      out[path] = std::vector<uint64_t>(p.shape.begin(), p.shape.end());
    }
  return out;
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  std::string checkpoint;
  po::options_description desc("ember inspect options");
  desc.add_options()("help,h", "print this help")("checkpoint", po::value(&checkpoint), "checkpoint file (.h5)");
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  po::variables_map vm;
  if (!parse_command(argc, argv, desc, "usage: ember inspect CHECKPOINT", vm, nullptr, &pos)) return EXIT_CODE_OK;
  require_option(vm, "checkpoint", "usage: ember inspect CHECKPOINT");
  const CheckpointMeta meta = read_checkpoint_meta(checkpoint);
  const ModelConfig& m = meta.model;
  printf(
      "checkpoint  %s\nstep        %lld\ntokens      %lld\nworld_size  %d\nmode        %s\ncreated     %s\n"
      "version     %s\nmodel       n_layer=%d n_head=%d n_embd=%d block_size=%d vocab_size=%d\n"
      "optimizer   step=%lld beta1=%g beta2=%g eps=%g weight_decay=%g lr=%g\n",
      checkpoint.c_str(), (long long)meta.step, (long long)meta.tokens_seen, meta.world_size,
      training_mode_name(meta.mode), meta.created.c_str(), meta.version.c_str(), m.n_layer, m.n_head, m.n_embd,
      m.block_size, m.vocab_size, (long long)meta.optimizer_step, double(meta.beta1), double(meta.beta2),
      double(meta.eps), double(meta.weight_decay), double(meta.lr));
  printf("attention   %s\n", describe_attention(m).c_str());
  printf("precision   %s\n", meta.precision.empty() ? "not recorded (written before checkpoints recorded it)"
                                                    : (meta.precision + " (matmul precision, as resolved)").c_str());
  if (meta.tokenizer) {
    const CheckpointTokenizer& t = *meta.tokenizer;
    printf("tokenizer   kind=%s ids=%d fingerprint=%s files=", t.kind.c_str(), t.vocab_size, t.fingerprint.c_str());
    if (t.files.empty()) printf("none");
    for (auto it = t.files.begin(); it != t.files.end(); ++it)
      printf("%s%s (%zu bytes)", it == t.files.begin() ? "" : ", ", it->first.c_str(), it->second.size());
    printf("\n");
  } else {
    printf("tokenizer   not recorded (written before checkpoints recorded it): data.tokenizer of the config\n");
  }
  printf("ranks       (per-rank state, /ranks/<r>)\n");
  if (meta.mode == TrainingMode::async) printf("async       version=%llu\n", (unsigned long long)meta.async_version);
  for (size_t r = 0; r < meta.ranks.size(); ++r) {
    const CheckpointMeta::RankState& rs = meta.ranks[r];
    printf("  rank %-4zu data_cursor=%llu rng_offset=%llu", r, (unsigned long long)rs.data_cursor,
           (unsigned long long)rs.rng_offset);
    if (!rs.role.empty())
      printf(" role=%s optimizer_step=%lld seq=%llu", rs.role.c_str(), (long long)rs.optimizer_step,
             (unsigned long long)rs.seq);
    printf("\n");
  }

  // Every dataset in the file, whatever its path, read in full; tensors of the model are also checked for shape.
  const std::vector<CheckpointDatasetReport> reports = scan_checkpoint(checkpoint);
  std::map<std::string, std::vector<uint64_t>> expected = expected_tensors(m);
  size_t width = 0;
  for (const CheckpointDatasetReport& r : reports) width = std::max(width, r.path.size());
  printf("datasets    (%zu, each read in full: Fletcher32 checksums verified)\n", reports.size());
  std::vector<std::string> bad;
  bool has_moments = false, non_finite = false;
  for (const CheckpointDatasetReport& r : reports) {
    std::string status = r.ok                                           ? "ok"
                         : r.problem == "corrupted (checksum mismatch)" ? "CORRUPT (checksum mismatch)"
                         : r.problem.rfind("holds", 0) == 0             ? "NON-FINITE (" + r.problem + ")"
                                                                        : "UNREADABLE (" + r.problem + ")";
    non_finite = non_finite || r.problem.rfind("holds", 0) == 0;
    const auto it = expected.find(r.path);
    if (it != expected.end()) {
      if (r.shape != it->second) status = "WRONG SHAPE (the model needs " + shape_str(it->second) + ")";
      expected.erase(it);
    }
    has_moments =
        has_moments || r.path.rfind("/optimizer/exp_avg/", 0) == 0 || r.path.rfind("/optimizer/exp_avg_sq/", 0) == 0;
    if (status != "ok") bad.push_back(r.path);
    printf("  %-8s %-*s %s %s\n", r.dtype.empty() ? "?" : r.dtype.c_str(), int(width), r.path.c_str(),
           shape_str(r.shape).c_str(), status.c_str());
  }
  // Missing weights are damage; missing moments only mean a weights-only checkpoint (fine for eval and generate).
  for (const auto& [path, shape] : expected)
    if (path.rfind("/model/", 0) == 0 || has_moments) {
      printf("  %-8s %-*s %s MISSING\n", "float32", int(width), path.c_str(), shape_str(shape).c_str());
      bad.push_back(path);
    }
  if (!has_moments && meta.mode == TrainingMode::async)
    printf(
        "  (async checkpoint: the center's momentum under /optimizer/momentum_buffer, each worker's AdamW state "
        "and residual under /ranks/<r>)\n");
  else if (!has_moments)
    printf("  (no optimizer state: a weights-only checkpoint)\n");
  printf("config:\n%s", meta.config_ini.c_str());
  if (!meta.config_ini.empty() && meta.config_ini.back() != '\n') printf("\n");
  // Non-zero exit for NaN or inf too: such a file fails resume, eval and generate as a damaged one does.
  if (!bad.empty())
    throw Error("checkpoint " + checkpoint + ": " + std::to_string(bad.size()) +
                    " dataset(s) damaged, missing or holding NaN/inf (first: " + bad.front() + ")",
                non_finite ? "NaN or inf: the run that wrote it had diverged (or the file was modified); resume from "
                             "an earlier checkpoint (--resume <folder>/step_XXXXXXXX.h5) with a lower optimizer.lr"
                           : "the file was damaged after it was written (disk, copy, transfer); resume from an earlier "
                             "checkpoint (--resume <folder>/step_XXXXXXXX.h5)");
  return EXIT_CODE_OK;
}

}  // namespace ember
