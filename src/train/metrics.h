// The metrics file: one JSON object per optimizer step in <run.dir>/metrics.jsonl, for plots and TensorBoard-style
// tooling. On resume it keeps the records up to the resumed step and drops any written after it.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace ember {

class MetricsWriter {
 public:
  // Opens path for appending after dropping every record whose "step" exceeds keep_up_to_step
  // (keep_up_to_step = 0: start a new file).
  MetricsWriter(const std::string& path, int64_t keep_up_to_step);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  FILE* file_ = nullptr;
};

}  // namespace ember
