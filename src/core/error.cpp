// Errors and check macros (implementation): formats the failure location and the library's own message.
#include "core/error.h"

#include <unistd.h>

#include <sstream>

#include "core/log.h"

namespace ember {

void throw_error(const std::string& message, const std::string& hint) { throw Error(message, hint); }

std::string error_location(const char* file, int line) {
  const int rank = log_rank();
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  std::ostringstream s;
  s << file << ":" << line << " (rank " << rank << " on " << host << ")";
  return s.str();
}

void fail_check(const char* lib, const char* stmt, const std::string& detail, const char* file, int line,
                const char* hint) {
  std::ostringstream s;
  s << lib << " check failed: " << stmt << " at " << error_location(file, line);
  if (!detail.empty()) s << ": " << detail;
  throw Error(s.str(), hint);
}

}  // namespace ember
