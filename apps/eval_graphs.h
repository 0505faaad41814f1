// `weft eval` of a graph-network checkpoint (eval_cmd.cc picks it by the model's data source,
// "graphs"): the energies and forces of a prepared graph dataset's split predicted and scored as
// atomistic models are (energy MAE and RMSE per atom, force MAE and RMSE per component, in the
// data's units) beside two baselines (the training split's per-species linear energy fit; zero
// forces), printed as a table, optionally written as JSON, and drawn as a parity plot.
// docs/model-gnn.md, "Evaluating".
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cli_util.h"
#include "comm/communicator.h"
#include "data/atoms/graph_metrics.h"
#include "model/config.h"

namespace weft {

struct GraphEvalOptions {
  std::string data;            // a prepared graph dataset (manifest.json)
  std::string split = "test";  // test, val or train
  int64_t batch = 8;           // structures per forward pass
  int64_t samples = 0;         // structures scored (0: all)
  std::string out_json;        // --out
  std::string parity_png;      // --parity
  std::string backend = "cpu";
  std::string comm;
  RunConfig layout = layout_defaults();  // data parallelism (ZeRO, HSDP) only
  std::string format = "text";
};

// One checkpoint's predictions of a split (every structure, in the split's order): total
// energies, forces flat (3 per atom, structure after structure), and their errors.
struct GraphPredictions {
  std::vector<double> energy;
  std::vector<float> forces;
  GraphErrors errors;
};
// Loads the checkpoint into an engine on the ranks of `comm` (collective; every rank gets the
// predictions). InputError as eval_graph_checkpoint.
GraphPredictions predict_graph_split(const std::string& ckpt_dir, const ModelConfig& mc, const GraphEvalOptions& o,
                                     Communicator& comm);

// The validation metrics of a trained graph run's checkpoint (weft tune's model search scores
// its trials with them; collective over `comm`): val_energy_mae (per atom) and val_force_mae
// (per component) in the data's units on the `val` split, and val_mae, the mean of the two
// normalised by the training split's spread (energy per atom over its std, forces over their
// RMS), so that one number weighs both tasks.
std::map<std::string, double> graph_validation_metrics(const std::string& ckpt_dir, const ModelConfig& mc,
                                                       const std::string& data, Communicator& comm);

// Every rank predicts every structure (the layout shards the parameters, not the structures);
// rank 0 prints and writes. InputError (exit 2) naming the values for data that is no graph
// dataset, a missing split, graphs of another radius than the model's, a structure larger than
// the model's capacity, or an option out of range; RuntimeError for predictions that are not
// finite.
int eval_graph_checkpoint(const std::string& ckpt_dir, const ModelConfig& mc, const GraphEvalOptions& o,
                          Communicator& world);

}  // namespace weft
