// The model search and the ensemble of its best trials (issue 33, item 7; seed 003's workflow):
// `weft tune CONFIG --space ...` trains each trial and scores it on the validation split (a graph
// run: energy and force MAE), writes models.json and best.toml; bad spaces are refused before
// anything trains. `weft ensemble --from` trains the top K concurrently as sub-communicators of
// one MPI world, sized by predicted cost (or equally), and scores their mean and spread.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/atoms/graph_prepare.h"
#include "test_util.h"
#include "tune/ensemble_groups.h"
#include "tune/model_search.h"

namespace weft::tune {
namespace {

using test::RunResult;
using test::TempDir;

// A prepared LJ set, a tiny graph run's config and (search()) a model search of 4 trials over it.
class ModelSearch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>("model-search");
    GraphPrepareOptions o;
    o.out_dir = *dir_ / "lj";
    o.synthetic_lj = true;
    o.lj.structures = 80;
    o.lj.max_cells = 3;
    o.lj.species = 2;
    prepare_graphs(o);
    std::ofstream(*dir_ / "run.toml") << "[model]\nmodel = \"gnn-tiny\"\n[data]\ndata = \"" << (*dir_ / "lj")
                                      << "\"\n[train]\nglobal_batch = 4\nmicro_batch = 1\nsteps = 6\nlr = 3e-3\n"
                                         "warmup_steps = 1\nthreads = 1\nseed = 3\n[eval]\nval_every = 6\nval_batches = 2\n"
                                         "[checkpoint]\nckpt_every = 0\n[run]\nlog_every = 100\n[parallel]\ncomm_timeout = 120.0\n";
  }
  void search() {
    const RunResult r = weft("tune " + config() + " --space model.layer=schnet,egnn --space n_embd=8,16 --space "
                             "lr=1e-3,3e-3 --trials 4 --initial 3 --seed 2 --out " + (*dir_ / "search"),
                             "search");
    ASSERT_EQ(r.code, 0) << r.err;
  }
  RunResult weft(const std::string& args, const std::string& scratch, int np = 0) {
    return test::run_weft_with(test::mpi_launcher(np), args, *dir_ / ("scratch-" + scratch));
  }
  std::string config() { return *dir_ / "run.toml"; }
  static nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(test::read_text(path)); }
  std::unique_ptr<TempDir> dir_;
};

TEST_F(ModelSearch, TrialsAreScoredOnTheValidationSplit) {
  ASSERT_NO_FATAL_FAILURE(search());
  const nlohmann::json j = read_json(*dir_ / "search/models.json");
  EXPECT_EQ(j["objective"], "val_mae");
  ASSERT_EQ(j["trials"].size(), 4u);
  std::set<int64_t> ids;
  double best = 1e300;
  int64_t best_id = -1;
  for (const auto& t : j["trials"]) {
    ASSERT_FALSE(t.contains("failed")) << t.dump();
    ids.insert(t["id"].get<int64_t>());
    for (const char* k : {"val_mae", "val_energy_mae", "val_force_mae", "val_loss"}) {
      ASSERT_TRUE(t["metrics"].contains(k)) << k << ": " << t.dump();
      EXPECT_GT(t["metrics"][k].get<double>(), 0) << k;
    }
    EXPECT_EQ(t["objective"].get<double>(), t["metrics"]["val_mae"].get<double>());
    EXPECT_TRUE(std::filesystem::exists(t["out"].get<std::string>())) << t["out"];
    if (t["objective"].get<double>() < best) best = t["objective"].get<double>(), best_id = t["id"].get<int64_t>();
  }
  EXPECT_EQ(ids.size(), 4u);  // no point twice
  EXPECT_EQ(j["best"].get<int64_t>(), best_id);
  // best.toml is the best trial's whole config: its values set.
  const std::string toml = test::read_text(*dir_ / "search/best.toml");
  for (const auto& t : j["trials"]) {
    if (t["id"].get<int64_t>() != best_id) continue;
    EXPECT_NE(toml.find("layer = '" + t["values"]["model.layer"].get<std::string>() + "'"), std::string::npos) << toml;
  }
  // read back best first
  const std::vector<ModelTrial> trials = read_model_trials(*dir_ / "search/models.json");
  ASSERT_EQ(trials.size(), 4u);
  EXPECT_EQ(trials[0].id, best_id);
  for (size_t i = 1; i < trials.size(); ++i) EXPECT_LE(trials[i - 1].objective, trials[i].objective);
}

TEST_F(ModelSearch, BadSpacesAreRefusedBeforeAnythingTrains) {
  EXPECT_NE(test::input_error_message([] { parse_search_dim("lr"); }).find("expected KEY=V1,V2"), std::string::npos);
  EXPECT_NE(test::input_error_message([] { parse_search_dim("lr=1e-3,,2e-3"); }).find("an empty value"),
            std::string::npos);
  const SearchDim d = parse_search_dim("n-embd=8,16");
  EXPECT_EQ(d.key, "n_embd");
  EXPECT_EQ(d.values, (std::vector<std::string>{"8", "16"}));
  for (const auto& [space, says] : std::vector<std::pair<std::string, std::string>>{
           {"model.no_such=1,2", "no_such"}, {"model.layer=schnet,gat", "gat"}, {"lr=1e-3,-1", "lr"}, {"bogus=1", "bogus"}}) {
    const std::string out = *dir_ / ("bad-" + std::to_string(std::hash<std::string>{}(space)));
    const RunResult r = weft("tune " + config() + " --space " + space + " --trials 2 --out " + out, "bad");
    EXPECT_EQ(r.code, 2) << space << ": " << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << space << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(out + "/models.json")) << space;
  }
  const RunResult r = weft("tune " + config() + " --space lr=1e-3 --objective val_nothing --trials 1 --out " +
                               (*dir_ / "bad-objective"), "bad-objective");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--objective val_nothing"), std::string::npos) << r.err;
}

TEST(EnsembleGroups, RanksFollowThePredictedCost) {
  const auto any = [](int, int) { return true; };
  // Costs 1 : 2 : 5 on 8 ranks: finishes 1, 1, 1.25 (6 ranks would make 5/6 < 1: the cheapest get 1, 2).
  EXPECT_EQ(ensemble_group_sizes({1, 2, 5}, any, 8, false), (std::vector<int>{1, 2, 5}));
  EXPECT_EQ(ensemble_group_sizes({1, 1, 1}, any, 3, false), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(ensemble_group_sizes({1, 2, 5}, any, 9, true), (std::vector<int>{3, 3, 3}));
  // Batches that divide over powers of two only: the costly member jumps 2 -> 4, the rank left
  // goes to the other; on 7 ranks the last one no member can take stays out.
  const auto pow2 = [](int, int n) { return (n & (n - 1)) == 0; };
  EXPECT_EQ(ensemble_group_sizes({1, 8}, pow2, 6, false), (std::vector<int>{2, 4}));
  EXPECT_EQ(ensemble_group_sizes({1, 8}, pow2, 7, false), (std::vector<int>{2, 4}));
  EXPECT_NE(test::input_error_message([&] { ensemble_group_sizes({1, 1, 1}, any, 2, false); })
                .find("--top 3 members need at least 3 ranks; this world has 2"),
            std::string::npos);
  EXPECT_NE(test::input_error_message([&] { ensemble_group_sizes({1, 1}, any, 3, true); })
                .find("3 ranks do not divide into 2 equal groups"),
            std::string::npos);
  EXPECT_NE(test::input_error_message([&] { ensemble_group_sizes({1, 1}, pow2, 6, true); }).find("member 0 cannot run on 3 ranks"),
            std::string::npos);
}

// The ensemble's mean is never worse than its members on average (|mean(p) - t| <= mean |p - t|
// per structure and component), its spread is scored, and the members' ranks follow their cost.
void expect_ensemble(const nlohmann::json& e, int K, int world) {
  ASSERT_EQ(static_cast<int>(e["members"].size()), K);
  int ranks = 0;
  double e_mean = 0, f_mean = 0;
  for (const auto& m : e["members"]) {
    ranks += m["ranks"].get<int>();
    EXPECT_GE(m["ranks"].get<int>(), 1);
    EXPECT_GT(m["finish_s"].get<double>(), 0);
    e_mean += m["energy_mae"].get<double>() / K;
    f_mean += m["force_mae"].get<double>() / K;
  }
  EXPECT_EQ(ranks + e["idle_ranks"].get<int>(), world);
  EXPECT_LE(e["ensemble"]["energy_mae"].get<double>(), e_mean * (1 + 1e-9));
  EXPECT_LE(e["ensemble"]["force_mae"].get<double>(), f_mean * (1 + 1e-9));
  for (const char* k : {"energy_within_2sd", "force_within_2sd"}) {
    EXPECT_GE(e["calibration"][k].get<double>(), 0.0) << k;
    EXPECT_LE(e["calibration"][k].get<double>(), 1.0) << k;
  }
  EXPECT_GE(e["finish"]["spread"].get<double>(), 0.0);
}

TEST_F(ModelSearch, EnsembleTrainsTheTopMembersAsSubCommunicators) {
  ASSERT_NO_FATAL_FAILURE(search());
  const std::string from = *dir_ / "search";
  RunResult r = weft("ensemble " + config() + " --from " + from + " --top 2 --out " + (*dir_ / "ens-cost"), "cost", 3);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ensemble (mean of the members)"), std::string::npos) << r.out;
  const nlohmann::json c = read_json(*dir_ / "ens-cost/ensemble.json");
  expect_ensemble(c, 2, 3);
  EXPECT_EQ(c["groups"], "cost");
  // The costlier member has at least the ranks of the cheaper one.
  const auto& m = c["members"];
  if (m[0]["cost"].get<double>() > m[1]["cost"].get<double>()) {
    EXPECT_GE(m[0]["ranks"].get<int>(), m[1]["ranks"].get<int>());
  } else if (m[1]["cost"].get<double>() > m[0]["cost"].get<double>()) {
    EXPECT_GE(m[1]["ranks"].get<int>(), m[0]["ranks"].get<int>());
  }
  // Equal groups of the top 3 on 3 ranks; --evaluate scores the search's own checkpoints.
  r = weft("ensemble " + config() + " --from " + from + " --top 3 --groups equal --out " + (*dir_ / "ens-eq"), "eq", 3);
  ASSERT_EQ(r.code, 0) << r.err;
  expect_ensemble(read_json(*dir_ / "ens-eq/ensemble.json"), 3, 3);
  r = weft("ensemble " + config() + " --from " + from + " --top 2 --evaluate --out " + (*dir_ / "ens-ev"), "ev", 2);
  ASSERT_EQ(r.code, 0) << r.err;
  expect_ensemble(read_json(*dir_ / "ens-ev/ensemble.json"), 2, 2);
  // Refusals: more members than ranks, equal groups that do not divide, an existing ensemble.
  r = weft("ensemble " + config() + " --from " + from + " --top 3 --out " + (*dir_ / "ens-x"), "x", 2);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--top 3 members need at least 3 ranks"), std::string::npos) << r.err;
  r = weft("ensemble " + config() + " --from " + from + " --top 2 --groups equal --out " + (*dir_ / "ens-y"), "y", 3);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("3 ranks do not divide into 2 equal groups"), std::string::npos) << r.err;
  r = weft("ensemble " + config() + " --from " + from + " --top 2 --out " + (*dir_ / "ens-ev"), "z", 2);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("already holds an ensemble"), std::string::npos) << r.err;
  r = weft("ensemble " + config() + " --from " + (*dir_ / "lj") + " --top 2 --out " + (*dir_ / "ens-w"), "w", 2);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no model search here"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weft::tune
