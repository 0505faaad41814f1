// In-context-learning task files (issue 36 item 4): the multiple-choice, schema and
// language-modelling items that zero- and few-shot evaluation scores by the log-likelihood of
// continuations (lm-evaluation-harness's `loglikelihood` requests; LLM Foundry's ICL tasks).
//
// Formats read, one JSON object a line (the kind is decided by the first line's keys, and every
// line must have them):
//   HellaSwag (hellaswag_val.jsonl as llm.c and lm-evaluation-harness read it): ctx_a, ctx_b
//     (or ctx), endings, label, activity_label; rendered as lm-evaluation-harness's hellaswag
//     task does (query "activity_label: ctx_a Ctx_b" and the endings, through its preprocess).
//   LLM Foundry multiple_choice: query, choices, gold.
//   LLM Foundry schema (Winograd, Winogrande): context_options, continuation, gold.
//   LLM Foundry language_modeling (LAMBADA): context, continuation; right when the model's
//     greedy tokens are the continuation's.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

enum class IclKind { kMultipleChoice, kSchema, kLanguageModeling };
const char* icl_kind_name(IclKind k);

// One item. Multiple choice: one context, the choices as continuations. Schema: the context
// options, one continuation. Language modelling: one of each. `gold` indexes the choices (or
// the context options); 0 for language modelling.
struct IclItem {
  std::vector<std::string> contexts;
  std::vector<std::string> continuations;
  int gold = 0;
};

struct IclTask {
  std::string name;    // the file's stem ("hellaswag_val")
  std::string path;
  std::string format;  // "hellaswag", "multiple_choice", "schema", "language_modeling"
  IclKind kind = IclKind::kMultipleChoice;
  std::vector<IclItem> items;
};

// Reads a task file. InputError naming the file and line for a line that is not a JSON object,
// lacks a key of its format, has a gold index outside its choices, or fewer than 2 choices (an
// empty file too); a first line of no known format names the keys it found and the formats.
IclTask load_icl_task(const std::string& path);

// lm-evaluation-harness's hellaswag preprocess: strip, " [title]" -> ". ", bracketed spans
// removed, double spaces made single.
std::string hellaswag_preprocess(std::string_view text);
// Python's str.capitalize() for ASCII letters (the first upper, the rest lower; other bytes as
// they are).
std::string python_capitalize(std::string_view text);
// Code points of valid UTF-8 text (Python's len() of the string: acc_norm's length).
int64_t utf8_length(std::string_view text);

}  // namespace weft
