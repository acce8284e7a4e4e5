// The run-state file (implementation): one small JSON object, replaced by rename so a reader never sees half of it.
#include "train/run_state.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/folder_lock.h"
#include "core/json_input.h"
#include "core/timer.h"

namespace ember {

namespace {

const char* STATE_HINT = "check that run.dir is writable and that the disk has free space";

}  // namespace

void write_run_state(const std::string& run_dir, const RunState& record) {
  nlohmann::ordered_json j = {{"format", "ember-run-state"}, {"version", 1}, {"state", record.state}};
  if (record.step >= 0) j["step"] = record.step;
  if (!record.checkpoint.empty()) j["checkpoint"] = record.checkpoint;
  if (!record.error.empty()) j["error"] = record.error;
  j["time"] = utc_timestamp();
  j["host"] = this_host();
  j["pid"] = long(getpid());
  const char* job = std::getenv("SLURM_JOB_ID");
  if (job) j["job_id"] = job;
  const std::string text = j.dump() + "\n";

  write_file_atomically(run_dir + "/run_state.json", text, "run state", STATE_HINT);
}

RunState read_run_state(const std::string& run_dir) {
  RunState r;
  std::ifstream in(run_dir + "/run_state.json");
  if (!in) return r;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json j = try_parse_json_input(text).value_or(nlohmann::json());
  if (!j.is_object()) return r;
  r.state = json_field_or<std::string>(j, "state", "");
  r.step = json_field_or<int64_t>(j, "step", -1);
  r.checkpoint = json_field_or<std::string>(j, "checkpoint", "");
  r.error = json_field_or<std::string>(j, "error", "");
  return r;
}

}  // namespace ember
