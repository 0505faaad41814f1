#include "train/config.h"

#include "model/family.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <functional>
#include <sstream>
#include <toml++/toml.h>
#include <variant>

#include "backend/registry.h"
#include "ckpt/checkpoint.h"
#include "comm/codec_spec.h"
#include "comm/device_comm_registry.h"
#include "core/error.h"
#include "data/text_util.h"
#include "train/divergence.h"

namespace weft {
namespace {

// Upper bounds of keys whose larger values are typos, not machines (docs/configuration.md).
constexpr int64_t kMaxThreads = 4096;
constexpr double kMaxBucketMb = 1048576.0;   // 1 TiB
constexpr double kMaxCommTimeout = 1e7;      // about 116 days, in seconds

using IntList = std::vector<int64_t>;
using StrList = std::vector<std::string>;
using Field = std::variant<int64_t RunConfig::*, double RunConfig::*, std::string RunConfig::*, bool RunConfig::*,
                           IntList RunConfig::*, StrList RunConfig::*>;
struct Key {
  const char* section;
  const char* name;
  Field field;
};

const std::vector<Key>& keys() {
  static const std::vector<Key> k = {
      {"model", "model", &RunConfig::model},
      {"model", "n_layer", &RunConfig::n_layer},
      {"model", "n_head", &RunConfig::n_head},
      {"model", "n_embd", &RunConfig::n_embd},
      {"model", "n_ctx", &RunConfig::n_ctx},
      {"model", "vocab_size", &RunConfig::vocab_size},
      {"model", "init_from", &RunConfig::init_from},
      {"data", "data", &RunConfig::data},
      {"data", "val_data", &RunConfig::val_data},
      {"data", "variables", &RunConfig::variables},
      {"data", "balance", &RunConfig::balance},
      {"data", "lead_hours", &RunConfig::lead_hours},
      {"train", "seq_len", &RunConfig::seq_len},
      {"train", "global_batch", &RunConfig::global_batch},
      {"train", "micro_batch", &RunConfig::micro_batch},
      {"train", "steps", &RunConfig::steps},
      {"train", "lr", &RunConfig::lr},
      {"train", "min_lr_ratio", &RunConfig::min_lr_ratio},
      {"train", "warmup_steps", &RunConfig::warmup_steps},
      {"train", "lr_decay_steps", &RunConfig::lr_decay_steps},
      {"train", "weight_decay", &RunConfig::weight_decay},
      {"train", "beta1", &RunConfig::beta1},
      {"train", "beta2", &RunConfig::beta2},
      {"train", "eps", &RunConfig::eps},
      {"train", "grad_clip", &RunConfig::grad_clip},
      {"train", "seed", &RunConfig::seed},
      {"train", "threads", &RunConfig::threads},
      {"train", "head_chunk", &RunConfig::head_chunk},
      {"train", "recompute", &RunConfig::recompute},
      {"train", "recompute_layers", &RunConfig::recompute_layers},
      {"train", "precision", &RunConfig::precision},
      {"train", "loss_scale", &RunConfig::loss_scale},
      {"train", "initial_loss_scale", &RunConfig::initial_loss_scale},
      {"train", "loss_scale_window", &RunConfig::loss_scale_window},
      {"train", "min_loss_scale", &RunConfig::min_loss_scale},
      {"train", "spike_policy", &RunConfig::spike_policy},
      {"train", "spike_zscore", &RunConfig::spike_zscore},
      {"train", "spike_window", &RunConfig::spike_window},
      {"train", "spike_min_steps", &RunConfig::spike_min_steps},
      {"precision", "matmul", &RunConfig::matmul},
      {"precision", "fp32_kernel", &RunConfig::fp32_kernel},
      {"precision", "wires", &RunConfig::wires},
      {"precision", "reduce_dtype", &RunConfig::reduce_dtype},
      {"parallel", "tp", &RunConfig::tp},
      {"parallel", "pp", &RunConfig::pp},
      {"parallel", "dp", &RunConfig::dp},
      {"parallel", "dp_shard", &RunConfig::dp_shard},
      {"parallel", "dp_replicate", &RunConfig::dp_replicate},
      {"parallel", "order", &RunConfig::order},
      {"parallel", "zero", &RunConfig::zero},
      {"parallel", "sequence_parallel", &RunConfig::sequence_parallel},
      {"parallel", "schedule", &RunConfig::schedule},
      {"parallel", "virtual_stages", &RunConfig::virtual_stages},
      {"parallel", "bucket_mb", &RunConfig::bucket_mb},
      {"parallel", "prefetch", &RunConfig::prefetch},
      {"parallel", "comm_timeout", &RunConfig::comm_timeout},
      {"zero", "quantized_weights", &RunConfig::quantized_weights},
      {"zero", "hpz_partition_size", &RunConfig::hpz_partition_size},
      {"zero", "quantized_gradients", &RunConfig::quantized_gradients},
      {"zero", "hierarchy", &RunConfig::hierarchy},
      {"zero", "block_size", &RunConfig::block_size},
      {"zero", "weight_bits", &RunConfig::weight_bits},
      {"zero", "gradient_bits", &RunConfig::gradient_bits},
      {"zero", "error_feedback", &RunConfig::error_feedback},
      {"compression", "dp", &RunConfig::compression_dp},
      {"compression", "params", &RunConfig::compression_params},
      {"compression", "tp", &RunConfig::compression_tp},
      {"compression", "pp", &RunConfig::compression_pp},
      {"compression", "error_feedback", &RunConfig::compression_error_feedback},
      {"compression", "block_size", &RunConfig::compression_block_size},
      {"eval", "val_every", &RunConfig::val_every},
      {"eval", "val_batches", &RunConfig::val_batches},
      {"eval", "tasks", &RunConfig::tasks},
      {"eval", "tasks_every", &RunConfig::tasks_every},
      {"eval", "fewshot", &RunConfig::fewshot},
      {"eval", "tasks_limit", &RunConfig::tasks_limit},
      {"eval", "tasks_seed", &RunConfig::tasks_seed},
      {"eval", "tokenizer", &RunConfig::tokenizer},
      {"checkpoint", "ckpt_every", &RunConfig::ckpt_every},
      {"checkpoint", "keep_last", &RunConfig::keep_last},
      {"checkpoint", "on_signal", &RunConfig::on_signal},
      {"run", "out", &RunConfig::out},
      {"run", "log_every", &RunConfig::log_every},
      {"run", "trace", &RunConfig::trace},
      {"run", "ranks_per_node", &RunConfig::ranks_per_node},
      {"run", "system", &RunConfig::system},
      {"run", "memory_check", &RunConfig::memory_check},
      {"run", "backend", &RunConfig::backend},
      {"run", "comm", &RunConfig::comm},
      {"sample", "sample_tokens", &RunConfig::sample_tokens},
      {"sample", "sample_prompt", &RunConfig::sample_prompt},
      {"sample", "temperature", &RunConfig::temperature},
      {"sample", "top_k", &RunConfig::top_k},
  };
  return k;
}

const Key* find_key(const std::string& name) {
  // "section.key", "section_key" (--zero-quantized-weights) or a bare key: the first key of that
  // name (tp is parallel.tp; [compression]'s keys, which share names with others, need their
  // section: compression.tp).
  const std::string_view n = name;
  for (const Key& k : keys()) {
    const std::string_view section = k.section, key = k.name;
    if (n == key) return &k;
    if (n.size() == section.size() + 1 + key.size() && n.starts_with(section) && n.ends_with(key) &&
        (n[section.size()] == '.' || n[section.size()] == '_')) {
      return &k;
    }
  }
  return nullptr;
}

std::string known_keys_text() { return fmt::format("{}", fmt::join(run_config_keys(), ", ")); }

const char* type_name(const Field& f) {
  if (std::holds_alternative<int64_t RunConfig::*>(f)) return "an integer";
  if (std::holds_alternative<double RunConfig::*>(f)) return "a number";
  if (std::holds_alternative<bool RunConfig::*>(f)) return "true or false";
  if (std::holds_alternative<IntList RunConfig::*>(f)) return "a list of integers";
  if (std::holds_alternative<StrList RunConfig::*>(f)) return "a list of strings";
  return "a string";
}

std::string node_type_name(const toml::node& n) {
  std::ostringstream os;
  os << n.type();
  std::string text;
  n.visit([&](auto&& v) {
    std::ostringstream vs;
    vs << v;
    text = vs.str();
  });
  return fmt::format("{} {}", os.str(), text);
}

// A family setting's value as written: a string as is, a number or boolean as its TOML text.
std::string setting_text(const toml::node& node, const std::string& where, const std::string& name) {
  if (auto s = node.value_exact<std::string>()) return *s;
  if (auto b = node.value_exact<bool>()) return *b ? "true" : "false";
  if (auto i = node.value_exact<int64_t>()) return std::to_string(*i);
  if (auto d = node.value_exact<double>()) return fmt::format("{}", *d);
  throw_input("{}: [model] setting '{}' must be a string, number or boolean, got {}", where, name, node_type_name(node));
}

void set_from_toml(RunConfig& cfg, const Key& k, const toml::node& node, const std::string& where) {
  const std::string full = fmt::format("{}.{}", k.section, k.name);
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(cfg.*member)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          auto v = node.value_exact<int64_t>();
          if (!v) throw_input("{}: key '{}' must be {}, got {}", where, full, type_name(k.field), node_type_name(node));
          cfg.*member = *v;
        } else if constexpr (std::is_same_v<T, bool>) {
          auto v = node.value_exact<bool>();
          if (!v) throw_input("{}: key '{}' must be {}, got {}", where, full, type_name(k.field), node_type_name(node));
          cfg.*member = *v;
        } else if constexpr (std::is_same_v<T, IntList>) {
          const toml::array* arr = node.as_array();
          if (!arr) throw_input("{}: key '{}' must be {}, got {}", where, full, type_name(k.field), node_type_name(node));
          IntList out;
          for (const toml::node& e : *arr) {
            auto v = e.value_exact<int64_t>();
            if (!v) throw_input("{}: key '{}' must be {}, got an element {}", where, full, type_name(k.field), node_type_name(e));
            out.push_back(*v);
          }
          cfg.*member = out;
        } else if constexpr (std::is_same_v<T, StrList>) {
          const toml::array* arr = node.as_array();
          if (!arr) throw_input("{}: key '{}' must be {}, got {}", where, full, type_name(k.field), node_type_name(node));
          StrList out;
          for (const toml::node& e : *arr) {
            auto v = e.value_exact<std::string>();
            if (!v) throw_input("{}: key '{}' must be {}, got an element {}", where, full, type_name(k.field), node_type_name(e));
            out.push_back(*v);
          }
          cfg.*member = out;
        } else if constexpr (std::is_same_v<T, double>) {
          auto v = node.value<double>();  // integers are accepted as numbers
          if (!v || node.is_boolean()) throw_input("{}: key '{}' must be {}, got {}", where, full, type_name(k.field), node_type_name(node));
          cfg.*member = *v;
        } else {
          auto v = node.value_exact<std::string>();
          if (!v) throw_input("{}: key '{}' must be {}, got {}", where, full, type_name(k.field), node_type_name(node));
          cfg.*member = *v;
        }
      },
      k.field);
}

void set_from_string(RunConfig& cfg, const Key& k, const std::string& text) {
  const std::string full = fmt::format("--{}", k.name);
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(cfg.*member)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          int64_t v = 0;
          auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
          if (ec != std::errc() || p != text.data() + text.size()) {
            throw_input("option {} must be an integer, got '{}'", full, text);
          }
          cfg.*member = v;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (text == "true" || text == "1" || text == "yes") {
            cfg.*member = true;
          } else if (text == "false" || text == "0" || text == "no") {
            cfg.*member = false;
          } else {
            throw_input("option {} must be true or false, got '{}'", full, text);
          }
        } else if constexpr (std::is_same_v<T, IntList>) {
          // "2,8", "[2, 8]" or "" (empty list)
          std::string t = text;
          if (!t.empty() && t.front() == '[') t.erase(0, 1);
          if (!t.empty() && t.back() == ']') t.pop_back();
          IntList out;
          std::stringstream ss(t);
          std::string item;
          while (std::getline(ss, item, ',')) {
            const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
            if (b == std::string::npos) throw_input("option {} must be a list of integers like 2,8, got '{}'", full, text);
            item = item.substr(b, e - b + 1);
            int64_t v = 0;
            auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
            if (ec != std::errc() || p != item.data() + item.size()) {
              throw_input("option {} must be a list of integers like 2,8, got '{}'", full, text);
            }
            out.push_back(v);
          }
          cfg.*member = out;
        } else if constexpr (std::is_same_v<T, StrList>) {
          // "a.jsonl,b.jsonl" or "" (empty list); each UTF-8 (config.toml reloads it)
          StrList out;
          std::stringstream ss(text);
          std::string item;
          while (std::getline(ss, item, ',')) {
            if (item.empty()) throw_input("option {} must be a comma-separated list like a.jsonl,b.jsonl, got '{}'", full, text);
            if (!is_valid_utf8(item)) throw_input("option {} must be UTF-8 text, got '{}'", full, item);
            out.push_back(item);
          }
          cfg.*member = out;
        } else if constexpr (std::is_same_v<T, double>) {
          try {
            size_t used = 0;
            double v = std::stod(text, &used);
            if (used != text.size()) throw std::invalid_argument("trailing");
            cfg.*member = v;
          } catch (const std::exception&) {
            throw_input("option {} must be a number, got '{}'", full, text);
          }
        } else {
          // config.toml (to_toml) must reload to the same value, and TOML strings are UTF-8.
          if (!is_valid_utf8(text)) {
            const size_t at = utf8_invalid_offset(text);
            throw_input("option {} must be UTF-8 text, byte {} is 0x{:02X}", full, at,
                        static_cast<unsigned char>(text[at]));
          }
          cfg.*member = text;
        }
      },
      k.field);
}

// A config path that names a folder, or a file this process cannot read, is refused before
// TOML sees it (toml++ reads a folder as an empty document).
void check_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw_input("config {} is a folder, not a config file (give the .toml file, e.g. configs/tiny.toml)", path);
  }
  if (!std::filesystem::exists(path, ec)) throw_input("config file {} does not exist", path);
  if (!std::ifstream(path)) throw_input("config file {} cannot be read (permissions?)", path);
}

// init_from: the model of the checkpoint's config.json; a shape key of the run config that
// disagrees with it is an error naming both values.
ModelConfig init_from_model_config(const RunConfig& cfg) {
  ModelConfig mc;
  try {
    mc = load_checkpoint_config(cfg.init_from);
  } catch (const InputError& e) {
    throw_input("init_from: {}", e.what());
  }
  const std::pair<const char*, std::pair<int64_t, int64_t>> shape[] = {
      {"n_layer", {cfg.n_layer, mc.n_layer}}, {"n_head", {cfg.n_head, mc.n_head}},
      {"n_embd", {cfg.n_embd, mc.n_embd}},    {"n_ctx", {cfg.n_ctx, mc.n_ctx}},
      {"vocab_size", {cfg.vocab_size, mc.vocab_size}}};
  for (const auto& [key, v] : shape) {
    if (v.first != 0 && v.first != v.second) {
      throw_input("{} = {}, but init_from {} holds a model with {} = {} (leave {} unset to take the checkpoint's)", key,
                  v.first, cfg.init_from, key, v.second, key);
    }
  }
  return mc;
}

// Every number key is finite: TOML's inf/nan would otherwise pass range checks written as
// "x < 0" and reach the optimizer or a cast to an integer.
void check_finite_numbers(const RunConfig& cfg) {
  for (const Key& k : keys()) {
    if (const auto* m = std::get_if<double RunConfig::*>(&k.field); m != nullptr && !std::isfinite(cfg.**m)) {
      throw_input("{}.{} must be a finite number, got {}", k.section, k.name, cfg.**m);
    }
  }
}

// The integer keys that the engine stores as int (model shape, layout sizes, threads, sampling):
// a value above INT_MAX would be truncated silently.
void check_int_keys(const RunConfig& cfg) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  static const std::vector<const Key*> int_keys = [] {
    std::vector<const Key*> out;
    for (const char* name : {"n_layer", "n_head", "n_embd", "n_ctx", "vocab_size", "seq_len", "tp", "pp", "dp",
                             "dp_shard", "dp_replicate", "virtual_stages", "prefetch", "ranks_per_node",
                             "recompute_layers", "zero", "top_k", "sample_tokens", "micro_batch", "global_batch"}) {
      out.push_back(find_key(name));
    }
    return out;
  }();
  for (const Key* k : int_keys) {
    const int64_t v = cfg.*std::get<int64_t RunConfig::*>(k->field);
    if (v > kIntMax) throw_input("{}.{} = {} is too large (at most {})", k->section, k->name, v, kIntMax);
  }
  // The MLP width 4 x n_embd is an int too.
  if (cfg.n_embd > kIntMax / 4) throw_input("model.n_embd = {} is too large (at most {})", cfg.n_embd, kIntMax / 4);
  check_thread_count(cfg.threads, "threads");
}

// a * b * ..., or InputError naming the factors when the product leaves int64.
int64_t checked_product(std::initializer_list<std::pair<const char*, int64_t>> factors, const char* what) {
  int64_t p = 1;
  std::string names;
  bool overflow = false;
  for (const auto& [name, v] : factors) {
    names += fmt::format("{}{} {}", names.empty() ? "" : " x ", name, v);
    overflow = overflow || __builtin_mul_overflow(p, v, &p);
  }
  if (overflow) throw_input("{} = {} overflows a 64-bit integer; reduce these sizes", what, names);
  return p;
}

// The products of sizes that weft computes in int64 (counts of tokens, elements, parameters).
void check_size_products(const RunConfig& cfg, const ModelConfig& mc) {
  const int64_t T = cfg.seq(), C = mc.n_embd, V = mc.padded_vocab, L = mc.n_layer;
  checked_product({{"steps", cfg.steps}, {"global_batch", cfg.global_batch}, {"seq_len", T}}, "tokens of the run");
  checked_product({{"val_batches", cfg.val_batches}, {"global_batch", cfg.global_batch}, {"seq_len", T}},
                  "validation tokens");
  checked_product({{"global_batch", cfg.global_batch}, {"seq_len", T}, {"n_embd", C}, {"n_layer", L}, {"bytes", 64}},
                  "activation bytes of a step");
  checked_product({{"global_batch", cfg.global_batch}, {"seq_len", T}, {"padded vocab", V}, {"bytes", 8}},
                  "logit bytes of a step");
  checked_product({{"global_batch", cfg.global_batch}, {"n_head", mc.n_head}, {"seq_len", T}, {"seq_len", T}, {"bytes", 8}},
                  "attention-score bytes of a step");
  checked_product({{"n_layer", L}, {"n_embd", C}, {"n_embd", C}, {"bytes per parameter", 12 * 20}}, "layer parameter bytes");
  checked_product({{"padded vocab", V}, {"n_embd", C}, {"bytes per parameter", 20}}, "embedding parameter bytes");
  checked_product({{"n_ctx", mc.n_ctx}, {"n_embd", C}, {"bytes per parameter", 20}}, "position parameter bytes");
}

// The number keys with more than a sign to check: what the optimizer stores as float, and
// seconds and MiB converted to integers.
void check_number_ranges(const RunConfig& cfg) {
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  if (!(cfg.lr > 0 && cfg.lr <= kFloatMax)) throw_input("lr must be positive (at most {} in float), got {}", kFloatMax, cfg.lr);
  if (cfg.min_lr_ratio < 0 || cfg.min_lr_ratio > 1) throw_input("min_lr_ratio must lie in [0, 1], got {}", cfg.min_lr_ratio);
  if (cfg.weight_decay < 0 || cfg.weight_decay > kFloatMax) {
    throw_input("weight_decay must be >= 0, got {}", cfg.weight_decay);
  }
  if (!(cfg.beta1 >= 0 && cfg.beta1 < 1) || !(cfg.beta2 >= 0 && cfg.beta2 < 1)) {
    throw_input("beta1 {} and beta2 {} must lie in [0, 1)", cfg.beta1, cfg.beta2);
  }
  // Adam divides by sqrt(v) + eps: an eps that rounds to 0 in float gives 0/0 for untouched rows.
  if (!(static_cast<float>(cfg.eps) > 0) || cfg.eps > kFloatMax) {
    throw_input("eps must be positive (at least {} in float), got {}", std::numeric_limits<float>::denorm_min(), cfg.eps);
  }
  if (cfg.grad_clip < 0) throw_input("grad_clip must be >= 0 (0: off), got {}", cfg.grad_clip);
  if (cfg.loss_scale < 0) throw_input("loss_scale must be >= 0 (0: dynamic for fp16, none otherwise), got {}", cfg.loss_scale);
  if (!(cfg.initial_loss_scale > 0) || !(cfg.min_loss_scale > 0) || cfg.min_loss_scale > cfg.initial_loss_scale) {
    throw_input("initial_loss_scale {} and min_loss_scale {} must be positive with min <= initial", cfg.initial_loss_scale,
                cfg.min_loss_scale);
  }
  if (!(cfg.bucket_mb > 0 && cfg.bucket_mb <= kMaxBucketMb)) {
    throw_input("bucket_mb must lie in (0, {}], got {}", kMaxBucketMb, cfg.bucket_mb);
  }
  if (cfg.comm_timeout < 0 || cfg.comm_timeout > kMaxCommTimeout) {
    throw_input("comm_timeout must lie in [0, {}] seconds (0: never), got {}", kMaxCommTimeout, cfg.comm_timeout);
  }
  if (!(cfg.temperature > 0)) throw_input("temperature must be positive, got {}", cfg.temperature);
}

// The [zero] keys' own ranges; what they require of the layout (ZeRO-3, sizes that divide the
// data-parallel group) is checked with the world size (train/engine_config.cc).
void validate_zeropp_keys(const RunConfig& cfg) {
  if (cfg.hpz_partition_size < 1 || cfg.hpz_partition_size > (1 << 20)) {
    throw_input("zero.hpz_partition_size must lie in [1, {}] (1: off), got {}", 1 << 20, cfg.hpz_partition_size);
  }
  if (cfg.block_size < 1 || cfg.block_size > (1 << 24)) {
    throw_input("zero.block_size must lie in [1, {}] elements, got {}", 1 << 24, cfg.block_size);
  }
  for (const auto& [name, bits] : {std::pair{"weight_bits", cfg.weight_bits}, std::pair{"gradient_bits", cfg.gradient_bits}}) {
    if (bits != 8 && bits != 4) throw_input("zero.{} must be 8 or 4, got {}", name, bits);
  }
  for (size_t i = 0; i < cfg.hierarchy.size(); ++i) {
    const int64_t v = cfg.hierarchy[i];
    if (v < 2 || v > (1 << 24)) {
      throw_input("zero.hierarchy [{}]: every level must hold 2 to {} data-parallel ranks, got {} at position {}",
                  fmt::join(cfg.hierarchy, ", "), 1 << 24, v, i);
    }
    if (i > 0 && (v <= cfg.hierarchy[i - 1] || v % cfg.hierarchy[i - 1] != 0)) {
      throw_input("zero.hierarchy [{}]: each level must be a larger multiple of the one inside it, {} is not of {}",
                  fmt::join(cfg.hierarchy, ", "), v, cfg.hierarchy[i - 1]);
    }
  }
  if (cfg.error_feedback && !cfg.quantized_gradients) {
    throw_input("zero.error_feedback needs zero.quantized_gradients (it carries the gradient quantization's error)");
  }
}

// The [compression] keys' own values; what they require of the layout and the backend is
// checked with them (train/engine_config.cc: run_compression).
void validate_compression_keys(const RunConfig& cfg) {
  if (cfg.compression_block_size < 1 || cfg.compression_block_size > (1 << 24)) {
    throw_input("compression.block_size must lie in [1, {}] values, got {}", 1 << 24, cfg.compression_block_size);
  }
  const CodecSpec dp = parse_codec(cfg.compression_dp, "compression.dp", cfg.compression_block_size);
  parse_codec(cfg.compression_params, "compression.params", cfg.compression_block_size);
  parse_codec(cfg.compression_tp, "compression.tp", cfg.compression_block_size);
  parse_codec(cfg.compression_pp, "compression.pp", cfg.compression_block_size);
  if (cfg.compression_error_feedback && dp.lossless()) {
    throw_input("compression.error_feedback needs a lossy compression.dp codec (it carries that codec's error to the "
                "next step), got compression.dp = \"{}\"", cfg.compression_dp);
  }
}

// [eval] tasks: in-context-learning tasks need a model that gives token logits.
void validate_task_keys(const RunConfig& cfg, const ModelConfig& mc) {
  if (cfg.tasks_every < 0 || cfg.fewshot < 0 || cfg.tasks_limit < 0 || cfg.tasks_seed < 0) {
    throw_input("tasks_every {}, fewshot {}, tasks_limit {} and tasks_seed {} must be >= 0", cfg.tasks_every,
                cfg.fewshot, cfg.tasks_limit, cfg.tasks_seed);
  }
  if (cfg.fewshot > std::numeric_limits<int>::max()) throw_input("fewshot {} is too large", cfg.fewshot);
  if (cfg.tasks.empty()) return;
  if (!mc.capabilities().generation) {
    throw_input("eval.tasks: model '{}' is a {} model, which gives no token logits to score continuations with: remove "
                "the tasks", mc.name, mc.capabilities().family);
  }
  for (const std::string& t : cfg.tasks) {
    if (t.empty()) throw_input("eval.tasks: a task file name is empty");
  }
}

}  // namespace

void check_thread_count(int64_t threads, const std::string& name) {
  // More threads than this is a typo, not a machine: starting them would exhaust the process.
  if (threads < 0 || threads > kMaxThreads) {
    throw_input("{} = {} must lie in [0, {}] (0: all cores)", name, threads, kMaxThreads);
  }
}

bool run_config_key_is_bool(const std::string& name) {
  const Key* k = find_key(name);
  return k != nullptr && std::holds_alternative<bool RunConfig::*>(k->field);
}

std::vector<std::string> run_config_keys() {
  std::vector<std::string> out;
  for (const Key& k : keys()) out.push_back(fmt::format("{}.{}", k.section, k.name));
  return out;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides) {
  RunConfig cfg;
  if (!path.empty()) {
    check_config_file(path);
    toml::table tbl;
    try {
      tbl = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      const auto& src = e.source();
      if (!src.begin) throw_input("{}: cannot read the config: {}", path, e.description());
      throw_input("{}:{}:{}: invalid TOML: {}", path, src.begin.line, src.begin.column, e.description());
    }
    for (auto&& [section_key, section_node] : tbl) {
      const std::string section(section_key.str());
      const toml::table* sec = section_node.as_table();
      if (!sec) {
        throw_input("{}: top-level key '{}' is not a [section]; keys live in sections ({})", path, section, known_keys_text());
      }
      for (auto&& [name_key, node] : *sec) {
        const std::string name(name_key.str());
        const Key* k = find_key(section + "." + name);
        if (!k && section == "model") {  // the family's own setting: model_config checks it
          cfg.model_settings[name] = setting_text(node, path, name);
          continue;
        }
        if (!k) {
          throw_input("{}: unknown key '{}.{}' (known keys: {})", path, section, name, known_keys_text());
        }
        set_from_toml(cfg, *k, node, path);
      }
    }
  }
  for (const auto& [name, value] : overrides) set_run_config_key(cfg, name, value);
  cfg.validate();
  return cfg;
}

void set_run_config_key(RunConfig& cfg, const std::string& name, const std::string& value) {
  const Key* k = find_key(name);
  if (!k && name.rfind("model.", 0) == 0 && name.size() > 6) {  // a family setting (model_config checks it)
    cfg.model_settings[name.substr(6)] = value;
    return;
  }
  if (!k) throw_input("unknown option --{} (config keys: {})", name, known_keys_text());
  set_from_string(cfg, *k, value);
}

ModelConfig RunConfig::model_config() const {
  if (!init_from.empty()) {
    if (!model_settings.empty()) {
      throw_input("init_from {} fixes the model; [model] setting '{}' cannot change it", init_from,
                  model_settings.begin()->first);
    }
    return init_from_model_config(*this);
  }
  ModelConfig base = model_preset(model);
  check_int_keys(*this);  // the overrides below are stored as int
  if (n_layer < 0 || n_head < 0 || n_embd < 0 || n_ctx < 0 || vocab_size < 0) {
    throw_input("model shape overrides must be >= 0 (0 keeps the preset): n_layer {}, n_head {}, n_embd {}, n_ctx {}, vocab_size {}",
                n_layer, n_head, n_embd, n_ctx, vocab_size);
  }
  const ModelConfig shaped = base.family->with_overrides(
      base, {.n_layer = n_layer, .n_head = n_head, .n_embd = n_embd, .n_ctx = n_ctx, .vocab_size = vocab_size});
  return shaped.family->with_settings(shaped, model_settings);
}

int64_t RunConfig::seq() const { return seq(model_config()); }

int64_t RunConfig::seq(const ModelConfig& mc) const {
  const int64_t fixed = fixed_positions(mc);
  return fixed > 0 ? fixed : seq_len > 0 ? seq_len : mc.n_ctx;
}

void RunConfig::validate() const {
  // The layout keys (tp, pp, dp, zero, global/micro batch, sequence_parallel, schedule,
  // virtual_stages, recompute_layers) are checked with the world size by the layout rules
  // (validate_run_layout, train/run_layout.h), the same ones the planner applies. What each
  // key must be is listed in docs/configuration.md ("What is checked").
  check_finite_numbers(*this);
  check_int_keys(*this);
  check_number_ranges(*this);
  ModelConfig mc = model_config();
  validate_task_keys(*this, mc);
  if (seq_len < 0) throw_input("seq_len must be >= 0 (0: the model context), got {}", seq_len);
  if (balance != "count" && balance != "cost") throw_input("data.balance must be 'count' or 'cost', got '{}'", balance);
  if (balance != "count" && std::string_view(mc.capabilities().data_source) != "graphs") {
    throw_input("data.balance '{}' deals graphs to ranks by their cost; model '{}' ({}) reads {} of equal size: remove it",
                balance, mc.name, mc.capabilities().family, mc.capabilities().data_source);
  }
  if (const int64_t fixed = fixed_positions(mc); fixed > 0 && seq_len != 0 && seq_len != fixed) {
    throw_input("seq_len {} does not apply to the {} model '{}': its samples have {} positions (leave seq_len 0)",
                seq_len, mc.capabilities().family, mc.name, fixed);
  }
  if (lead_hours.empty()) throw_input("lead_hours must list at least one lead time (hours)");
  for (int64_t h : lead_hours) {
    if (h <= 0) throw_input("lead_hours must be positive, got {}", h);
  }
  if (!mc.capabilities().generation && sample_tokens > 0) {
    throw_input("sample_tokens {}: {} models do not generate text", sample_tokens, mc.capabilities().family);
  }
  if (seq() > mc.n_ctx) {
    throw_input("seq_len {} is longer than the context of model '{}' ({})", seq(), mc.name, mc.n_ctx);
  }
  if (steps < 1) throw_input("steps must be >= 1 (a run of no step trains nothing), got {}", steps);
  if (warmup_steps < 0 || lr_decay_steps < 0) {
    throw_input("warmup_steps {} and lr_decay_steps {} must be >= 0", warmup_steps, lr_decay_steps);
  }
  if (seed < 0) throw_input("seed must be >= 0, got {}", seed);
  if (head_chunk < 0) throw_input("head_chunk must be >= 0, got {}", head_chunk);
  parse_recompute(recompute);  // names the valid modes
  parse_precision(precision);
  parse_matmul_mode(matmul);
  if (wires != "storage" && wires != "fp32") throw_input("unknown wires '{}', expected one of: storage, fp32", wires);
  if (reduce_dtype != "fp32" && reduce_dtype != "bf16") {
    throw_input("unknown reduce_dtype '{}', expected one of: fp32, bf16", reduce_dtype);
  }
  if (!cpu_fp32_kernel_known(fp32_kernel)) {
    throw_input("unknown fp32_kernel '{}', expected one of: {} (or \"\": the system file's)", fp32_kernel,
                kCpuFp32Kernels);
  }
  if (loss_scale_window < 1) throw_input("loss_scale_window must be >= 1, got {}", loss_scale_window);
  validate_spike_keys(*this);
  if (val_every < 0 || val_batches < 0) throw_input("val_every {} and val_batches {} must be >= 0", val_every, val_batches);
  if (ckpt_every < 0 || keep_last < 0) throw_input("ckpt_every {} and keep_last {} must be >= 0", ckpt_every, keep_last);
  if (log_every <= 0) throw_input("log_every must be positive, got {}", log_every);
  if (sample_tokens < 0) throw_input("sample_tokens must be >= 0, got {}", sample_tokens);
  if (top_k < 0) throw_input("top_k must be >= 0 (0: no cut), got {}", top_k);
  if (out.empty()) throw_input("out (the run folder) must not be empty");
  if (prefetch < 0) throw_input("prefetch must be >= 0, got {}", prefetch);
  if (ranks_per_node < 0) {
    throw_input("ranks_per_node must be >= 0 (0: the real nodes), got {}", ranks_per_node);
  }
  if (data.empty()) throw_input("data (the shard folder) must not be empty");
  validate_zeropp_keys(*this);
  validate_compression_keys(*this);
  if (memory_check != "on" && memory_check != "warn" && memory_check != "off") {
    throw_input("memory_check must be on, warn or off, got '{}'", memory_check);
  }
  check_size_products(*this, mc);
  check_backend_name(backend);
  if (!comm.empty()) check_device_comm(comm, backend);
}

std::string RunConfig::to_toml() const {
  std::ostringstream os;
  std::string section;
  for (const Key& k : keys()) {
    if (section != k.section) {
      section = k.section;
      os << (os.tellp() > 0 ? "\n" : "") << "[" << section << "]\n";
    }
    os << k.name << " = ";
    std::visit(
        [&](auto member) {
          using T = std::remove_cvref_t<decltype(this->*member)>;
          if constexpr (std::is_same_v<T, std::string>) {
            os << toml::value<std::string>(this->*member);
          } else if constexpr (std::is_same_v<T, bool>) {
            os << (this->*member ? "true" : "false");
          } else if constexpr (std::is_same_v<T, IntList>) {
            os << "[" << fmt::format("{}", fmt::join(this->*member, ", ")) << "]";
          } else if constexpr (std::is_same_v<T, StrList>) {
            os << "[";
            for (size_t i = 0; i < (this->*member).size(); ++i) os << (i ? ", " : "") << toml::value<std::string>((this->*member)[i]);
            os << "]";
          } else if constexpr (std::is_same_v<T, double>) {
            os << fmt::format("{}", this->*member);
            if (fmt::format("{}", this->*member).find_first_of(".eEn") == std::string::npos) os << ".0";
          } else {
            os << this->*member;
          }
        },
        k.field);
    os << "\n";
    if (std::string_view(k.name) == "init_from") {
      for (const auto& [name, value] : model_settings) os << name << " = " << toml::value<std::string>(value) << "\n";
    }
  }
  return os.str();
}

}  // namespace weft
