// The graph networks (issue 33) against an independent float64 PyTorch implementation
// (tests/reference/gnn_reference.py): same weights, same structures (periodic Lennard-Jones cells
// of a two-species mixture, their radius graphs); the loss (forces over atoms, energy per atom
// over graphs, normalised task weights), every gradient tensor, and five AdamW steps, for each
// layer type with a different activation and pooling. Also the family's registration, its
// config.json round trip and its refusals.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_test_util.h"
#include "ckpt/safetensors.h"
#include "data/atoms/graph_batch.h"
#include "data/atoms/lennard_jones.h"
#include "model/family.h"
#include "model/gnn/gnn.h"
#include "model/gnn/gnn_config.h"
#include "optim/optim.h"

namespace fs = std::filesystem;

namespace weft {
namespace {

ModelConfig test_config(GnnLayer layer, Activation act, GnnPooling pool) {
  ModelConfig cfg = *gnn_family().preset(layer == GnnLayer::kSchnet ? "gnn-tiny"
                                         : layer == GnnLayer::kEgnn ? "gnn-egnn-tiny"
                                                                    : "gnn-pna-tiny");
  cfg.n_embd = 16, cfg.ffn = 12, cfg.n_layer = 2;
  GnnFields f = gnn_fields(cfg);
  f.activation = act;
  f.pooling = pool;
  f.num_gaussians = 10;
  f.cutoff = 5.0;
  f.energy_weight = 1.0, f.forces_weight = 3.0;
  f.energy_mean = -2.5, f.energy_std = 0.4, f.force_scale = 1.7;
  f.max_atoms = 27, f.max_neighbours = 40;
  f.pna_delta = 2.9, f.pna_delta_lin = 17.5;  // near these cells' in-degrees (8-27 atoms, radius 5)
  return with_gnn_fields(cfg, f);
}

// Batch k: three structures of the Kob-Andersen mixture (8 or 27 atoms), graphs of radius 5.
GraphBatch make_batch(const ModelConfig& cfg, int k) {
  LjSetOptions o;
  o.structures = 100, o.min_cells = 2, o.max_cells = 3, o.species = 2, o.seed = 5;
  const GnnFields& f = gnn_fields(cfg);
  GraphBatch b(GraphBudget{3 * f.max_atoms, 3 * f.max_atoms * f.max_neighbours, 3});
  for (int i = 0; i < 3; ++i) b.append(make_graph_sample(lj_structure(o, 3 * k + i), RadiusGraphOptions{5.0, 0}));
  return b;
}

double rel_l2(const float* x, const double* ref, int64_t n) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

void write_batches(const std::vector<GraphBatch>& batches, const std::string& path) {
  std::vector<TensorRef> t;
  for (size_t k = 0; k < batches.size(); ++k) {
    const GraphBatch& b = batches[k];
    const std::string p = std::to_string(k) + ".";
    const int64_t N = b.nodes(), E = b.edges(), G = b.graphs();
    t.push_back({p + "species", StDType::kI32, {N}, b.species().data()});
    t.push_back({p + "node_graph", StDType::kI32, {N}, b.node_graph().data()});
    t.push_back({p + "source", StDType::kI32, {E}, b.source().data()});
    t.push_back({p + "receiver", StDType::kI32, {E}, b.receiver().data()});
    t.push_back({p + "pos", StDType::kF32, {N, 3}, b.pos().data()});
    t.push_back({p + "shift_vec", StDType::kF32, {E, 3}, b.shift_vec().data()});
    t.push_back({p + "energy", StDType::kF64, {G}, b.energy().data()});
    t.push_back({p + "forces", StDType::kF32, {N, 3}, b.forces().data()});
  }
  write_safetensors(path, t, {});
}

// The mean loss of a batch and (training) its gradient: the model's loss sum over the atoms.
double mean_loss(GnnModel& m, const GraphBatch& b, bool training) {
  m.set_term_totals({b.nodes(), b.graphs()});
  const double atoms = static_cast<double>(b.nodes());
  return (training ? m.train_micro_batch(b, static_cast<float>(1.0 / atoms)) : m.loss_sum(b)) / atoms;
}

void check_against_torch(GnnLayer layer, Activation act, GnnPooling pool) {
  const ModelConfig cfg = test_config(layer, act, pool);
  const GnnFields& f = gnn_fields(cfg);
  auto be = make_cpu_backend();
  GnnModel model(cfg, *be);
  model.init(3);
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (int64_t i = 0; i < model.layout().total(); ++i) model.params()[i] += nd(rng);  // biases too
  std::vector<GraphBatch> batches;
  for (int k = 0; k < 3; ++k) batches.push_back(make_batch(cfg, k));
  ASSERT_GT(batches[0].edges(), 0);
  GraphBatch capacity(batches[0].budget());
  model.reserve(capacity, true, 0, 1);

  const std::string tag = fmt::format("{}_{}_{}", gnn_layer_name(f.layer), activation_name(act), gnn_pooling_name(pool));
  const fs::path dir = fs::path(WEFT_TEST_TMP) / ("gnn_reference_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<TensorRef> params;
  for (const ParamTensor& t : model.layout().tensors()) {
    params.push_back({t.name, StDType::kF32, t.full_shape, model.params() + t.offset});
  }
  write_safetensors((dir / "params.safetensors").string(), params, {});
  write_batches(batches, (dir / "batch.safetensors").string());
  {
    std::ofstream s(dir / "settings.json");
    s << fmt::format(
        R"({{"layer": "{}", "activation": "{}", "pooling": "{}", "cutoff": {}, "num_gaussians": {}, "layers": {}, )"
        R"("energy_weight": {}, "forces_weight": {}, "energy_mean": {}, "energy_std": {}, "force_scale": {}, )"
        R"("pna_delta": {}, "pna_delta_lin": {}}})",
        gnn_layer_name(f.layer), activation_name(act), gnn_pooling_name(pool), f.cutoff, f.num_gaussians, cfg.n_layer,
        f.energy_weight, f.forces_weight, f.energy_mean, f.energy_std, f.force_scale, f.pna_delta, f.pna_delta_lin);
  }
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const int steps = 5;
  const std::string cmd = fmt::format(
      "/usr/bin/python3 {}/tests/reference/gnn_reference.py --params {} --batch {} --settings {} --out {} --steps {} "
      "--lr {} --beta1 {} --beta2 {} --eps {} --weight-decay {}",
      WEFT_SOURCE_DIR, (dir / "params.safetensors").string(), (dir / "batch.safetensors").string(),
      (dir / "settings.json").string(), (dir / "ref.safetensors").string(), steps, lr, b1, b2, eps, wd);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the PyTorch reference failed (needs Debian's python3-torch): " << cmd;
  SafetensorsFile ref((dir / "ref.safetensors").string());

  model.zero_grads();
  const double loss = mean_loss(model, batches[0], true);
  const double ref_loss = static_cast<const double*>(ref.data("loss"))[0];
  EXPECT_NEAR(loss, ref_loss, 1e-6 * ref_loss) << tag;
  // Evaluation (loss_sum): PNA's BatchNorm with its running statistics, the others the same loss.
  const double ref_eval = static_cast<const double*>(ref.data("eval_loss"))[0];
  EXPECT_NEAR(mean_loss(model, batches[0], false), ref_eval, 1e-6 * ref_eval) << tag << ": loss_sum";
  if (layer != GnnLayer::kPna) EXPECT_EQ(ref_eval, ref_loss) << tag;
  double worst = 0.0;
  std::string worst_name;
  for (const ParamTensor& t : model.layout().tensors()) {
    const auto& info = ref.info("grad." + t.name);
    ASSERT_EQ(info.shape, t.full_shape) << t.name;
    const double err = rel_l2(model.grads() + t.offset, static_cast<const double*>(ref.data("grad." + t.name)), t.numel);
    if (err > worst) worst = err, worst_name = t.name;
    EXPECT_LT(err, 1e-4) << tag << " " << t.name;
  }
  std::printf("%s: loss %.9f, rel. error %.2e; worst gradient rel. L2 error %.2e (%s)\n", tag.c_str(), ref_loss,
              std::fabs(loss - ref_loss) / ref_loss, worst, worst_name.c_str());

  AdamW opt(model.layout(), AdamWConfig{lr, b1, b2, eps, wd}, *be);
  for (const ParamTensor& t : model.layout().tensors()) {
    EXPECT_EQ(t.weight_decay, t.name.find("weight") != std::string::npos && t.name.find(".norm.") == std::string::npos)
        << t.name;
  }
  const double* ref_losses = static_cast<const double*>(ref.data("losses"));
  for (int k = 0; k < steps; ++k) {
    model.zero_grads();
    const double l = mean_loss(model, batches[static_cast<size_t>(k % 3)], true);
    EXPECT_NEAR(l, ref_losses[k], 1e-5 * ref_losses[k]) << tag << " step " << k;
    opt.step(model.params(), model.grads(), lr, k + 1);
  }
  const double ref_final = static_cast<const double*>(ref.data("final_loss"))[0];
  EXPECT_NEAR(mean_loss(model, batches[steps % 3], false), ref_final, 1e-5 * ref_final) << tag << " after the steps";
  double worst_p = 0.0;
  for (const ParamTensor& t : model.layout().tensors()) {
    const double err = rel_l2(model.params() + t.offset, static_cast<const double*>(ref.data("param." + t.name)), t.numel);
    worst_p = std::max(worst_p, err);
    EXPECT_LT(err, 1e-4) << tag << " " << t.name << " after the steps";
  }
  std::printf("%s: after %d AdamW steps, worst parameter rel. L2 error %.2e\n", tag.c_str(), steps, worst_p);
}

TEST(GnnReference, SchnetMatchesPyTorch) { check_against_torch(GnnLayer::kSchnet, Activation::kShiftedSoftplus, GnnPooling::kMean); }
TEST(GnnReference, SchnetSiluAddPoolingMatchesPyTorch) {
  check_against_torch(GnnLayer::kSchnet, Activation::kSilu, GnnPooling::kAdd);
}
TEST(GnnReference, EgnnMatchesPyTorch) { check_against_torch(GnnLayer::kEgnn, Activation::kSilu, GnnPooling::kMean); }
// PNA: four aggregators, three degree scalers, BatchNorm (batch statistics in training, the
// running ones, blended by the optimizer after each step, in evaluation).
TEST(GnnReference, PnaMatchesPyTorch) { check_against_torch(GnnLayer::kPna, Activation::kRelu, GnnPooling::kMean); }

// The model touches its buffers only through the device contract: on the guarded backend (every
// argument checked to lie in a live device buffer, host access refused) a training micro-batch
// gives the cpu backend's loss and gradients bit for bit, for both layer types.
TEST(GnnModel, GuardedBackendGivesTheCpuResultsBitwise) {
  for (GnnLayer layer : {GnnLayer::kSchnet, GnnLayer::kEgnn, GnnLayer::kPna}) {
    const ModelConfig cfg = test_config(layer, Activation::kSilu, GnnPooling::kMean);
    const GraphBatch b = make_batch(cfg, 1);
    std::vector<std::vector<float>> grads;
    std::vector<double> losses;
    for (const char* name : {"cpu", "cpu-guarded"}) {
      auto be = test::make_test_backend(name);
      GnnModel model(cfg, *be);
      model.init(9);
      model.zero_grads();
      GraphBatch capacity(b.budget());
      model.reserve(capacity, true, 0, 1);
      losses.push_back(mean_loss(model, b, true));
      std::vector<float> g(static_cast<size_t>(model.layout().total()));
      be->copy_to_host(g.data(), model.grads(), 0, g.size() * sizeof(float));
      grads.push_back(std::move(g));
    }
    EXPECT_EQ(losses[0], losses[1]) << gnn_layer_name(layer);
    EXPECT_EQ(grads[0], grads[1]) << gnn_layer_name(layer);
  }
}

// Rotating a structure (positions and cell) leaves the predicted energy unchanged and rotates
// the predicted forces with it, for both layer types: the layers read distances only and the force
// head sums scalars times the edges' unit vectors. Also translation: the same predictions.
TEST(GnnModel, PredictionsAreInvariantAndForcesEquivariantUnderRotation) {
  const double c = std::cos(0.7), s = std::sin(0.7), c2 = std::cos(-1.1), s2 = std::sin(-1.1);
  // R = Rz(0.7) Rx(-1.1)
  const double R[9] = {c, -s * c2, s * s2, s, c * c2, -c * s2, 0.0, s2, c2};
  auto rotate = [&](const double* v, double* out) {
    for (int i = 0; i < 3; ++i) out[i] = R[3 * i] * v[0] + R[3 * i + 1] * v[1] + R[3 * i + 2] * v[2];
  };
  for (GnnLayer layer : {GnnLayer::kSchnet, GnnLayer::kEgnn, GnnLayer::kPna}) {
    const ModelConfig cfg = test_config(layer, Activation::kSilu, GnnPooling::kMean);
    LjSetOptions o;
    o.structures = 10, o.min_cells = 2, o.max_cells = 3, o.species = 2, o.seed = 8;
    const AtomStructure a = lj_structure(o, 4);
    AtomStructure b = a;
    for (int64_t i = 0; i < a.atoms(); ++i) rotate(a.pos.data() + 3 * i, b.pos.data() + 3 * i);
    for (int k = 0; k < 3; ++k) rotate(a.cell.lattice.data() + 3 * k, b.cell.lattice.data() + 3 * k);
    AtomStructure t = a;
    for (size_t i = 0; i < t.pos.size(); ++i) t.pos[i] += 0.37 * static_cast<double>(i % 3 + 1);
    auto be = make_cpu_backend();
    GnnModel model(cfg, *be);
    model.init(4);
    std::vector<std::vector<double>> energy(3);
    std::vector<std::vector<float>> forces(3);
    int k = 0;
    for (const AtomStructure* st : {&a, static_cast<const AtomStructure*>(&b), static_cast<const AtomStructure*>(&t)}) {
      GraphBatch batch(GraphBudget{cfg.n_ctx, int64_t{cfg.n_ctx} * 40, 1});
      batch.append(make_graph_sample(*st, RadiusGraphOptions{5.0, 0}));
      if (k == 0) model.reserve(batch, false, 0, 1);
      model.predict(batch, &energy[static_cast<size_t>(k)], &forces[static_cast<size_t>(k)]);
      ++k;
    }
    EXPECT_NEAR(energy[1][0], energy[0][0], 1e-5 * std::abs(energy[0][0])) << gnn_layer_name(layer);
    EXPECT_NEAR(energy[2][0], energy[0][0], 1e-5 * std::abs(energy[0][0])) << gnn_layer_name(layer);
    double scale = 0.0, worst = 0.0;
    for (int64_t i = 0; i < a.atoms(); ++i) {
      const double f0[3] = {forces[0][3 * i], forces[0][3 * i + 1], forces[0][3 * i + 2]};
      double want[3];
      rotate(f0, want);
      for (int j = 0; j < 3; ++j) {
        scale = std::max(scale, std::abs(want[j]));
        worst = std::max(worst, std::abs(forces[1][static_cast<size_t>(3 * i + j)] - want[j]));
        worst = std::max(worst, std::abs(forces[2][static_cast<size_t>(3 * i + j)] - f0[j]));
      }
    }
    EXPECT_GT(scale, 1e-3) << gnn_layer_name(layer) << ": the forces are not trivially zero";
    for (int j = 0; j < 3; ++j) {  // Newton's third law: each edge's pair force acts on both ends
      double total = 0.0;
      for (int64_t i = 0; i < a.atoms(); ++i) total += forces[0][static_cast<size_t>(3 * i + j)];
      EXPECT_LT(std::abs(total), 1e-4 * scale * static_cast<double>(a.atoms())) << gnn_layer_name(layer);
    }
    EXPECT_LT(worst, 1e-4 * scale) << gnn_layer_name(layer);
  }
}

TEST(GnnFamily, RegisteredWithItsPresetsAndConfigJsonRoundTrip) {
  ASSERT_NE(find_family("gnn"), nullptr);
  const ModelConfig cfg = test_config(GnnLayer::kEgnn, Activation::kRelu, GnnPooling::kAdd);
  const auto j = gnn_family().to_config_json(cfg);
  const ModelConfig back = family_of_config_json(nlohmann::json::parse(j.dump()), "config.json")
                               .from_config_json(nlohmann::json::parse(j.dump()), "config.json");
  EXPECT_EQ(back.family, &gnn_family());
  EXPECT_EQ(back.n_layer, cfg.n_layer);
  EXPECT_EQ(back.n_embd, cfg.n_embd);
  EXPECT_EQ(back.ffn, cfg.ffn);
  const GnnFields &a = gnn_fields(cfg), &b = gnn_fields(back);
  EXPECT_EQ(b.layer, a.layer);
  EXPECT_EQ(b.activation, a.activation);
  EXPECT_EQ(b.pooling, a.pooling);
  EXPECT_EQ(b.num_gaussians, a.num_gaussians);
  EXPECT_EQ(b.energy_mean, a.energy_mean);
  EXPECT_EQ(b.energy_std, a.energy_std);
  EXPECT_EQ(b.force_scale, a.force_scale);
  EXPECT_EQ(b.forces_weight, a.forces_weight);
  EXPECT_EQ(b.max_atoms, a.max_atoms);
  EXPECT_EQ(b.max_neighbours, a.max_neighbours);
  EXPECT_EQ(model_preset("gnn-lj").family, &gnn_family());
  EXPECT_FALSE(gnn_family().capabilities().tensor_parallel);
  EXPECT_FALSE(gnn_family().capabilities().pipeline_stages);
  auto bad = nlohmann::json::parse(j.dump());
  bad["mpnn_type"] = "gat";
  try {
    gnn_family().from_config_json(bad, "ckpt/config.json");
    FAIL() << "an unknown layer type was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt/config.json: unknown graph layer 'gat' (known: schnet, egnn"),
              std::string::npos)
        << e.what();
  }
  bad = nlohmann::json::parse(j.dump());
  bad["normalisation"]["energy_per_atom_std"] = 0.0;
  EXPECT_THROW(gnn_family().from_config_json(bad, "config.json"), InputError);
}

}  // namespace
}  // namespace weft
