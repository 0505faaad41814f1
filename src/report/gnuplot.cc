#include "report/gnuplot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/log.h"
#include "data/text_util.h"

extern char** environ;

namespace fs = std::filesystem;

namespace weft::report {

namespace {

// The first executable `name` in the folders of $PATH (empty if none).
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream folders(path ? path : "");
  std::string dir;
  while (std::getline(folders, dir, ':')) {
    const fs::path p = fs::path(dir.empty() ? "." : dir) / name;
    if (fs::is_regular_file(p) && ::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return {};
}

struct ProcessResult {
  int code = -1;       // exit status, or 128 + signal
  std::string output;  // stdout and stderr together
};

// Seconds a gnuplot run may take before it is killed ($WEFT_GNUPLOT_TIMEOUT, default 120): a
// plot of any data weft writes takes well under a second.
double gnuplot_timeout_s() {
  const char* v = std::getenv("WEFT_GNUPLOT_TIMEOUT");
  if (!v || !*v) return 120.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*end != '\0' || !(s > 0) || !std::isfinite(s)) {
    throw_input("WEFT_GNUPLOT_TIMEOUT={}: expected a number of seconds > 0", v);
  }
  return s;
}

// Waits for `pid` at most `timeout_s` seconds; then kills it (SIGKILL) and says so.
int wait_or_kill(pid_t pid, const std::string& program, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) throw_runtime("waiting for {}: {}", program, std::strerror(errno));
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-pid, SIGKILL);  // the group run_process gave it
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      throw_runtime("{} did not finish within {:g} s and was killed (WEFT_GNUPLOT_TIMEOUT sets the limit)", program,
                    timeout_s);
    }
    ::usleep(5000);
  }
}

// Runs `program args...` in `cwd` with stdout and stderr into `log` (read back, then removed;
// "": /dev/null), killed after gnuplot_timeout_s().
ProcessResult run_process(const std::string& program, const std::vector<std::string>& args, const std::string& cwd,
                          const std::string& log) {
  // The log is opened here, never through a link or into a FIFO planted at its name
  // (core/durable_file.h), and handed to the child as its stdout and stderr.
  const double timeout_s = gnuplot_timeout_s();
  const int log_fd = log.empty() ? ::open("/dev/null", O_WRONLY | O_CLOEXEC) : open_for_writing(log, O_WRONLY | O_CREAT | O_TRUNC);
  if (log_fd < 0) throw_runtime("cannot open /dev/null: {}", std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, log_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  std::vector<char*> argv = {const_cast<char*>(program.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  // Its own process group, so that a timeout kills whatever it started too.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  const int rc = posix_spawn(&pid, program.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  ::close(log_fd);
  if (rc != 0) throw_runtime("cannot start {}: {}", program, std::strerror(rc));
  int status = 0;
  try {
    status = wait_or_kill(pid, program, timeout_s);
  } catch (...) {
    std::error_code ec;
    if (!log.empty()) fs::remove(log, ec);
    throw;
  }
  ProcessResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (!log.empty()) {
    r.output = fs::exists(log) ? read_file(log) : std::string();
    fs::remove(log);
  }
  return r;
}

// Whether gnuplot accepts `set terminal NAME` (a build without cairo has no pngcairo).
// No file is written: neither $TMPDIR (which may not exist) nor the output folder is needed.
bool has_terminal(const std::string& program, const std::string& name) {
  return run_process(program, {"-e", "set terminal " + name}, "/", "").code == 0;
}

// gnuplot's messages on one line (the CLI's errors are one line each).
std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c != '\n') {
      out += c;
    } else if (!out.empty() && out.back() != ' ') {
      out += " / ";
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '/')) out.pop_back();
  return out;
}

}  // namespace

Gnuplot find_gnuplot() {
  const std::string program = find_on_path("gnuplot");
  if (program.empty()) {
    throw_input(
        "gnuplot not found on PATH: weft report draws its plots with it (install gnuplot-nox; scripts/setup.sh does)");
  }
  for (const char* t : {"pngcairo", "png"}) {
    if (has_terminal(program, t)) return {program, t};
  }
  throw_input("{} has neither the pngcairo nor the png terminal: weft report writes PNG plots", program);
}

void run_script(const Gnuplot& gp, const std::string& dir, const std::string& name, const std::string& script) {
  write_file_atomic((fs::path(dir) / (name + ".gp")).string(), script);
  const std::string png = (fs::path(dir) / (name + ".png")).string();
  const ProcessResult r = run_process(gp.program, {name + ".gp"}, dir, (fs::path(dir) / (name + ".log")).string());
  if (r.code != 0 || !fs::is_regular_file(png)) {
    throw_runtime("gnuplot failed on {}.gp (exit {}{}): {}", name, r.code,
                  fs::is_regular_file(png) ? "" : ", no PNG written", one_line(r.output));
  }
  // gnuplot exits 0 when its PNG could not be written whole (a full disk): a PNG is at least
  // its 8-byte signature and a header.
  std::error_code ec;
  if (const auto size = fs::file_size(png, ec); ec || size < 64) {
    throw_runtime("gnuplot wrote {} of {} bytes only ({}): {}", png, ec ? 0 : size, free_space_note(png),
                  r.output.empty() ? "no message" : one_line(r.output));
  }
  if (!r.output.empty()) log_warn("gnuplot on {}.gp: {}", name, one_line(r.output));
}

std::string script_header(const Gnuplot& gp, const std::string& name, int width, int height) {
  const std::string font = gp.terminal == "pngcairo" ? " font 'sans,10'" : "";
  return fmt::format(
      "set terminal {} size {},{}{}\nset output {}\nset grid ytics lc rgb '#d0d0d0'\nset key outside right top\n"
      "set border 3\nset tics nomirror\n",
      gp.terminal, width, height, font, quoted(name + ".png"));
}

std::string datablock(const std::string& name, const std::vector<std::string>& rows) {
  std::string s = "$" + name + " << EOD\n";
  for (const std::string& r : rows) s += r + "\n";
  return s + "EOD\n";
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string series_colour(int run, int k) {
  // Blues for the first run, oranges/reds for the second; each list from dark to light.
  static const char* const kRun0[] = {"#1f4e9c", "#4a90d9", "#7fb8e8", "#2a9d8f", "#8ecae6", "#5e60ce", "#b8c0ff"};
  static const char* const kRun1[] = {"#c0392b", "#e67e22", "#f5b041", "#8e44ad", "#f1948a", "#d35400", "#fad7a0"};
  const int i = k % 7;
  return run == 0 ? kRun0[i] : kRun1[i];
}

ByteUnit byte_unit(double max_bytes) {
  if (max_bytes >= 1024.0 * 1048576.0) return {"GiB", 1024.0 * 1048576.0};
  if (max_bytes >= 1048576.0) return {"MiB", 1048576.0};
  if (max_bytes >= 1024.0) return {"KiB", 1024.0};
  return {"bytes", 1.0};
}

}  // namespace weft::report
