// trainer.json of a checkpoint, range-checked before a resume uses any of it.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "train/run_folder.h"

namespace weft {

namespace {

// Far beyond any run (10^12 steps), low enough that step x global batch x T stays in 64 bits.
constexpr int64_t kMaxStep = 1'000'000'000'000;

int64_t state_int(const nlohmann::json& j, const char* key, const std::string& path, int64_t lo, int64_t hi) {
  const auto& v = j.at(key);
  bool ok = false;
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    ok = v.get<uint64_t>() <= static_cast<uint64_t>(hi);
    if (ok) x = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
    ok = true;
  }
  if (!ok || x < lo || x > hi) {
    throw_input("{}: key '{}' is {}, expected an integer from {} to {}: the trainer state is corrupted", path, key,
                v.dump(), lo, hi);
  }
  return x;
}

}  // namespace

ResumeState parse_resume_state(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) throw_input("{}: expected a JSON object, found a {}", path, j.type_name());
  if (!j.contains("step")) throw_input("{}: key 'step' is missing", path);
  ResumeState s;
  s.raw = j;
  s.step = state_int(j, "step", path, 0, kMaxStep);
  s.optimizer_steps = j.contains("optimizer_steps") ? state_int(j, "optimizer_steps", path, 0, s.step) : s.step;
  if (j.contains("loss_scale")) {
    const auto& v = j.at("loss_scale");
    const double d = v.is_number() ? v.get<double>() : -1.0;
    if (!(d > 0.0) || !std::isfinite(d) || d > std::numeric_limits<float>::max()) {
      throw_input("{}: key 'loss_scale' is {}, expected a positive finite number: the trainer state is corrupted",
                  path, v.dump());
    }
    s.has_loss_scale = true;
    s.loss_scale = d;
    if (j.contains("loss_scale_good_steps")) {
      s.loss_scale_good_steps = state_int(j, "loss_scale_good_steps", path, 0, s.step);
    }
  }
  if ((s.has_seed = j.contains("seed"))) {
    s.seed = state_int(j, "seed", path, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  }
  if ((s.has_global_batch = j.contains("global_batch"))) {
    s.global_batch = state_int(j, "global_batch", path, 1, std::numeric_limits<int32_t>::max());
  }
  return s;
}

}  // namespace weft
