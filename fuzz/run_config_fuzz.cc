// Fuzz target: a run config (train/config.h, configs/*.toml) as `weft train CONFIG --key value`
// loads it. The input is the TOML file, optionally followed by a line "#--overrides--" and
// command-line overrides, one "key value" per line. load_run_config's contract is InputError for
// every bad input: a RuntimeError is a finding here too. An accepted config must survive its
// own round trip (to_toml, the config.toml of a run folder, loads again to the same text).
#include <string>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "train/config.h"

namespace {

using Overrides = std::vector<std::pair<std::string, std::string>>;

Overrides parse_overrides(std::string_view text) {
  Overrides out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    const size_t space = line.find(' ');
    if (!line.empty()) {
      out.emplace_back(std::string(line.substr(0, space)),
                       space == std::string_view::npos ? "" : std::string(line.substr(space + 1)));
    }
    begin = end + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft;
  const std::string_view all = fuzz::as_view(data, size);
  const std::string_view sep = "\n#--overrides--\n";
  const std::string path = fuzz::write_scratch("config.toml", fuzz::part(all, sep, 0));
  const Overrides overrides = parse_overrides(fuzz::part(all, sep, 1));
  fuzz::expect_weft_errors(
      [&] {
        const RunConfig cfg = load_run_config(path, overrides);
        (void)cfg.seq();
        const std::string resolved = cfg.to_toml();
        const std::string again_path = fuzz::write_scratch("resolved.toml", resolved);
        RunConfig again;
        try {
          again = load_run_config(again_path, {});
        } catch (const InputError& e) {
          fuzz::finding(std::string("an accepted config's to_toml() does not load again: ") + e.what());
        }
        fuzz::require(again.to_toml() == resolved, "to_toml() round trip gives the same text");
      },
      /*runtime_is_finding=*/true);
  return 0;
}
