#include "train/graph_run_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "core/error.h"
#include "data/atoms/graph_batch.h"
#include "data/atoms/graph_batching.h"
#include "data/atoms/graph_dataset.h"
#include "model/family.h"

namespace weft {
namespace {

class GraphRunData final : public RunData {
 public:
  GraphRunData(const RunConfig& cfg, const ModelConfig& mc)
      : seed_(static_cast<uint64_t>(cfg.seed)), by_cost_(cfg.balance == "cost"),
        train_(GraphDataset::open(cfg.data, "train")) {
    if (train_.samples.empty()) throw_input("{}: the training split holds no structure", cfg.data);
    if (cfg.val_batches > 0) {
      const std::string src = cfg.val_data.empty() ? cfg.data : cfg.val_data;
      val_ = std::make_unique<GraphDataset>(GraphDataset::open(src, "val"));
      if (val_->samples.empty()) throw_input("{}: the validation split holds no structure (set eval.val_batches = 0)", src);
      if (val_->cutoff != train_.cutoff) {
        throw_input("{}: graphs of radius {} A; the training split's ({}) have {}", src, val_->cutoff, cfg.data,
                    train_.cutoff);
      }
    }
    check_capacity(train_, mc);
    if (val_) check_capacity(*val_, mc);
  }

  // The radius of the graphs and the training split's statistics (PNA's degree scalers: the mean
  // of log(d + 1) and of d over its receivers' in-degrees, as PyG's PNAConv takes them from the
  // histogram).
  std::map<std::string, std::string> model_settings() const override {
    const GraphSplitStats& s = train_.stats;
    double nodes = 0.0, log_sum = 0.0, lin_sum = 0.0;
    for (size_t d = 0; d < s.in_degree_histogram.size(); ++d) {
      const double n = static_cast<double>(s.in_degree_histogram[d]);
      nodes += n, log_sum += n * std::log(static_cast<double>(d) + 1.0), lin_sum += n * static_cast<double>(d);
    }
    const bool degrees = nodes > 0.0 && log_sum > 0.0 && lin_sum > 0.0;
    return {{"radius", fmt::format("{}", train_.cutoff)},
            {"pna_delta", fmt::format("{}", degrees ? log_sum / nodes : 1.0)},
            {"pna_delta_lin", fmt::format("{}", degrees ? lin_sum / nodes : 1.0)},
            {"energy_mean", fmt::format("{}", s.energy_per_atom_mean)},
            {"energy_std", fmt::format("{}", s.energy_per_atom_std > 0.0 ? s.energy_per_atom_std : 1.0)},
            {"force_scale", fmt::format("{}", s.force_rms > 0.0 ? s.force_rms : 1.0)},
            {"mean_in_degree", fmt::format("{}", static_cast<double>(s.edges) / static_cast<double>(s.atoms))},
            {"mean_atoms", fmt::format("{}", static_cast<double>(s.atoms) / static_cast<double>(s.structures))}};
  }

  // The layout: with balance = "cost", the step's structures are dealt to its dp x accumulation
  // micro-batch slots by cost (nodes + edges), largest first to the least loaded slot with room
  // (data/atoms/graph_batching.h); a rank's slots are consecutive, so its busy time is balanced
  // too. The same plan on every rank (no communication).
  void configure(Engine& engine) const override {
    slots_ = static_cast<int>(engine.config().layout.dp * engine.accumulation());
    micro_batch_ = engine.config().layout.micro_batch;
    const ModelConfig& mc = engine.config().model;
    budget_ = batch_as<GraphBatch>(*mc.family->make_batch(mc, micro_batch_, 0), "graphs").budget();
    sizes_.clear();
    for (const GraphSample& g : train_.samples) sizes_.push_back({g.s.atoms(), g.edges()});
  }
  void fill(int64_t step, int64_t global_batch, int64_t first, int64_t count, HostBatch& out) const override {
    auto& b = batch_as<GraphBatch>(out, "graphs");
    if (by_cost_) {
      WEFT_CHECK(slots_ > 0, "the graph data source deals structures by cost only once configure() knows the layout");
      for (int64_t id : slot_graphs(step, global_batch, first / micro_batch_)) b.append(train_.samples[static_cast<size_t>(id)]);
      return;
    }
    for (int64_t i = first; i < first + count; ++i) b.append(train_.samples[static_cast<size_t>(structure_at(step * global_batch + i))]);
  }
  bool has_val() const override { return val_ != nullptr; }
  int64_t val_rows(int64_t requested) const override {
    return std::min<int64_t>(static_cast<int64_t>(val_->samples.size()), requested);
  }
  double evaluate(Engine& engine, int64_t requested) const override {
    return engine.evaluate_rows(
        [&](int64_t first, int64_t count, HostBatch& out) {
          auto& b = batch_as<GraphBatch>(out, "graphs");
          for (int64_t i = first; i < first + count; ++i) b.append(val_->samples[static_cast<size_t>(i)]);
        },
        val_rows(requested));
  }
  std::string describe(int64_t) const override {
    return fmt::format("{} train structures ({} atoms, {} edges, radius {} A; largest {} atoms)",
                       train_.samples.size(), train_.stats.atoms, train_.stats.edges, train_.cutoff,
                       train_.stats.max_atoms);
  }

 private:
  // A structure that passes the model's capacity for one graph (its atoms, its edges) would fail
  // in the middle of the run: refused now, naming the settings.
  static void check_capacity(const GraphDataset& d, const ModelConfig& mc) {
    const auto one = mc.family->make_batch(mc, 1, 0);
    const GraphBudget& b = batch_as<GraphBatch>(*one, "graphs").budget();
    if (d.stats.max_atoms > b.max_nodes || d.stats.max_edges > b.max_edges) {
      throw_input("{}: its largest structures have {} atoms and {} edges; model '{}' holds at most {} atoms and {} "
                  "edges a structure (raise [model] max_atoms or max_neighbours)",
                  d.dir, d.stats.max_atoms, d.stats.max_edges, mc.name, b.max_nodes, b.max_edges);
    }
  }
  // The structure at position p of the run's stream: epoch p / n's shuffled order.
  int64_t structure_at(int64_t p) const {
    const int64_t n = static_cast<int64_t>(train_.samples.size());
    return order(p / n)[static_cast<size_t>(p % n)];
  }
  // The structures of slot `slot` of step `step` (its plan made once).
  std::vector<int64_t> slot_graphs(int64_t step, int64_t global_batch, int64_t slot) const {
    std::lock_guard<std::mutex> lock(plan_mu_);
    if (step != plan_step_) {
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < global_batch; ++i) ids.push_back(structure_at(step * global_batch + i));
      plan_ = plan_graph_step(sizes_, ids, slots_, GraphBalance::kCost, budget_, GraphCostModel{}, step);
      plan_step_ = step;
    }
    return plan_.rank_graphs.at(static_cast<size_t>(slot));
  }
  // The shuffled order of epoch e (a permutation of the training structures).
  const std::vector<int64_t>& order(int64_t e) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (e != epoch_) {
      order_ = graph_epoch_order(static_cast<int64_t>(train_.samples.size()), seed_, e);
      epoch_ = e;
    }
    return order_;
  }

  uint64_t seed_;
  bool by_cost_;
  GraphDataset train_;
  mutable int slots_ = 0;
  mutable int64_t micro_batch_ = 1;
  mutable GraphBudget budget_;  // a micro-batch's (configure)
  mutable std::mutex plan_mu_;
  mutable int64_t plan_step_ = -1;
  mutable GraphStep plan_;
  mutable std::vector<GraphSize> sizes_;
  std::unique_ptr<GraphDataset> val_;
  mutable std::mutex mu_;
  mutable int64_t epoch_ = -1;
  mutable std::vector<int64_t> order_;
};

}  // namespace

std::unique_ptr<RunData> open_graph_run_data(const RunConfig& cfg, const ModelConfig& mc) {
  return std::make_unique<GraphRunData>(cfg, mc);
}

}  // namespace weft
