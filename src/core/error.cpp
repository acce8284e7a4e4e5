// Errors and check macros (implementation): formats the failure location and the library's own message.
#include "core/error.h"

#include <hdf5.h>
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

static herr_t collect_hdf5_error(unsigned n, const H5E_error2_t* err, void* client) {
  auto* out = static_cast<std::string*>(client);
  if (n == 0 && err->desc) *out = err->desc;  // walking downward, frame 0 is the API call that failed
  return 0;
}

std::string hdf5_error_string() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_hdf5_error, &msg);
  return msg.empty() ? "HDF5 call failed" : msg;
}

}  // namespace ember
