// The bounded readers of data/text_util.h (issue 34 class 6): a file weft reads back is refused
// at its first bad byte or line, with memory bounded by the longest line, however large it is.
#include "data/text_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace weft {
namespace {

using test::input_error_message;
TEST(TextUtil, ForEachFileLineStreamsLinesAndRefusesNulsAndEndlessLines) {
  test::TempDir tmp("text-util");
  const std::string ok = tmp / "ok.jsonl";
  std::ofstream(ok) << "{\"a\":1}\n\n{\"b\":2}\nlast";
  std::vector<std::pair<std::string, int64_t>> lines;
  for_each_file_line(ok, 64, [&](std::string_view l, int64_t no) { lines.emplace_back(std::string(l), no); });
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], (std::pair<std::string, int64_t>{"{\"a\":1}", 1}));
  EXPECT_EQ(lines[1].first, "");
  EXPECT_EQ(lines[3], (std::pair<std::string, int64_t>{"last", 4}));
  // A sparse 4 GiB file of zeros (no disk used): refused at its first byte, at once.
  const std::string zeros = tmp / "zeros.jsonl";
  std::ofstream(zeros) << "{\"a\":1}\n";
  ASSERT_EQ(::truncate(zeros.c_str(), int64_t{4} << 30), 0);
  int seen = 0;
  const std::string e = input_error_message([&] { for_each_file_line(zeros, 1 << 20, [&](std::string_view, int64_t) { ++seen; }); });
  EXPECT_EQ(seen, 1);
  EXPECT_NE(e.find("zeros.jsonl:2: a NUL byte"), std::string::npos) << e;
  const std::string wide = tmp / "wide.jsonl";
  std::ofstream(wide) << std::string(100, 'x') << "\n";
  EXPECT_NE(input_error_message([&] { for_each_file_line(wide, 64, [](std::string_view, int64_t) {}); })
                .find("wide.jsonl:1: a line longer than 64 bytes"),
            std::string::npos);
  // The callback's own error leaves the file closed and goes through unchanged.
  EXPECT_EQ(input_error_message([&] { for_each_file_line(ok, 64, [](std::string_view, int64_t) { throw_input("mine"); }); }),
            "mine");
  EXPECT_NE(input_error_message([&] { for_each_file_line(tmp / "missing", 64, [](std::string_view, int64_t) {}); })
                .find("cannot open"),
            std::string::npos);
}

TEST(TextUtil, ReadTextFileRefusesOversizeAndNulBytesBeforeReadingThemAll) {
  test::TempDir tmp("text-util-read");
  const std::string ok = tmp / "ok.json";
  std::ofstream(ok) << "{\"version\": 3}";
  EXPECT_EQ(read_text_file(ok, 1024), "{\"version\": 3}");
  EXPECT_NE(input_error_message([&] { read_text_file(ok, 4); }).find("14 bytes, more than the 4"), std::string::npos);
  const std::string tail = tmp / "tail.json";
  std::ofstream(tail) << "{}";
  ASSERT_EQ(::truncate(tail.c_str(), 1000), 0);  // zeros after the JSON: nlohmann would stop at the NUL
  EXPECT_NE(input_error_message([&] { read_text_file(tail, 4096); }).find("a NUL byte at offset 2"), std::string::npos);
  EXPECT_NE(input_error_message([&] { read_text_file(tmp / "", 4096); }).find("is a folder"), std::string::npos);
}

}  // namespace
}  // namespace weft
