// Shared pieces of the fuzz targets (fuzz/*_fuzz.cc, docs/fuzzing.md): a scratch folder for the
// parsers that take a path, and the rule that decides what is a finding. weft's parsers report
// bad input as InputError (and I/O trouble as RuntimeError): those are the normal outcome of a
// malformed input. Any other exception, a failed property, a crash or a sanitizer report is a
// finding; the first three abort here so that libFuzzer saves the input as crash-<sha1>.
#pragma once
#include <cxxabi.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <typeinfo>

#include "core/error.h"

namespace weft::fuzz {

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "weft fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A property every input must keep (e.g. a round trip); its failure is a finding.
inline void require(bool ok, const std::string& what) {
  if (!ok) finding("property violated: " + what);
}

inline std::string demangled(const std::type_info& t) {
  int status = 0;
  char* d = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : t.name();
  std::free(d);
  return s;
}

// Runs f; InputError is expected, RuntimeError too unless runtime_is_finding (a parser whose
// contract is InputError only). Everything else that escapes is a finding.
// WEFT_FUZZ_VERBOSE=1 prints each refusal (to check what a seed reaches).
template <typename F>
void expect_weft_errors(F&& f, bool runtime_is_finding = false) {
  static const bool verbose = std::getenv("WEFT_FUZZ_VERBOSE") != nullptr;
  try {
    f();
    if (verbose) std::fprintf(stderr, "accepted\n");
  } catch (const InputError& e) {
    if (verbose) std::fprintf(stderr, "InputError: %s\n", e.what());
  } catch (const RuntimeError& e) {
    if (verbose) std::fprintf(stderr, "RuntimeError: %s\n", e.what());
    if (runtime_is_finding) finding(std::string("RuntimeError where only InputError is allowed: ") + e.what());
  } catch (const std::exception& e) {
    finding("unexpected exception " + demangled(typeid(e)) + ": " + e.what());
  } catch (...) {
    finding("unexpected exception of a non-std type");
  }
}

// A folder of this process for the files the parsers read (in /dev/shm when it exists: no disk
// traffic at thousands of inputs a second), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = std::string(base) + "/weft-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) finding("cannot create a scratch folder under " + std::string(base));
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

// Writes bytes to <scratch>/<name> (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch_dir() / name).string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) finding("cannot write " + path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) finding("cannot write " + path);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits an input into parts at a separator line: part 0 before the first occurrence, etc.
// Lets one input carry several files (e.g. a vocabulary and a merges file).
inline std::string_view part(std::string_view all, std::string_view sep, int index) {
  size_t begin = 0;
  for (int i = 0; i < index; ++i) {
    const size_t at = all.find(sep, begin);
    if (at == std::string_view::npos) return {};
    begin = at + sep.size();
  }
  const size_t end = all.find(sep, begin);
  return all.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin);
}

}  // namespace weft::fuzz
