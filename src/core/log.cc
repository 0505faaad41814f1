#include "core/log.h"

namespace weft {

LogState& log_state() {
  static LogState s;
  return s;
}

void set_log_rank(int rank, bool all_ranks) {
  log_state().rank = rank;
  log_state().all_ranks = all_ranks;
}

void set_log_level(LogLevel level) { log_state().level = level; }

void log_line(LogLevel level, const std::string& msg) {
  const LogState& s = log_state();
  if (level < s.level) return;
  if (s.rank != 0 && !s.all_ranks && level < LogLevel::kWarn) return;
  // Progress and info go to stdout, warnings and errors to stderr.
  std::FILE* out = level >= LogLevel::kWarn ? stderr : stdout;
  if (s.all_ranks || s.rank != 0) {
    fmt::print(out, "[rank {}] {}\n", s.rank, msg);
  } else {
    fmt::print(out, "{}\n", msg);
  }
  std::fflush(out);
}

}  // namespace weft
