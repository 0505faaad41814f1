// Errors carry a message that names the offending values. The CLI maps InputError to exit
// code 2 (bad input: config, CLI, data files, checkpoints, layouts) and every other
// exception to exit code 1 (runtime failure).
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace weft {

// Bad input from the user: a config key, a file, a shape. Exit code 2.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& msg) : std::runtime_error(msg) {}
};

// A failure while running (I/O error, internal invariant). Exit code 1.
class RuntimeError : public std::runtime_error {
 public:
  explicit RuntimeError(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void throw_input(fmt::format_string<Args...> f, Args&&... args) {
  throw InputError(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void throw_runtime(fmt::format_string<Args...> f, Args&&... args) {
  throw RuntimeError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace weft

// Internal invariant check: a failure is a bug in weft, not bad input.
#define WEFT_CHECK(cond, ...)                                                         \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      throw ::weft::RuntimeError(fmt::format("internal check failed at {}:{}: {}: {}", \
                                             __FILE__, __LINE__, #cond,               \
                                             fmt::format(__VA_ARGS__)));              \
    }                                                                                 \
  } while (0)
