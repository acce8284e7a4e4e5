// One rule for every output a command writes (prep's and export's folders, eval's logits, tokenizer train's files):
//   - never a special file: a device node, FIFO or socket at the path is refused, with --overwrite or without;
//   - an existing output is replaced only with --overwrite, and only when it is what this command writes (the command
//     says how to tell); it is moved aside to <path>.previous-<UTC time>, never deleted; an empty folder is simply
//     replaced;
//   - the new output is built completely under a temporary name beside it (<path>.tmp-<pid>) and swapped in last, so a
//     failure at any point leaves the old output whole, and the temporary one is removed;
//   - one job at a time per output: a lock file beside it (<path>.lock) names the holder (core/folder_lock.h).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/folder_lock.h"
#include "core/regular_file.h"

namespace ember {

enum class OutputKind { file, folder };

struct OutputRule {
  std::string path;     // as the user gave it
  std::string option;   // the option that named it ("--output", "--logits-out"), in messages
  std::string command;  // "ember export", in messages and the lock file
  OutputKind kind = OutputKind::folder;
  bool overwrite = false;
  // Whether the existing output at a path is one this command writes, and what that looks like, for the refusal
  // ("an export folder (config.json, model.safetensors)").
  std::function<bool(const std::string& path)> is_ours;
  std::string looks_like;
};

// For OutputRule::is_ours: whether `dir` is a folder with at least one entry and every entry is one `ours` accepts
// (given the entry's name and whether it is a regular file or a folder). A symbolic link or special file never is.
bool folder_holds_only(const std::string& dir,
                       const std::function<bool(const std::string& name, bool is_file, bool is_folder)>& ours);

class StagedOutput {
 public:
  // Checks the path against the rule and takes the lock; for a folder, creates the temporary folder. Throws
  // ember::Error naming the option and the path, with a hint, when the output may not be written.
  explicit StagedOutput(OutputRule rule);
  // Without commit(), removes what was staged; always releases the lock.
  ~StagedOutput();
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;

  // Where to write the new output: a folder (created) or a file path (not yet created).
  const std::string& staging() const { return staging_; }
  // Swaps the new output in, the old one (if any) moved aside, and returns where it went ("" when there was none).
  std::string commit();

 private:
  OutputRule rule_;
  std::string staging_;
  std::unique_ptr<FolderLock> lock_;
  bool committed_ = false;
};

}  // namespace ember
