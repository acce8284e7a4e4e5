// Logging: rank 0 prints by default; with log_all_ranks every rank prints with a "[rank r]" prefix.
// printf-style because the toolchain (GCC 12) has no std::format.
#pragma once

#include <cstdarg>

namespace ember {

enum LogLevel { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO = 1, LOG_LEVEL_WARN = 2, LOG_LEVEL_ERROR = 3 };

void log_set_rank(int rank, bool all_ranks);
// The rank set by log_set_rank (0 until then); errors name it.
int log_rank();
void log_set_level(LogLevel level);
// Info and debug lines go to stdout unless this sends them to stderr, for commands whose stdout is their product
// (generate's text, eval's JSON).
void log_info_to_stderr(bool on);
bool log_is_printing_rank();

void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Errors print on every rank: the rank that failed may not be rank 0.
void log_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ember
