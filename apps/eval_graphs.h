// `weft eval` of a graph-network checkpoint (eval_cmd.cc picks it by the model's data source,
// "graphs"): the energies and forces of a prepared graph dataset's split predicted and scored as
// atomistic models are (energy MAE and RMSE per atom, force MAE and RMSE per component, in the
// data's units) beside two baselines (the training split's per-species linear energy fit; zero
// forces), printed as a table, optionally written as JSON, and drawn as a parity plot.
// docs/model-gnn.md, "Evaluating".
#pragma once
#include <cstdint>
#include <string>

#include "cli_util.h"
#include "comm/communicator.h"
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

// Every rank predicts every structure (the layout shards the parameters, not the structures);
// rank 0 prints and writes. InputError (exit 2) naming the values for data that is no graph
// dataset, a missing split, graphs of another radius than the model's, a structure larger than
// the model's capacity, or an option out of range; RuntimeError for predictions that are not
// finite.
int eval_graph_checkpoint(const std::string& ckpt_dir, const ModelConfig& mc, const GraphEvalOptions& o,
                          Communicator& world);

}  // namespace weft
