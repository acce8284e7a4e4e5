// The run folder of one `ember train`: held by one job at a time (folder_lock.h), never overwritten silently, proven
// writable by every rank that will write before the first step, and carrying the run-state file (run_state.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/folder_lock.h"
#include "parallel/world.h"
#include "train/run.h"
#include "train/run_config.h"

namespace ember {

class RunFolder {
 public:
  // Collective over `world`, before the run's set-up. Rank 0 creates run.dir and the checkpoint folder, locks each
  // (the checkpoint folder even inside run.dir, so no other job's checkpoint.folder can point into it), and refuses a
  // fresh start (no checkpoint.resume) over earlier results (metrics, checkpoints, `latest`) unless `overwrite`; then
  // every rank that will write proves it can (a probe file created and removed): rank 0 in run.dir for the metrics
  // (every rank in async mode, which writes metrics_rank<r>.jsonl), every rank in the checkpoint folder (a checkpoint
  // is one file written by all ranks). A failure on any rank throws the same ember::Error on every rank.
  RunFolder(const World& world, const RunConfig& config, bool overwrite);
  // Rank 0: releases the locks; when the run never started, also removes the folders this start created.
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  // Collective: once set-up has succeeded, before anything is written. With `overwrite`, rank 0 moves the earlier
  // results aside into previous-<UTC time>/ folders (run.dir's and the checkpoint folder's; nothing is deleted); then
  // it records "running" at `step` in the run-state file.
  void start(int64_t step);
  // Rank 0: records "done" or "stopped" (after its checkpoint) with the step and checkpoint.
  void finish(const TrainResult& result);
  // Rank 0, once started: records "failed" with the message; never throws (it runs on the way out of an error).
  void fail(const std::string& message) noexcept;

 private:
  void prepare_on_root();
  void probe();
  void move_earlier_results_aside();

  World world_;
  RunConfig config_;
  bool overwrite_ = false;
  bool started_ = false;
  bool has_earlier_ = false;          // a fresh start with --overwrite over earlier results
  std::vector<std::string> created_;  // folders this start created, parents first
  std::vector<std::unique_ptr<FolderLock>> locks_;
};

}  // namespace ember
