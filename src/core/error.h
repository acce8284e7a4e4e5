// Errors and check macros: one family for MPI, HDF5, CUDA-side libraries and plain preconditions.
// A check evaluates its call once and reports the statement, file:line, rank, host and the library's message.
#pragma once

#include <stdexcept>
#include <string>

namespace ember {

// A user-facing error: `what()` names the bad input in one line, `hint()` says what to do.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, std::string hint) : std::runtime_error(message), hint_(std::move(hint)) {}
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};

// An error every rank of the job holds, agreed collectively (agree_on_error): each rank unwinds on its own, so the
// ranks can wait for one another before the job ends, and rank 0's clean-up is never cut short by a peer's abort.
class AgreedError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_error(const std::string& message, const std::string& hint);

// Where a check failed, formatted as "file:line (rank R on HOST)".
std::string error_location(const char* file, int line);

[[noreturn]] void fail_check(const char* lib, const char* stmt, const std::string& detail, const char* file, int line,
                             const char* hint);

}  // namespace ember

// EMBER_CHECK_GEN(lib, stmt, ok_expr, detail_expr, hint): evaluates stmt once into `ember_rc_`.
#define EMBER_CHECK_GEN(lib, stmt, ok_expr, detail_expr, hint)                                \
  do {                                                                                        \
    auto ember_rc_ = (stmt);                                                                  \
    if (!(ok_expr)) ::ember::fail_check(lib, #stmt, (detail_expr), __FILE__, __LINE__, hint); \
  } while (0)

// Preconditions that stay on in release builds.
#define EMBER_ASSERT(cond, msg)                                                                                    \
  do {                                                                                                             \
    if (!(cond))                                                                                                   \
      ::ember::fail_check("assert", #cond, (msg), __FILE__, __LINE__, "this is a bug in ember; please report it"); \
  } while (0)
