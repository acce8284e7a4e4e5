// `ember inspect`: a checkpoint's metadata and stored config, and a full read of every dataset so that any
// checksum or shape problem shows up here rather than at resume time.
#include <cstdio>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "core/error.h"

namespace po = boost::program_options;

namespace ember {

int cmd_inspect(int argc, char** argv) {
  std::string checkpoint;
  po::options_description desc("ember inspect options");
  desc.add_options()("help,h", "print this help")("checkpoint", po::value(&checkpoint), "checkpoint file (.h5)");
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw_error(std::string("ember inspect: ") + e.what(), "usage: ember inspect CHECKPOINT");
  }
  if (vm.count("help")) {
    printf("usage: ember inspect CHECKPOINT\n");
    return EXIT_CODE_OK;
  }
  require_option(vm, "checkpoint", "usage: ember inspect CHECKPOINT");
  CheckpointMeta meta = read_checkpoint_meta(checkpoint);
  const ModelConfig& m = meta.model;
  printf("checkpoint  %s\nstep        %lld\ntokens      %lld\nworld_size  %d\nmode        %s\ncreated     %s\n"
         "version     %s\nmodel       n_layer=%d n_head=%d n_embd=%d block_size=%d vocab_size=%d\n",
         checkpoint.c_str(), (long long)meta.step, (long long)meta.tokens_seen, meta.world_size, meta.mode.c_str(),
         meta.created.c_str(), meta.version.c_str(), m.n_layer, m.n_head, m.n_embd, m.block_size, m.vocab_size);
  ParamTable table(m);
  std::vector<float> params(table.total_numel()), avg(table.total_numel()), avg_sq(table.total_numel());
  load_checkpoint(checkpoint, table, {params.data(), avg.data(), avg_sq.data()}, meta);
  printf("datasets (%zu tensors x 3: model, exp_avg, exp_avg_sq; checksums verified):\n", table.params().size());
  for (const ParamInfo& p : table.params()) {
    std::string shape;
    for (int64_t d : p.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    printf("  %-44s [%s] ok\n", p.name.c_str(), shape.c_str());
  }
  printf("config:\n%s", meta.config_ini.c_str());
  return EXIT_CODE_OK;
}

}  // namespace ember
