// The "graphs" data source (issue 33): a prepared graph dataset (`weft prepare --synthetic-lj`
// or `--xyz`, data/atoms/graph_dataset.h) as a run reads it: each step's global batch is the next
// structures of the epoch's shuffled order (the same set whatever the layout), the validation
// loss the mean over the validation split's first structures, and the model takes the data's
// radius and the training split's normalisation statistics (RunData::model_settings).
#pragma once
#include <memory>

#include "train/run_data.h"

namespace weft {

std::unique_ptr<RunData> open_graph_run_data(const RunConfig& cfg, const ModelConfig& mc);

}  // namespace weft
