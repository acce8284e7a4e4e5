// The run-folder lock (implementation): O_EXCL create, a heartbeat on the file's mtime, and the reclaim of stale
// locks by rename.
#include "core/folder_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/log.h"
#include "core/regular_file.h"
#include "core/timer.h"

namespace ember {

namespace {

constexpr const char* LOCK_NAME = "ember.lock";

// Field `n` (3 = state, 22 = start time in clock ticks since boot) of /proc/PID/stat, or "" when unknown.
std::string process_stat_field(long pid, int n) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= n && (rest >> field); ++i)
    if (i == n) return field;
  return "";
}

// The start time of process `pid`: with the pid it names a process uniquely on one host, so a reused pid is not
// mistaken for the holder.
std::string process_start(long pid) { return process_stat_field(pid, 22); }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// "host H, pid P, job J, started T" from a lock file's text.
std::string describe_holder(const nlohmann::json& holder) {
  if (holder.is_discarded() || !holder.is_object()) return "a holder it does not name (the file is empty or damaged)";
  std::string s = "host " + json_field_or<std::string>(holder, "host", "?") + ", pid " +
                  std::to_string(json_field_or<long>(holder, "pid", -1));
  const std::string job = json_field_or<std::string>(holder, "job_id", "");
  if (!job.empty()) s += ", job " + job;
  return s + ", started " + json_field_or<std::string>(holder, "start", "?");
}

// Why the lock at `path` (holding `text`) is stale, or "" while its holder may still be alive.
std::string stale_reason(const std::string& path, const nlohmann::json& holder, double stale_s) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";  // gone meanwhile: the next create decides
  const double age = std::difftime(std::time(nullptr), st.st_mtime);
  if (holder.is_discarded() || !holder.is_object()) {
    // A holder writes its lock right after creating it; an empty file that stays so was left by a crash.
    return age > stale_s ? "it names no holder and was last written " + std::to_string(long(age)) + " s ago" : "";
  }
  const long pid = json_field_or<long>(holder, "pid", -1);
  if (json_field_or<std::string>(holder, "host", "") == this_host()) {
    if (pid <= 0) return "it names no valid pid";
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) return "its process " + std::to_string(pid) + " is gone";
    const std::string state = process_stat_field(pid, 3);
    if (state == "Z" || state == "X") return "its process " + std::to_string(pid) + " is gone (a zombie)";
    const std::string started = json_field_or<std::string>(holder, "pid_start", "");
    const std::string now = process_start(pid);
    if (!started.empty() && !now.empty() && started != now)
      return "its process " + std::to_string(pid) + " is gone (the pid now belongs to another process)";
    return "";
  }
  if (age > stale_s)
    return "its holder on another host has not refreshed it for " + std::to_string(long(age)) + " s (stale after " +
           std::to_string(long(stale_s)) + " s)";
  return "";
}

}  // namespace

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

double lock_stale_seconds() {
  if (const char* env = std::getenv("EMBER_LOCK_STALE_SECONDS")) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end != env && *end == '\0' && v > 0) return v;
    log_warn("EMBER_LOCK_STALE_SECONDS=%s is not a positive number of seconds; using 300", env);
  }
  return 300.0;
}

FolderLock::FolderLock(const std::string& dir, const std::string& what)
    : FolderLock(LockSpec{dir, what, dir + "/" + LOCK_NAME, "ember train", "give this run another run.dir"}) {}

FolderLock::FolderLock(const LockSpec& spec) : path_(spec.path) {
  const std::string& what = spec.what;
  const std::string& dir = spec.target;
  const double stale_s = lock_stale_seconds();
  const char* job = std::getenv("SLURM_JOB_ID");
  content_ =
      nlohmann::json{
          {"host", this_host()},      {"pid", long(getpid())},    {"pid_start", process_start(long(getpid()))},
          {"job_id", job ? job : ""}, {"start", utc_timestamp()}, {"command", spec.command}}
          .dump() +
      "\n";
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      std::string problem = write_all(fd, content_);
      if (problem.empty() && ::fsync(fd) != 0) problem = std::strerror(errno);
      ::close(fd);
      if (!problem.empty()) {
        ::unlink(path_.c_str());
        throw_error(what + " " + dir + ": cannot write the lock file " + path_ + ": " + problem,
                    "make the folder writable and check free disk space");
      }
      break;
    }
    if (errno != EEXIST)
      throw_error(what + " " + dir + ": cannot create the lock file " + path_ + ": " + std::strerror(errno),
                  "make the folder writable (or choose another one) and check free disk space");
    refuse_special_file(path_, what + " " + dir + ": the lock file");  // a FIFO would block the read below
    const std::string text = read_all(path_);
    const nlohmann::json holder =
        try_parse_json_input(text).value_or(nlohmann::json(nlohmann::json::value_t::discarded));
    const std::string reason = attempt < 3 ? stale_reason(path_, holder, stale_s) : "";
    if (reason.empty()) {
      const std::string job_id = json_field_or<std::string>(holder, "job_id", "");
      throw_error(what + " " + dir + " is in use by another job: " + path_ + " names " + describe_holder(holder),
                  "wait for that job to end or stop it (" +
                      (job_id.empty() ? std::string("kill its pid") : "scancel " + job_id) + "), or " + spec.elsewhere +
                      "; a lock whose holder is gone is reclaimed "
                      "automatically (from another host after " +
                      std::to_string(long(stale_s)) + " s without a refresh), or remove " + path_ + " by hand");
    }
    // Move the stale file out of the way under a name of our own, then make sure it is the one judged stale: if
    // another job reclaimed it first and took the lock meanwhile, we moved that job's live lock and put it back.
    const std::string aside = path_ + ".stale." + this_host() + "." + std::to_string(getpid());
    if (::rename(path_.c_str(), aside.c_str()) != 0) continue;  // gone meanwhile: try the create again
    if (read_all(aside) != text) {
      if (::link(aside.c_str(), path_.c_str()) == 0) ::unlink(aside.c_str());
      continue;
    }
    ::unlink(aside.c_str());
    log_warn("%s %s: reclaimed a stale lock (%s): %s", what.c_str(), dir.c_str(), reason.c_str(),
             describe_holder(holder).c_str());
  }
  heartbeat_ = std::thread([this, stale_s] { heartbeat(std::max(1.0, stale_s / 10.0)); });
}

void FolderLock::heartbeat(double interval_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto interval = std::chrono::duration<double>(interval_s);
  while (!wake_.wait_for(lock, interval, [this] { return stopping_; })) {
    // utimensat(NULL): "now" as the file server sees it, the clock other nodes compare against too.
    if (::utimensat(AT_FDCWD, path_.c_str(), nullptr, 0) != 0)
      log_warn("lock %s: cannot refresh it (%s); another job may take the folder", path_.c_str(), std::strerror(errno));
  }
}

FolderLock::~FolderLock() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (read_all(path_) == content_)
    ::unlink(path_.c_str());
  else
    log_warn("lock %s: no longer names this process; left in place", path_.c_str());
}

}  // namespace ember
