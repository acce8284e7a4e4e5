// Shared command-line plumbing for the subcommands: Boost.Program_options parsing with ember's error style, and
// choosing the device and loading a model's weights from a checkpoint for eval and generate.
#pragma once

#include <boost/program_options.hpp>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "dist/device_select.h"
#include "model/gpt.h"

namespace ember {

// Parses argv (argv[0] is the subcommand) against desc; unknown options, missing values and bad types throw
// ember::Error naming the option. Returns false (after printing usage) when --help was given.
bool parse_command(int argc, char** argv, const boost::program_options::options_description& desc, const char* usage,
                   boost::program_options::variables_map& vm);

// Throws ember::Error naming the option when it was not given.
void require_option(const boost::program_options::variables_map& vm, const char* name, const char* hint);

struct LoadedModel {
  std::unique_ptr<GPT> model;
  CheckpointMeta meta;
};

// The --device value of eval and generate (cpu, cuda or auto); any other text is an ember::Error naming it.
DeviceRequest parse_device_option(const std::string& value);

// The backend for a --device request, chosen as training.device is (dist/device_select.h) and named "--device" in
// its log line and errors. From here on info lines go to stderr: stdout is the command's product.
std::unique_ptr<Backend> backend_for_device(DeviceRequest device);

// Builds a GPT (no gradients) sized (max_B, max_T) from a checkpoint's model attributes and loads its weights.
// max_T = 0 means the model's block_size.
LoadedModel load_model(const std::string& checkpoint, Backend& backend, int max_B, int max_T);

// The value of "section.key" in a stored INI config, or `fallback` when absent.
std::string ini_value(const std::string& ini_text, const std::string& key, const std::string& fallback);

}  // namespace ember
