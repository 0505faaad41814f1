// A run's engine from its config: the layout (validated), the model chunking, ZeRO, recompute,
// precision, optimizer and loss scaling settings.
#pragma once
#include "comm/topology.h"
#include "engine/engine.h"
#include "train/config.h"

namespace weft {

// dp is derived as world / (tp x pp) when the config leaves it 0. InputError naming the
// values for a layout that does not divide or is not supported.
EngineConfig engine_config(const RunConfig& cfg, int world_size);
// The same for a model given apart from the config's preset (a checkpoint's).
EngineConfig engine_config(const RunConfig& cfg, const ModelConfig& model, int world_size);
// The run's ZeRO++ settings ([zero] keys) resolved against its layout and node map: `nodes`,
// else the nodes run.ranks_per_node emulates, else none (one level unless zero.hierarchy
// says otherwise). InputError naming the values for a combination that cannot apply.
ZeroPPConfig run_zeropp(const RunConfig& cfg, const GridSpec& grid, const NodeMap* nodes);
// The run's [compression] policy against its layout, ZeRO settings and backend: InputError
// naming the values where it cannot apply (a codec the backend lacks, compression on top of
// ZeRO++'s own quantization of the same traffic); `notes` (may be null) receives what has no
// effect or is risky (a codec on an axis of size 1, parameter compression without ZeRO 1-3,
// error feedback with zfp under 8 bits per value).
CompressionPolicy run_compression(const RunConfig& cfg, const GridSpec& grid, const ZeroPPConfig& zeropp,
                                  std::vector<std::string>* notes);

}  // namespace weft
