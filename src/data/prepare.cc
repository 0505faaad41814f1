#include "data/prepare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/shard.h"
#include "data/text_util.h"
#include "data/tokenizer.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

// Philox stream for the validation draw (the last id of the data range; the loader's epoch
// streams are kRngStreamData + epoch).
constexpr uint64_t kPrepareValStream = kRngStreamData + 0xFFFFFFFFull;
// Documents are tokenized in batches of about this many bytes (in parallel within a batch).
constexpr int64_t kBatchBytes = 8 << 20;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  });
}

// Why `text` is not UTF-8 text, or empty if it is.
std::string not_text_reason(std::string_view text) {
  size_t nul = text.find('\0');
  if (nul != std::string_view::npos) return fmt::format("NUL byte at offset {}", nul);
  size_t bad = utf8_invalid_offset(text);
  if (bad != std::string_view::npos) {
    return fmt::format("invalid UTF-8 at offset {} (byte 0x{:02X})", bad,
                       static_cast<uint8_t>(text[bad]));
  }
  return {};
}

void add_document(std::vector<std::string>& docs, std::string_view text) {
  if (!is_blank(text)) docs.emplace_back(text);
}

// Splits at lines that are exactly "%" (optionally "%\r"); returns false if there are none.
bool split_percent(std::string_view text, std::vector<std::string>& docs) {
  bool any = false;
  size_t doc_start = 0, pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    size_t end = eol == std::string_view::npos ? text.size() : eol;
    std::string_view line = text.substr(pos, end - pos);
    const size_t next = eol == std::string_view::npos ? text.size() : eol + 1;
    if (line == "%" || line == "%\r") {
      any = true;
      add_document(docs, text.substr(doc_start, pos - doc_start));
      doc_start = next;
    }
    pos = next;
  }
  if (any) add_document(docs, text.substr(doc_start));
  return any;
}

// Documents of one file. When the file is not UTF-8 text and `lenient`, returns false and
// says why in `reason` (the caller skips it); otherwise that is an InputError.
bool file_documents(const std::string& path, bool split_on_percent, bool lenient,
                    std::vector<std::string>& docs, std::string* reason) {
  std::string text = read_file(path);
  if (ends_with(path, ".jsonl")) {
    size_t pos = 0;
    int64_t line_no = 0;
    while (pos < text.size()) {
      size_t eol = text.find('\n', pos);
      if (eol == std::string::npos) eol = text.size();
      std::string_view line(text.data() + pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (is_blank(line)) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw_input("{}:{}: not valid JSON: {}", path, line_no, e.what());
      }
      if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
        throw_input("{}:{}: expected a JSON object with a string \"text\" field, got {}", path,
                    line_no, j.dump().substr(0, 120));
      }
      add_document(docs, j["text"].get_ref<const std::string&>());
    }
    return true;
  }
  std::string why = not_text_reason(text);
  if (!why.empty()) {
    if (!lenient) throw_input("{} is not UTF-8 text ({}): pass text or .jsonl files", path, why);
    *reason = why;
    return false;
  }
  std::string_view body(text);
  if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);  // UTF-8 byte order mark
  if (!split_on_percent || !split_percent(body, docs)) add_document(docs, body);
  return true;
}

struct InputFile {
  std::string path;
  bool explicit_input;  // named on the command line (not found in a folder)
  int64_t documents = 0;
};

bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

// Files of every input in order: a folder contributes its files recursively, sorted by path,
// skipping hidden files and folders. A file reached twice (e.g. through a symlink) is read once.
std::vector<InputFile> collect_inputs(const std::vector<std::string>& inputs, int64_t* duplicates) {
  std::vector<InputFile> files;
  std::unordered_set<std::string> seen;
  *duplicates = 0;
  auto add = [&](const fs::path& p, bool explicit_input) {
    std::error_code ec;
    fs::path canon = fs::weakly_canonical(p, ec);
    const std::string key = ec ? p.string() : canon.string();
    if (!seen.insert(key).second) {
      ++*duplicates;
      return;
    }
    files.push_back({p.string(), explicit_input});
  };
  for (const std::string& input : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(input, ec);
    if (ec || !fs::exists(st)) {
      throw_input("input {} does not exist", input);
    }
    if (fs::is_directory(st)) {
      std::vector<fs::path> found;
      fs::recursive_directory_iterator it(input, fs::directory_options::skip_permission_denied, ec);
      if (ec) throw_input("cannot list input folder {}: {}", input, ec.message());
      for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) throw_input("cannot list input folder {}: {}", input, ec.message());
        const fs::path& p = it->path();
        std::error_code ec2;
        if (hidden(p)) {
          if (it->is_directory(ec2)) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file(ec2)) found.push_back(p);
      }
      std::sort(found.begin(), found.end());
      for (const fs::path& p : found) add(p, false);
    } else if (fs::is_regular_file(st)) {
      add(input, true);
    } else {
      throw_input("input {} is neither a file nor a folder", input);
    }
  }
  return files;
}

// Shard names "<name>_<split>_<6 digits>.bin" and meta.json in `dir`.
std::vector<fs::path> earlier_outputs(const fs::path& dir, const std::string& name) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string f = entry.path().filename().string();
    bool ours = f == "meta.json";
    for (const char* split : {"train", "val"}) {
      const std::string prefix = name + "_" + split + "_";
      if (f.starts_with(prefix) && (ends_with(f, ".bin") || ends_with(f, ".bin.tmp"))) ours = true;
    }
    if (ours) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Accumulates one split's tokens and writes a shard each time shard_tokens are ready.
class SplitWriter {
 public:
  SplitWriter(fs::path dir, std::string name, std::string split, int64_t shard_tokens, int vocab)
      : dir_(std::move(dir)),
        name_(std::move(name)),
        split_(std::move(split)),
        shard_tokens_(shard_tokens),
        vocab_(vocab) {}

  void append_document(int32_t eot, const std::vector<int32_t>& tokens) {
    buf_.push_back(eot);
    buf_.insert(buf_.end(), tokens.begin(), tokens.end());
    total_ += 1 + static_cast<int64_t>(tokens.size());
    ++documents_;
    if (static_cast<int64_t>(buf_.size()) >= shard_tokens_) flush(false);
  }

  // Writes every full shard, and with `last` the remainder too.
  void flush(bool last) {
    size_t done = 0;
    while (static_cast<int64_t>(buf_.size() - done) >= shard_tokens_) {
      write(buf_.data() + done, shard_tokens_);
      done += static_cast<size_t>(shard_tokens_);
    }
    if (last && (buf_.size() > done || files_.empty())) {
      write(buf_.data() + done, static_cast<int64_t>(buf_.size() - done));
      done = buf_.size();
    }
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(done));
  }

  const std::vector<std::string>& files() const { return files_; }
  int64_t tokens() const { return total_; }
  int64_t documents() const { return documents_; }

 private:
  void write(const int32_t* tokens, int64_t count) {
    const std::string path =
        (dir_ / fmt::format("{}_{}_{:06d}.bin", name_, split_, files_.size())).string();
    write_shard(path, tokens, count, vocab_);
    files_.push_back(path);
  }

  fs::path dir_;
  std::string name_, split_;
  int64_t shard_tokens_;
  int vocab_;
  std::vector<int32_t> buf_;
  std::vector<std::string> files_;
  int64_t total_ = 0, documents_ = 0;
};

std::string shard_name_for(const std::string& out_dir) {
  fs::path p = fs::absolute(out_dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

// Marks k of n documents for validation: Floyd's sampling without replacement, driven by
// Philox(seed, kPrepareValStream, j), so the choice depends only on (seed, n, k).
std::vector<bool> choose_validation(uint64_t seed, int64_t n, int64_t k) {
  std::vector<bool> val(static_cast<size_t>(n), false);
  for (int64_t j = n - k; j < n; ++j) {
    const Philox::Block b = Philox::draw(seed, kPrepareValStream, static_cast<uint64_t>(j));
    const uint64_t x = (static_cast<uint64_t>(b[1]) << 32) | b[0];
    const auto t = static_cast<int64_t>(
        (static_cast<unsigned __int128>(x) * static_cast<uint64_t>(j + 1)) >> 64);  // [0, j]
    if (val[t]) {
      val[j] = true;
    } else {
      val[t] = true;
    }
  }
  return val;
}

std::string human(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}B", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

}  // namespace

std::vector<std::string> read_documents(const std::string& path, bool split_on_percent_lines) {
  std::vector<std::string> docs;
  file_documents(path, split_on_percent_lines, /*lenient=*/false, docs, nullptr);
  return docs;
}

PrepareResult prepare_corpus(const PrepareOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  if (opt.inputs.empty()) throw_input("prepare: no inputs given");
  if (opt.out_dir.empty()) throw_input("prepare: no output folder given");
  if (!(opt.val_fraction > 0.0 && opt.val_fraction < 1.0)) {
    throw_input("prepare: val_fraction must be in (0, 1), got {}", opt.val_fraction);
  }
  if (opt.shard_tokens < 1 || opt.shard_tokens > INT32_MAX) {
    throw_input("prepare: shard_tokens must be in [1, {}], got {}", INT32_MAX, opt.shard_tokens);
  }
  const std::string name = opt.name.empty() ? shard_name_for(opt.out_dir) : opt.name;
  if (name.empty() || name.find('/') != std::string::npos) {
    throw_input("prepare: shard name \"{}\" (from output folder {}) is not a file name", name,
                opt.out_dir);
  }
  {
    size_t i = 0;
    while (i <= name.size()) {
      size_t j = name.find_first_of("_-.", i);
      if (j == std::string::npos) j = name.size();
      std::string_view part(name.data() + i, j - i);
      if (part == "train" || part == "val") {
        throw_input("prepare: shard name \"{}\" has \"{}\" as a part, which would make its shards "
                    "look like both splits; choose another output folder name or shard name",
                    name, part);
      }
      i = j + 1;
    }
  }

  // The tokenizer first: missing files should fail before the corpus is read.
  const Tokenizer tok = Tokenizer::load_gpt2(opt.tokenizer_dir);

  // Inputs.
  int64_t duplicates = 0;
  std::vector<InputFile> files = collect_inputs(opt.inputs, &duplicates);

  // Output folder (before any heavy work).
  const fs::path out_dir(opt.out_dir);
  {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec || !fs::is_directory(out_dir)) {
      throw_input("prepare: cannot create output folder {}: {}", opt.out_dir,
                  ec ? ec.message() : std::string("a file of that name exists"));
    }
    std::vector<fs::path> old = earlier_outputs(out_dir, name);
    if (!old.empty() && !opt.overwrite) {
      throw_input("prepare: output folder {} already holds {} output file(s) of an earlier run "
                  "(e.g. {}); remove them or pass --overwrite",
                  opt.out_dir, old.size(), old.front().filename().string());
    }
    for (const fs::path& p : old) {
      fs::remove(p, ec);
      if (ec) throw_input("prepare: cannot remove earlier output {}: {}", p.string(), ec.message());
    }
  }

  // Pass 1: count documents per file, skipping files in folders that are not text.
  PrepareResult res;
  std::vector<InputFile> used;
  std::vector<std::string> skipped;
  for (InputFile& f : files) {
    std::vector<std::string> docs;
    std::string why;
    if (!file_documents(f.path, opt.split_on_percent_lines, !f.explicit_input, docs, &why)) {
      skipped.push_back(fmt::format("{} ({})", f.path, why));
      continue;
    }
    f.documents = static_cast<int64_t>(docs.size());
    res.documents += f.documents;
    used.push_back(f);
  }
  res.files_read = static_cast<int64_t>(used.size());
  res.files_skipped = static_cast<int64_t>(skipped.size());
  if (!skipped.empty()) {
    std::string list;
    for (size_t i = 0; i < skipped.size() && i < 3; ++i) list += (i ? ", " : "") + skipped[i];
    log_info("prepare: skipped {} file(s) that are not UTF-8 text: {}{}", skipped.size(), list,
             skipped.size() > 3 ? ", ..." : "");
  }
  if (duplicates > 0) {
    log_info("prepare: {} file(s) reached twice (symlinks) were read once", duplicates);
  }
  std::string input_list;
  for (size_t i = 0; i < opt.inputs.size(); ++i) input_list += (i ? ", " : "") + opt.inputs[i];
  if (res.documents < 2) {
    throw_input("prepare: found {} document(s) in {} ({} text file(s), {} skipped); need at least "
                "2 (one for train, one for val)",
                res.documents, input_list, res.files_read, res.files_skipped);
  }

  // Validation documents.
  const int64_t n_val = std::clamp<int64_t>(
      std::llround(opt.val_fraction * static_cast<double>(res.documents)), 1, res.documents - 1);
  const std::vector<bool> is_val = choose_validation(opt.seed, res.documents, n_val);

  // Pass 2: tokenize in batches, route each document to its split.
  const int32_t eot = tok.eot_token();
  SplitWriter train(out_dir, name, "train", opt.shard_tokens, tok.vocab_size());
  SplitWriter val(out_dir, name, "val", opt.shard_tokens, tok.vocab_size());
  std::vector<std::string> batch;
  int64_t batch_bytes = 0, doc_index = 0;
  auto last_log = std::chrono::steady_clock::now();
  auto run_batch = [&]() {
    std::vector<std::string_view> views(batch.begin(), batch.end());
    std::vector<std::vector<int32_t>> ids = tok.encode_batch(views);
    for (size_t i = 0; i < ids.size(); ++i, ++doc_index) {
      (is_val[static_cast<size_t>(doc_index)] ? val : train).append_document(eot, ids[i]);
    }
    res.text_bytes += batch_bytes;
    batch.clear();
    batch_bytes = 0;
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_log).count() > 10.0) {
      last_log = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      log_info("prepare: {} / {} documents, {} tokens, {:.1f} MB/s", doc_index, res.documents,
               human(static_cast<double>(train.tokens() + val.tokens())), res.text_bytes / s / 1e6);
    }
  };
  for (const InputFile& f : used) {
    std::vector<std::string> docs;
    file_documents(f.path, opt.split_on_percent_lines, /*lenient=*/false, docs, nullptr);
    if (static_cast<int64_t>(docs.size()) != f.documents) {
      throw_runtime("prepare: {} changed while being read ({} documents, then {})", f.path,
                    f.documents, docs.size());
    }
    for (std::string& d : docs) {
      batch_bytes += static_cast<int64_t>(d.size());
      batch.push_back(std::move(d));
      if (batch_bytes >= kBatchBytes) run_batch();
    }
  }
  run_batch();
  train.flush(true);
  val.flush(true);
  WEFT_CHECK(doc_index == res.documents, "{} documents tokenized, {} counted", doc_index,
             res.documents);

  res.train_documents = train.documents();
  res.val_documents = val.documents();
  res.train_tokens = train.tokens();
  res.val_tokens = val.tokens();
  res.train_files = train.files();
  res.val_files = val.files();

  // meta.json last: its presence means the shards are complete.
  auto rel = [](const std::vector<std::string>& paths) {
    std::vector<std::string> out;
    for (const std::string& p : paths) out.push_back(fs::path(p).filename().string());
    return out;
  };
  nlohmann::json meta = {
      {"format", "llm.c token shards"},
      {"name", name},
      {"tokenizer", "gpt2"},
      {"tokenizer_source", tok.source()},
      {"vocab_size", tok.vocab_size()},
      {"eot_token", eot},
      {"token_dtype", shard_token_bytes(tok.vocab_size()) == 2 ? "uint16" : "uint32"},
      {"inputs", opt.inputs},
      {"files_read", res.files_read},
      {"files_skipped", res.files_skipped},
      {"split_on_percent_lines", opt.split_on_percent_lines},
      {"documents", res.documents},
      {"text_bytes", res.text_bytes},
      {"val_fraction", opt.val_fraction},
      {"seed", opt.seed},
      {"shard_tokens", opt.shard_tokens},
      {"train", {{"documents", res.train_documents}, {"tokens", res.train_tokens},
                 {"files", rel(res.train_files)}}},
      {"val", {{"documents", res.val_documents}, {"tokens", res.val_tokens},
               {"files", rel(res.val_files)}}},
  };
  res.meta_path = (out_dir / "meta.json").string();
  write_file_atomic(res.meta_path, meta.dump(2) + "\n");

  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("prepare: {} documents ({:.1f} MB) from {} file(s) -> train {} tokens ({} documents, "
           "{} shard(s)), val {} tokens ({} documents, {} shard(s)) in {} ({:.1f} s, {:.2f} MB/s)",
           res.documents, res.text_bytes / 1e6, res.files_read, human(res.train_tokens),
           res.train_documents, res.train_files.size(), human(res.val_tokens), res.val_documents,
           res.val_files.size(), opt.out_dir, res.seconds,
           res.seconds > 0 ? res.text_bytes / res.seconds / 1e6 : 0.0);
  return res;
}

}  // namespace weft
