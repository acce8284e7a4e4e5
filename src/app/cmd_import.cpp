// `ember import`: a Hugging Face GPT-2 folder (save_pretrained's safetensors, config.json, tokenizer files) as an ember
// checkpoint at step 0 with a fresh optimizer, for eval, generate, serve and `train --init-from`.
#include <cstdio>
#include <filesystem>

#include "app/cli.h"
#include "app/commands.h"
#include "app/options.h"
#include "core/error.h"
#include "core/output.h"
#include "hf/format.h"
#include "parallel/host_collectives.h"
#include "train/run_checkpoint.h"
#include "train/run_tokenizer.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace ember {

int cmd_import(int argc, char** argv) {
  std::string hf, output, tokenizer;
  po::options_description desc("ember import options");
  desc.add_options()("help,h", "print this help")("hf", po::value(&hf), "folder written by save_pretrained")(
      "output", po::value(&output), "checkpoint file to write (.h5; refused if it exists, unless --overwrite)")(
      "tokenizer", po::value(&tokenizer),
      "bytes, or a tokenizer folder or file (default: the tokenizer files in --hf)")(
      "overwrite", "replace an earlier checkpoint at --output (moved aside, once the new one is complete)");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember import --hf DIR --output F.h5 [--tokenizer bytes|PATH]\n"
                     "Reads a GPT2LMHeadModel folder and writes an ember checkpoint at step 0 with a fresh optimizer.",
                     vm))
    return EXIT_CODE_OK;
  require_option(vm, "hf", "give the folder save_pretrained wrote, e.g. --hf models/gpt2");
  require_option(vm, "output", "give the checkpoint to write, e.g. --output gpt2.h5");
  const OutputRule rule{
      .path = output,
      .option = "--output",
      .command = "ember import",
      .kind = OutputKind::file,
      .overwrite = vm.count("overwrite") > 0,
      .is_ours = [](const std::string& f) { return file_starts_with(f, std::string("\x89HDF\r\n\x1a\n", 8)); },
      .looks_like = "an HDF5 checkpoint"};
  StagedOutput staged(rule);

  HostModel m = read_hf_folder(hf, tokenizer);
  RunConfig config;
  config.model = m.model;
  config.training.seq_len = std::min(config.training.seq_len, m.model.block_size);
  const std::string config_ini = render_config_ini(config);
  CheckpointMeta meta = run_checkpoint_meta(config, config_ini, checkpoint_tokenizer(*m.tokenizer));
  const ParamTable table(m.model);
  std::vector<float> zeros(table.total_numel(), 0.0f);
  CheckpointContents contents;
  contents.sets = {TensorSet{SET_MODEL, m.weights.data()}, TensorSet{SET_EXP_AVG, zeros.data()},
                   TensorSet{SET_EXP_AVG_SQ, zeros.data()}};
  // The durable writer makes step_00000000.h5 in a folder of its own; the file becomes the staged output, which the
  // commit swaps in.
  const fs::path folder = staged.staging() + ".d";
  std::error_code ec;
  fs::remove_all(folder, ec);
  try {
    const std::string written = save_checkpoint(folder.string(), meta, table, contents, 1, self_world());
    fs::rename(written, staged.staging(), ec);
    if (ec)
      throw_error("ember import: cannot move " + written + " to " + staged.staging() + " (" + ec.message() + ")",
                  "check that the folder of --output is writable");
  } catch (...) {
    fs::remove_all(folder, ec);
    throw;
  }
  fs::remove_all(folder, ec);
  staged.commit();
  printf("imported %s (n_layer %d, n_head %d, n_embd %d, block_size %d, vocab_size %d, tokenizer %s) to %s\n",
         hf.c_str(), m.model.n_layer, m.model.n_head, m.model.n_embd, m.model.block_size, m.model.vocab_size,
         m.tokenizer->describe().c_str(), output.c_str());
  return EXIT_CODE_OK;
}

}  // namespace ember
