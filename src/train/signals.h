// Stop requests from the batch system: SIGUSR1 (Slurm's --signal before the time limit) and SIGTERM (preemption,
// scancel) set a flag that the training loop reads at each step boundary; the ranks then agree and checkpoint.
#pragma once

namespace ember {

// Installs the handlers (idempotent). The handler only sets a flag, which is async-signal-safe.
void install_stop_signal_handlers();

// The signal number that requested a stop, or 0.
int stop_signal_received();

}  // namespace ember
