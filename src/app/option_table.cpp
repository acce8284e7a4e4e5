// The option table: every key of `ember train` bound to its RunConfig field once, with its help text and domain.
#include <string>
#include <vector>

#include "app/option_binding.h"
#include "model/attention_schedule.h"

namespace ember {

std::vector<Binding> bindings(RunConfig& c) {
  std::vector<Binding> b;
  b.push_back(bind_number("model.n_layer", &c.model.n_layer, "transformer blocks", ints(1, 1024)));
  b.push_back(bind_number("model.n_head", &c.model.n_head, "attention heads per block", ints(1, 1024)));
  b.push_back(bind_number<int>("model.n_embd", &c.model.n_embd, "embedding width C (a multiple of n_head)",
                               ints(1, 65536), [&c](int v) {
                                 if (c.model.n_head >= 1 && v % c.model.n_head != 0)
                                   return "must be a multiple of model.n_head = " + std::to_string(c.model.n_head);
                                 return std::string();
                               }));
  b.push_back(bind_number("model.block_size", &c.model.block_size, "maximum sequence length", ints(1, 1 << 20)));
  b.push_back(bind_number("model.vocab_size", &c.model.vocab_size, "vocabulary size (256 for the byte tokenizer)",
                          ints(2, 65536)));
  b.push_back(bind_key<PositionEncoding>(
      "model.position", &c.model.position,
      "positions: learned (GPT-2's wpe table) or rope (rotary embeddings of q and k in every layer, no wpe)",
      [&c](PositionEncoding) { return rope_problem(c.model); }));
  b.push_back(bind_number("model.rope_theta", &c.model.rope_theta, "rotary base (position = rope)", floats(1, 1e9f)));
  // The windows' check runs before the slopes': a preset's slopes apply unless model.alibi_slopes is given.
  b.push_back(bind_text(
      "model.attention_windows", "full",
      "attention window per layer (comma-separated, one value for all): full, or N (each query sees itself and the N "
      "tokens before it); or a preset: tscale (window 1 first, then 64 with ALiBi 0.5 alternating with full), sssl "
      "(3 windows of block_size/2, then full; the last layer full)",
      "full, tscale, sssl, or n_layer entries each full or an integer >= 1",
      [&c](const std::string& text) {
        return parse_attention_windows(text, c.model.n_layer, c.model.block_size, &c.model.attention_windows,
                                       &c.model.alibi_slopes);
      },
      [&c] { return format_attention_windows(c.model.attention_windows); }));
  b.push_back(bind_text(
      "model.alibi_slopes", "",
      "ALiBi slope per layer (comma-separated, one value for all; 0: no bias): key j's score for query i gets "
      "-slope * (i - j). Empty: none, or the attention_windows preset's",
      "empty, or n_layer numbers >= 0",
      [&c](const std::string& text) {
        return text.empty() ? std::string() : parse_alibi_slopes(text, c.model.n_layer, &c.model.alibi_slopes);
      },
      [&c] { return format_alibi_slopes(c.model.alibi_slopes); }));
  b.push_back(bind_number("training.batch_size", &c.training.batch_size, "micro-batch size B", ints(1, 65536)));
  b.push_back(bind_number<int>("training.seq_len", &c.training.seq_len, "sequence length T (<= model.block_size)",
                               ints(1, 1 << 20), [&c](int v) {
                                 if (v > c.model.block_size)
                                   return "must be <= model.block_size = " + std::to_string(c.model.block_size);
                                 return std::string();
                               }));
  b.push_back(bind_number("training.grad_accum_steps", &c.training.grad_accum_steps, "micro-batches per optimizer step",
                          ints(1, 65536)));
  b.push_back(bind_number("training.steps", &c.training.steps, "optimizer steps of the whole run", ints(1, kMaxCount)));
  b.push_back(bind_number("training.seed", &c.training.seed, "seed of initialisation and data order",
                          Domain<uint64_t>{0, UINT64_MAX}));
  b.push_back(bind_number("training.max_norm", &c.training.max_norm, "clip gradients to this L2 norm (0: off)",
                          floats(0, 1e6f)));
  b.push_back(bind_number("training.threads", &c.training.threads, "CPU threads per rank (0: OpenMP default)",
                          ints(0, max_training_threads())));
  b.back().values = "an integer in [0, 4 x the machine's hardware threads]";  // the reference is the same anywhere
  b.push_back(
      bind_number("training.zero", &c.training.zero, "ZeRO stage: 0 (off) or 1 (shard optimizer state)", ints(0, 1)));
  b.push_back(bind_number("training.bucket_mb", &c.training.bucket_mb, "gradient all-reduce bucket size (MiB)",
                          floats(0, 4096, /*lo_open=*/true)));
  // The help of an enum option describes each value; its names, and what a bad value must be, come from the enum.
  b.push_back(bind_key("training.mode", &c.training.mode,
                       "sync (all-reduce data parallel) or async (rank 0 serves, ranks 1.. train)"));
  b.push_back(bind_key("training.device", &c.training.device,
                       "cpu, cuda (one GPU per rank) or auto (cuda when every rank sees a GPU, else cpu)"));
  b.push_back(bind_key("training.comm", &c.training.comm,
                       "gradient communicator: auto (nccl on cuda, mpi on cpu), nccl, or mpi (staged through host "
                       "memory on cuda)"));
  b.push_back(bind_key("training.recompute", &c.training.recompute,
                       "activation recomputation in backward: none, attention (each layer's attention half) or full "
                       "(whole layers; only layer outputs are kept)"));
  b.push_back(bind_key("training.offload", &c.training.offload,
                       "none, or optimizer: the fp32 master weights and AdamW's moments in host memory, the update "
                       "run there by host threads, the device keeping the weights it computes with (in sync runs at "
                       "bf16, int8 or fp8 no fp32 arena: the bf16 or quantized copies and fp32 vectors) and the "
                       "gradients; one rank hands each layer's gradients over as backward finishes it"));
  b.push_back(bind_key("training.precision", &c.training.precision,
                       "GEMM inputs: auto (bf16 on cuda, fp32 on cpu), fp32, bf16 (rounded to bf16, accumulated "
                       "in fp32; weights, gradients and AdamW stay fp32), int8 (bf16, with the dense layers' "
                       "products in int8) or fp8 (bf16, with all the dense layers' "
                       "products in fp8); int8 on cuda needs sm_75 or newer; fp8 on cpu only for now"));
  b.push_back(bind_key("training.int8_stochastic_rounding", &c.training.int8_stochastic_rounding,
                       "int8 (test-only switch): round the output gradients stochastically (dithered); false rounds "
                       "them to nearest"));
  b.push_back(bind_key("training.int8_weight_gradient", &c.training.int8_weight_gradient,
                       "int8: run the dense layers' weight-gradient products in int8 too (scales per channel and "
                       "tile of 256 tokens, gradients dithered); false runs them in bf16"));
  b.push_back(bind_key("training.fp8_scaling", &c.training.fp8_scaling,
                       "fp8 (test-only switch): scale each tensor into fp8's range; false casts the values unscaled"));
  b.push_back(bind_key("training.deterministic", &c.training.deterministic,
                       "bitwise-repeatable GPU results (false lets cuBLAS reduce with atomics; the CPU backend is "
                       "deterministic either way)"));
  b.push_back(bind_number("async.local_steps", &c.async.local_steps, "async: worker steps between syncs (H)",
                          ints(1, 1000000)));
  b.push_back(bind_number("async.block_size", &c.async.block_size, "async: values per fp32 scale of a 1-bit message",
                          ints(8, 1 << 24)));
  b.push_back(bind_key("async.compression", &c.async.compression,
                       "async: how deltas and updates travel: onebit (signs and a scale per block, with error "
                       "feedback) or none (fp32)"));
  b.push_back(bind_number("async.outer_lr", &c.async.outer_lr, "async: the center's learning rate on deltas",
                          floats(0, 10, /*lo_open=*/true)));
  b.push_back(bind_number("async.outer_momentum", &c.async.outer_momentum, "async: the center's Nesterov momentum",
                          floats(-1, 1, true, true)));
  b.push_back(bind_number("async.inner_beta1", &c.async.inner_beta1,
                          "async: the workers' AdamW beta1 (optimizer.beta1 is sync mode's)",
                          floats(-1, 1, true, true)));
  b.push_back(bind_number("async.center_timeout", &c.async.center_timeout,
                          "async: seconds a worker waits for the center before failing",
                          floats(0, 86400, /*lo_open=*/true)));  // a day: past it a job is dead, not waiting
  b.push_back(bind_number("async.worker_timeout", &c.async.worker_timeout,
                          "async: seconds without a sign of life (sent between local steps, at most once a second) "
                          "before the center drops a worker and the job goes on without it",
                          floats(0, 86400, /*lo_open=*/true)));
  b.push_back(bind_number("async.ranks_per_worker", &c.async.ranks_per_worker,
                          "async: ranks per worker, which train in sync among themselves (a box of GPUs); its first "
                          "rank alone exchanges with the center",
                          ints(1, 1 << 20)));
  b.push_back(bind_key("async.join", &c.async.join,
                       "async: join the job running in run.dir (started with --ompi-server, as this mpirun) as more "
                       "workers, rather than start one; it takes them in at its next barrier"));
  b.push_back(
      bind_key("async.error_feedback", &c.async.error_feedback,
               "async (test-only switch): keep what the 1-bit compression lost for the next message, up and down"));
  b.push_back(bind_number("async.test_slow_worker", &c.async.test_slow_worker,
                          "async (test-only): this worker rank trains test_slowdown times slower (0: none)",
                          ints(0, 1 << 20)));
  b.push_back(bind_number("async.test_slowdown", &c.async.test_slowdown, "async (test-only): slowdown factor",
                          floats(1, 1000)));
  b.push_back(bind_number("async.test_center_stall", &c.async.test_center_stall,
                          "async (test-only): the center stops serving after this many versions (0: never)",
                          ints(0, kMaxCount)));
  b.push_back(bind_number("dist.timeout", &c.dist.timeout,
                          "seconds a collective may wait without completing before the job ends with an error naming "
                          "it (a peer died, froze or lost its link)",
                          floats(0, 86400, /*lo_open=*/true)));
  b.push_back(
      bind_number("optimizer.lr", &c.optimizer.lr, "peak learning rate", floats(0, 10, /*lo_open=*/true, true)));
  b.push_back(bind_number<float>("optimizer.min_lr", &c.optimizer.min_lr,
                                 "learning rate at the end of the cosine decay", floats(0, 10),
                                 [&c](float v) { return v <= c.optimizer.lr ? "" : "must be in [0, optimizer.lr]"; }));
  b.push_back(
      bind_number("optimizer.warmup_steps", &c.optimizer.warmup_steps, "linear warm-up steps", ints(0, kMaxCount)));
  b.push_back(bind_number("optimizer.weight_decay", &c.optimizer.weight_decay, "AdamW weight decay (matrices only)",
                          floats(0, 10)));
  b.push_back(bind_number("optimizer.beta1", &c.optimizer.beta1, "AdamW beta1", floats(-1, 1, true, true)));
  b.push_back(bind_number("optimizer.beta2", &c.optimizer.beta2, "AdamW beta2", floats(-1, 1, true, true)));
  b.push_back(bind_number("optimizer.eps", &c.optimizer.eps, "AdamW epsilon", floats(0, 1, /*lo_open=*/true)));
  b.push_back(bind_key("data.dir", &c.data.dir, "directory of train_*.bin and val_*.bin shards (from `ember prep`)",
                       path_value(true)));
  b.push_back(bind_key("data.tokenizer", &c.data.tokenizer,
                       "tokenizer the shards were made with: auto (the one data.dir/prep.json records; bytes for "
                       "shards without one when model.vocab_size = 256), bytes, or a tokenizer folder or file "
                       "(tokenizer.json, or GPT-2's vocab.json + merges.txt)",
                       path_value(true)));
  b.push_back(bind_number("eval.every", &c.eval.every, "validation loss every N steps (0: at the end only)",
                          ints(0, kMaxCount)));
  b.push_back(bind_number("eval.batches", &c.eval.batches, "validation batches per evaluation", ints(1, 1000000)));
  b.push_back(bind_text(
      "eval.task", "none",
      "multiple-choice task scored during training (acc, acc_norm in metrics.jsonl): none, hellaswag (the dataset's "
      "JSONL: ctx, endings, label) or choice (context, choices, answer); docs/eval.md",
      "none, hellaswag or choice",
      [&c](const std::string& text) -> std::string {
        c.eval.task = parse_task_format(text);
        if (!c.eval.task && text != "none") return "must be none, hellaswag or choice";
        if (c.eval.task && c.eval.task_data.empty()) return "needs eval.task_data, the task's JSONL file";
        return "";
      },
      [&c] { return std::string(c.eval.task ? task_format_name(*c.eval.task) : "none"); }));
  b.push_back(bind_key("eval.task_data", &c.eval.task_data, "eval.task's JSONL file (e.g. HellaSwag's val file)",
                       path_value(false)));
  b.push_back(bind_number("eval.task_every", &c.eval.task_every, "score eval.task every N steps (0: at the end only)",
                          ints(0, kMaxCount)));
  b.push_back(bind_number("eval.task_limit", &c.eval.task_limit, "items of eval.task scored each time (0: all)",
                          ints(0, kMaxCount)));
  b.push_back(bind_key("checkpoint.folder", &c.checkpoint.folder,
                       "checkpoint directory (default <run.dir>/checkpoints)", path_value(false)));
  b.push_back(bind_number("checkpoint.interval", &c.checkpoint.interval, "save every N steps (0: at the end only)",
                          ints(0, kMaxCount)));
  b.push_back(bind_number("checkpoint.keep_latest_k", &c.checkpoint.keep_latest_k, "checkpoints kept (0: all)",
                          ints(0, 1000000)));
  b.push_back(
      bind_key("checkpoint.resume", &c.checkpoint.resume, "\"\", \"auto\" or a checkpoint path", path_value(false)));
  b.push_back(bind_key("checkpoint.init_from", &c.checkpoint.init_from,
                       "a fresh run starts from this checkpoint's /model weights (fine-tuning; step 0, fresh "
                       "optimizer and data order; ignored when the run resumes)",
                       path_value(false)));
  b.push_back(bind_key("run.dir", &c.run.dir, "run directory: metrics.jsonl and checkpoints", path_value(true)));
  b.push_back(bind_number("run.log_every", &c.run.log_every, "progress line every N steps", ints(1, kMaxCount)));
  return b;
}

}  // namespace ember
