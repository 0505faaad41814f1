#include "train/feedback_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "ckpt/checkpoint.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "engine/engine.h"

namespace weft {

namespace {

constexpr int kFeedbackTag = 0x4645;  // "FE"

std::string tensor_name(const GridCoords& c, int chunk) {
  return fmt::format("tp{}.pp{}.dp{}.chunk{}", c[static_cast<size_t>(Axis::kTp)],
                     c[static_cast<size_t>(Axis::kPp)], c[static_cast<size_t>(Axis::kDp)], chunk);
}

// The layout a residual file belongs to: what must match for its tensors to mean the same
// elements on the same ranks.
std::map<std::string, std::string> layout_meta(const Engine& e) {
  const EngineConfig& c = e.config();
  std::map<std::string, std::string> m = {{"tp", std::to_string(c.layout.tp)},
                                          {"pp", std::to_string(c.layout.pp)},
                                          {"dp", std::to_string(c.layout.dp)},
                                          {"virtual_stages", std::to_string(c.layout.chunks())}};
  // HSDP shards over dp_shard: a residual's elements depend on the split (absent: 1).
  if (c.layout.dp_replicate > 1) m["dp_replicate"] = std::to_string(c.layout.dp_replicate);
  return m;
}

std::string describe_layout(const std::map<std::string, std::string>& m) {
  auto get = [&](const char* k) {
    auto it = m.find(k);
    return it == m.end() ? std::string("?") : it->second;
  };
  const auto rep = m.find("dp_replicate");
  return fmt::format("tp {} x pp {} x dp {}{}, {} virtual stage(s)", get("tp"), get("pp"), get("dp"),
                     rep == m.end() ? std::string() : fmt::format(" (dp_replicate {})", rep->second),
                     get("virtual_stages"));
}

}  // namespace

FeedbackTensors gather_feedback(Engine& engine, Communicator& world) {
  FeedbackTensors out;
  std::vector<DeviceBuffer*> mine = engine.feedback_residuals();
  // Whether the run has error feedback is the same on every rank (one config).
  if (engine.feedback_source().empty()) return out;
  const int chunks = engine.num_chunks();
  WEFT_CHECK(static_cast<int>(mine.size()) == chunks, "gather_feedback: {} residuals for {} chunks", mine.size(),
             chunks);
  std::vector<int64_t> sizes(static_cast<size_t>(chunks)), all(static_cast<size_t>(chunks * world.size()));
  for (int c = 0; c < chunks; ++c) sizes[static_cast<size_t>(c)] = mine[static_cast<size_t>(c)]->count();
  world.all_gather(sizes.data(), all.data(), chunks, CommDType::kI64);
  const bool root = world.rank() == 0;
  for (int r = 0; r < world.size(); ++r) {
    for (int c = 0; c < chunks; ++c) {
      const int64_t n = all[static_cast<size_t>(r * chunks + c)];
      if (r == world.rank()) {
        std::vector<float> v = mine[static_cast<size_t>(c)]->download<float>();
        if (root) {
          out.data.push_back(std::move(v));
        } else {
          world.send(v.data(), n, CommDType::kF32, 0, kFeedbackTag);
        }
      } else if (root) {
        std::vector<float> v(static_cast<size_t>(n));
        world.recv(v.data(), n, CommDType::kF32, r, kFeedbackTag);
        out.data.push_back(std::move(v));
      }
    }
  }
  if (!root) return out;
  size_t i = 0;
  for (int r = 0; r < world.size(); ++r) {
    const GridCoords coords = engine.grid().coords_of(r);
    for (int c = 0; c < chunks; ++c, ++i) {
      out.refs.push_back({tensor_name(coords, c), StDType::kF32, {static_cast<int64_t>(out.data[i].size())},
                          out.data[i].data()});
    }
  }
  out.meta = layout_meta(engine);
  out.meta["format"] = "weft-error-feedback";
  out.meta["source"] = engine.feedback_source();
  return out;
}

std::string restore_feedback(Engine& engine, const std::string& dir) {
  const std::string source = engine.feedback_source();
  std::unique_ptr<SafetensorsFile> f = open_checkpoint_feedback(dir, CheckpointVerify::kAlreadyVerified);
  if (!f) {
    return source.empty() ? "" : fmt::format("error feedback ({}): the checkpoint holds no residuals; they start from zero",
                                             source);
  }
  const std::map<std::string, std::string>& meta = f->metadata();
  const auto saved_source = meta.count("source") ? meta.at("source") : std::string("?");
  if (source.empty()) {
    return fmt::format("error feedback: the checkpoint's residuals ({}) are not used: this run has none", saved_source);
  }
  const std::map<std::string, std::string> want = layout_meta(engine);
  auto replicas = [](const std::map<std::string, std::string>& m) {
    auto it = m.find("dp_replicate");
    return it == m.end() ? std::string("1") : it->second;
  };
  bool differs = replicas(meta) != replicas(want);
  for (const auto& [k, v] : want) {
    auto it = meta.find(k);
    differs = differs || it == meta.end() || it->second != v;
  }
  if (differs) {
    for (DeviceBuffer* r : engine.feedback_residuals()) r->zero();
    return fmt::format("error feedback ({}): the checkpoint's residuals belong to layout {}, this run is {}: "
                       "they start from zero",
                       source, describe_layout(meta), describe_layout(want));
  }
  const GridCoords coords = engine.grid().coords();
  std::vector<DeviceBuffer*> mine = engine.feedback_residuals();
  for (size_t c = 0; c < mine.size(); ++c) {
    const std::string name = tensor_name(coords, static_cast<int>(c));
    if (!f->has(name)) {
      throw_input("{}: has no tensor {} although it is written for this layout ({})", f->path(), name,
                  describe_layout(want));
    }
    std::vector<float> v(static_cast<size_t>(mine[c]->count()));
    f->read_f32(name, {mine[c]->count()}, v.data());  // InputError naming both shapes
    // A residual is a bounded rounding error: a NaN or infinity there would reach every later
    // update (issue 34 class 7: named here, not found as a non-finite loss steps later).
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    if (bad != v.end()) {
      throw_input("{}: tensor {} holds {} at element {}: error-feedback residuals must be finite (the file is damaged; "
                  "resume from another checkpoint)",
                  f->path(), name, *bad, bad - v.begin());
    }
    mine[c]->upload(v);
  }
  return fmt::format("error feedback ({}): residuals restored from the checkpoint ({})", source, saved_source);
}

}  // namespace weft
