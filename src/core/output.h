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

// Throws ember::Error naming `what` and the path, with a hint, when something exists at `path` that is neither a
// regular file nor a folder (a device node, FIFO or socket): nothing Ember writes or reads may be one.
void refuse_special_file(const std::string& path, const std::string& what);

// Whether `path` is an existing regular file that starts with `magic`.
bool file_starts_with(const std::string& path, const std::string& magic);

}  // namespace ember
