// Fuzz target: an extended XYZ file (data/atoms/extxyz.h) read as `weft prepare --xyz` reads it.
// An accepted file gives frames of consistent sizes (3 coordinates and, when present, 3 force
// components an atom; atomic numbers 1-118; finite numbers) that write_extxyz writes and
// read_extxyz reads back unchanged. InputError is the expected refusal; anything else is a
// finding (fuzz/fuzz_util.h).
#include <cmath>

#include "data/atoms/extxyz.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft;
  const std::string path = fuzz::write_scratch("frames.xyz", fuzz::as_view(data, size));
  fuzz::expect_weft_errors([&] {
    const std::vector<AtomStructure> f = read_extxyz(path);
    for (const AtomStructure& s : f) {
      fuzz::require(s.atoms() >= 1 && static_cast<int64_t>(s.pos.size()) == 3 * s.atoms(), "3 coordinates an atom");
      fuzz::require(s.forces.empty() || static_cast<int64_t>(s.forces.size()) == 3 * s.atoms(), "3 forces an atom");
      for (int32_t z : s.species) fuzz::require(z >= 1 && z <= 118, "atomic numbers 1-118");
      for (double x : s.pos) fuzz::require(std::isfinite(x), "finite positions");
    }
    const std::string back = fuzz::write_scratch("back.xyz", "");
    write_extxyz(back, f);
    const std::vector<AtomStructure> g = read_extxyz(back);
    fuzz::require(g.size() == f.size(), "the written frames read back");
    for (size_t k = 0; k < f.size(); ++k) {
      fuzz::require(g[k].species == f[k].species && g[k].pos == f[k].pos && g[k].forces == f[k].forces &&
                        g[k].cell.lattice == f[k].cell.lattice && g[k].cell.pbc == f[k].cell.pbc &&
                        g[k].has_energy == f[k].has_energy && (!f[k].has_energy || g[k].energy == f[k].energy),
                    "a frame round-trips unchanged");
    }
  });
  return 0;
}
