#include "train/kill_timeout.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "core/durable_file.h"

namespace weft {

namespace {

constexpr const char* kParam = "odls_base_sigkill_timeout";

// A whole number of seconds >= 0 (Open MPI's parameter is an int), else nullopt.
std::optional<double> parse_seconds(std::string t) {
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t' || t.back() == '\r')) t.pop_back();
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.erase(t.begin());
  char* end = nullptr;
  const long v = std::strtol(t.c_str(), &end, 10);
  if (t.empty() || end != t.c_str() + t.size() || v < 0) return std::nullopt;
  return static_cast<double>(v);
}

// "odls_base_sigkill_timeout = N" in an Open MPI parameter file (the last setting wins).
std::optional<double> from_param_file(const std::string& path) {
  std::ifstream in(path);
  std::optional<double> r;
  for (std::string line; std::getline(in, line);) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    key.erase(std::remove_if(key.begin(), key.end(), [](char c) { return c == ' ' || c == '\t'; }), key.end());
    if (key == kParam) {
      if (auto v = parse_seconds(line.substr(eq + 1))) r = v;
    }
  }
  return r;
}

}  // namespace

std::optional<KillTimeout> openmpi_kill_timeout() {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return std::nullopt;
  const std::string env = std::string("OMPI_MCA_") + kParam;
  if (const char* v = std::getenv(env.c_str())) {
    if (auto s = parse_seconds(v)) return KillTimeout{*s, env};
  }
  std::vector<std::string> files;
  if (const char* home = std::getenv("HOME")) files.push_back(std::string(home) + "/.openmpi/mca-params.conf");
  files.push_back("/etc/openmpi/openmpi-mca-params.conf");
  for (const std::string& f : files) {
    if (auto s = from_param_file(f)) return KillTimeout{*s, f};
  }
  return KillTimeout{1.0, "Open MPI's default"};
}

double synced_write_rate(const std::string& dir, int64_t bytes) {
  const int64_t n = std::clamp<int64_t>(bytes, 1 << 20, int64_t{16} << 20);
  const std::string path = fmt::format("{}/.weft-write-probe-{}", dir, ::getpid());
  const std::vector<char> block(1 << 20, 'w');
  const auto t0 = std::chrono::steady_clock::now();
  int fd = -1;
  try {
    fd = open_for_writing(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  } catch (const std::exception&) {
    return 0.0;
  }
  bool ok = true;
  for (int64_t done = 0; ok && done < n; done += static_cast<int64_t>(block.size())) {
    ok = write_fully(fd, block.data(), block.size()) == 0;
  }
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  ::unlink(path.c_str());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ok && s > 0 ? static_cast<double>(n) / s : 0.0;
}

std::string kill_timeout_warning(const StopNeed& need, const KillTimeout& timeout) {
  const double want = 2.0 * need.total();
  if (want <= timeout.seconds) return "";
  const double raise = std::max(30.0, std::ceil(4.0 * need.total() / 10.0) * 10.0);
  return fmt::format(
      "preemption: a stop needs about {:.1f} s (a step, {:.1f} s, then the checkpoint: {:.1f} MiB at {:.0f} MiB/s, {:.1f} s), "
      "more than half of mpirun's kill timeout of {:g} s ({}): a SIGTERM would kill the ranks before the checkpoint "
      "is written. Raise it: mpirun --mca {} {:g} ... (or export OMPI_MCA_{}={:g}); under Slurm see docs/preemption.md",
      need.total(), need.step_s, static_cast<double>(need.checkpoint_bytes) / (1 << 20), need.rate / (1 << 20),
      need.checkpoint_s, timeout.seconds, timeout.source, kParam, raise, kParam, raise);
}

}  // namespace weft
