// HDF5 checkpoints, --resume: which checkpoint of a folder a run continues from, falling back past damaged files
// with a warning naming each and why, and never silently starting over.
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/folder.h"
#include "core/error.h"
#include "core/log.h"

namespace ember {
namespace {

using namespace checkpoint_detail;

// The reason part of a checkpoint error about `path`: "checkpoint P: dataset D is corrupted" -> "dataset D is
// corrupted", "checkpoint P is truncated (...)" -> "truncated (...)".
std::string reason_of(const std::string& what, const std::string& path) {
  const std::string head = "checkpoint " + path;
  if (what.rfind(head, 0) != 0) return what;
  std::string r = what.substr(head.size());
  for (const char* lead : {": ", " is ", " "})
    if (r.rfind(lead, 0) == 0) return r.substr(std::char_traits<char>::length(lead));
  return r;
}

}  // namespace

std::string resolve_resume(const std::string& folder, const std::string& resume) {
  if (resume.empty()) return "";
  if (resume != "auto") {
    std::error_code ec;
    if (!fs::exists(resume, ec))
      throw Error("resume checkpoint " + resume + " does not exist",
                  "pass an existing step_XXXXXXXX.h5, --resume auto for the newest checkpoint in " +
                      folder_path(folder).string() + ", or no --resume to start fresh");
    if (!fs::is_regular_file(resume, ec))
      throw Error("resume checkpoint " + resume + " is not a file",
                  "pass a step_XXXXXXXX.h5 file, or --resume auto with checkpoint.folder set to this folder");
    verify_checkpoint(resume);
    return resume;
  }
  const fs::path dir = folder_path(folder);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  auto in_folder = [&](const std::string& name) { return (folder.empty() ? fs::path(name) : dir / name).string(); };

  // `latest` is written last, so it names a complete checkpoint unless that file was deleted or damaged since.
  // Fallbacks are the checkpoints older than it: newer step numbers can only be leftovers of an earlier, longer run.
  std::vector<std::string> candidates;
  int64_t older_than = INT64_MAX;
  const std::string latest = read_latest(dir);
  if (!latest.empty() && fs::is_regular_file(dir / latest, ec)) {
    candidates.push_back(latest);
    if (parse_step(latest) >= 0) older_than = parse_step(latest);
  } else if (!latest.empty()) {
    log_warn("checkpoint folder %s: `latest` names %s, which does not exist; trying the newest step_*.h5", dir.c_str(),
             latest.c_str());
  }
  for (const auto& [step, name] : list_checkpoints(dir))
    if (step < older_than && name != latest) candidates.push_back(name);

  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string path = in_folder(candidates[i]);
    try {
      verify_checkpoint(path);
      return path;
    } catch (const std::exception& e) {
      if (i + 1 < candidates.size())
        log_warn("checkpoint %s is unreadable (%s); falling back to %s", path.c_str(),
                 reason_of(e.what(), path).c_str(), in_folder(candidates[i + 1]).c_str());
      else
        log_warn("checkpoint %s is unreadable (%s)", path.c_str(), reason_of(e.what(), path).c_str());
    }
  }
  // Starting over silently would throw away the run (and its new checkpoints would be pruned against the damaged
  // ones): with checkpoints present but none readable, stop and let the user decide.
  if (!candidates.empty())
    throw_error("checkpoint folder " + dir.string() + ": none of its " + std::to_string(candidates.size()) +
                    " checkpoints is readable",
                "restore a checkpoint from a backup, or move the folder away and run without --resume to start over");
  return "";
}

}  // namespace ember
