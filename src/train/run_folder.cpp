// The run folder (implementation): locks, the refusal of a fresh start over earlier results, the probes, moving
// earlier results aside, and the run-state records.
#include "train/run_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/host_collectives.h"
#include "train/run_state.h"

namespace ember {

namespace {

namespace fs = std::filesystem;

const char* RUN_HINT = "set run.dir to a writable folder on a file system every rank can reach";
const char* CHECKPOINT_HINT =
    "set checkpoint.folder (default <run.dir>/checkpoints) to a writable folder on a file system every rank can reach";

// Creates `dir` with every missing parent, appending the ones it created (parents first) to `created`. Throws when
// `dir` or a parent exists and is not a folder, or cannot be created.
void ensure_folder(const std::string& dir, const std::string& what, const char* hint,
                   std::vector<std::string>& created) {
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path p = fs::path(dir).lexically_normal(); !p.empty(); p = p.parent_path()) {
    const fs::file_status st = fs::status(p, ec);
    if (fs::exists(st)) {
      if (!fs::is_directory(st))
        throw_error(what + " " + dir + ": " + p.string() + " exists and is not a folder",
                    std::string(hint) + "; or move that file away");
      break;
    }
    missing.push_back(p);
    if (p == p.parent_path() || p.filename().empty()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0777) != 0 && errno != EEXIST)
      throw_error(what + " " + dir + ": cannot create " + it->string() + ": " + std::strerror(errno), hint);
    created.push_back(it->string());
  }
}

// True when `inner` is `outer` or lies under it (both existing folders).
bool is_within(const std::string& inner, const std::string& outer) {
  std::error_code ec;
  const fs::path a = fs::weakly_canonical(inner, ec), b = fs::weakly_canonical(outer, ec);
  const fs::path rel = a.lexically_relative(b);
  return !rel.empty() && *rel.begin() != "..";
}

// True when the two existing folders are one.
bool same_folder(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

bool is_checkpoint_name(const std::string& name) {
  const auto ends_with = [&](const std::string& s) {
    return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return name.rfind("step_", 0) == 0 && (ends_with(".h5") || ends_with(".h5.tmp"));
}

bool is_metrics_name(const std::string& name) {
  return name == "metrics.jsonl" ||
         (name.rfind("metrics_rank", 0) == 0 && name.size() > 18 && name.compare(name.size() - 6, 6, ".jsonl") == 0);
}

// The files a fresh start would overwrite: metrics in run.dir, checkpoints and `latest` in the checkpoint folder.
std::vector<fs::path> earlier_results(const std::string& run_dir, const std::string& checkpoint_dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec))
    if (is_metrics_name(it->path().filename().string()) && it->is_regular_file(ec) && fs::file_size(*it, ec) > 0)
      found.push_back(it->path());
  for (fs::directory_iterator it(checkpoint_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if ((is_checkpoint_name(name) || name == "latest") && !it->is_directory(ec)) found.push_back(it->path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The files a run reads and writes by name must be regular files where they exist: a folder fails a save, and a
// device or FIFO would take the metrics or block the writer forever.
void check_named_files(const std::string& run_dir, const std::string& ckpt) {
  std::vector<std::pair<fs::path, std::string>> named = {
      {fs::path(ckpt) / "latest", "the file naming the newest checkpoint"},
      {fs::path(run_dir) / "metrics.jsonl", "the metrics file"},
      {fs::path(run_dir) / "run_state.json", "the run's state file"}};
  std::error_code ec;
  for (const std::string& dir : {run_dir, ckpt})
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (is_metrics_name(name) && name != "metrics.jsonl") named.emplace_back(it->path(), "a metrics file");
      if (is_checkpoint_name(name)) named.emplace_back(it->path(), "a checkpoint");
    }
  for (const auto& [path, role] : named) {
    const fs::file_status st = fs::status(path, ec);  // what a link leads to
    if (ec || !fs::exists(st) || fs::is_regular_file(st)) continue;
    const char* kind = fs::is_directory(st) ? "a folder"
                       : fs::is_fifo(st)    ? "a FIFO"
                       : fs::is_socket(st)  ? "a socket"
                                            : "a device";
    throw_error(path.string() + " is " + kind + ", not " + role,
                "move " + path.string() + " away, or give this run a new run.dir");
  }
}

// Creates and removes a probe file in `dir`: proves this process can create files there now.
void probe_folder(const World& world, const std::string& dir, const std::string& what, const char* hint) {
  const std::string where = world.size > 1 ? " from rank " + std::to_string(world.rank) + " on " + world.host : "";
  const std::string probe = dir + "/.ember-probe." + this_host() + "." + std::to_string(getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) throw_error(what + " " + dir + " does not exist" + where + " (rank 0 created it)", hint);
    throw_error(what + " " + dir + " is not writable" + where + ": cannot create a file in it: " + std::strerror(err),
                hint);
  }
  const bool ok = ::write(fd, "x", 1) == 1;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!ok) throw_error(what + " " + dir + " is not writable" + where + ": " + std::strerror(err), hint);
}

// A folder named previous-<UTC time> (with -2, -3, ... when taken) inside `dir`, created.
fs::path make_aside_folder(const fs::path& dir, const std::string& stamp) {
  for (int k = 1;; ++k) {
    const fs::path p = dir / ("previous-" + stamp + (k > 1 ? "-" + std::to_string(k) : ""));
    if (::mkdir(p.c_str(), 0777) == 0) return p;
    if (errno != EEXIST)
      throw_error("cannot create " + p.string() + " to move the earlier results aside: " + std::strerror(errno),
                  "make the run folder writable, or give this run a new run.dir");
  }
}

}  // namespace

RunFolder::RunFolder(const World& world, const RunConfig& config, bool overwrite)
    : world_(world), config_(config), overwrite_(overwrite) {
  try {
    run_agreed(
        world_, /*root_only=*/true, [this] { prepare_on_root(); }, RUN_HINT);
    run_agreed(
        world_, /*root_only=*/false, [this] { probe(); }, CHECKPOINT_HINT);
  } catch (...) {
    locks_.clear();
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) ::rmdir(it->c_str());
    throw;
  }
}

RunFolder::~RunFolder() {
  locks_.clear();
  if (!started_)  // a start refused or failed in set-up leaves no folder behind (only empty ones are removed)
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) ::rmdir(it->c_str());
}

void RunFolder::prepare_on_root() {
  const std::string run_dir = config_.run.dir, ckpt = config_.checkpoint_folder();
  ensure_folder(run_dir, "run folder", RUN_HINT, created_);
  locks_.push_back(std::make_unique<FolderLock>(run_dir, "run folder"));
  ensure_folder(ckpt, "checkpoint folder", CHECKPOINT_HINT, created_);
  // Its own lock even inside run.dir: another job pointing checkpoint.folder into this run's folder is refused too.
  if (!same_folder(ckpt, run_dir)) locks_.push_back(std::make_unique<FolderLock>(ckpt, "checkpoint folder"));

  check_named_files(run_dir, ckpt);

  if (!config_.checkpoint.resume.empty()) return;  // resuming continues the earlier results
  const std::vector<fs::path> earlier = earlier_results(run_dir, ckpt);
  if (earlier.empty()) return;
  if (!overwrite_) {
    std::string names;
    for (size_t i = 0; i < earlier.size() && i < 3; ++i) names += (i ? ", " : "") + earlier[i].string();
    if (earlier.size() > 3) names += ", ... (" + std::to_string(earlier.size()) + " files)";
    // Named after the folder that holds them: a checkpoint.folder outside run.dir is not "the run folder".
    const bool all_in_ckpt = std::all_of(earlier.begin(), earlier.end(),
                                         [](const fs::path& p) { return !is_metrics_name(p.filename().string()); });
    const std::string holder =
        all_in_ckpt && !is_within(ckpt, run_dir) ? "checkpoint folder " + ckpt : "run folder " + run_dir;
    throw_error(holder + " holds the results of an earlier run (" + names + "): a fresh start would overwrite them",
                "continue that run with --resume auto, give this run a new run.dir, or pass --overwrite to move the "
                "earlier results aside (into previous-<time>/ folders) and start over");
  }
  has_earlier_ = true;
}

void RunFolder::probe() {
  const bool async = config_.training.mode == TrainingMode::async;
  if (world_.rank == 0 || async) probe_folder(world_, config_.run.dir, "run folder", RUN_HINT);
  probe_folder(world_, config_.checkpoint_folder(), "checkpoint folder", CHECKPOINT_HINT);
}

void RunFolder::move_earlier_results_aside() {
  const std::string run_dir = config_.run.dir, ckpt = config_.checkpoint_folder();
  const std::vector<fs::path> earlier = earlier_results(run_dir, ckpt);
  if (earlier.empty()) return;
  if (!has_earlier_)  // --resume auto found no checkpoint to continue: its metrics would be cut off silently
    log_warn("no checkpoint to resume from in %s: starting from scratch, earlier results moved aside", ckpt.c_str());
  std::string stamp = utc_timestamp();
  stamp.erase(std::remove(stamp.begin(), stamp.end(), ':'), stamp.end());
  fs::path run_aside, ckpt_aside;
  for (const fs::path& p : earlier) {
    const bool in_ckpt = !is_metrics_name(p.filename().string());
    fs::path& aside = in_ckpt ? ckpt_aside : run_aside;
    if (aside.empty()) aside = make_aside_folder(in_ckpt ? fs::path(ckpt) : fs::path(run_dir), stamp);
    if (::rename(p.c_str(), (aside / p.filename()).c_str()) != 0)
      throw_error("cannot move " + p.string() + " aside into " + aside.string() + ": " + std::strerror(errno),
                  "make the run folder writable, or give this run a new run.dir");
  }
  log_info("earlier results moved aside (nothing deleted): %s%s%s", run_aside.c_str(),
           !run_aside.empty() && !ckpt_aside.empty() ? " and " : "", ckpt_aside.c_str());
}

void RunFolder::start(int64_t step) {
  run_agreed(
      world_, /*root_only=*/true,
      [&] {
        if (step == 0) move_earlier_results_aside();
        write_run_state(config_.run.dir, RunState{"running", step, "", ""});
      },
      RUN_HINT);
  started_ = true;
}

void RunFolder::finish(const TrainResult& result) {
  if (world_.rank != 0) return;
  try {
    write_run_state(config_.run.dir,
                    RunState{result.stopped_early ? "stopped" : "done", result.step, result.last_checkpoint, ""});
  } catch (const Error& e) {
    log_warn("%s (job scripts will not see that this run %s)", e.what(),
             result.stopped_early ? "stopped after a checkpoint" : "is done");
  }
}

void RunFolder::fail(const std::string& message) noexcept {
  if (world_.rank != 0 || !started_) return;
  try {
    write_run_state(config_.run.dir, RunState{"failed", -1, "", message});
  } catch (const std::exception& e) {
    log_warn("%s", e.what());
  }
}

}  // namespace ember
