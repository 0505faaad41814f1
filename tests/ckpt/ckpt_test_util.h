// Helpers for the checkpoint tests: a fresh temporary folder per test, running the Python
// reader, raw file writing.
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

#include "ckpt/fs_util.h"
#include "test_util.h"

namespace weft::testing_ckpt {

namespace fs = std::filesystem;

// A fresh, empty folder under WEFT_TEST_TMP named after the running test; removed when the
// test passes (kept for inspection when it fails).
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::path(WEFT_TEST_TMP) / "ckpt" /
            fmt::format("{}.{}-{}", info->test_suite_name(), info->name(), ::getpid());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    if (!::testing::Test::HasFailure()) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

using test::input_error_message;  // test_util.h

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A safetensors file from its parts: the 8-byte length `header_len` (normally
// header.size()), the header text and the data buffer.
inline std::string safetensors_bytes(const std::string& header, const std::string& buffer, uint64_t header_len) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &header_len, 8);
  return out + header + buffer;
}
inline std::string safetensors_bytes(const std::string& header, const std::string& buffer) {
  return safetensors_bytes(header, buffer, header.size());
}

// Turns a weft checkpoint folder into one written before manifests existed (no manifest.json,
// no weft.format_version in config.json), which loads unverified: for tests that edit a file
// to reach the parsers' own checks behind the checksums.
inline void make_unverified(const std::string& dir) {
  fs::remove(fs::path(dir) / "manifest.json");
  auto cfg = nlohmann::json::parse(read_bytes(dir + "/config.json"));
  cfg["weft"].erase("format_version");
  write_bytes(dir + "/config.json", cfg.dump(2));
}

// The pid of a process that has exited (a child that ends at once, reaped).
inline pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

// The "<host>-<pid>" suffix of temporary names for `pid` on this host.
inline std::string suffix_for_pid(pid_t pid) {
  const std::string own = ckpt_io::writer_suffix();
  return own.substr(0, own.rfind('-') + 1) + std::to_string(pid);
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout
};

// Runs a shell command, capturing stdout (stderr goes to `stderr_path`).
inline CommandResult run_command(const std::string& cmd, const std::string& stderr_path) {
  CommandResult r;
  std::FILE* p = ::popen((cmd + " 2>'" + stderr_path + "'").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs tests/ckpt/read_safetensors.py with `args` under /usr/bin/python3 (Debian's, which has
// python3-numpy and python3-torch). Fails the test, with the reason, if it cannot run.
inline std::string run_python_reader(const std::string& args, const std::string& scratch_dir) {
  const std::string python = "/usr/bin/python3";
  const std::string script = std::string(WEFT_SOURCE_DIR) + "/tests/ckpt/read_safetensors.py";
  if (::access(python.c_str(), X_OK) != 0) {
    ADD_FAILURE() << python << " is missing: install python3, python3-numpy and python3-torch (scripts/setup.sh)";
    return "";
  }
  const std::string err_path = scratch_dir + "/python-stderr.txt";
  CommandResult r = run_command(python + " '" + script + "' " + args, err_path);
  const std::string err = read_bytes(err_path);
  if (r.exit_code == 3) {
    ADD_FAILURE() << "read_safetensors.py needs numpy and torch: " << err
                  << " (install python3-numpy and python3-torch, see scripts/setup.sh)";
    return "";
  }
  if (r.exit_code != 0) {
    ADD_FAILURE() << "read_safetensors.py " << args << " exited with " << r.exit_code << ":\n" << err;
    return "";
  }
  return r.output;
}

}  // namespace weft::testing_ckpt
