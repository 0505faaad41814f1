// `weft bench --peer torch` (bench_peer.h): both sides as child processes, so that each starts
// with the same environment (OMP_WAIT_POLICY=PASSIVE: PyTorch's OpenMP threads busy-wait by
// default, which on a small machine takes cycles from the other side's threads; see
// bench/README.md), alternately, the order flipping each round.
#include "bench_peer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/cpu/onednn_gemm.h"
#include "core/error.h"
#include "data/text_util.h"
#include "train/trainer.h"  // set_threads

extern char** environ;

namespace weft {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSetup = "scripts/setup-peers.sh";
constexpr const char* kPeerScript = "bench/nanogpt_peer.py";
const std::vector<std::string> kModes = {"eager", "compile", "bf16", "bf16-compile"};
const std::vector<std::string> kPeerModels = {"tiny", "small", "gpt2-124m"};  // nanogpt_peer.py's presets

struct Child {
  int code = -1;  // exit status, or 128 + signal
  std::string out, err;
};

// The environment of this process with OMP_WAIT_POLICY=PASSIVE (replacing any value).
std::vector<std::string> child_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "OMP_WAIT_POLICY=", 16) != 0) env.emplace_back(*e);
  }
  env.emplace_back("OMP_WAIT_POLICY=PASSIVE");
  return env;
}

// Runs argv[0] (a path) with argv, stdin from /dev/null, stdout and stderr captured (through
// new files in the temporary folder, created exclusively without following links, removed
// afterwards).
Child run_child(const std::vector<std::string>& argv) {
  static int counter = 0;
  const fs::path tmp = fs::temp_directory_path();
  const std::string stem = fmt::format("weft-bench-peer-{}-{}", ::getpid(), counter++);
  const std::string out = (tmp / (stem + ".out")).string(), err = (tmp / (stem + ".err")).string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_text = child_environment();
  std::vector<char*> env;
  for (std::string& e : env_text) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  Child c;
  if (rc != 0) {
    c.code = 127;
    c.err = fmt::format("cannot start {}: {}", argv[0], std::strerror(rc));
  } else {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR) throw_runtime("waiting for {}: {}", argv[0], std::strerror(errno));
    }
    c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    c.out = fs::exists(out) ? read_file(out) : std::string();
    c.err = fs::exists(err) ? read_file(err) : std::string();
  }
  std::error_code ec;
  fs::remove(out, ec);
  fs::remove(err, ec);
  return c;
}

// The last non-empty line of `text` (a child's error message), at most 300 characters.
std::string last_line(const std::string& text) {
  std::string last;
  for_each_line(text, [&](std::string_view line, int64_t) {
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) last = std::string(line);
  });
  if (last.size() > 300) last = last.substr(0, 297) + "...";
  return last.empty() ? "(no message)" : last;
}

// The JSON objects among the lines of `text` that carry a numeric tokens_per_s.
std::vector<json> result_lines(const std::string& text) {
  std::vector<json> out;
  for_each_line(text, [&](std::string_view line, int64_t) {
    if (line.empty() || line.front() != '{') return;
    json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("tokens_per_s") && j["tokens_per_s"].is_number()) out.push_back(std::move(j));
  });
  return out;
}

std::string join_args(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// The Python that runs the peer: --peer-python, or the peers' environment in the source folder.
std::string peer_python(const PeerOptions& p) {
  return p.python.empty() ? (fs::path(WEFT_SOURCE_DIR) / ".venv-peers/bin/python").string() : p.python;
}

// InputError (one line naming scripts/setup-peers.sh) unless the Python exists, imports torch,
// and that torch is 2.x or newer; returns torch's version.
std::string check_peer_environment(const std::string& python, const std::string& script) {
  if (!fs::exists(python) || ::access(python.c_str(), X_OK) != 0) {
    throw_input("--peer torch: no Python at {} (the peers' environment): run {} to make .venv-peers, or pass "
                "--peer-python PATH", python, kSetup);
  }
  if (!fs::is_regular_file(script)) {
    throw_input("--peer torch: the peer script {} is missing from the source folder {}", kPeerScript, WEFT_SOURCE_DIR);
  }
  const Child c = run_child({python, "-c", "import torch; print(torch.__version__)"});
  if (c.code != 0) {
    throw_input("--peer torch: {} cannot import torch (exit {}: {}): run {} (or pass --peer-python PATH)", python,
                c.code, last_line(c.err), kSetup);
  }
  const std::string version = last_line(c.out);
  if (std::atoi(version.c_str()) < 2) {
    throw_input("--peer torch: {} has torch {}, the peer needs PyTorch 2.x (torch.compile): run {}", python, version,
                kSetup);
  }
  return version;
}

std::vector<std::string> check_modes(const std::string& modes) {
  const std::vector<std::string> list = split_comma_list(modes);
  if (list.empty()) throw_input("--peer-modes '{}' names no mode (known: {})", modes, fmt::join(kModes, ", "));
  for (const std::string& m : list) {
    if (std::find(kModes.begin(), kModes.end(), m) == kModes.end()) {
      throw_input("--peer-modes: unknown mode '{}' (known: {})", m, fmt::join(kModes, ", "));
    }
  }
  return list;
}

// What the rounds collected.
struct PeerRuns {
  std::vector<json> weft;                          // weft bench's JSON line per round (fp32)
  std::vector<json> weft_bf16;                     // the same with --precision bf16 --matmul fast (native bf16 only)
  std::map<std::string, std::vector<json>> modes;  // the peer's JSON line per mode per round
};

// bf16: weft's bf16 storage with its native bf16 products (--matmul fast), the counterpart of the
// peer's bf16 autocast.
json run_weft_side(const PeerShapes& s, int64_t threads, bool bf16) {
  // This very binary, even if a rebuild has replaced the file since it started.
  std::vector<std::string> argv = {"/proc/self/exe", "bench", "--model", s.model, "--batch", std::to_string(s.batch),
                                   "--seq", std::to_string(s.seq), "--threads", std::to_string(threads),
                                   "--steps", std::to_string(s.steps), "--warmup", std::to_string(s.warmup),
                                   "--head-chunk", std::to_string(s.head_chunk), "--no-peak", "--format", "json"};
  if (bf16) argv.insert(argv.end(), {"--precision", "bf16", "--matmul", "fast"});
  // The fp32 products of both sides (a bf16 fast run's attention and f32 operands use it too).
  if (!s.fp32_kernel.empty()) argv.insert(argv.end(), {"--fp32-kernel", s.fp32_kernel});
  const Child c = run_child(argv);
  const std::vector<json> lines = result_lines(c.out);
  if (c.code != 0 || lines.empty()) {
    throw_runtime("--peer torch: `weft {}` failed (exit {}): {}", join_args({argv.begin() + 1, argv.end()}), c.code,
                  c.code != 0 ? last_line(c.err) : "no JSON line with tokens_per_s");
  }
  return lines.back();
}

std::vector<json> run_peer_side(const PeerShapes& s, int64_t threads, const std::string& python,
                                const std::string& script, const std::vector<std::string>& modes, double max_seconds,
                                bool kernels) {
  std::vector<std::string> argv = {python, script, "--device", "cpu", "--model", s.model,
                                   "--batch", std::to_string(s.batch), "--seq", std::to_string(s.seq),
                                   "--threads", std::to_string(threads), "--steps", std::to_string(s.steps),
                                   "--warmup", std::to_string(std::max<int64_t>(s.warmup, 1)), "--lr", "1e-4",
                                   "--modes", fmt::format("{}", fmt::join(modes, ",")), "--max-seconds",
                                   fmt::format("{}", max_seconds), "--format", "json"};
  if (kernels) argv.push_back("--kernels");
  const Child c = run_child(argv);
  std::vector<json> lines = result_lines(c.out);
  if (c.code != 0 || lines.size() != modes.size()) {
    throw_runtime("--peer torch: `{}` failed (exit {}, {} of {} modes measured): {} (check the peers' environment: "
                  "{})", join_args(argv), c.code, lines.size(), modes.size(), last_line(c.err), kSetup);
  }
  return lines;
}

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats stats_of(const std::vector<json>& runs, const char* key) {
  std::vector<double> v;
  for (const json& j : runs) {
    if (j.contains(key) && j[key].is_number()) v.push_back(j[key].get<double>());
  }
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

// The summary: the medians (and range) over the rounds, the ratios and both sides' kernels.
json summarize(const PeerRuns& runs, const PeerShapes& s, int64_t threads, const PeerOptions& o,
               const std::vector<std::string>& modes, const std::string& torch_version) {
  const Stats w = stats_of(runs.weft, "tokens_per_s");
  const json& w0 = runs.weft.front();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  json out = {{"summary", "bench_peer"}, {"peer", "torch"}, {"model", s.model}, {"batch", s.batch},
              {"seq", s.seq}, {"threads", threads}, {"steps", s.steps}, {"warmup", s.warmup},
              {"rounds", o.rounds}, {"peer_max_seconds", o.max_seconds}, {"omp_wait_policy", "PASSIVE"}};
  out["weft"] = {{"tokens_per_s", w.median}, {"tokens_per_s_min", w.min}, {"tokens_per_s_max", w.max},
                 {"ms_per_step", stats_of(runs.weft, "ms_per_step").median}, {"runs", runs.weft.size()},
                 {"precision", "fp32"}, {"product_kernel", w0.value("product_kernel", "?")},
                 {"blas_core", w0.value("blas_core", "?")},
                 {"blas_config", w0.value("blas_config", "?")},
                 {"openblas_coretype_env", coretype ? json(coretype) : json(nullptr)}};
  const bool have_bf16 = !runs.weft_bf16.empty();
  const Stats wb = stats_of(runs.weft_bf16, "tokens_per_s");
  if (have_bf16) {
    out["weft_bf16_fast"] = {{"tokens_per_s", wb.median}, {"tokens_per_s_min", wb.min}, {"tokens_per_s_max", wb.max},
                             {"ms_per_step", stats_of(runs.weft_bf16, "ms_per_step").median},
                             {"runs", runs.weft_bf16.size()}, {"precision", "bf16"}, {"matmul", "fast"},
                             {"product_kernel", runs.weft_bf16.front().value("product_kernel", "?")},
                             {"ratio_over_weft_fp32", w.median > 0 ? json(wb.median / w.median) : json(nullptr)}};
  }
  json peer = {{"torch", torch_version}, {"script", kPeerScript}}, ratios = json::object();
  for (const std::string& m : modes) {
    const std::vector<json>& r = runs.modes.at(m);
    const Stats p = stats_of(r, "tokens_per_s");
    const json& k = r.front().contains("kernels") ? r.front()["kernels"] : json::object();
    if (!peer.contains("kernels")) {
      json common = k;
      for (const char* per_mode : {"mkl_calls", "onednn_calls"}) common.erase(per_mode);
      peer["kernels"] = common;
    }
    // A bf16 autocast mode is compared with weft's bf16 fast run where there is one.
    const bool bf16_mode = r.front().value("dtype", "") == "bf16" && have_bf16;
    const double mine = bf16_mode ? wb.median : w.median;
    json mj = {{"tokens_per_s", p.median}, {"tokens_per_s_min", p.min}, {"tokens_per_s_max", p.max},
               {"ms_per_step", stats_of(r, "ms_per_step").median}, {"runs", r.size()},
               {"dtype", r.front().value("dtype", "?")}, {"compile", r.front().value("compile", false)},
               {"ratio_weft_over_peer", p.median > 0 ? json(mine / p.median) : json(nullptr)},
               {"ratio_basis", bf16_mode ? "weft bf16 fast" : "weft fp32"}};
    if (mj["compile"].get<bool>()) {  // per round: a later round may find Inductor's on-disk cache warm
      mj["compile_s"] = json::array();
      for (const json& x : r) mj["compile_s"].push_back(x.value("compile_s", json()));
    }
    mj["steps_timed"] = static_cast<int64_t>(stats_of(r, "steps").min);  // fewer than --steps: capped
    for (const char* per_mode : {"mkl_calls", "onednn_calls"}) {
      if (k.contains(per_mode)) mj[per_mode] = k[per_mode];
    }
    peer["modes"][m] = mj;
    ratios[m] = mj["ratio_weft_over_peer"];
  }
  out["torch"] = peer;
  out["ratio_weft_over_peer"] = ratios;
  return out;
}

// "SGEMM x 120, SGEMV x 2" from {"SGEMM": 120, ...}; "none" when empty.
std::string counts_text(const json& counts) {
  std::string s;
  if (counts.is_object()) {
    for (const auto& [name, n] : counts.items()) s += fmt::format("{}{} x {}", s.empty() ? "" : ", ", name, n.dump());
  }
  return s.empty() ? "none" : s;
}

std::string mode_label(const std::string& m) {
  if (m == "eager") return "torch eager fp32";
  if (m == "compile") return "torch compile fp32";
  if (m == "bf16") return "torch eager bf16 autocast";
  return "torch compile bf16 autocast";
}

void print_table(const json& j, const std::vector<std::string>& modes) {
  fmt::print("weft vs PyTorch {} (CPU): {}, batch {}, seq {}, threads {}, {} steps after {} warm-up, {} rounds "
             "alternating, OMP_WAIT_POLICY=PASSIVE\n", j["torch"]["torch"].get<std::string>(),
             j["model"].get<std::string>(), j["batch"].get<int64_t>(), j["seq"].get<int64_t>(),
             j["threads"].get<int64_t>(), j["steps"].get<int64_t>(), j["warmup"].get<int64_t>(),
             j["rounds"].get<int64_t>());
  fmt::print("{:<28} {:>12} {:>21} {:>10} {:>10}\n", "", "tokens/s", "(min - max)", "ms/step", "weft/peer");
  auto row = [](const std::string& name, const json& r, const std::string& ratio) {
    const std::string range =
        fmt::format("({:.1f} - {:.1f})", r["tokens_per_s_min"].get<double>(), r["tokens_per_s_max"].get<double>());
    fmt::print("{:<28} {:>12.1f} {:>21} {:>10.1f} {:>10}\n", name, r["tokens_per_s"].get<double>(), range,
               r["ms_per_step"].get<double>(), ratio);
  };
  row("weft fp32", j["weft"], "");
  if (j.contains("weft_bf16_fast")) row("weft bf16 (--matmul fast)", j["weft_bf16_fast"], "");
  for (const std::string& m : modes) {
    const json& r = j["torch"]["modes"][m];
    const bool bf16 = r.value("ratio_basis", "") == "weft bf16 fast";
    row(mode_label(m), r, r["ratio_weft_over_peer"].is_number()
                              ? fmt::format("{:.2f}{}", r["ratio_weft_over_peer"].get<double>(), bf16 ? " (bf16)" : "")
                              : "?");
  }
  if (j.contains("weft_bf16_fast")) {
    fmt::print("  weft bf16: {}; {:.2f}x weft fp32\n", j["weft_bf16_fast"]["product_kernel"].get<std::string>(),
               j["weft_bf16_fast"]["ratio_over_weft_fp32"].get<double>());
  }
  const json& w = j["weft"];
  fmt::print("kernels:\n  weft fp32: {}; OpenBLAS core {} (OPENBLAS_CORETYPE {}); {}\n", w.value("product_kernel", "?"),
             w["blas_core"].get<std::string>(),
             w["openblas_coretype_env"].is_string() ? w["openblas_coretype_env"].get<std::string>() : "unset",
             w["blas_config"].get<std::string>());
  const json& k = j["torch"]["kernels"];
  fmt::print("  torch: CPU capability {}, MKL {}, oneDNN {} (bf16 through oneDNN on this CPU: {}), {}\n",
             k.value("cpu_capability", "?"), k.value("mkl_available", false) ? "yes" : "no",
             k.value("mkldnn_available", false) ? "yes" : "no",
             !k.contains("mkldnn_bf16_supported") || !k["mkldnn_bf16_supported"].is_boolean() ? "unknown"
             : k["mkldnn_bf16_supported"].get<bool>()                                        ? "yes"
                                                                                             : "no",
             k.value("optimizer", "?"));
  if (k.contains("config")) {
    fmt::print("  torch build: {}\n", fmt::join(k["config"].get<std::vector<std::string>>(), "; "));
  }
  if (k.contains("mkl_header") && k["mkl_header"].is_string()) {
    fmt::print("  MKL at run time: {}\n", k["mkl_header"].get<std::string>());
  }
  for (const std::string& m : modes) {
    const json& r = j["torch"]["modes"][m];
    fmt::print("  {}: MKL {}; oneDNN {}; timed steps per round: {}", m, counts_text(r.value("mkl_calls", json())),
               counts_text(r.value("onednn_calls", json())), r["steps_timed"].get<int64_t>());
    if (r.contains("compile_s")) {
      std::vector<std::string> t;
      for (const json& x : r["compile_s"]) t.push_back(x.is_number() ? fmt::format("{:.1f}", x.get<double>()) : "?");
      fmt::print("; compile s by round: {}", fmt::join(t, ", "));
    }
    fmt::print("\n");
  }
}

}  // namespace

void add_peer_options(CLI::App& app, PeerOptions& o) {
  app.add_option("--peer", o.name, "torch: also run the same GPT in PyTorch 2.x (bench/nanogpt_peer.py) alternately, "
                 "and print both sides' tokens/s, the ratio and their kernels")
      ->check(CLI::IsMember({"torch"}));
  app.add_option("--peer-python", o.python,
                 "--peer: the Python with torch 2.x (default: <source>/.venv-peers/bin/python, made by "
                 "scripts/setup-peers.sh)");
  app.add_option("--peer-modes", o.modes, "--peer: comma-separated peer modes: eager, compile, bf16, bf16-compile");
  app.add_option("--peer-rounds", o.rounds, "--peer: rounds, each running both sides once (the order flips)");
  app.add_option("--peer-max-seconds", o.max_seconds, "--peer: soft cap on one peer mode's warm-up and timed steps "
                 "(a slow mode times fewer than --steps, at least 1; 0: none)");
}

int run_bench_peer(const PeerOptions& peer, const PeerShapes& s) {
  if (peer.rounds < 1 || peer.rounds > 100) throw_input("--peer-rounds {} must be between 1 and 100", peer.rounds);
  if (!(peer.max_seconds >= 0)) throw_input("--peer-max-seconds {} must be >= 0", peer.max_seconds);
  if (std::find(kPeerModels.begin(), kPeerModels.end(), s.model) == kPeerModels.end()) {
    throw_input("--peer torch: the peer has the presets {}, not --model {}", fmt::join(kPeerModels, ", "), s.model);
  }
  const std::vector<std::string> modes = check_modes(peer.modes);
  const std::string python = peer_python(peer);
  const std::string script = (fs::path(WEFT_SOURCE_DIR) / kPeerScript).string();
  const std::string version = check_peer_environment(python, script);
  const int64_t threads = set_threads(s.threads);  // the same count on both sides
  PeerRuns runs;
  for (int64_t r = 0; r < peer.rounds; ++r) {
    for (int side = 0; side < 2; ++side) {
      if ((side == 0) == (r % 2 == 0)) {
        runs.weft.push_back(run_weft_side(s, threads, false));
        fmt::print(stderr, "round {}/{}: weft {:.1f} tokens/s\n", r + 1, peer.rounds,
                   runs.weft.back()["tokens_per_s"].get<double>());
        if (OnednnGemm::native_bf16()) {
          runs.weft_bf16.push_back(run_weft_side(s, threads, true));
          fmt::print(stderr, "round {}/{}: weft bf16 fast {:.1f} tokens/s\n", r + 1, peer.rounds,
                     runs.weft_bf16.back()["tokens_per_s"].get<double>());
        }
      } else {
        const std::vector<json> lines = run_peer_side(s, threads, python, script, modes, peer.max_seconds, r == 0);
        for (size_t i = 0; i < modes.size(); ++i) {
          runs.modes[modes[i]].push_back(lines[i]);
          fmt::print(stderr, "round {}/{}: torch {} {:.1f} tokens/s\n", r + 1, peer.rounds, modes[i],
                     lines[i]["tokens_per_s"].get<double>());
        }
      }
    }
  }
  const json j = summarize(runs, s, threads, peer, modes, version);
  if (s.format == "json") {
    fmt::print("{}\n", j.dump());
  } else {
    print_table(j, modes);
  }
  return 0;
}

}  // namespace weft
