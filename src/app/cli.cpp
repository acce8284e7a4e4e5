// Shared command-line plumbing (implementation).
#include "app/cli.h"

#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/world.h"
#include "tokenizer/tokenizer_choice.h"
#include "train/memory_estimate.h"

namespace po = boost::program_options;

namespace ember {

bool parse_command(int argc, char** argv, const po::options_description& desc, const char* usage, po::variables_map& vm,
                   const NumericOptions* numbers, const po::positional_options_description* positional) {
  const std::string command = std::string("ember ") + argv[0];
  vm = parse_command_line(argc, argv, desc, command, positional);
  if (vm.count("help")) {
    std::cout << usage << "\n\n" << desc << "\n";
    return false;
  }
  if (numbers) numbers->parse(command + ": ", "see `" + command + " --help` for each option's range");
  return true;
}

void require_option(const po::variables_map& vm, const char* name, const char* hint) {
  if (!vm.count(name)) throw_error(std::string("missing required option --") + name, hint);
}

DeviceRequest parse_device_option(const std::string& value) {
  const std::optional<DeviceRequest> device = parse_device_request(value);
  if (!device)
    throw_error("--device " + value + " is not a device",
                "use one of: " + join_names(kDeviceRequests, device_request_name));
  return *device;
}

MatmulPrecision parse_precision_option(const std::string& value) {
  const std::optional<MatmulPrecision> p = parse_matmul_precision(value);
  if (!p || *p == MatmulPrecision::fp8)
    throw_error("--precision " + value + " is not a decoding precision",
                "use fp32, bf16 or int8 (fp8 is a training precision: training.precision = fp8)");
  return *p;
}

std::unique_ptr<Backend> backend_for_device(DeviceRequest device) {
  log_info_to_stderr(true);  // stdout is the command's product; the device line and any notice go to stderr
  const World world = make_world();
  return make_backend(select_device(world, device, "--device"));
}

DecodingSetup open_for_decoding(const std::string& checkpoint, const std::string& device,
                                const std::string& precision) {
  const DeviceRequest request = parse_device_option(device);
  const MatmulPrecision matmul_precision = parse_precision_option(precision);
  DecodingSetup out;
  out.meta = read_checkpoint_meta(checkpoint);
  out.tokenizer = checkpoint_tokenizer(checkpoint, out.meta);
  out.backend = backend_for_device(request);
  out.backend->set_matmul_precision(matmul_precision);
  return out;
}

std::vector<int32_t> document_start_tokens(const Tokenizer& tokenizer) {
  const std::optional<int32_t> eot = tokenizer.eot_id();
  return eot ? std::vector<int32_t>{*eot} : tokenizer.encode("\n");
}

int model_seq_len(const CheckpointMeta& meta, int requested) {
  const int T = requested > 0 ? requested : meta.model.block_size;
  if (T > meta.model.block_size)
    throw_error("--seq-len " + std::to_string(T) + " exceeds the checkpoint's block_size " +
                    std::to_string(meta.model.block_size),
                "use a sequence length of at most block_size");
  return T;
}

LoadedModel load_model(const std::string& checkpoint, const CheckpointMeta& meta, Backend& backend, int max_B,
                       int max_T, size_t extra_bytes) {
  LoadedModel out;
  out.meta = meta;
  const int T = model_seq_len(meta, max_T);
  // The host copy of the weights below is as large as the model's fp32 parameters.
  const size_t host_params = ParamTable(meta.model).total_numel() * sizeof(float);
  require_memory("the model",
                 estimate_inference_memory(meta.model, max_B, T, backend.matmul_precision(), extra_bytes + host_params),
                 backend, 1, "lower --batch-size or --seq-len, or use a machine with more memory");
  out.model = std::make_unique<GPT>(out.meta.model, backend, max_B, T, /*with_grads=*/false);
  const std::vector<float> params = load_model_weights(checkpoint, meta.model);
  backend.copy_to_device(out.model->params(), params.data(), params.size() * sizeof(float));
  return out;
}

std::string ini_value(const std::string& ini_text, const std::string& key, const std::string& fallback) {
  std::istringstream in(ini_text);
  po::options_description none;
  const po::parsed_options parsed = po::parse_config_file(in, none, /*allow_unregistered=*/true);
  for (const po::option& o : parsed.options)
    if (o.string_key == key && !o.value.empty()) return o.value.front();
  return fallback;
}

}  // namespace ember

namespace ember {

std::unique_ptr<Tokenizer> checkpoint_tokenizer(const std::string& checkpoint, const CheckpointMeta& meta) {
  const std::string configured =
      meta.tokenizer ? "" : ini_value(meta.config_ini, "data.tokenizer", tokenizer_kind_name(TokenizerKind::bytes));
  return recorded_tokenizer("checkpoint " + checkpoint, meta.tokenizer,
                            meta.tokenizer ? meta.tokenizer->files : TokenizerFiles{}, configured,
                            meta.model.vocab_size);
}

}  // namespace ember
