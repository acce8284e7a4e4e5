// `ember export`: a checkpoint as a Hugging Face GPT-2 folder (safetensors, config.json, tokenizer files) that
// transformers loads with AutoModelForCausalLM and AutoTokenizer.
#include <cstdio>

#include "app/cli.h"
#include "app/commands.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "hf/format.h"

namespace po = boost::program_options;

namespace ember {

int cmd_export(int argc, char** argv) {
  std::string checkpoint, output, dtype_name;
  po::options_description desc("ember export options");
  desc.add_options()("help,h", "print this help")("checkpoint", po::value(&checkpoint), "checkpoint file (.h5)")(
      "output", po::value(&output), "folder to write (refused if it exists, unless --overwrite)")(
      "dtype", po::value(&dtype_name)->default_value("fp32"), "weights in fp32, bf16 or fp16")(
      "overwrite", "replace --output if it exists (only once the new folder is complete)");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember export --checkpoint F --output DIR [--dtype fp32|bf16|fp16]\n"
                     "Writes model.safetensors, config.json (GPT2LMHeadModel), generation_config.json and the "
                     "checkpoint's tokenizer as GPT-2 tokenizer files.",
                     vm))
    return EXIT_CODE_OK;
  require_option(vm, "checkpoint", "give a checkpoint, e.g. --checkpoint runs/demo/checkpoints/step_00000500.h5");
  require_option(vm, "output", "give the folder to write, e.g. --output exports/demo");
  const std::optional<HfDtype> dtype = parse_hf_dtype(dtype_name);
  if (!dtype)
    throw_error("ember export: --dtype " + dtype_name + " is not a dtype",
                "use one of: " + join_names(kHfDtypes, hf_dtype_name));

  const CheckpointMeta meta = read_checkpoint_meta(checkpoint);
  HostModel m;
  m.model = meta.model;
  m.tokenizer = checkpoint_tokenizer(checkpoint, meta);
  m.weights = load_model_weights(checkpoint, meta.model);
  write_hf_folder(output, m, *dtype, vm.count("overwrite") > 0);
  printf("exported %s (step %lld, %s weights, tokenizer %s) to %s\n", checkpoint.c_str(), (long long)meta.step,
         hf_dtype_name(*dtype), m.tokenizer->describe().c_str(), output.c_str());
  return EXIT_CODE_OK;
}

}  // namespace ember
