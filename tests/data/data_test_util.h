// Helpers shared by the data tests: scratch folders under WEFT_TEST_TMP, a tokenizer loaded
// once per process, small file writers.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "data/tokenizer.h"

namespace weft::testing {

// A fresh, empty folder WEFT_TEST_TMP/data/<test suite>.<test name>.<pid>, removed when the
// object dies unless the test failed (so a failure leaves its files to look at).
class ScratchDir {
 public:
  ScratchDir() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "scratch";
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = std::filesystem::path(WEFT_TEST_TMP) / "data" / (name + "." + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    if (!::testing::Test::HasFailure()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& rel) const { return (path_ / rel).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

// GPT-2's tokenizer from default_tokenizer_dir(), loaded once (throws InputError with the
// setup hint when the files are missing, which fails the calling test).
inline const Tokenizer& gpt2_tokenizer() {
  static const Tokenizer tok = Tokenizer::load_gpt2(default_tokenizer_dir());
  return tok;
}

}  // namespace weft::testing
