// Rank-aware logger. Library code logs through this, never printf/std::cout.
// By default only rank 0 prints; set_log_rank() is called once the process grid exists.
#pragma once
#include <fmt/format.h>

#include <cstdio>
#include <string>

namespace weft {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

struct LogState {
  int rank = 0;
  bool all_ranks = false;
  LogLevel level = LogLevel::kInfo;
};

LogState& log_state();
void set_log_rank(int rank, bool all_ranks = false);
void set_log_level(LogLevel level);
void log_line(LogLevel level, const std::string& msg);

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_line(LogLevel::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  log_line(LogLevel::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  log_line(LogLevel::kDebug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace weft
