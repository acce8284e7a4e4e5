// `ember eval`: mean cross-entropy (nats/token) and bits per byte of a checkpoint on a data split, evaluated over
// the split's samples in order, so any reader of the shards and the checkpoint can reproduce the number; with --task,
// a multiple-choice task instead (app/cmd_eval_task.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/commands.h"
#include "app/eval_output.h"
#include "app/eval_task.h"
#include "core/atomic_file.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/output.h"
#include "data/data_loader.h"
#include "data/prep_manifest.h"
#include "tokenizer/tokenizer_choice.h"

namespace po = boost::program_options;

namespace ember {
namespace {

// Shards made with another tokenizer than the model's would be scored as noise: refused when prep.json says so.
void check_data_tokenizer(const std::string& data, const std::string& checkpoint, const Tokenizer& t) {
  const std::optional<PrepManifest> prep = read_prep_manifest(data);
  if (prep)
    check_shards_tokenizer(data, PREP_MANIFEST_NAME, prep->tokenizer, "checkpoint " + checkpoint + " was trained with",
                           t, "evaluate on data prepared with the checkpoint's tokenizer (`ember inspect` shows it)");
}

// A NumPy .npy file (format 1.0) of a C-ordered array: `descr` "<f4" or "<i4", the header padded to 64 bytes.
void write_npy(const std::string& path, const char* descr, const std::vector<int64_t>& shape, const void* data,
               size_t bytes) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::string file = "\x93NUMPY";
  file += char(1);
  file += char(0);
  file += char(header.size() & 0xff);
  file += char(header.size() >> 8);
  file += header;
  file.append(static_cast<const char*>(data), bytes);
  write_file_atomically(path, file, "--logits-out file " + path, "check that its folder is writable");
}

// --logits-out's three files, each under the output rule (core/output.h): `path` and, beside it,
// <path without .npy>.inputs.npy and .targets.npy. Taken before the model loads, so a refusal costs nothing.
struct LogitsFiles {
  std::unique_ptr<StagedOutput> logits, inputs, targets;
};

LogitsFiles stage_logits_files(const std::string& path, bool overwrite) {
  const std::string stem = path.size() > 4 && path.ends_with(".npy") ? path.substr(0, path.size() - 4) : path;
  auto stage = [&](const std::string& p) {
    return stage_eval_output(p, "--logits-out", overwrite, "\x93NUMPY", "a NumPy .npy file");
  };
  return {stage(path), stage(stem + ".inputs.npy"), stage(stem + ".targets.npy")};
}

// The logits and inputs of the first batch, for comparing with another implementation on the same tokens:
// logits (B, T, V) float32, inputs and targets (B, T) int32, into the staged files.
void write_first_batch(LogitsFiles& files, GPT& model, const std::vector<int32_t>& inputs,
                       const std::vector<int32_t>& targets, int B, int T) {
  // The model's rows are padded_vocab_size() long; the file holds the V real logits of each.
  const int V = model.config().vocab_size, ld = model.config().padded_vocab_size();
  std::vector<float> padded(size_t(B) * T * ld), logits(size_t(B) * T * V);
  const TensorIn stored = model.logits();
  if (stored.bf16) {
    std::vector<BFloat16> b16(padded.size());
    model.backend().copy_to_host(b16.data(), stored.b16(), b16.size() * sizeof(BFloat16));
    widen_bf16(padded.data(), b16.data(), b16.size());
  } else {
    model.backend().copy_to_host(padded.data(), stored.f32(), padded.size() * sizeof(float));
  }
  for (size_t r = 0; r < size_t(B) * T; ++r)
    std::copy(padded.begin() + ptrdiff_t(r * ld), padded.begin() + ptrdiff_t(r * ld + V),
              logits.begin() + ptrdiff_t(r * V));
  write_npy(files.logits->staging(), "<f4", {B, T, V}, logits.data(), logits.size() * sizeof(float));
  write_npy(files.inputs->staging(), "<i4", {B, T}, inputs.data(), inputs.size() * sizeof(int32_t));
  write_npy(files.targets->staging(), "<i4", {B, T}, targets.data(), targets.size() * sizeof(int32_t));
  for (StagedOutput* f : {files.logits.get(), files.inputs.get(), files.targets.get()}) f->commit();
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  std::string checkpoint, data, split, device, logits_out;
  EvalTaskArgs task;
  int batch_size = 8, seq_len = 0, max_batches = 0, limit = 0;
  po::options_description desc("ember eval options");
  NumericOptions numbers;
  desc.add_options()("help,h", "print this help")("checkpoint", po::value(&checkpoint), "checkpoint file (.h5)")(
      "data", po::value(&data), "directory of shards (from `ember prep`), or with --task the task's JSONL file")(
      "split", po::value(&split)->default_value("val"), "shard prefix: val or train")(
      "task", po::value(&task.task),
      "score a multiple-choice task instead: hellaswag (the dataset's JSONL: ctx, endings, label) or choice "
      "(context, choices, answer); prints acc and acc_norm (docs/eval.md)")(
      "items-out", po::value(&task.items_out), "with --task: write one JSON line per item (its scores) to this file");
  numbers.add(desc, "batch-size", &batch_size, {1, 65536}, "sequences per batch (with --task: items scored at once)");
  numbers.add(desc, "seq-len", &seq_len, {0, 1 << 20}, "sequence length (0: the model's block_size)");
  numbers.add(desc, "max-batches", &max_batches, {0, 1000000000}, "evaluate at most N batches (0: all full batches)");
  numbers.add(desc, "limit", &limit, {0, 1000000000}, "with --task: score the first N items only (0: all)");
  desc.add_options()("json", "print one JSON object instead of text")(
      "device", po::value(&device)->default_value("cpu"), "cpu, cuda or auto (cuda when a GPU is visible)")(
      "logits-out", po::value(&logits_out),
      "write the first batch's logits to this .npy file (B, T, V float32) and its inputs and targets beside "
      "it (<name>.inputs.npy, <name>.targets.npy: B x T int32), e.g. to compare with transformers")(
      "overwrite", "replace earlier --logits-out or --items-out files (moved aside, not deleted)");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember eval --checkpoint F --data DIR [--json]\n       ember eval --checkpoint F --task "
                     "hellaswag --data FILE.jsonl [--limit N] [--json]",
                     vm, &numbers))
    return EXIT_CODE_OK;
  require_option(vm, "checkpoint",
                 "give the checkpoint to evaluate, e.g. --checkpoint runs/demo/checkpoints/step_00000500.h5");
  if (vm.count("task")) {
    require_option(vm, "data", "give the task's JSONL file, e.g. --data data/downloads/hellaswag_val.jsonl");
    if (!logits_out.empty() || max_batches > 0 || vm["split"].defaulted() == false)
      throw_error("ember eval: --logits-out, --max-batches and --split score a data split, not a --task",
                  "leave them out with --task (--limit N scores the first N items)");
    task.checkpoint = checkpoint, task.data = data, task.device = device, task.batch_size = batch_size;
    task.seq_len = seq_len, task.limit = limit, task.json = vm.count("json") > 0;
    task.overwrite = vm.count("overwrite") > 0;
    return eval_task(task);
  }
  if (!task.items_out.empty() || limit > 0)
    throw_error("ember eval: --items-out and --limit go with --task", "add --task hellaswag or --task choice");
  require_option(vm, "data", "give a directory made by `ember prep`, e.g. --data data/demo");
  if (split != "val" && split != "train")
    throw_error("ember eval: --split " + split + " must be val or train", "give --split val or --split train");

  // The cheap checks first (the outputs, the checkpoint's metadata, the data), the model's allocation last.
  const DeviceRequest request = parse_device_option(device);
  LogitsFiles logits_files;
  if (!logits_out.empty()) logits_files = stage_logits_files(logits_out, vm.count("overwrite") > 0);
  const CheckpointMeta meta = read_checkpoint_meta(checkpoint);
  const ModelConfig& mc = meta.model;
  const int T = model_seq_len(meta, seq_len);
  const std::unique_ptr<Tokenizer> tokenizer = checkpoint_tokenizer(checkpoint, meta);
  check_data_tokenizer(data, checkpoint, *tokenizer);
  DataLoader loader(data, split, T, mc.vocab_size, 0, /*shuffle=*/false);
  uint64_t batches = loader.num_samples() / uint64_t(batch_size);
  if (batches == 0)
    throw_error("data " + data + ": split '" + split + "' has " + std::to_string(loader.num_samples()) +
                    " samples of length " + std::to_string(T) + ", fewer than one batch of " +
                    std::to_string(batch_size),
                "lower --batch-size or --seq-len, or prepare more data");
  if (max_batches > 0) batches = std::min<uint64_t>(batches, uint64_t(max_batches));

  auto backend = backend_for_device(request);
  const size_t host_batch = size_t(batch_size) * size_t(T) * 2 * sizeof(int32_t);  // inputs and targets below
  LoadedModel loaded = load_model(checkpoint, meta, *backend, batch_size, T, host_batch);

  std::vector<int32_t> inputs(size_t(batch_size) * T), targets(inputs.size());
  double loss_sum = 0.0;
  size_t bytes = 0;
  for (uint64_t k = 0; k < batches; ++k) {
    loader.batch_at(k * batch_size, inputs.data(), targets.data(), batch_size);
    loss_sum += loaded.model->forward(inputs.data(), targets.data(), batch_size, T);
    if (k == 0 && logits_files.logits) write_first_batch(logits_files, *loaded.model, inputs, targets, batch_size, T);
    bytes += tokenizer->decode(targets).size();
  }
  const double loss = loss_sum / double(batches);
  const double tokens = double(batches) * batch_size * T;
  // Bits per byte: total nats over the targets, in bits, divided by the bytes those targets decode to.
  const double bpb = loss * tokens / (std::log(2.0) * double(bytes));
  if (vm.count("json")) {
    nlohmann::json out = {
        {"checkpoint", checkpoint}, {"step", loaded.meta.step},  {"split", split},           {"loss", loss},
        {"bits_per_byte", bpb},     {"tokens", int64_t(tokens)}, {"batch_size", batch_size}, {"seq_len", T},
        {"batches", batches}};
    printf("%s\n", out.dump().c_str());
  } else {
    printf("%s (step %lld) on %s/%s: loss %.6f nats/token | %.4f bits/byte | %.0f tokens\n", checkpoint.c_str(),
           (long long)loaded.meta.step, data.c_str(), split.c_str(), loss, bpb, tokens);
  }
  return EXIT_CODE_OK;
}

}  // namespace ember
