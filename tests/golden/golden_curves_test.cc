// Golden curves: the exact bits of short training runs, pinned from the code as it was before
// the engine restructuring, so that a refactor which claims to change nothing numerically is
// held to bitwise equality rather than to the 1e-5 layout parity of tests/parallel/.
// Unlike every other test, the references come from the code under test: they guard refactors;
// correctness stays with the parity and reference tests.
//
// What is pinned, per layout (one file tests/golden/<machine>/<case>.json, one gtest case each, so that
// CTest runs them in parallel and a failure names its layout): every training step's "loss" and
// "grad_norm", the "val_loss" at steps 0 and 6, and for fp16 the "loss_scale" in use at each
// step, all from metrics.jsonl (written by nlohmann::json with round-trip precision, so the
// parsed doubles are the engine's doubles). Values are stored as hex floats ("%a"), compared
// as bit patterns. The tiny preset on the random corpus of test_util.h, T 32, B 8 (micro-batch
// 2) with V 500, 6 steps, threads 1 on every rank (the thread count changes the sums' order).
//
// Rules:
//  - A change that intentionally changes rounding order (a fused kernel, another reduction
//    order, a different BLAS call) must re-pin in the same commit and say why in the commit
//    message; it must still keep 1e-5 parity with one rank (dp/tp/pp parity tests).
//  - Re-pin with `WEFT_GOLDEN_WRITE=1 ctest --test-dir build -R GoldenCurves` (or the test
//    binary with --gtest_filter='Pinned/GoldenCurves.*'): the files are rewritten and each case
//    ends as skipped (not failed) with a loud line saying whether its bits changed. Never
//    re-pin to make a refactor pass.
//  - The bits depend on the machine (compiler, -march=native, OpenBLAS kernels): each machine
//    has its own folder of pins, tests/golden/<blas core>-<fingerprint hash>/, whose files record
//    the fingerprint; a case compares against the folder whose fingerprint is this machine's.
//    On a machine with no folder yet, pin it from the base commit of the change under test:
//    `bench/golden_pin.sh BASE` builds BASE's weft in a worktree and pins with it
//    (WEFT_GOLDEN_WEFT names the weft binary that write mode runs), so the refactor is checked
//    bit for bit against code it did not touch. Until then the case skips, naming the script.
//
// A variant that must reproduce the same bits (e.g. another backend) is one more
// INSTANTIATE_TEST_SUITE_P over golden_cases("--extra args"), at the bottom of this file.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cblas.h>
#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <utility>

#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using test::RunResult;

// One pinned layout: `weft train` on `np` MPI ranks (0: a plain process) with `args`; `extra`
// is appended to the command line but is not part of what was pinned (a variant that must give
// the same bits).
// The two model families pinned: GPT (tiny, token shards) and ClimaX (climax-tiny, weather fields).
enum class GoldenFamily { kGpt, kClimax };

struct GoldenCase {
  std::string name;  // gtest name and pinned file tests/golden/<machine>/<name>.json
  int np = 0;
  std::string args;
  std::string extra;
  GoldenFamily family = GoldenFamily::kGpt;
};

// How gtest shows a case (in --gtest_list_tests and failures): np, arguments and extra.
void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << "np " << c.np << ", args '" << c.args << "', extra '" << c.extra << "'";
}

// The layouts, each with `extra` appended.
std::vector<GoldenCase> golden_cases(const std::string& extra) {
  std::vector<GoldenCase> cases;
  auto golden_case = [&](std::string name, int np, std::string args) { cases.push_back({name, np, args, extra}); };
  auto climax_case = [&](std::string name, int np, std::string args) {
    cases.push_back({name, np, args, extra, GoldenFamily::kClimax});
  };
  golden_case("one_rank", 0, "");
  for (int zero = 0; zero <= 3; ++zero) {
    golden_case(fmt::format("dp2_zero{}", zero), 2, fmt::format("--dp 2 --zero {}", zero));
  }
  golden_case("tp2_sequence_parallel", 2, "--tp 2 --sequence_parallel true");
  golden_case("pp2_interleaved", 2, "--pp 2 --schedule interleaved --virtual_stages 2");
  golden_case("tp2_pp2_dp2_zero1", 8, "--tp 2 --pp 2 --dp 2 --zero 1 --micro_batch 1");
  golden_case("recompute_full", 0, "--recompute full");
  golden_case("bf16", 0, "--precision bf16");
  // 2^22 overflows at the first step: the 6 steps skip, halve, and double the scale.
  golden_case("fp16_dynamic_scale", 0, "--precision fp16 --initial_loss_scale 4194304 --loss_scale_window 2");
  // ClimaX: its own batch (fields, lead times), loss (latitude-weighted MSE) and layouts (no pp).
  climax_case("climax_one_rank", 0, "");
  climax_case("climax_tp2", 2, "--tp 2");
  climax_case("climax_dp2_zero1", 2, "--dp 2 --zero 1 --micro_batch 1");
  climax_case("climax_hybrid_stop", 8, "--tp 2 --dp-shard 2 --dp-replicate 2 --zero 3 --micro_batch 1");
  climax_case("climax_recompute_bf16", 0, "--recompute full --precision bf16");
  return cases;
}

// The run settings shared by every case (under [model] and [train], beside the case's
// arguments). V 500 (padded to 512) keeps the LM head, the optimizer and the checkpoint small.
constexpr int kVocab = 500;
constexpr const char* kModelLines = "model = \"tiny\"\nvocab_size = 500\n";
constexpr const char* kTrainLines =
    "seq_len = 32\nglobal_batch = 8\nmicro_batch = 2\nseed = 99\nsteps = 6\nlr = 2e-3\nwarmup_steps = 3\n"
    "threads = 1\n";
// ClimaX: 30 days of generated fields (`weft prepare --synthetic-weather`), two lead times.
constexpr const char* kClimaxModelLines = "model = \"climax-tiny\"\n";
constexpr const char* kClimaxDataLines = "lead_hours = [6, 12]\n";
constexpr const char* kClimaxTrainLines =
    "global_batch = 8\nmicro_batch = 2\nseed = 11\nsteps = 6\nlr = 1e-3\nwarmup_steps = 2\nthreads = 1\n";

// The metrics pinned: key in metrics.jsonl -> (step, value) in file order.
using Series = std::vector<std::pair<int64_t, double>>;
using Curves = std::map<std::string, Series>;
constexpr const char* kPinnedKeys[] = {"loss", "grad_norm", "val_loss", "loss_scale"};

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

// A run folder's pinned metrics (keys that never appear are left out). JSON writes a
// non-finite value as null (the gradient norm of an fp16 step skipped for overflow): read as NaN.
Curves read_curves(const std::string& run) {
  Curves out;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    for (const char* key : kPinnedKeys) {
      if (!j.contains(key)) continue;
      const double v = j[key].is_null() ? std::numeric_limits<double>::quiet_NaN() : j[key].get<double>();
      out[key].emplace_back(j["step"].get<int64_t>(), v);
    }
  }
  return out;
}

// A pinned file: inputs and machine on one line each, then every series one step a line as
// [step, "hex float", decimal]; the decimal (6 digits) is for reading only.
std::string pinned_text(const nlohmann::json& inputs, const nlohmann::json& machine, const Curves& curves) {
  std::string out =
      fmt::format("{{\n \"inputs\": {},\n \"machine\": {},\n \"curves\": {{", inputs.dump(), machine.dump());
  const char* sep = "\n";
  for (const auto& [key, series] : curves) {
    out += fmt::format("{}  \"{}\": [", sep, key);
    for (size_t i = 0; i < series.size(); ++i) {
      const auto [step, v] = series[i];
      const std::string decimal = std::isfinite(v) ? fmt::format("{:.6g}", v) : "null";
      out += fmt::format("{}\n   [{}, \"{}\", {}]", i ? "," : "", step, hex(v), decimal);
    }
    out += "\n  ]";
    sep = ",\n";
  }
  return out + "\n }\n}\n";
}

// The curves of a pinned file; strtod reads hex floats exactly.
Curves curves_from_json(const nlohmann::json& j) {
  Curves out;
  for (const auto& [key, arr] : j.items()) {
    for (const auto& e : arr) {
      out[key].emplace_back(e[0].get<int64_t>(), std::strtod(e[1].get<std::string>().c_str(), nullptr));
    }
  }
  return out;
}

// FNV-1a 64 of some bytes.
uint64_t fnv1a(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

// FNV-1a 64 of a file's bytes, as hex.
std::string file_hash(const std::string& path) { return fmt::format("{:016x}", fnv1a(test::read_text(path))); }

// The first line of /proc/cpuinfo starting with one of `keys`, after its colon ("" if none).
std::string cpuinfo_field(std::initializer_list<const char*> keys) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    for (const char* k : keys) {
      if (line.rfind(k, 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
    }
  }
  return "";
}

// The CPU's instruction-set extensions that code generation and OpenBLAS's kernel choice can
// depend on (SIMD, FMA, half-float, matrix), not the kernel's bookkeeping flags.
std::string isa_flags() {
  std::istringstream flags(cpuinfo_field({"flags", "Features"}));
  std::string out;
  for (std::string f; flags >> f;) {
    for (const char* p : {"sse", "ssse", "avx", "fma", "f16c", "amx", "asimd", "sve", "fp16", "bf16"}) {
      if (f.rfind(p, 0) == 0) {
        out += (out.empty() ? "" : " ") + f;
        break;
      }
    }
  }
  return out;
}

// What the pinned bits depend on besides the code: build, BLAS and its kernels, CPU.
nlohmann::json machine_fingerprint() {
  return {{"build", WEFT_GOLDEN_BUILD},
          {"blas", openblas_get_config()},
          {"blas_core", openblas_get_corename()},
          {"cpu", cpuinfo_field({"model name", "CPU part"})},
          {"isa", isa_flags()}};
}

// The first step where `got` differs in bits from `want`, both values, how many steps differ,
// and the largest relative difference; "" when every bit and step agrees.
std::string series_difference(const Series& want, const Series& got) {
  if (want.size() != got.size()) return fmt::format("{} steps pinned, {} in the run", want.size(), got.size());
  std::string first;
  int differing = 0;
  double max_rel = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const auto [ws, w] = want[i];
    const auto [gs, g] = got[i];
    if (ws != gs) return fmt::format("entry {} is step {} pinned, step {} in the run", i, ws, gs);
    if (std::bit_cast<uint64_t>(w) == std::bit_cast<uint64_t>(g)) continue;
    max_rel = std::max(max_rel, std::abs(g - w) / std::max(std::abs(w), 1e-300));
    if (differing++ == 0) {
      first = fmt::format("first at step {}: expected {:.17g} ({}), got {:.17g} ({})", ws, w, hex(w), g, hex(g));
    }
  }
  if (differing == 0) return "";
  return fmt::format("{}; {} of {} steps differ, max relative difference {:.3g}", first, differing, want.size(),
                     max_rel);
}

// Whether two sets of curves agree in every key, step and bit (NaN included).
bool same_bits(const Curves& a, const Curves& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [key, series] : a) {
    if (!b.count(key) || !series_difference(series, b.at(key)).empty()) return false;
  }
  return true;
}

// Every pinned series (and no other) reproduced bit for bit.
void expect_same_bits(const Curves& want, const Curves& got, const std::string& what) {
  for (const auto& [key, series] : want) {
    auto it = got.find(key);
    if (it == got.end()) {
      ADD_FAILURE() << what << ": '" << key << "' is pinned but the run has none";
      continue;
    }
    const std::string diff = series_difference(series, it->second);
    EXPECT_TRUE(diff.empty()) << what << ", " << key << ": " << diff;
  }
  for (const auto& [key, series] : got) {
    EXPECT_TRUE(want.count(key)) << what << ": the run has '" << key << "', which is not pinned";
  }
}

bool write_mode() {
  const char* v = std::getenv("WEFT_GOLDEN_WRITE");
  return v != nullptr && std::string(v) == "1";
}

fs::path golden_root() { return fs::path(WEFT_SOURCE_DIR) / "tests/golden"; }

// Every folder of pins with the fingerprint of the machine that pinned it (every file of a
// folder carries the same one: the first file's is read).
std::vector<std::pair<fs::path, nlohmann::json>> pinned_folders() {
  std::vector<std::pair<fs::path, nlohmann::json>> out;
  if (!fs::exists(golden_root())) return out;
  for (const auto& dir : fs::directory_iterator(golden_root())) {
    if (!dir.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(dir.path())) {
      if (f.path().extension() != ".json") continue;
      out.emplace_back(dir.path(), nlohmann::json::parse(test::read_text(f.path())).at("machine"));
      break;
    }
  }
  return out;
}

// The folder of pins made on this machine, or "" when no folder has its fingerprint.
fs::path machine_folder(const nlohmann::json& machine) {
  for (const auto& [dir, pinned] : pinned_folders()) {
    if (pinned == machine) return dir;
  }
  return {};
}

// The name of a new machine's folder: its OpenBLAS core and a hash of its fingerprint.
std::string new_folder_name(const nlohmann::json& machine) {
  std::string core = machine.at("blas_core").get<std::string>();
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return fmt::format("{}-{:08x}", core, static_cast<uint32_t>(fnv1a(machine.dump()) >> 32));
}

// The folders pinned so far with their fingerprints, one per line (for the skip message).
std::string pinned_machines() {
  std::string out;
  for (const auto& [dir, pinned] : pinned_folders()) out += fmt::format("\n  {}: {}", dir.filename().string(), pinned.dump());
  return out.empty() ? " none" : out;
}

// The weft that write mode pins with: WEFT_GOLDEN_WEFT (a build of the base commit) or this build's.
std::string pinning_binary() {
  const char* v = std::getenv("WEFT_GOLDEN_WEFT");
  return v != nullptr && *v ? std::string(v) : std::string(WEFT_BINARY);
}

// Runs of the tiny preset on the random corpus (validation at steps 0 and 6 over 1 batch).
class GoldenCurves : public test::ParityRuns, public ::testing::WithParamInterface<GoldenCase> {
 protected:
  void SetUp() override {
    tmp = std::make_unique<test::TempDir>("golden");
    config = *tmp / "run.toml";
    const bool climax = GetParam().family == GoldenFamily::kClimax;
    if (climax) {
      const RunResult r = test::run_weft("prepare --synthetic-weather " + (*tmp / "data") + " --days 30 --seed 5",
                                         *tmp / "prep");
      ASSERT_EQ(r.code, 0) << r.err;
    } else {
      test::make_random_corpus(*tmp / "data", 40000, 4000, kVocab);
    }
    std::ofstream(config) << "[model]\n" << model_lines() << "[data]\ndata = \"" << (*tmp / "data") << "\"\n"
                          << (climax ? kClimaxDataLines : "") << "[train]\n" << train_lines()
                          << "[eval]\nval_every = 6\nval_batches = 1\n"
                          << "[checkpoint]\nkeep_last = 0\n[parallel]\ncomm_timeout = 120.0\n";
  }
  const char* model_lines() const { return GetParam().family == GoldenFamily::kClimax ? kClimaxModelLines : kModelLines; }
  const char* train_lines() const { return GetParam().family == GoldenFamily::kClimax ? kClimaxTrainLines : kTrainLines; }
  // The data the run reads: the token shard, or every file of the generated weather folder.
  std::string corpus_hash() const {
    if (GetParam().family == GoldenFamily::kGpt) return file_hash(*tmp / "data/x_train_000000.bin");
    std::vector<fs::path> files;
    for (const auto& f : fs::directory_iterator(*tmp / "data")) files.push_back(f.path());
    std::sort(files.begin(), files.end());
    std::string all;
    for (const auto& f : files) all += f.filename().string() + ":" + file_hash(f) + ";";
    return all;
  }
  // What the pinned bits depend on in the test itself: layout, settings, corpus.
  nlohmann::json inputs() const {
    const GoldenCase& c = GetParam();
    nlohmann::json j = {
        {"np", c.np}, {"args", c.args}, {"model", model_lines()}, {"train", train_lines()}, {"corpus", corpus_hash()}};
    if (c.family == GoldenFamily::kClimax) j["data"] = kClimaxDataLines;
    return j;
  }
  // The pinned metrics of a run that went through its 6 steps and 2 validations.
  Curves run_case(const std::string& binary = WEFT_BINARY) {
    const GoldenCase& c = GetParam();
    const std::string out = *tmp / "run";
    const std::string args = fmt::format("train {} {} {} --out {}", config, c.args, c.extra, out);
    const RunResult r = test::run_weft_with(test::mpi_launcher(c.np), args, *tmp / "cmd", binary);
    EXPECT_EQ(r.code, 0) << c.args << " " << c.extra << ": " << r.err;
    Curves curves = read_curves(out);
    EXPECT_EQ(curves["loss"].size(), 6u);
    EXPECT_EQ(curves["val_loss"].size(), 2u);
    return curves;
  }
  // Writes the pinned file; returns a loud line saying so and whether the curves' bits changed.
  std::string write_pinned(const Curves& curves) const {
    const nlohmann::json machine = machine_fingerprint();
    fs::path folder = machine_folder(machine);
    if (folder.empty()) folder = golden_root() / new_folder_name(machine);
    fs::create_directories(folder);
    const fs::path file = folder / (GetParam().name + ".json");
    const char* change = "new";
    if (fs::exists(file)) {
      const bool same = same_bits(curves_from_json(nlohmann::json::parse(test::read_text(file)).at("curves")), curves);
      change = same ? "bits unchanged" : "BITS CHANGED";
    }
    std::ofstream(file) << pinned_text(inputs(), machine, curves);
    return fmt::format("*** WEFT_GOLDEN_WRITE=1: REWROTE {} ({}) with {}; nothing was checked; commit it with the reason ***",
                       file.string(), change, pinning_binary());
  }
};

TEST_P(GoldenCurves, BitwiseCurve) {
  const GoldenCase& c = GetParam();
  // Skips, each with its reason: re-pinning (WEFT_GOLDEN_WRITE=1) rewrites the files and must not
  // count as a check; and a machine (compiler, -march, OpenBLAS kernel set, CPU) with no folder
  // of pins, or without this case in its folder, has nothing to compare with (the case then
  // prints this machine's fingerprint and the folders pinned, and names bench/golden_pin.sh).
  if (write_mode()) {
    if (!c.extra.empty()) GTEST_SKIP() << "WEFT_GOLDEN_WRITE=1 pins only the cases without extra arguments";
    const Curves got = run_case(pinning_binary());
    if (HasFailure()) return;
    const std::string note = write_pinned(got);
    std::fprintf(stderr, "\n%s\n\n", note.c_str());
    GTEST_SKIP() << note;  // listed by CTest as "Skipped", not failed
  }
  // A skip, not a failure: bits depend on the machine, so pins made elsewhere cannot judge this
  // run, and a pass here would be a guess; the remedy (one command) is printed. The machine CI
  // runs on has its folder committed, so there every case compares.
  const fs::path folder = machine_folder(machine_fingerprint());
  if (folder.empty()) {
    GTEST_SKIP() << "no pins for this machine, bits not comparable here; pin them from the base commit with "
                    "`bench/golden_pin.sh BASE` (docs/engine.md, \"What is pinned\")\n  here   "
                 << machine_fingerprint().dump() << "\n  pinned:" << pinned_machines();
  }
  const fs::path file = folder / (c.name + ".json");
  if (!fs::exists(file)) {  // a case added after this machine's folder was pinned
    GTEST_SKIP() << file << " is not pinned on this machine yet; pin it from the base commit with "
                            "`bench/golden_pin.sh BASE`";
  }
  const nlohmann::json pinned = nlohmann::json::parse(test::read_text(file));
  ASSERT_EQ(pinned.at("inputs"), inputs()) << "the case's settings or corpus changed since " << file
                                        << " was pinned; re-pin (WEFT_GOLDEN_WRITE=1) in the commit that changed them";
  expect_same_bits(curves_from_json(pinned.at("curves")), run_case(), c.name + (c.extra.empty() ? "" : " " + c.extra));
}

std::string case_name(const ::testing::TestParamInfo<GoldenCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Pinned, GoldenCurves, ::testing::ValuesIn(golden_cases("")), case_name);
// The same layouts on cpu-guarded (device memory fenced from the host: the model, the stores,
// the optimizer, the pipeline runtime and the engine touch it only through the backend and
// the device communicators): the same bits as the cpu backend's pins.
INSTANTIATE_TEST_SUITE_P(CpuGuarded, GoldenCurves, ::testing::ValuesIn(golden_cases("--backend cpu-guarded")),
                         case_name);
// A further variant expected to give the same bits is one more line like the one above.
// (`golden_cases("--threads 2")` fails on every case: the thread count changes the sums.)

}  // namespace
}  // namespace weft
