// Async training (training.mode = async), for hosts of unequal speed: rank 0 is a dedicated center that owns the
// global parameters and serves the exchange window (center.cpp); ranks 1..N are workers that each train
// async.local_steps steps with their own AdamW on a range of global samples they reserved, then send a 1-bit
// error-feedback delta and rebase onto the newest published parameters (worker.cpp). No worker waits for
// another. The run ends when the center has folded in training.steps x grad_accum_steps x batch_size x N samples: the
// same tokens a sync run over N ranks trains on. docs/async.md describes it.
#pragma once

#include <string>

#include "parallel/world.h"
#include "train/run.h"
#include "train/run_config.h"

namespace ember {

// Runs one invocation on every rank of `world` (at least 2); collective. Checkpoints hold the center's parameters
// under /model as in sync mode (so eval, generate and inspect read them unchanged), its Nesterov momentum under
// /optimizer/momentum_buffer, and every worker's AdamW moments and error-feedback residual under /ranks/<r>.
TrainResult run_async(const World& world, const RunConfig& config, const std::string& config_ini, TrainLimits limits);

}  // namespace ember
