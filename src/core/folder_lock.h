// One job per folder: an exclusive lock file that names its holder (host, pid, job id, start time), taken before
// anything is written and removed at exit. A run folder's is <folder>/ember.lock; an output that is swapped in whole
// (core/output.h) has its own beside it, <output>.lock.
//
// Why not flock() alone: on NFS and Lustre advisory locks are often disabled, local to one client, or lost when the
// client that holds them dies, so they cannot keep two nodes out of one folder. Creating the file with O_CREAT|O_EXCL
// is atomic on every shared file system (NFSv3 and later, Lustre, GPFS), so it decides who holds the folder. A holder
// that crashed leaves its file behind; it is reclaimed, with a warning, when it is stale:
//   - on the same host, when the named process is gone (its pid no longer exists, or now belongs to a process that
//     started at another time);
//   - on another host, when the file's mtime has not been refreshed for the stale time: a heartbeat thread of the
//     holder touches it every stale/10 seconds, so the stale time covers attribute caching and clock skew between
//     nodes. The stale time is 300 s, or EMBER_LOCK_STALE_SECONDS.
// A reclaim renames the stale file to a unique name first and checks that it moved the file it judged stale, so two
// jobs that reclaim at once cannot both win.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace ember {

// What a lock keeps to one job, and how its messages read.
struct LockSpec {
  std::string target;     // the folder or file kept to one job, named in messages
  std::string what;       // names `target`: "run folder", "prep output"
  std::string path;       // the lock file; its folder must exist
  std::string command;    // recorded in the lock file: "ember train"
  std::string elsewhere;  // the way out the hint offers besides waiting: "give this run another run.dir"
};

class FolderLock {
 public:
  // Takes <dir>/ember.lock for `ember train`; `dir` must exist. `what` names the folder in messages ("run folder",
  // "checkpoint folder").
  FolderLock(const std::string& dir, const std::string& what);
  // Takes spec.path. Throws ember::Error naming the target and the holder, with a hint, when a live job holds it.
  explicit FolderLock(const LockSpec& spec);
  // Stops the heartbeat and removes the lock file if it still names this process.
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  void heartbeat(double interval_s);

  std::string path_;
  std::string content_;  // what this process wrote into the lock file
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread heartbeat_;
};

// This host's name (gethostname), as lock files and the run-state file record it.
std::string this_host();

// Seconds without a heartbeat after which a lock held from another host is stale (EMBER_LOCK_STALE_SECONDS, or 300).
double lock_stale_seconds();

}  // namespace ember
