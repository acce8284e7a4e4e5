// A file `ember eval` writes beside its report (--logits-out, --items-out), staged under the output rule
// (core/output.h): written in full before it replaces anything, never over a file that is not one of its own kind.
#pragma once

#include <memory>
#include <string>

#include "core/output.h"
#include "core/regular_file.h"

namespace ember {

// `path` for `option`: an existing file is replaced only with --overwrite, and only where it starts with `magic`
// (else it is refused as not looking like `looks_like`).
inline std::unique_ptr<StagedOutput> stage_eval_output(const std::string& path, const char* option, bool overwrite,
                                                       const std::string& magic, const char* looks_like) {
  const OutputRule rule{.path = path,
                        .option = option,
                        .command = "ember eval",
                        .kind = OutputKind::file,
                        .overwrite = overwrite,
                        .is_ours = [magic](const std::string& f) { return file_starts_with(f, magic); },
                        .looks_like = looks_like};
  return std::make_unique<StagedOutput>(rule);
}

}  // namespace ember
