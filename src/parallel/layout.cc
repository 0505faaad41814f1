#include "parallel/layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>

#include "core/error.h"

namespace weft {

std::string Layout::describe() const {
  const std::string split =
      dp_replicate > 1 ? fmt::format(" (dp_shard {} x dp_replicate {})", dp_shard(), dp_replicate) : std::string();
  std::string s =
      fmt::format("tp {} pp {} dp {}{} mb {} zero {} {}", tp, pp, dp, split, micro_batch, zero, recompute_name(recompute));
  if (recompute == Recompute::kFull && recompute_layers >= 0) s += fmt::format("({})", recompute_layers);
  if (sequence_parallel) s += " sp";
  s += fmt::format(" {}", schedule_name(schedule));
  if (schedule == PipeSchedule::kInterleaved) s += fmt::format(" v{}", virtual_stages);
  if (zeropp_on() || zeropp != ZeroPP::kNone) {
    std::string k;
    if (qwz) k += " qwz";
    if (hpz > 1) k += fmt::format(" hpz {}", hpz);
    if (qgz) k += hierarchy.empty() ? std::string(" qgz flat") : fmt::format(" qgz {}", fmt::join(hierarchy, ","));
    if (quant_block != 2048) k += fmt::format(" G {}", quant_block);
    s += fmt::format(" {}({})", zeropp == ZeroPP::kNone ? "zeropp" : zeropp_name(zeropp), k.empty() ? "off" : k.substr(1));
  }
  if (compression.any() || compression_name != "none") {
    std::vector<std::string> on;
    for (const auto& [axis, c] : {std::pair<const char*, const CodecSpec*>{"dp", &compression.dp},
                                  {"params", &compression.params}, {"tp", &compression.tp}, {"pp", &compression.pp}}) {
      if (!c->off()) on.push_back(fmt::format("{}={}", axis, c->name()));
    }
    if (compression.error_feedback) on.push_back("ef=on");
    // No commas: the description is one field of --scaling's CSV.
    s += fmt::format(" {}({})", compression_name, on.empty() ? "off" : fmt::format("{}", fmt::join(on, " ")));
  }
  return s;
}

const char* zeropp_name(ZeroPP z) {
  switch (z) {
    case ZeroPP::kNone: return "none";
    case ZeroPP::kZeroPP: return "zero++";
    case ZeroPP::kThreeLevel: return "3-level";
    case ZeroPP::kCustom: return "custom";
  }
  return "none";
}

ZeroPP parse_zeropp(const std::string& s) {
  for (ZeroPP z : {ZeroPP::kNone, ZeroPP::kZeroPP, ZeroPP::kThreeLevel, ZeroPP::kCustom}) {
    if (s == zeropp_name(z)) return z;
  }
  throw_input("unknown ZeRO++ preset '{}' (known: none, zero++, 3-level, custom)", s);
}

}  // namespace weft
