// Fuzz target: a system file (plan/system.h, systems/*.toml) as `weft plan --system FILE` loads
// it: load_system parses and validates it; an accepted system is then written back as TOML
// (what `weft calibrate` writes) and its unit sizes are queried as the planner does.
// InputError is the expected refusal; anything else is a finding (fuzz/fuzz_util.h).
#include "fuzz_util.h"
#include "plan/system.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft;
  const std::string path = fuzz::write_scratch("system.toml", fuzz::as_view(data, size));
  fuzz::expect_weft_errors([&] {
    const plan::System s = plan::load_system(path);
    for (size_t i = 0; i < s.levels.size(); ++i) {
      fuzz::require(s.unit_devices(i) >= 1, "a level's unit holds at least one device");
    }
    (void)plan::system_to_toml(s, {"fuzz"});
  });
  return 0;
}
