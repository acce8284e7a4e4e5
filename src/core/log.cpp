// Logging (implementation): one line per call, flushed, so interleaved ranks stay readable.
#include "core/log.h"

#include <cstdio>

namespace ember {

static int g_rank = 0;
static bool g_all_ranks = false;
static LogLevel g_level = LOG_LEVEL_INFO;
static bool g_info_to_stderr = false;

void log_set_rank(int rank, bool all_ranks) {
  g_rank = rank;
  g_all_ranks = all_ranks;
}
int log_rank() { return g_rank; }
void log_set_level(LogLevel level) { g_level = level; }
void log_info_to_stderr(bool on) { g_info_to_stderr = on; }
bool log_is_printing_rank() { return g_rank == 0 || g_all_ranks; }

static void vlog(FILE* out, LogLevel level, bool every_rank, const char* tag, const char* fmt, va_list ap) {
  if (level < g_level) return;
  if (!every_rank && !log_is_printing_rank()) return;
  char buf[4096];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  if (g_all_ranks || (every_rank && g_rank != 0))
    fprintf(out, "[rank %d] %s%s\n", g_rank, tag, buf);
  else
    fprintf(out, "%s%s\n", tag, buf);
  fflush(out);
}

#define EMBER_LOG_BODY(out, level, every, tag) \
  va_list ap;                                  \
  va_start(ap, fmt);                           \
  vlog(out, level, every, tag, fmt, ap);       \
  va_end(ap)

void log_info(const char* fmt, ...) { EMBER_LOG_BODY(g_info_to_stderr ? stderr : stdout, LOG_LEVEL_INFO, false, ""); }
void log_warn(const char* fmt, ...) { EMBER_LOG_BODY(stderr, LOG_LEVEL_WARN, false, "warning: "); }
void log_debug(const char* fmt, ...) {
  EMBER_LOG_BODY(g_info_to_stderr ? stderr : stdout, LOG_LEVEL_DEBUG, true, "debug: ");
}
void log_error(const char* fmt, ...) { EMBER_LOG_BODY(stderr, LOG_LEVEL_ERROR, true, "error: "); }

}  // namespace ember
