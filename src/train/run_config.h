// The resolved run configuration: one struct per INI section. Defaults live here; src/app/option_table.cpp binds each
// field to its "section.key" option, checks ranges, and renders the whole thing back to INI text for checkpoints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/training_mode.h"
#include "data/choice_task.h"
#include "model/gpt.h"
#include "model/model_config.h"
#include "parallel/comm_select.h"
#include "parallel/device_select.h"
#include "tokenizer/tokenizer.h"
#include "train/async/delta_codec.h"
#include "train/offload.h"

namespace ember {

struct TrainingConfig {
  int batch_size = 8;        // micro-batch B (sequences per forward/backward)
  int seq_len = 64;          // T, at most model.block_size
  int grad_accum_steps = 1;  // micro-batches per optimizer step
  int steps = 100;           // optimizer steps in the whole run
  uint64_t seed = 1337;
  float max_norm = 1.0f;    // clip gradients to this global L2 norm; 0 disables clipping
  int threads = 0;          // OpenMP threads per rank; 0 = the OpenMP default (all cores, or OMP_NUM_THREADS)
  int zero = 0;             // 1: ZeRO-1, optimizer state sharded across data-parallel ranks
  float bucket_mb = 25.0f;  // gradient all-reduce bucket size in MiB (as PyTorch DDP's bucket_cap_mb)
  // sync: all-reduce data parallel; async: rank 0 is a center, ranks 1.. train
  TrainingMode mode = TrainingMode::sync;
  // cpu, cuda (one GPU per rank, by local rank) or auto (cuda if all ranks have one)
  DeviceRequest device = DeviceRequest::cpu;
  CommRequest comm = CommRequest::automatic;  // auto (nccl on cuda, mpi on cpu), nccl, or mpi (host-staged on cuda)
  Recompute recompute = Recompute::none;      // activation recomputation: none, attention or full (model/gpt.h)
  Offload offload = Offload::none;            // optimizer: master weights and AdamW state in host memory (offload.h)
  // GEMM inputs: auto (bf16 on cuda, fp32 on cpu), fp32, bf16, int8 or fp8 (fp32 masters either way; core/dtype.h)
  PrecisionRequest precision = PrecisionRequest::automatic;
  // Test-only switch: false rounds int8's output gradients to nearest instead of stochastically (docs/precision.md).
  bool int8_stochastic_rounding = true;
  // int8: the dense layers' weight-gradient products in int8 too (the default), or in bf16 (docs/precision.md).
  bool int8_weight_gradient = true;
  // Test-only switch: false casts fp8's operands into the format unscaled (scale 1) (docs/precision.md).
  bool fp8_scaling = true;
  bool deterministic = true;  // bitwise-repeatable losses; false lets cuBLAS pick split-K kernels that use atomics
};

// mode = async (docs/async.md): workers train local_steps steps, then send 1-bit deltas to the center over MPI
// one-sided windows and rebase onto the download the center prepared for them.
struct AsyncConfig {
  // H: optimizer steps a worker takes between two syncs. 10 keeps a 1-bit upload under 0.125 bits per parameter
  // per step (docs/architecture.md, "Asynchronous mode").
  int local_steps = 10;
  int block_size = 2048;                                    // values per fp32 scale of a 1-bit message
  DeltaCompression compression = DeltaCompression::onebit;  // of the deltas and downloads: onebit, or none (fp32)
  float outer_lr = 2.0f;                                    // the center's (outer) learning rate on the weighted deltas
  // The center's Nesterov momentum. Negative by default: applying deltas taken against older parameters acts like
  // extra momentum already (docs/async.md); -0.4 damps that. With outer_lr 2.0 and each delta weighted 1 / sqrt(N),
  // the long-run gain on the sum of N deltas is 2.0 sqrt(N) / 1.4 (1.01 at N = 2).
  float outer_momentum = -0.4f;
  // The workers' AdamW beta1 (their inner optimizer; optimizer.beta1 is sync mode's). Below sync's 0.9 for the same
  // reason: the momentum that asynchrony adds comes on top of each worker's own (docs/architecture.md).
  float inner_beta1 = 0.8f;
  float center_timeout = 120.0f;  // seconds a worker waits for the center before failing the job
  // Seconds the center waits for a sign of life from a worker (sent between local steps, at most once a second or
  // every worker_timeout / 8) before it drops it and the job goes on without it: a dead, frozen or cut-off host
  // costs its share of the work, not the job.
  float worker_timeout = 120.0f;
  // Ranks per worker: a worker is a group of this many ranks (a box of GPUs) that trains with the sync path among
  // them, and whose first rank alone exchanges with the center: sync inside a box, async between boxes.
  int ranks_per_worker = 1;
  // This start joins the async job already running in run.dir (same config) as one more worker of its ranks, rather
  // than starting a job: the job takes it in at its next barrier, after a checkpoint it then starts from.
  bool join = false;
  bool error_feedback = true;  // test-only switch: false drops what the 1-bit compression lost, both ways
  int test_slow_worker = 0;    // test-only: this worker rank (>= 1) trains test_slowdown times slower
  float test_slowdown = 1.0f;
  int test_center_stall = 0;  // test-only: the center stops serving after this many versions (0: never)
};

// Collectives between ranks (the section torch.distributed's init_process_group options would be).
struct DistConfig {
  // Seconds a collective may wait without completing before every rank ends with an error naming it: a peer that
  // died, froze or lost its link never lets it finish. As torch's process-group timeout; ours is shorter (5
  // minutes) since a step of the models Ember trains takes seconds.
  float timeout = 300.0f;
};

struct OptimizerConfig {
  float lr = 6e-4f;           // peak learning rate
  float min_lr = 6e-5f;       // floor reached at the end of the cosine decay
  int warmup_steps = 10;      // linear warm-up from lr/warmup_steps to lr
  float weight_decay = 0.1f;  // decoupled; matrices only
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
};

struct DataConfig {
  std::string dir = "data/demo";  // directory with train_*.bin and val_*.bin shards
  // What the shards were made with: "auto" (the tokenizer data.dir/prep.json records; bytes for shards without one
  // when model.vocab_size is 256), "bytes", or a tokenizer folder or file (load_tokenizer).
  std::string tokenizer = "auto";
};

struct EvalConfig {
  int every = 50;   // validation loss every this many steps (0: only at the end)
  int batches = 8;  // validation batches of training.batch_size sequences
  // A multiple-choice task scored every task_every steps and at the end (data/choice_task.h): none where unset.
  std::optional<TaskFormat> task;
  std::string task_data;  // its JSONL file
  int task_every = 0;     // 0: only at the end
  int task_limit = 0;     // items scored each time (0: all)
};

struct CheckpointConfig {
  std::string folder;     // default: <run.dir>/checkpoints
  int interval = 0;       // save every this many steps (0: only at the end)
  int keep_latest_k = 3;  // keep the newest K checkpoints
  std::string resume;     // "", "auto" (the checkpoint `latest` names, if any) or a checkpoint path
  std::string init_from;  // a fresh run takes this checkpoint's /model weights ("": random initialisation)
};

struct RunSection {
  std::string dir = "runs/default";  // metrics.jsonl and (by default) checkpoints go here
  int log_every = 10;                // progress line every this many steps
};

struct RunConfig {
  ModelConfig model;
  TrainingConfig training;
  AsyncConfig async;
  DistConfig dist;
  OptimizerConfig optimizer;
  DataConfig data;
  EvalConfig eval;
  CheckpointConfig checkpoint;
  RunSection run;

  std::string checkpoint_folder() const {
    return checkpoint.folder.empty() ? run.dir + "/checkpoints" : checkpoint.folder;
  }
};

}  // namespace ember
