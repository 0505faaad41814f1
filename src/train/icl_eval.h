// In-context-learning evaluation (issue 36 item 4): multiple-choice, schema and
// language-modelling tasks (data/icl_tasks.h) scored by the log-likelihood of each
// continuation, as lm-evaluation-harness's `loglikelihood` requests do:
//   - a request is (context, target_delimiter + continuation) after the item's few-shot
//     examples; trailing whitespace of the context moves to the continuation; the continuation's
//     tokens are those of encode(context + continuation) after encode(context)'s (an empty
//     context: the prefix token, <|endoftext|>); the input is cut from the left to the model's
//     context n_ctx; the log-likelihood is the sum of log-softmax of the continuation's tokens;
//   - acc: the option with the largest log-likelihood is gold (the first of equal ones);
//     acc_norm (multiple choice): the largest log-likelihood per character (code point) of the
//     choice's text; language modelling: right when every continuation token is the argmax.
// Runs in any layout: the requests are dealt round-robin over the data-parallel replicas, one
// sequence per forward pass, and their scores summed over dp (each made on one replica:
// exact), so every layout gives the one-rank results up to its products' rounding.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/icl_tasks.h"

namespace weft {

class Engine;

struct IclOptions {
  int fewshot = 0;                          // examples before each item (other items of the file)
  uint64_t seed = 1234;                     // the draw of the few-shot examples
  int64_t limit = 0;                        // items scored, the file's first (0: all)
  std::string target_delimiter = " ";       // between a context and its continuation
  std::string fewshot_delimiter = "\n\n";   // after each few-shot example
};

// The tokenizer the requests are encoded with: text -> ids, and the id put before an empty
// context (GPT-2: <|endoftext|>).
struct IclEncoder {
  std::function<std::vector<int32_t>(std::string_view)> encode;
  int32_t prefix_token = 0;
};

// One scored continuation: the model reads `input`; the log-probabilities of `targets` at its
// last targets.size() positions are summed.
struct IclRequest {
  std::vector<int32_t> input;
  std::vector<int32_t> targets;
};

struct IclScore {
  double loglikelihood = 0;
  bool greedy = false;  // every target token was the argmax of its position's logits
};

struct IclTaskResult {
  std::string name, format;
  int64_t items = 0, requests = 0;
  int fewshot = 0;
  double acc = 0, acc_stderr = 0;
  bool has_norm = false;  // multiple choice: acc_norm
  double acc_norm = 0, acc_norm_stderr = 0;
  double seconds = 0;
  std::vector<IclScore> scores;  // every request's, in item and option order
};

// The items' few-shot examples: `k` other items of the task drawn for item i (the same for any
// layout and run: a hash of seed and i).
std::vector<int64_t> icl_fewshot_indices(int64_t items, int64_t i, int k, uint64_t seed);
// Item i's (context, continuation) per option, the few-shot examples and delimiters included.
std::vector<std::pair<std::string, std::string>> icl_item_texts(const IclTask& task, int64_t i, const IclOptions& o);
// lm-evaluation-harness's encoding of one (context, continuation) pair, cut to n_ctx tokens.
// InputError when the continuation alone does not fit n_ctx.
IclRequest icl_request(const std::string& context, const std::string& continuation, const IclEncoder& enc,
                       int64_t n_ctx);
// The score of n targets from their positions' logits (n rows of V).
IclScore icl_score(const float* logits, int64_t V, const int32_t* targets, int64_t n);
// Accuracy from the scores of every request of the first `items` items, in item and option
// order.
IclTaskResult icl_accuracy(const IclTask& task, int64_t items, const std::vector<IclScore>& scores);

// Every request of a task's first `items` items (o.limit), encoded: InputError naming the file and
// the item whose continuation does not fit n_ctx.
struct IclRequests {
  int64_t items = 0;
  std::vector<IclRequest> requests;  // in item and option order
};
IclRequests icl_requests(const IclTask& task, const IclEncoder& enc, const IclOptions& o, int64_t n_ctx);

// Scores a task on an engine built for generation-size sequences (any layout; collective over
// the grid). Every rank returns the same result.
IclTaskResult evaluate_icl_task(Engine& engine, const IclTask& task, const IclEncoder& enc, const IclOptions& o);
// The same for requests encoded before (icl_requests with the same options): weft train's tasks,
// encoded once and scored many times.
IclTaskResult score_icl_requests(Engine& engine, const IclTask& task, const IclRequests& prepared, const IclOptions& o);

// One task's scores as JSON: task, format, items, requests, fewshot, acc, acc_stderr, acc_norm and
// acc_norm_stderr (multiple choice), seconds.
nlohmann::json icl_result_json(const IclTaskResult& r);

}  // namespace weft
