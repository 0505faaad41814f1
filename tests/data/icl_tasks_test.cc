// In-context-learning task files (data/icl_tasks.h): the four formats read into items, the
// HellaSwag rendering of lm-evaluation-harness, and bad files refused naming the file and line.
#include "data/icl_tasks.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "test_util.h"

namespace weft {
namespace {

using test::TempDir;

std::string write(const TempDir& tmp, const std::string& name, const std::string& text) {
  const std::string p = tmp / name;
  std::ofstream(p) << text;
  return p;
}

void expect_refused(const std::string& path, const std::vector<std::string>& parts) {
  try {
    load_icl_task(path);
    ADD_FAILURE() << path << " was read";
  } catch (const InputError& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(IclTasks, ReadsTheFourFormats) {
  TempDir tmp("icl-tasks");
  IclTask mc = load_icl_task(write(tmp, "arc.jsonl",
                                   "{\"query\": \"Q: 2+2?\\nA:\", \"choices\": [\"4\", \"5\"], \"gold\": 0}\n\n"
                                   "{\"query\": \"Sky?\", \"choices\": [\"red\", \"blue\", \"green\"], \"gold\": 1}\n"));
  EXPECT_EQ(mc.name, "arc");
  EXPECT_EQ(mc.format, "multiple_choice");
  EXPECT_EQ(mc.kind, IclKind::kMultipleChoice);
  ASSERT_EQ(mc.items.size(), 2u);
  EXPECT_EQ(mc.items[0].contexts, std::vector<std::string>{"Q: 2+2?\nA:"});
  EXPECT_EQ(mc.items[1].continuations, (std::vector<std::string>{"red", "blue", "green"}));
  EXPECT_EQ(mc.items[1].gold, 1);

  IclTask sc = load_icl_task(write(tmp, "wino.jsonl",
                                   "{\"context_options\": [\"A because A\", \"A because B\"], \"continuation\": \"won.\", "
                                   "\"gold\": 1}\n"));
  EXPECT_EQ(sc.kind, IclKind::kSchema);
  EXPECT_EQ(sc.items[0].contexts.size(), 2u);
  EXPECT_EQ(sc.items[0].continuations, std::vector<std::string>{"won."});

  IclTask lm = load_icl_task(write(tmp, "lambada.jsonl", "{\"context\": \"one two\", \"continuation\": \" three\"}\n"));
  EXPECT_EQ(lm.kind, IclKind::kLanguageModeling);
  EXPECT_EQ(lm.items[0].gold, 0);

  // HellaSwag as lm-evaluation-harness renders it: "activity_label: ctx_a Ctx_b" (capitalize()
  // lowers the rest), " [title]" -> ". ", bracketed spans dropped, double spaces made single;
  // the label may be a string.
  IclTask hs = load_icl_task(write(
      tmp, "hellaswag_val.jsonl",
      "{\"activity_label\": \"Baking\", \"ctx_a\": \"[header] How to bake [title] Heat the oven.\", \"ctx_b\": "
      "\"THEN Mix\", \"ctx\": \"x\", \"endings\": [\"the  flour.\", \"[step] a rock.\"], \"label\": \"1\"}\n"));
  EXPECT_EQ(hs.format, "hellaswag");
  EXPECT_EQ(hs.kind, IclKind::kMultipleChoice);
  EXPECT_EQ(hs.items[0].contexts[0], "Baking: How to bake. Heat the oven. Then mix");
  // (strip comes first: the space before a dropped bracket stays, as in Python)
  EXPECT_EQ(hs.items[0].continuations, (std::vector<std::string>{"the flour.", " a rock."}));
  EXPECT_EQ(hs.items[0].gold, 1);
}

TEST(IclTasks, PreprocessingFollowsTheHarness) {
  EXPECT_EQ(hellaswag_preprocess("  a [title] b  "), "a. b");
  EXPECT_EQ(hellaswag_preprocess("x [one] y [two] z"), "x y z");
  EXPECT_EQ(hellaswag_preprocess("a   b"), "a  b");  // one pass of "  " -> " ", as str.replace
  EXPECT_EQ(hellaswag_preprocess("a [open\n] b"), "a [open\n] b");  // `.` stops at a newline
  EXPECT_EQ(python_capitalize("hELLO World"), "Hello world");
  EXPECT_EQ(python_capitalize(""), "");
  EXPECT_EQ(utf8_length("caf\xc3\xa9"), 4);
  EXPECT_EQ(utf8_length("\xe6\x97\xa5\xe6\x9c\xac"), 2);
}

TEST(IclTasks, BadFilesAreRefusedNamingTheLine) {
  TempDir tmp("icl-tasks");
  expect_refused(tmp / "missing.jsonl", {"missing.jsonl"});
  expect_refused(write(tmp, "empty.jsonl", "\n\n"), {"empty.jsonl", "no items"});
  expect_refused(write(tmp, "keys.jsonl", "{\"question\": \"q\", \"answer\": \"a\"}\n"),
                 {"keys.jsonl:1", "answer, question", "multiple_choice"});
  const std::string ok = "{\"query\": \"q\", \"choices\": [\"a\", \"b\"], \"gold\": 0}\n";
  expect_refused(write(tmp, "json.jsonl", ok + "{\"query\": \"q\", \n"), {"json.jsonl:2", "not JSON"});
  expect_refused(write(tmp, "gold.jsonl", ok + "{\"query\": \"q\", \"choices\": [\"a\", \"b\"], \"gold\": 2}\n"),
                 {"gold.jsonl:2", "gold 2", "0..1"});
  expect_refused(write(tmp, "neg.jsonl", "{\"query\": \"q\", \"choices\": [\"a\", \"b\"], \"gold\": -1}\n"),
                 {"neg.jsonl:1", "gold -1"});
  expect_refused(write(tmp, "one.jsonl", "{\"query\": \"q\", \"choices\": [\"a\"], \"gold\": 0}\n"),
                 {"one.jsonl:1", "1 options"});
  expect_refused(write(tmp, "types.jsonl", ok + "{\"query\": 3, \"choices\": [\"a\", \"b\"], \"gold\": 0}\n"),
                 {"types.jsonl:2", "'query' must be a string"});
  expect_refused(write(tmp, "array.jsonl", "[1, 2]\n"), {"array.jsonl:1", "not a JSON object"});
  // A line of another format after the first is refused by the first's keys.
  expect_refused(write(tmp, "mixed.jsonl", ok + "{\"context\": \"c\", \"continuation\": \"x\"}\n"),
                 {"mixed.jsonl:2", "'query'"});
}

}  // namespace
}  // namespace weft
