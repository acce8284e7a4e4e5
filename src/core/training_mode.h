// The kind of training run (training.mode), kept in core because the config, the trainers and the checkpoint
// metadata (which records the mode that wrote a file) all name it.
#pragma once

#include <optional>
#include <string>

namespace ember {

// sync: all-reduce data parallel over every rank. async: rank 0 serves as a center, ranks 1.. train and exchange
// 1-bit deltas through MPI one-sided windows.
enum class TrainingMode { sync, async };

inline const char* training_mode_name(TrainingMode m) { return m == TrainingMode::async ? "async" : "sync"; }

// The mode a name denotes, or nothing for any other text.
inline std::optional<TrainingMode> parse_training_mode(const std::string& name) {
  if (name == "sync") return TrainingMode::sync;
  if (name == "async") return TrainingMode::async;
  return std::nullopt;
}

}  // namespace ember
