// The planner on graph networks (issue 33, item 8; GnnDescription): the family lists everything a
// micro-batch runs as its front (edge features, embedding, layers) and back (heads, loss); the
// products of those lists are the family's FLOPs (gnn_forward_flops) at the data's mean graph;
// the activations are priced at the device's measured function rates; the layout rules refuse
// what the family cannot run (tp, pp, recompute, 16-bit precision) with the numbers; `weft plan
// --model gnn-*` ranks dp layouts, takes family settings (--model.NAME) and defaults to fp32.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/gnn/gnn_config.h"
#include "model/gnn/gnn_description.h"
#include "model/gnn/gnn_layers.h"
#include "parallel/layout_rules.h"
#include "plan/kernel_model.h"
#include "plan/predict.h"
#include "plan_test_util.h"
#include "test_util.h"

namespace weft::plan {
namespace {

using test::RunResult;

ModelConfig gnn(const char* preset, const char* layer, double atoms, double degree) {
  const ModelConfig base = model_preset(preset);
  return base.family->with_settings(base, {{"layer", layer},
                                           {"mean_atoms", fmt::format("{}", atoms)},
                                           {"mean_in_degree", fmt::format("{}", degree)}});
}

struct Sums {
  double products = 0, functions = 0;
};
Sums sums(const std::vector<Kernel>& ks) {
  Sums s;
  for (const Kernel& k : ks) {
    if (k.k > 0) s.products += k.times * 2 * k.m * k.n * k.k * k.batch;
    s.functions += k.times * k.functions;
  }
  return s;
}

TEST(PlanGnn, ForwardProductsAreTheFamilysFlopsAtTheMeanGraph) {
  for (const char* layer : {"schnet", "egnn", "pna"}) {
    const ModelConfig mc = gnn("gnn-lj", layer, 30.0, 12.0);
    const int64_t B = 4;
    const auto d = mc.family->describe({.model = mc, .B = B, .T = 0});
    const EndsWork w = d->ends_work();
    const double N = B * 30.0, E = N * 12.0, G = B;
    const GnnFlops f = gnn_forward_flops(mc);
    const double forward = sums(w.front_forward.kernels).products + sums(w.back_forward.kernels).products;
    EXPECT_NEAR(forward, N * f.per_node + E * f.per_edge + G * f.per_graph, 1e-9 * forward) << layer;
    // The backward: each product's dW, and dX where a gradient flows on (not into the data's
    // features: SchNet's Gaussians, the distances), plus the force head's d(s_e) = d(t_e) . u_e.
    const double backward = sums(w.front_backward.kernels).products + sums(w.back_backward.kernels).products;
    EXPECT_GT(backward, 1.5 * forward) << layer;
    EXPECT_LT(backward, 2.05 * forward) << layer;
    EXPECT_DOUBLE_EQ(d->mean_positions(), N) << layer;
    // Every activation a layer runs is listed with its function: SiLU after each layer's
    // update, SchNet's shifted softplus in its filter.
    const Sums fwd = sums(w.front_forward.kernels);
    EXPECT_GT(fwd.functions, 0) << layer;
  }
}

// The products carry the operand layouts the cpu backend runs (matmul_forward: A B;
// matmul_backward: dX = dY W^T, dW = X^T dY), which a CPU's table prices apart: every forward
// product is A B, every backward one A B^T or A^T B, one weight gradient per forward product,
// except the force head's d(s_e) = d(t_e) . u_e, which the backward runs as a forward product
// (E x 3) @ (3 x 1).
TEST(PlanGnn, BackwardProductsAreTheInputAndWeightGradientLayouts) {
  for (const char* layer : {"schnet", "egnn", "pna"}) {
    const ModelConfig mc = gnn("gnn-lj", layer, 30.0, 12.0);
    const plan_test::EndLayouts e = plan_test::end_layouts(mc.family->describe({.model = mc, .B = 4, .T = 0})->ends_work());
    EXPECT_GT(e.forward, 0) << layer;
    EXPECT_EQ(e.forward_not_ab, 0) << layer;
    EXPECT_EQ(e.weight_gradients, e.forward) << layer;
    const double E = 4 * 30.0 * 12.0;  // the force head's row dot, (E x 3) @ (3 x 1)
    const std::vector<std::string> row_dot = {std::to_string(E) + " x " + std::to_string(1.0) + " x " + std::to_string(3.0)};
    EXPECT_EQ(e.backward_ab, row_dot) << layer;
  }
}

TEST(PlanGnn, WithoutDataStatisticsTheCapacityIsPriced) {
  const ModelConfig mc = model_preset("gnn-lj");
  const auto d = mc.family->describe({.model = mc, .B = 2, .T = 0});
  const GnnFields& f = gnn_fields(mc);
  EXPECT_DOUBLE_EQ(d->mean_positions(), 2.0 * f.max_atoms);
}

TEST(PlanGnn, ActivationsArePricedAtTheMeasuredFunctionRate) {
  System sys = plan_test::one_level(1e10, 1e-6);
  Device& dev = sys.device;
  EXPECT_DOUBLE_EQ(elementwise_time(dev, 8e6, "ssp", 1e6), memory_time(dev, 8e6));  // no rate: its bytes
  dev.function_rates["ssp"] = 1e8;
  EXPECT_DOUBLE_EQ(elementwise_time(dev, 8e6, "ssp", 1e6), 1e6 / 1e8 + dev.kernel_latency);
  EXPECT_DOUBLE_EQ(elementwise_time(dev, 8e6, "silu", 1e6), memory_time(dev, 8e6));  // another function
  // A slow function makes the predicted step longer by its elements' time.
  const ModelShape m = ModelShape::from_config(gnn("gnn-lj", "schnet", 30.0, 12.0));
  Layout l = plan_test::grid(1, 1, 1);
  l.micro_batch = 4;
  const Options o = Options::from_system(sys, Precision::kFp32, 16);
  System fast = sys;
  fast.device.function_rates.clear();
  EXPECT_GT(predict(m, sys, l, o).step_time_s, predict(m, fast, l, o).step_time_s);
}

TEST(PlanGnn, DataParallelLayoutsArePricedAtTheMeanGraph) {
  const System sys = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml");
  const ModelShape m = ModelShape::from_config(gnn("hydragnn-gfm-egnn", "egnn", 40.0, 20.0));
  m.validate();
  const Options o = Options::from_system(sys, Precision::kFp32, 256);
  Layout one = plan_test::grid(1, 1, 1), four = plan_test::grid(1, 1, 4);
  one.micro_batch = four.micro_batch = 8;
  four.zero = 1;
  const Prediction p1 = predict(m, sys, one, o), p4 = predict(m, sys, four, o);
  EXPECT_GT(p1.time.compute, 0);
  EXPECT_EQ(p1.time.tp_comm, 0);
  EXPECT_EQ(p1.time.pp_bubble, 0);
  EXPECT_GT(p4.time.dp_exposed + p4.time.overhead, 0);
  EXPECT_LT(p4.step_time_s, p1.step_time_s);
  EXPECT_NEAR(p1.time.compute / p4.time.compute, 4.0, 1e-9);  // the same micro-batches, a quarter each
  // Positions per second are atoms: the data's mean per structure.
  EXPECT_NEAR(p1.tokens_per_s * p1.step_time_s, 256 * 40.0, 1e-6);
  EXPECT_GT(p1.mfu, 0);
  EXPECT_LT(p1.mfu, 1);
  EXPECT_TRUE(p1.fits);
}

TEST(PlanGnn, LayoutsTheFamilyCannotRunAreRefusedWithTheNumbers) {
  const ModelShape m = ModelShape::from_config(model_preset("gnn-lj"));
  auto error_of = [&](auto&& edit) {
    Layout l = plan_test::grid(1, 1, 2);
    l.micro_batch = 2;
    Precision p = Precision::kFp32;
    edit(l, p);
    return layout_error(layout_candidate(m, l, 8, p));
  };
  EXPECT_EQ(error_of([](Layout&, Precision&) {}), "");
  const std::string tp2 = error_of([](Layout& l, Precision&) { l.tp = 2; });
  EXPECT_NE(tp2.find("tp must be 1, got 2"), std::string::npos) << tp2;
  EXPECT_NE(error_of([](Layout& l, Precision&) { l.pp = 2; }).find("pp must be 1, got 2"), std::string::npos);
  EXPECT_NE(error_of([](Layout& l, Precision&) { l.recompute = Recompute::kFull; }).find("recompute must be 'none', got 'full'"),
            std::string::npos);
  EXPECT_NE(error_of([](Layout&, Precision& p) { p = Precision::kBf16; }).find("precision 'bf16'"), std::string::npos);
}

TEST(PlanGnn, SystemFilesKeepTheFunctionRates) {
  test::TempDir tmp("gnn-plan-system");
  System s = plan_test::one_level(1e10, 1e-6);
  s.device.function_rates = {{"silu", 6e8}, {"ssp_backward", 5.5e8}};
  const std::string path = tmp / "sys.toml";
  std::ofstream(path) << system_to_toml(s, {});
  const System back = load_system(path);
  ASSERT_EQ(back.device.function_rates.size(), 2u);
  EXPECT_DOUBLE_EQ(back.device.function_rates.at("silu"), 6e8);
  EXPECT_DOUBLE_EQ(back.device.function_rates.at("ssp_backward"), 5.5e8);
  std::string text = system_to_toml(s, {});
  text.replace(text.find("6e+08"), 5, "-1");
  std::ofstream(path) << text;
  const std::string msg = test::input_error_message([&] { load_system(path); });
  EXPECT_NE(msg.find("function_rates.silu"), std::string::npos) << msg;
}

TEST(PlanGnn, PlanCommandRanksDataParallelLayouts) {
  test::TempDir tmp("gnn-plan-cli");
  const std::string sys = std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml";
  RunResult r = test::run_weft("plan --model gnn-lj --system " + sys +
                                   " --gpus 4 --global-batch 64 --model.mean_atoms 30 --model.mean_in_degree=12",
                               tmp / "ok");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("fp32"), std::string::npos) << r.out;  // the family's only precision
  EXPECT_NE(r.out.find("tp 1 pp 1 dp 4"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("tp 2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("pp 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("positions are atoms"), std::string::npos) << r.out;
  r = test::run_weft("plan --model gnn-lj --system " + sys + " --gpus 4 --global-batch 64 --explain", tmp / "explain");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("message-passing layers"), std::string::npos) << r.out;
  r = test::run_weft("plan --model gnn-lj --system " + sys + " --gpus 4 --global-batch 64 --model.no_such 1", tmp / "bad");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no_such"), std::string::npos) << r.err;
  r = test::run_weft("plan --model gnn-lj --system " + sys + " --gpus 4 --global-batch 64 --precision bf16", tmp / "bf16");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bf16"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weft::plan
