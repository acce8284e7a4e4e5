// The checks every checkpoint's metadata passes on read (internal to src/checkpoint): each attribute in its domain
// and consistent with the others and with the datasets it describes, so a damaged file fails here, by name.
#pragma once

#include <hdf5.h>

#include <string>

#include "checkpoint/checkpoint.h"

namespace ember::checkpoint_detail {

// Throws ember::Error "checkpoint F: attribute A is V, expected E" with a hint unless every attribute of `m` (read
// from the open file `file_id`) holds a value ember can have written: counters >= 0 and within an int (steps are
// ints), world_size 1.. the /ranks groups, AdamW hyper-parameters finite and in the ranges the config accepts, model
// sizes positive with n_embd a multiple of n_head and matching n_layer, wte and wpe of /model, and per-rank roles
// that fit the mode (none in sync mode; in async mode the center, at rank 0 only, with zero step and seq).
void check_meta(hid_t file_id, const CheckpointMeta& m, const std::string& file);

// Hint for a tensor holding NaN or inf.
inline constexpr const char* HINT_NON_FINITE =
    "the run that wrote it had diverged (or the file was modified); resume from an earlier checkpoint "
    "(--resume <folder>/step_XXXXXXXX.h5) with a lower optimizer.lr";

}  // namespace ember::checkpoint_detail
