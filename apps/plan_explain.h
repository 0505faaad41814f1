// `weft plan --explain`: one layout's step taken apart (compute per op class, each
// collective per axis and link level, pipeline fill/drain and transfers, optimizer,
// stragglers, per-step overheads), with which term dominates.
#pragma once
#include <nlohmann/json.hpp>

#include "plan/predict.h"

namespace weft {

// Prints the breakdown of `p` (predicted with Options::explain set) as text.
void print_explain(const plan::Prediction& p);
// The same as JSON: {"terms": [{group, name, where, seconds, share, detail}], "groups", "dominant",
// "dp_bytes_per_device", "traffic": {tp|pp|dp|params: {codec, raw_bytes, wire_bytes, codec_s}}}.
nlohmann::json explain_json(const plan::Prediction& p);

}  // namespace weft
