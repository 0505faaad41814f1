// `weft prepare`: text corpus -> GPT-2 token shards (train and val) + meta.json.
//
// Inputs are files or folders (walked recursively in sorted order). A text file whose lines
// include ones that are exactly "%" (a fortune database) holds one document per
// "%"-separated entry; any other text file is one document; a .jsonl file holds one document
// per line (its "text" field). Every document is preceded by <|endoftext|>. Whole documents go
// to the validation split, chosen by a seeded draw. The full rules are in docs/formats-data.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weft {

struct PrepareOptions {
  std::vector<std::string> inputs;   // text / .jsonl files and folders of them
  std::string out_dir;               // created if missing; its basename names the shards
  std::string name;                  // shard name prefix; empty = basename of out_dir
  std::string tokenizer_dir;         // Tokenizer::load's argument: a tokenizer.json, a folder of GPT-2's files or
                                     // with a tokenizer.json; empty = GPT-2's vendored files
  double val_fraction = 0.02;        // share of documents in val (at least 1 document)
  int64_t shard_tokens = 100'000'000;  // tokens per shard file (the last one holds the rest)
  uint64_t seed = 1337;              // picks the validation documents
  bool split_on_percent_lines = true;  // fortune rule: lines that are exactly "%" split documents
  bool overwrite = false;            // replace shards/meta.json from an earlier run in out_dir
};

struct PrepareResult {
  int64_t files_read = 0;      // input files that contributed documents (or were empty)
  int64_t files_skipped = 0;   // files inside folders skipped as binary / not UTF-8
  int64_t documents = 0;
  int64_t train_documents = 0;
  int64_t val_documents = 0;
  int64_t train_tokens = 0;    // EOT separators included
  int64_t val_tokens = 0;
  int64_t text_bytes = 0;      // UTF-8 bytes of all documents
  std::vector<std::string> train_files;  // shard paths written, in order
  std::vector<std::string> val_files;
  std::string meta_path;       // out_dir/meta.json
  double seconds = 0.0;
  int64_t files_written() const {
    return static_cast<int64_t>(train_files.size() + val_files.size()) + 1;  // + meta.json
  }
};

// Runs the whole pipeline. Throws InputError for a missing input, an input file named
// explicitly that is not UTF-8 text, a malformed .jsonl line (file:line), fewer than two
// documents, an output folder that cannot be created, or earlier outputs there without
// `overwrite`.
PrepareResult prepare_corpus(const PrepareOptions& opt);

// The documents of one input file by the rules above (exposed for tests and tools). Throws
// InputError when the file is not UTF-8 text or a .jsonl line is malformed.
std::vector<std::string> read_documents(const std::string& path, bool split_on_percent_lines = true);

}  // namespace weft
