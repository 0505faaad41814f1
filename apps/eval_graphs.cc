#include "eval_graphs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/atoms/graph_batch.h"
#include "data/atoms/graph_dataset.h"
#include "data/atoms/graph_metrics.h"
#include "model/family.h"
#include "report/parity_plot.h"

namespace fs = std::filesystem;

namespace weft {
namespace {

struct Scores {
  GraphErrors model, baseline;
  report::ParityPanel energy{"energy per atom", "data units", {}, {}, 0.0};
  report::ParityPanel forces{"force components", "data units", {}, {}, 0.0};
};

void check_options(const GraphEvalOptions& o, const GraphDataset& ds, const ModelConfig& mc) {
  if (o.batch < 1) throw_input("--batch {}: at least one structure per forward pass", o.batch);
  if (o.samples < 0 || o.samples > static_cast<int64_t>(ds.samples.size())) {
    throw_input("--samples {}: split '{}' of {} holds {} structures", o.samples, o.split, o.data, ds.samples.size());
  }
  // The model learned on graphs of its radius (config.json's "radius"): other graphs are refused.
  const nlohmann::ordered_json j = mc.family->to_config_json(mc);
  if (j.contains("radius") && j.at("radius").is_number() && j.at("radius").get<double>() != ds.cutoff) {
    throw_input("{}: graphs of radius {} A; model '{}' was trained on graphs of radius {} A", o.data, ds.cutoff,
                mc.name, j.at("radius").get<double>());
  }
}

// The model's errors and, with a fit, the baselines' (none: the predictions only).
Scores score(Engine& engine, const ModelConfig& mc, const GraphDataset& ds, const SpeciesEnergyFit* fit,
             const GraphEvalOptions& o, GraphPredictions* keep = nullptr) {
  Scores r;
  const int64_t n = o.samples > 0 ? o.samples : static_cast<int64_t>(ds.samples.size());
  Model& model = engine.model(0);
  const std::unique_ptr<HostBatch> hb = mc.family->make_batch(mc, o.batch, 0);
  auto& b = batch_as<GraphBatch>(*hb, "graphs");
  std::vector<float> out, zeros;  // zeros: the zero-force baseline's forces
  for (int64_t first = 0; first < n; first += o.batch) {
    b.clear();
    const int64_t count = std::min(o.batch, n - first);
    for (int64_t i = first; i < first + count; ++i) b.append(ds.samples[static_cast<size_t>(i)]);
    out.assign(static_cast<size_t>(model.outputs_of(b)), 0.0f);
    model.forward_outputs(b, out.data());
    const float* forces = out.data() + count;
    for (int64_t k = 0; k < count; ++k) {
      const AtomStructure& s = ds.samples[static_cast<size_t>(first + k)].s;
      const double e = out[static_cast<size_t>(k)];
      if (!std::isfinite(e)) throw_runtime("model '{}' predicts a non-finite energy for structure {}", mc.name, first + k);
      r.model.add(s, e, forces);
      if (keep) {
        keep->energy.push_back(e);
        keep->forces.insert(keep->forces.end(), forces, forces + 3 * s.atoms());
      }
      if (fit) {
        zeros.assign(s.forces.size(), 0.0f);
        r.baseline.add(s, fit->predict(s), zeros.data());
      }
      if (s.has_energy) {
        r.energy.truth.push_back(s.energy / static_cast<double>(s.atoms()));
        r.energy.pred.push_back(e / static_cast<double>(s.atoms()));
      }
      if (s.has_forces()) {
        for (size_t c = 0; c < s.forces.size(); ++c) {
          r.forces.truth.push_back(s.forces[c]);
          r.forces.pred.push_back(forces[c]);
        }
      }
      forces += 3 * s.atoms();
    }
  }
  r.energy.mae = r.model.energy_mae();
  r.forces.mae = r.model.force_mae();
  if (keep) keep->errors = r.model;
  return r;
}

// An evaluation engine of the checkpoint on the ranks of `comm`.
std::unique_ptr<EngineRun> eval_engine(const std::string& ckpt_dir, const ModelConfig& mc, const GraphEvalOptions& o,
                                       Communicator& comm) {
  EngineRequest req;
  req.model = mc;
  req.seq = 0;
  req.batch = o.batch;
  req.per_replica = true;
  req.training = false;
  auto run = std::make_unique<EngineRun>(layout_engine_config(o.layout, req, comm.size()), comm, o.backend, o.comm);
  load_checkpoint_into(*run->engine, ckpt_dir);
  return run;
}

nlohmann::ordered_json scores_json(const Scores& r, const std::string& dir, const GraphEvalOptions& o) {
  auto errs = [](const GraphErrors& e, bool forces) {
    nlohmann::ordered_json j = {{"energy_mae_per_atom", e.energy_mae()}, {"energy_rmse_per_atom", e.energy_rmse()}};
    if (forces) j["force_mae"] = e.force_mae(), j["force_rmse"] = e.force_rmse();
    return j;
  };
  const bool forces = r.model.components > 0;
  return {{"checkpoint", dir}, {"data", o.data}, {"split", o.split}, {"structures", r.model.structures},
          {"atoms", r.model.atoms}, {"force_components", r.model.components}, {"model", errs(r.model, forces)},
          {"baselines", {{"species_linear_energy", errs(r.baseline, false)}, {"zero_forces", {{"force_mae", r.baseline.force_mae()}, {"force_rmse", r.baseline.force_rmse()}}}}}};
}

void print_scores(const Scores& r, const std::string& dir, const GraphEvalOptions& o) {
  fmt::print("weft eval: {} on {} split '{}': {} structures, {} atoms\n", dir, o.data, o.split, r.model.structures,
             r.model.atoms);
  fmt::print("{:<34} {:>14} {:>14}\n", "", "MAE", "RMSE");
  fmt::print("{:<34} {:>14.6g} {:>14.6g}\n", "energy per atom: model", r.model.energy_mae(), r.model.energy_rmse());
  fmt::print("{:<34} {:>14.6g} {:>14.6g}\n", "energy per atom: per-species fit", r.baseline.energy_mae(),
             r.baseline.energy_rmse());
  if (r.model.components > 0) {
    fmt::print("{:<34} {:>14.6g} {:>14.6g}\n", "force component: model", r.model.force_mae(), r.model.force_rmse());
    fmt::print("{:<34} {:>14.6g} {:>14.6g}\n", "force component: zero forces", r.baseline.force_mae(),
               r.baseline.force_rmse());
  }
  fmt::print("units: the data's (eV for extended XYZ, epsilon and epsilon/A for the Lennard-Jones sets); the per-species "
             "fit is least squares of E = sum_s n_s e_s on the training split\n");
}

}  // namespace

GraphPredictions predict_graph_split(const std::string& ckpt_dir, const ModelConfig& mc, const GraphEvalOptions& o,
                                     Communicator& comm) {
  const GraphDataset ds = GraphDataset::open(o.data, o.split);
  check_options(o, ds, mc);
  const std::unique_ptr<EngineRun> run = eval_engine(ckpt_dir, mc, o, comm);
  GraphPredictions p;
  (void)score(*run->engine, mc, ds, nullptr, o, &p);
  return p;
}

std::map<std::string, double> graph_validation_metrics(const std::string& ckpt_dir, const ModelConfig& mc,
                                                       const std::string& data, Communicator& comm) {
  GraphEvalOptions o;
  o.data = data;
  o.split = "val";
  const GraphPredictions p = predict_graph_split(ckpt_dir, mc, o, comm);
  const GraphSplitStats train = GraphDataset::split_stats(data, "train");
  std::map<std::string, double> m;
  double sum = 0.0;
  int terms = 0;
  if (p.errors.structures > 0) {
    m["val_energy_mae"] = p.errors.energy_mae();
    sum += p.errors.energy_mae() / std::max(train.energy_per_atom_std, 1e-12);
    ++terms;
  }
  if (p.errors.components > 0) {
    m["val_force_mae"] = p.errors.force_mae();
    sum += p.errors.force_mae() / std::max(train.force_rms, 1e-12);
    ++terms;
  }
  if (terms > 0) m["val_mae"] = sum / terms;
  return m;
}

int eval_graph_checkpoint(const std::string& ckpt_dir, const ModelConfig& mc, const GraphEvalOptions& o,
                          Communicator& world) {
  if (!o.parity_png.empty() && fs::path(o.parity_png).extension() != ".png") {
    throw_input("--parity {}: the file must end in .png", o.parity_png);
  }
  const GraphDataset ds = GraphDataset::open(o.data, o.split);
  check_options(o, ds, mc);
  const SpeciesEnergyFit fit =
      SpeciesEnergyFit::fit(o.split == "train" ? ds.samples : GraphDataset::open(o.data, "train").samples);
  report::Gnuplot gp;
  if (!o.parity_png.empty()) gp = report::find_gnuplot();  // a missing gnuplot fails before the work
  const std::unique_ptr<EngineRun> run = eval_engine(ckpt_dir, mc, o, world);
  Scores r = score(*run->engine, mc, ds, &fit, o);
  if (world.rank() != 0) return 0;
  const nlohmann::ordered_json j = scores_json(r, ckpt_dir, o);
  if (o.format == "json") {
    fmt::print("{}\n", j.dump(2));
  } else {
    print_scores(r, ckpt_dir, o);
  }
  if (!o.out_json.empty()) {
    std::ofstream f(o.out_json);
    if (!(f << j.dump(2) << "\n")) throw_input("--out {}: cannot write", o.out_json);
  }
  if (!o.parity_png.empty()) {
    const fs::path png(o.parity_png);
    const std::string dir = png.parent_path().empty() ? "." : png.parent_path().string();
    std::vector<report::ParityPanel> panels;
    if (!r.energy.truth.empty()) panels.push_back(r.energy);
    if (!r.forces.truth.empty()) panels.push_back(r.forces);
    report::draw_parity_plot(gp, dir, png.stem().string(), panels);
    fmt::print("parity plot: {}\n", o.parity_png);
  }
  return 0;
}

}  // namespace weft
