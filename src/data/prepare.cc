#include "data/prepare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/corpus_inputs.h"
#include "data/shard.h"
#include "data/text_util.h"
#include "data/tokenizer.h"

namespace weft {

namespace fs = std::filesystem;
using corpus_io::collect_inputs;
using corpus_io::file_documents;
using corpus_io::InputFile;

namespace {

// Philox stream for the validation draw (the last id of the data range; the loader's epoch
// streams are kRngStreamData + epoch).
constexpr uint64_t kPrepareValStream = kRngStreamData + 0xFFFFFFFFull;
// Documents are tokenized in batches of about this many bytes (in parallel within a batch).
constexpr int64_t kBatchBytes = 8 << 20;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Shard names "<name>_<split>_<6 digits>.bin", their temporary files and meta.json in `dir`.
std::vector<fs::path> earlier_outputs(const fs::path& dir, const std::string& name) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string f = entry.path().filename().string();
    bool ours = f == "meta.json";
    for (const char* split : {"train", "val"}) {
      const std::string prefix = name + "_" + split + "_";
      // Temporary files of an interrupted prepare: "<shard>.bin.tmp" (older weft) or
      // "<shard>.bin.tmp-<host>-<pid>-<random>" (write_file_atomic).
      const bool temp = ends_with(f, ".bin.tmp") || f.find(".bin.tmp-") != std::string::npos;
      if (f.starts_with(prefix) && (ends_with(f, ".bin") || temp)) ours = true;
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

// Throws for options that cannot work, before anything is read.
void check_options(const PrepareOptions& opt) {
  if (opt.inputs.empty()) throw_input("prepare: no inputs given");
  if (opt.out_dir.empty()) throw_input("prepare: no output folder given");
  if (!(opt.val_fraction > 0.0 && opt.val_fraction < 1.0)) {
    throw_input("prepare: val_fraction must be in (0, 1), got {}", opt.val_fraction);
  }
  if (opt.shard_tokens < 1 || opt.shard_tokens > INT32_MAX) {
    throw_input("prepare: shard_tokens must be in [1, {}], got {}", INT32_MAX, opt.shard_tokens);
  }
}

// The shard name: opt.name, else the output folder's name. It must be a file name, and none of
// its parts (split at '_', '-', '.') may be "train" or "val".
std::string checked_shard_name(const PrepareOptions& opt) {
  const std::string name = opt.name.empty() ? shard_name_for(opt.out_dir) : opt.name;
  if (name.empty() || name.find('/') != std::string::npos) {
    throw_input("prepare: shard name \"{}\" (from output folder {}) is not a file name", name,
                opt.out_dir);
  }
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
  return name;
}

// Creates the output folder and removes an earlier run's outputs there (only with overwrite).
void prepare_output_folder(const fs::path& out_dir, const PrepareOptions& opt,
                           const std::string& name) {
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

struct CountedInputs {
  std::vector<InputFile> used;       // files with documents counted
  std::vector<std::string> skipped;  // "path (why)" of files in folders that are not text
};

// Pass 1: counts documents per file, skipping files in folders that are not text. Fills
// res.documents, res.files_read and res.files_skipped.
CountedInputs count_documents(std::vector<InputFile>& files, const PrepareOptions& opt,
                              PrepareResult& res) {
  CountedInputs counted;
  for (InputFile& f : files) {
    std::vector<std::string> docs;
    std::string why;
    if (!file_documents(f.path, opt.split_on_percent_lines, !f.explicit_input, docs, &why)) {
      counted.skipped.push_back(fmt::format("{} ({})", f.path, why));
      continue;
    }
    f.documents = static_cast<int64_t>(docs.size());
    res.documents += f.documents;
    counted.used.push_back(f);
  }
  res.files_read = static_cast<int64_t>(counted.used.size());
  res.files_skipped = static_cast<int64_t>(counted.skipped.size());
  return counted;
}

// Says which files were skipped (the first three) and how many were reached twice.
void log_input_notes(const std::vector<std::string>& skipped, int64_t duplicates) {
  if (!skipped.empty()) {
    std::string list;
    for (size_t i = 0; i < skipped.size() && i < 3; ++i) list += (i ? ", " : "") + skipped[i];
    log_info("prepare: skipped {} file(s) that are not UTF-8 text: {}{}", skipped.size(), list,
             skipped.size() > 3 ? ", ..." : "");
  }
  if (duplicates > 0) {
    log_info("prepare: {} file(s) reached twice (symlinks) were read once", duplicates);
  }
}

void require_two_documents(const PrepareOptions& opt, const PrepareResult& res) {
  std::string input_list;
  for (size_t i = 0; i < opt.inputs.size(); ++i) input_list += (i ? ", " : "") + opt.inputs[i];
  if (res.documents < 2) {
    throw_input("prepare: found {} document(s) in {} ({} text file(s), {} skipped); need at least "
                "2 (one for train, one for val)",
                res.documents, input_list, res.files_read, res.files_skipped);
  }
}

// Which of the n documents go to validation: round(val_fraction * n), at least 1, at most n - 1.
std::vector<bool> validation_documents(const PrepareOptions& opt, int64_t n) {
  const int64_t n_val =
      std::clamp<int64_t>(std::llround(opt.val_fraction * static_cast<double>(n)), 1, n - 1);
  return choose_validation(opt.seed, n, n_val);
}

// Pass 2's tokenizing: documents are gathered into batches of about kBatchBytes, each batch is
// tokenized in parallel, and every document goes, in order, to its split's writer.
class DocumentRouter {
 public:
  using Clock = std::chrono::steady_clock;

  DocumentRouter(const Tokenizer& tok, const std::vector<bool>& is_val, SplitWriter& train,
                 SplitWriter& val, int64_t total_documents, Clock::time_point t0)
      : tok_(tok),
        is_val_(is_val),
        train_(train),
        val_(val),
        eot_(tok.eot_token()),
        total_documents_(total_documents),
        t0_(t0),
        last_log_(Clock::now()) {}

  void add(std::string&& doc) {
    batch_bytes_ += static_cast<int64_t>(doc.size());
    batch_.push_back(std::move(doc));
    if (batch_bytes_ >= kBatchBytes) run_batch();
  }

  // Tokenizes what is left in the batch.
  void finish() { run_batch(); }

  int64_t documents() const { return doc_index_; }
  int64_t text_bytes() const { return text_bytes_; }

 private:
  void run_batch() {
    std::vector<std::string_view> views(batch_.begin(), batch_.end());
    std::vector<std::vector<int32_t>> ids = tok_.encode_batch(views);
    for (size_t i = 0; i < ids.size(); ++i, ++doc_index_) {
      (is_val_[static_cast<size_t>(doc_index_)] ? val_ : train_).append_document(eot_, ids[i]);
    }
    text_bytes_ += batch_bytes_;
    batch_.clear();
    batch_bytes_ = 0;
    log_progress();
  }

  // At most every 10 seconds.
  void log_progress() {
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_log_).count() > 10.0) {
      last_log_ = now;
      const double s = std::chrono::duration<double>(now - t0_).count();
      log_info("prepare: {} / {} documents, {} tokens, {:.1f} MB/s", doc_index_, total_documents_,
               human(static_cast<double>(train_.tokens() + val_.tokens())), text_bytes_ / s / 1e6);
    }
  }

  const Tokenizer& tok_;
  const std::vector<bool>& is_val_;
  SplitWriter& train_;
  SplitWriter& val_;
  const int32_t eot_;
  const int64_t total_documents_;
  const Clock::time_point t0_;
  Clock::time_point last_log_;
  std::vector<std::string> batch_;
  int64_t batch_bytes_ = 0, doc_index_ = 0, text_bytes_ = 0;
};

// Pass 2's reading: the documents of every used file again, in order, into the router.
void route_documents(const std::vector<InputFile>& used, const PrepareOptions& opt,
                     DocumentRouter& router) {
  for (const InputFile& f : used) {
    std::vector<std::string> docs;
    file_documents(f.path, opt.split_on_percent_lines, /*lenient=*/false, docs, nullptr);
    if (static_cast<int64_t>(docs.size()) != f.documents) {
      throw_runtime("prepare: {} changed while being read ({} documents, then {})", f.path,
                    f.documents, docs.size());
    }
    for (std::string& d : docs) router.add(std::move(d));
  }
  router.finish();
}

void record_splits(const SplitWriter& train, const SplitWriter& val, PrepareResult& res) {
  res.train_documents = train.documents();
  res.val_documents = val.documents();
  res.train_tokens = train.tokens();
  res.val_tokens = val.tokens();
  res.train_files = train.files();
  res.val_files = val.files();
}

std::vector<std::string> file_names(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) out.push_back(fs::path(p).filename().string());
  return out;
}

std::vector<std::string> all_files(const PrepareResult& res) {
  std::vector<std::string> all = res.train_files;
  all.insert(all.end(), res.val_files.begin(), res.val_files.end());
  return all;
}

nlohmann::json meta_json(const PrepareOptions& opt, const std::string& name, const Tokenizer& tok,
                         const PrepareResult& res) {
  const int32_t eot = tok.eot_token();
  return {
      {"format", "llm.c token shards"},
      {"name", name},
      {"tokenizer", opt.tokenizer_dir.empty() ? std::string("gpt2") : opt.tokenizer_dir},
      {"tokenizer_source", tok.source()},
      {"separator", tok.separator_name()},
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
                 {"files", file_names(res.train_files)}}},
      {"val", {{"documents", res.val_documents}, {"tokens", res.val_tokens},
               {"files", file_names(res.val_files)}}},
      // Each shard's size and XXH3, checked whenever it is opened (check_shard_record).
      {"shards", shard_records(all_files(res))},
  };
}

void log_summary(const PrepareOptions& opt, const PrepareResult& res) {
  log_info("prepare: {} documents ({:.1f} MB) from {} file(s) -> train {} tokens ({} documents, "
           "{} shard(s)), val {} tokens ({} documents, {} shard(s)) in {} ({:.1f} s, {:.2f} MB/s)",
           res.documents, res.text_bytes / 1e6, res.files_read, human(res.train_tokens),
           res.train_documents, res.train_files.size(), human(res.val_tokens), res.val_documents,
           res.val_files.size(), opt.out_dir, res.seconds,
           res.seconds > 0 ? res.text_bytes / res.seconds / 1e6 : 0.0);
}

}  // namespace

std::vector<std::string> read_documents(const std::string& path, bool split_on_percent_lines) {
  std::vector<std::string> docs;
  file_documents(path, split_on_percent_lines, /*lenient=*/false, docs, nullptr);
  return docs;
}

PrepareResult prepare_corpus(const PrepareOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  check_options(opt);
  const std::string name = checked_shard_name(opt);
  // The tokenizer first: missing files should fail before the corpus is read.
  const Tokenizer tok = Tokenizer::load(opt.tokenizer_dir);
  int64_t duplicates = 0;
  std::vector<InputFile> files = collect_inputs(opt.inputs, &duplicates);
  // Output folder (before any heavy work).
  const fs::path out_dir(opt.out_dir);
  prepare_output_folder(out_dir, opt, name);

  PrepareResult res;
  const CountedInputs counted = count_documents(files, opt, res);
  log_input_notes(counted.skipped, duplicates);
  require_two_documents(opt, res);
  const std::vector<bool> is_val = validation_documents(opt, res.documents);

  SplitWriter train(out_dir, name, "train", opt.shard_tokens, tok.vocab_size());
  SplitWriter val(out_dir, name, "val", opt.shard_tokens, tok.vocab_size());
  DocumentRouter router(tok, is_val, train, val, res.documents, t0);
  route_documents(counted.used, opt, router);
  train.flush(true);
  val.flush(true);
  WEFT_CHECK(router.documents() == res.documents, "{} documents tokenized, {} counted",
             router.documents(), res.documents);
  res.text_bytes = router.text_bytes();
  record_splits(train, val, res);

  // meta.json last: its presence means the shards are complete.
  res.meta_path = (out_dir / "meta.json").string();
  write_file_atomic(res.meta_path, meta_json(opt, name, tok, res).dump(2) + "\n");

  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_summary(opt, res);
  return res;
}

}  // namespace weft
