// The run-state file, <run.dir>/run_state.json: what the last start of `ember train` in a run folder came to
// ("running", "done", "stopped", "failed"), so job scripts decide on a requeue without trusting the launcher's exit
// code alone (mpirun exits 1 on SIGTERM although every rank stopped cleanly after its checkpoint).
#pragma once

#include <cstdint>
#include <string>

namespace ember {

// One record of the file (format "ember-run-state", version 1; docs/run-folder.md).
struct RunState {
  std::string state;       // running | done | stopped | failed
  int64_t step = -1;       // optimizer steps completed; -1 when unknown (not written)
  std::string checkpoint;  // the newest checkpoint of this start ("" when none; not written)
  std::string error;       // the error message of a failed run ("" otherwise; not written)
};

// Replaces <run_dir>/run_state.json atomically (temp file, fsync, rename, fsync of the folder), adding the time,
// host, pid and Slurm job id. Throws ember::Error when it cannot.
void write_run_state(const std::string& run_dir, const RunState& record);

// Reads <run_dir>/run_state.json; a record with an empty `state` where there is no readable file (none yet, or one
// being replaced this instant reads as the old or the new one, never half).
RunState read_run_state(const std::string& run_dir);

}  // namespace ember
