// Finding the input files of `weft prepare` and reading their documents (internal to
// src/data; the rules are in data/prepare.h and docs/formats-data.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weft::corpus_io {

struct InputFile {
  std::string path;
  bool explicit_input;  // named on the command line (not found in a folder)
  int64_t documents = 0;
};

// Files of every input in order: a folder contributes its files recursively, sorted by path,
// skipping hidden files and folders. A file reached twice (e.g. through a symlink) is read once;
// `duplicates` counts those. Throws InputError for an input that is missing or not a file or folder.
std::vector<InputFile> collect_inputs(const std::vector<std::string>& inputs, int64_t* duplicates);

// Appends the documents of one file to `docs`. When the file is not UTF-8 text and `lenient`,
// returns false and says why in `reason` (the caller skips it); otherwise that is an InputError.
// A malformed .jsonl line is an InputError ("<path>:<line>: ...").
bool file_documents(const std::string& path, bool split_on_percent, bool lenient,
                    std::vector<std::string>& docs, std::string* reason);

}  // namespace weft::corpus_io
