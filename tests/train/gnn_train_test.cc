// The graph-network family through weft train and weft eval (issue 33, item 6): a prepared LJ
// dataset trains with the family's settings ([model] keys), the model takes the data's radius and
// normalisation (written into the checkpoint's config.json), a run resumed from a checkpoint
// follows the uninterrupted one bit for bit, weft eval scores the checkpoint beside its
// baselines, and bad settings are refused naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "comm/self_comm.h"
#include "core/error.h"
#include "data/atoms/graph_prepare.h"
#include "test_util.h"
#include "train/trainer.h"

namespace weft {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

void prepare_lj(const std::string& dir) {
  GraphPrepareOptions o;
  o.out_dir = dir;
  o.synthetic_lj = true;
  o.lj.structures = 60;
  o.lj.max_cells = 3;
  o.lj.species = 2;
  prepare_graphs(o);
}

RunConfig gnn_run(const std::string& data, const std::string& out) {
  RunConfig c;
  c.model = "gnn-tiny";
  c.model_settings = {{"layer", "egnn"}, {"activation", "silu"}, {"forces_weight", "2"}};
  c.data = data;
  c.global_batch = 4;
  c.micro_batch = 2;
  c.steps = 8;
  c.lr = 3e-3;
  c.warmup_steps = 2;
  c.val_every = 4;
  c.val_batches = 5;
  c.ckpt_every = 4;
  c.keep_last = 0;
  c.out = out;
  c.log_every = 100;
  c.threads = 2;
  return c;
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A copy of `full`'s run (trained to its 8 steps in tmp / "full") resumed from its step-4
// checkpoint: the same metrics and the same final weights, bit for bit.
void expect_resume_bit_for_bit(const TempDir& tmp, const RunConfig& full) {
  const std::string part = tmp / "part";
  fs::create_directories(part);
  fs::copy(tmp / "full/step-000004", part + "/step-000004", fs::copy_options::recursive);
  {
    std::ofstream out(part + "/metrics.jsonl");
    for (const auto& j : read_metrics(tmp / "full/metrics.jsonl")) {
      if (j["step"].get<int64_t>() <= 4) out << j.dump() << "\n";
    }
  }
  TrainOptions opt;
  opt.resume = true;
  RunConfig resumed = full;
  resumed.out = part;
  TrainResult b = train(resumed, opt);
  EXPECT_EQ(b.first_step, 4);
  const auto ma = read_metrics(tmp / "full/metrics.jsonl"), mb = read_metrics(part + "/metrics.jsonl");
  ASSERT_EQ(ma.size(), mb.size());
  int losses = 0;
  for (size_t i = 0; i < ma.size(); ++i) {
    for (const char* k : {"loss", "grad_norm", "val_loss"}) {
      if (!ma[i].contains(k)) continue;
      ASSERT_TRUE(mb[i].contains(k)) << k;
      EXPECT_EQ(ma[i][k].get<double>(), mb[i][k].get<double>()) << k << " at step " << ma[i]["step"];
      ++losses;
    }
  }
  EXPECT_GT(losses, 8);
  EXPECT_EQ(test::read_text(tmp / "full/step-000008/model.safetensors"),
            test::read_text(part + "/step-000008/model.safetensors"));

}

TEST(GnnTrain, TrainsResumesBitForBitAndEvaluates) {
  TempDir tmp("gnn_train");
  prepare_lj(tmp / "lj");
  const RunConfig full = gnn_run(tmp / "lj", tmp / "full");
  TrainResult a = train(full, {});
  ASSERT_EQ(a.steps_done, 8);
  // The checkpoint's config.json: the settings and the data's statistics.
  const auto cj = nlohmann::json::parse(test::read_text(tmp / "full/step-000008/config.json"));
  EXPECT_EQ(cj.at("model_type"), "gnn");
  EXPECT_EQ(cj.at("mpnn_type"), "egnn");
  EXPECT_EQ(cj.at("task_weights").at("forces").get<double>(), 2.0);
  EXPECT_EQ(cj.at("radius").get<double>(), 5.0);
  EXPECT_LT(cj.at("normalisation").at("energy_per_atom_mean").get<double>(), -1.0);  // LJ: about -3.8 eps
  EXPECT_GT(cj.at("normalisation").at("force_scale").get<double>(), 0.1);

  expect_resume_bit_for_bit(tmp, full);

  // weft eval on the test split: the table's rows, the JSON, the parity plot.
  const std::string json = tmp / "eval.json", png = tmp / "parity.png";
  const auto r = test::run_weft(fmt::format("eval --checkpoint {} --data {} --out {} --parity {}",
                                            tmp / "full", tmp / "lj", json, png),
                                tmp / "eval_scratch");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("energy per atom: per-species fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("force component: zero forces"), std::string::npos) << r.out;
  const auto ej = nlohmann::json::parse(test::read_text(json));
  EXPECT_GT(ej.at("structures").get<int64_t>(), 0);
  EXPECT_GT(ej.at("baselines").at("zero_forces").at("force_mae").get<double>(), 0.0);
  EXPECT_TRUE(ej.at("model").contains("force_mae"));
  EXPECT_TRUE(fs::exists(png));
}

// PNA: its degree scalers' means come from the training split's in-degree histogram into
// config.json; BatchNorm's running statistics move with the steps, are checkpointed as
// parameters and resume bit for bit (the validation losses, which use them, included).
TEST(GnnTrain, PnaTakesItsDegreeMeansFromTheDataAndResumesItsRunningStatistics) {
  TempDir tmp("gnn_pna_train");
  prepare_lj(tmp / "lj");
  RunConfig full = gnn_run(tmp / "lj", tmp / "full");
  full.model_settings["layer"] = "pna";
  ASSERT_EQ(train(full, {}).steps_done, 8);
  const auto cj = nlohmann::json::parse(test::read_text(tmp / "full/step-000008/config.json"));
  EXPECT_EQ(cj.at("mpnn_type"), "pna");
  const double delta = cj.at("pna_delta")[0].get<double>(), delta_lin = cj.at("pna_delta")[1].get<double>();
  EXPECT_GT(delta, 1.5);  // log(d + 1) of tens of neighbours within 5 A
  EXPECT_NEAR(delta_lin, cj.at("data_means").at("in_degree").get<double>(), 1e-9 * delta_lin);
  SafetensorsFile st(tmp / "full/step-000008/model.safetensors");
  const auto& info = st.info("convs.0.norm.running_var");
  ASSERT_EQ(info.shape, std::vector<int64_t>{16});
  const float* var = static_cast<const float*>(st.data("convs.0.norm.running_var"));
  double moved = 0.0;
  for (int c = 0; c < 16; ++c) moved = std::max(moved, std::abs(var[c] - 1.0));
  EXPECT_GT(moved, 1e-3) << "the running variance never moved from its initial 1";
  expect_resume_bit_for_bit(tmp, full);
}

// The planner beside the run (issue 33, item 8): a graph run prints its predicted step time (the
// family's kernels at the data's mean graph, plan/predict.h) and its memory, predicted to the byte.
TEST(GnnTrain, RunsPrintThePredictedStepTimeAndExactMemory) {
  TempDir tmp("gnn_predicted");
  prepare_lj(tmp / "lj");
  for (const char* layer : {"schnet", "egnn", "pna"}) {
    RunConfig c = gnn_run(tmp / "lj", tmp / layer);
    c.model_settings["layer"] = layer;
    c.steps = 3;
    c.val_every = 0;
    c.ckpt_every = 0;
    c.system = std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml";
    // On a communicator that outlives the run (weft tune's and weft ensemble's): the run's tracer
    // is detached when it ends.
    const std::unique_ptr<Communicator> world = make_self_communicator("world");
    ASSERT_EQ(train(c, {}, *world).steps_done, 3);
    EXPECT_EQ(world->tracer(), nullptr);
    nlohmann::json time, memory;
    for (const auto& j : read_metrics(tmp / (std::string(layer) + "/metrics.jsonl"))) {
      if (j.contains("step_time_report")) time = j["step_time_report"];
      if (j.contains("memory_report")) memory = j["memory_report"];
    }
    ASSERT_FALSE(time.is_null()) << layer;
    EXPECT_GT(time["predicted_s"].get<double>(), 0) << layer;
    EXPECT_GT(time["measured_s"].get<double>(), 0) << layer;
    EXPECT_GT(time["predicted"]["compute"].get<double>(), 0) << layer;
    ASSERT_EQ(memory.size(), 1u) << layer;
    for (const char* k : {"params", "grads", "optimizer", "activations", "workspace", "comm"}) {
      EXPECT_EQ(memory[0]["predicted"][k].get<int64_t>(), memory[0]["measured"][k].get<int64_t>()) << layer << ": " << k;
    }
  }
}

// Load balance (issue 33, item 5): on 2 ranks, dealing each step's structures to the micro-batch
// slots by cost (data.balance = "cost") instead of equal counts trains on the same global batch
// (the losses agree within 1e-5: only the summation order differs), records the ranks' busy-time
// imbalance per step, and the communication model still equals the trace (the step's term counts
// and the busy times ride on all-reduces it prices).
TEST(GnnTrain, CostBalancedShardingKeepsTheLossesAndRecordsTheImbalance) {
  TempDir tmp("gnn_balance");
  prepare_lj(tmp / "lj");
  const std::string config = tmp / "run.toml";
  std::ofstream(config) << "[model]\nmodel = \"gnn-tiny\"\nlayer = \"schnet\"\n";
  std::map<std::string, std::map<int64_t, double>> loss;
  for (const char* mode : {"count", "cost"}) {
    const std::string out = tmp / mode;
    const auto r = test::run_weft_with(
        test::mpi_launcher(2),
        fmt::format("train {} --data {} --out {} --steps 6 --global-batch 8 --micro-batch 2 --dp 2 --balance {} "
                    "--val-every 0 --ckpt-every 0 --trace true --threads 1",
                    config, tmp / "lj", out, mode),
        tmp / (std::string("cmd_") + mode));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    loss[mode] = test::metric_series(out, "loss");
    const auto imbalance = test::metric_series(out, "imbalance");
    ASSERT_EQ(imbalance.size(), 6u) << mode;
    for (const auto& [step, v] : imbalance) EXPECT_GE(v, 1.0) << mode << " step " << step;
    const std::string report = test::read_text(out + "/comm_report.txt");
    EXPECT_NE(report.find("rows differing from the model (marked *): 0"), std::string::npos) << report;
  }
  test::expect_same_series(loss["cost"], loss["count"], "cost-balanced against equal counts");
}

TEST(GnnTrain, SettingsAreCheckedByTheFamily) {
  TempDir tmp("gnn_settings");
  RunConfig c = gnn_run(tmp / "none", tmp / "out");
  c.model_settings["layers"] = "3";  // a typo of n_layer
  EXPECT_NE(test::input_error_message([&] { (void)c.model_config(); })
                .find("[model] key 'layers' (3) is not a setting of model 'gnn-tiny' (graph network models take layer, "
                      "activation, pooling"),
            std::string::npos);
  c.model_settings = {{"layer", "gat"}};
  EXPECT_NE(test::input_error_message([&] { (void)c.model_config(); }).find("unknown graph layer 'gat'"),
            std::string::npos);
  c.model_settings = {{"energy_weight", "abc"}};
  EXPECT_NE(test::input_error_message([&] { (void)c.model_config(); }).find("[model] energy_weight must be a number"),
            std::string::npos);
  RunConfig g;
  g.model = "tiny";
  g.model_settings = {{"layer", "egnn"}};
  EXPECT_NE(test::input_error_message([&] { (void)g.model_config(); })
                .find("[model] key 'layer' (egnn) is not a setting of model 'tiny' (GPT models take position, norm, bias, "
                      "mlp, ffn, n_kv_head"),
            std::string::npos);
  // The settings survive the resolved config (config.toml of a run) and the command line.
  RunConfig t = gnn_run("d", "o");
  set_run_config_key(t, "model.pooling", "add");
  const std::string toml = t.to_toml();
  EXPECT_NE(toml.find("pooling = 'add'"), std::string::npos) << toml;
  EXPECT_NE(toml.find("layer = 'egnn'"), std::string::npos) << toml;
}

}  // namespace
}  // namespace weft
