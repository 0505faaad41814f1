// Fuzz target: a graph shard (data/atoms/graph_shard.h) opened as the graph family's loader opens
// it. An accepted shard gives structures whose edges join their own atoms, ordered by receiver,
// and which write_graph_shard writes and read_graph_shard reads back unchanged. InputError is
// the expected refusal; anything else is a finding (fuzz/fuzz_util.h).
#include "data/atoms/graph_shard.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft;
  const std::string path = fuzz::write_scratch("graphs.wgs", fuzz::as_view(data, size));
  fuzz::expect_weft_errors([&] {
    const std::vector<GraphSample> s = read_graph_shard(path);
    for (const GraphSample& g : s) {
      fuzz::require(static_cast<int64_t>(g.s.pos.size()) == 3 * g.s.atoms(), "3 coordinates an atom");
      fuzz::require(static_cast<int64_t>(g.shift.size()) == 3 * g.edges() && g.receiver.size() == g.source.size(),
                    "3 shift components an edge");
      for (int64_t e = 0; e < g.edges(); ++e) {
        fuzz::require(g.source[static_cast<size_t>(e)] >= 0 && g.source[static_cast<size_t>(e)] < g.s.atoms() &&
                          g.receiver[static_cast<size_t>(e)] >= 0 && g.receiver[static_cast<size_t>(e)] < g.s.atoms(),
                      "edges join the structure's atoms");
      }
    }
    const std::string back = fuzz::write_scratch("back.wgs", "");
    write_graph_shard(back, s);
    const std::vector<GraphSample> t = read_graph_shard(back);
    fuzz::require(t.size() == s.size(), "the written shard reads back");
    for (size_t k = 0; k < s.size(); ++k) {
      fuzz::require(t[k].s.pos == s[k].s.pos && t[k].s.species == s[k].s.species && t[k].source == s[k].source &&
                        t[k].receiver == s[k].receiver && t[k].shift == s[k].shift,
                    "a structure round-trips unchanged");
    }
  });
  return 0;
}
