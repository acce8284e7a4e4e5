// The run-state file (implementation): one small JSON object, replaced by rename so a reader never sees half of it.
#include "train/run_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/timer.h"
#include "train/folder_lock.h"

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

  const std::string path = run_dir + "/run_state.json", tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_error("run state " + tmp + ": cannot create: " + std::strerror(errno), STATE_HINT);
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    ::unlink(tmp.c_str());
    throw_error("run state " + path + ": cannot write: " + std::strerror(e), STATE_HINT);
  }
  const int dfd = ::open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // file systems that cannot fsync a folder still order the rename
    ::close(dfd);
  }
}

}  // namespace ember
