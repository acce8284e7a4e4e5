// The metrics file (implementation): truncation on resume goes through a temp file and rename, so a crash
// midway never loses the records that were already there.
#include "train/metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json_input.h"
#include "core/regular_file.h"

namespace ember {

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_up_to_step) : path_(path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec)
    throw_error("metrics directory " + fs::path(path).parent_path().string() + ": " + ec.message(),
                "set run.dir to a writable directory");
  refuse_special_file(path, "metrics file");  // a FIFO would block the open below forever
  if (keep_up_to_step > 0 && fs::exists(path)) {
    const std::string tmp = path + ".tmp";
    try {
      std::ifstream in(path);
      std::ofstream out(tmp, std::ios::trunc);
      std::string line;
      // A line that is no JSON (the half-written last line of a crash) is dropped; a record whose step is not a
      // whole number was not written by ember and stops the resume rather than being dropped unseen.
      for (int64_t number = 1; std::getline(in, line); ++number) {
        const std::optional<nlohmann::json> parsed = try_parse_json_input(line);
        if (!parsed || !parsed->is_object() || !parsed->contains("step")) continue;
        const nlohmann::json& rec = *parsed;
        if (!rec["step"].is_number_integer())
          throw_error("metrics file " + path + " line " + std::to_string(number) + ": \"step\" is " +
                          rec["step"].dump() + ", not a whole number",
                      "fix or delete that line (the run resumes from its checkpoint either way), or start the run "
                      "in a fresh run.dir");
        if (rec["step"].get<int64_t>() <= keep_up_to_step) out << line << "\n";
      }
      if (!out) throw_error("metrics file " + tmp + ": write failed", "check free disk space in run.dir");
    } catch (...) {
      fs::remove(tmp, ec);  // the metrics file stays as it was
      throw;
    }
    fs::rename(tmp, path, ec);
    if (ec)
      throw_error("metrics file " + path + ": cannot replace it: " + ec.message(), "check that run.dir is writable");
  }
  file_ = fopen(path.c_str(), keep_up_to_step > 0 ? "a" : "w");
  if (!file_) throw_error("metrics file " + path + ": " + strerror(errno), "set run.dir to a writable directory");
}

MetricsWriter::~MetricsWriter() {
  if (file_) fclose(file_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  if (fwrite(line.data(), 1, line.size(), file_) != line.size() || fflush(file_) != 0)
    throw_error("metrics file " + path_ + ": write failed (" + strerror(errno) + ")",
                "check free disk space in run.dir");
}

}  // namespace ember
