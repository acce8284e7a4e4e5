// Shared command-line plumbing for the subcommands: Boost.Program_options parsing with ember's error style, and
// choosing the device and loading a model's weights from a checkpoint for eval and generate.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/options.h"
#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "model/gpt.h"
#include "parallel/device_select.h"
#include "tokenizer/tokenizer.h"

namespace ember {

// Parses argv (argv[0] is the subcommand) against desc: unknown options, stray arguments (beyond `positional`) and
// repeated options throw UsageError, bad values ember::Error, each naming the option; then parses `numbers` (strictly,
// each against its domain). Returns false (after printing usage) when --help was given.
bool parse_command(int argc, char** argv, const boost::program_options::options_description& desc, const char* usage,
                   boost::program_options::variables_map& vm, const NumericOptions* numbers = nullptr,
                   const boost::program_options::positional_options_description* positional = nullptr);

// Throws ember::Error naming the option when it was not given.
void require_option(const boost::program_options::variables_map& vm, const char* name, const char* hint);

struct LoadedModel {
  std::unique_ptr<GPT> model;
  CheckpointMeta meta;
};

// The --device value of eval and generate (cpu, cuda or auto); any other text is an ember::Error naming it.
DeviceRequest parse_device_option(const std::string& value);

// The --precision value of generate and serve (fp32 or bf16); any other text is an ember::Error naming it.
MatmulPrecision parse_precision_option(const std::string& value);

// The backend for a --device request, chosen as training.device is (parallel/device_select.h) and named "--device" in
// its log line and errors. From here on info lines go to stderr: stdout is the command's product.
std::unique_ptr<Backend> backend_for_device(DeviceRequest device);

// The sequence length of eval and generate: `requested`, or the model's block_size where it is 0; more than
// block_size throws ember::Error naming --seq-len.
int model_seq_len(const CheckpointMeta& meta, int requested);

// Builds a GPT (no gradients) sized (max_B, max_T) from a checkpoint's model attributes (`meta`, read with
// read_checkpoint_meta) and loads its weights. max_T = 0 means the model's block_size. First checks that the model,
// its activations and `extra_bytes` of the caller's buffers fit in the memory available (ember::Error if not).
LoadedModel load_model(const std::string& checkpoint, const CheckpointMeta& meta, Backend& backend, int max_B,
                       int max_T, size_t extra_bytes = 0);

// What generate and serve decode with: a checkpoint's metadata, its tokenizer, and the backend for --device with its
// matmul precision set to --precision (bad values are errors naming the option). The KvModel's shape is the caller's.
struct DecodingSetup {
  CheckpointMeta meta;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
};
DecodingSetup open_for_decoding(const std::string& checkpoint, const std::string& device, const std::string& precision);

// The tokens an empty prompt stands for, the start of a document: the tokenizer's end-of-text token where it has one
// (<|endoftext|>), else a newline.
std::vector<int32_t> document_start_tokens(const Tokenizer& tokenizer);

// The value of "section.key" in a stored INI config, or `fallback` when absent.
std::string ini_value(const std::string& ini_text, const std::string& key, const std::string& fallback);

// The tokenizer the checkpoint at `checkpoint` (metadata `meta`) was trained with: rebuilt from its /tokenizer group,
// or, for files written before checkpoints recorded it, the stored config's data.tokenizer (bytes when absent).
// Rebuilt files whose fingerprint is not the recorded one are an error naming the checkpoint; so is a model with
// fewer rows than the tokenizer has ids.
std::unique_ptr<Tokenizer> checkpoint_tokenizer(const std::string& checkpoint, const CheckpointMeta& meta);

}  // namespace ember
