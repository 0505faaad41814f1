#include "train/train_tasks.h"

#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "data/text_util.h"
#include "data/tokenizer.h"
#include "engine/engine.h"

namespace weft {
namespace fs = std::filesystem;

std::string task_tokenizer_source(const RunConfig& cfg) {
  if (!cfg.tokenizer.empty()) return cfg.tokenizer;
  std::error_code ec;
  const fs::path data(cfg.data);
  const fs::path meta = fs::is_directory(data, ec) ? data / "meta.json" : data.parent_path() / "meta.json";
  if (!fs::is_regular_file(meta, ec)) return "";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(meta.string()));
  } catch (const nlohmann::json::exception& e) {
    throw_input("{}: not valid JSON ({}): set eval.tokenizer for the tasks, or prepare the corpus again", meta.string(),
                e.what());
  }
  const std::string t = j.is_object() && j.contains("tokenizer") && j["tokenizer"].is_string()
                            ? j["tokenizer"].get<std::string>()
                            : std::string("gpt2");
  return t == "gpt2" ? std::string() : t;
}

namespace {

Tokenizer load_task_tokenizer(const RunConfig& cfg) {
  const std::string src = task_tokenizer_source(cfg);
  try {
    return Tokenizer::load(src);
  } catch (const InputError& e) {
    if (!cfg.tokenizer.empty()) throw_input("eval.tokenizer: {}", e.what());
    throw_input("eval.tasks: the training data's meta.json names the tokenizer '{}', which does not load here ({}): set "
                "eval.tokenizer", src, e.what());
  }
}

}  // namespace

TrainTasks::TrainTasks(const RunConfig& cfg, const ModelConfig& mc) {
  every_ = cfg.tasks_every > 0 ? cfg.tasks_every : cfg.val_every;
  opt_.fewshot = static_cast<int>(cfg.fewshot);
  opt_.seed = static_cast<uint64_t>(cfg.tasks_seed);
  opt_.limit = cfg.tasks_limit;
  if (cfg.tasks.empty()) return;
  for (const std::string& f : cfg.tasks) tasks_.push_back(load_icl_task(f));  // every file read before any work
  const Tokenizer tok = load_task_tokenizer(cfg);
  if (tok.vocab_size() > mc.vocab_size) {
    throw_input("eval.tasks: the tokenizer ({}) has {} tokens, more than model '{}' reads ({}): set eval.tokenizer to "
                "the model's", tok.source(), tok.vocab_size(), mc.name, mc.vocab_size);
  }
  // Every request is encoded once, now: an item that does not fit the context fails the run
  // before its first step (naming the file and item), and each scoring reuses them.
  const IclEncoder enc{[&tok](std::string_view t) { return tok.encode(t); }, tok.eot_token()};
  for (const IclTask& t : tasks_) {
    try {
      requests_.push_back(icl_requests(t, enc, opt_, mc.n_ctx));
    } catch (const InputError& e) {
      throw_input("eval.tasks: {}", e.what());
    }
  }
}

bool TrainTasks::due(int64_t done, bool last) const {
  if (tasks_.empty()) return false;
  return done == 0 || last || (every_ > 0 && done % every_ == 0);
}

nlohmann::json TrainTasks::evaluate(Engine& engine, int64_t done, int64_t tokens) {
  const int64_t D = engine.comm(Axis::kDp).size();
  nlohmann::json results = nlohmann::json::array();
  last_passes_ = 0;
  for (size_t k = 0; k < tasks_.size(); ++k) {
    const IclTaskResult r = score_icl_requests(engine, tasks_[k], requests_[k], opt_);  // begins generation
    last_passes_ += (r.requests + D - 1) / D;
    results.push_back(icl_result_json(r));
    log_info("step {:>5} | {} {}-shot: acc {:.4f}{} ({} items, {:.1f} s)", done, r.name, r.fewshot, r.acc,
             r.has_norm ? fmt::format(", acc_norm {:.4f}", r.acc_norm) : std::string(), r.items, r.seconds);
  }
  engine.end_generation();
  return {{"step", done}, {"tokens", tokens}, {"tasks", results}};
}

}  // namespace weft
