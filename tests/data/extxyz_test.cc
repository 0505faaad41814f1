// data/atoms/extxyz.h: frames as ASE writes them (Lattice, Properties with skipped columns,
// energy, pbc, other keys), a molecule, a bitwise round trip of generated structures, and bad
// files refused in one line naming the file, the frame, its line and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/atoms/elements.h"
#include "data/atoms/extxyz.h"
#include "data/atoms/lennard_jones.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

std::string write_text(const std::string& name, const std::string& text) {
  const fs::path dir = fs::path(::testing::TempDir()) / "weft_extxyz";
  fs::create_directories(dir);
  const std::string p = (dir / name).string();
  std::ofstream(p) << text;
  return p;
}

TEST(ExtXyz, ReadsFramesAsAseWritesThem) {
  const std::string p = write_text("ase.xyz",
                                   "2\n"
                                   "Lattice=\"4.0 0.0 0.0 0.0 4.0 0.0 0.0 0.0 5.0\" "
                                   "Properties=species:S:1:pos:R:3:masses:R:1:forces:R:3:Z:I:1 "
                                   "config_type=bulk energy=-7.25 stress=\"1 0 0 0 1 0 0 0 1\" pbc=\"T T F\"\n"
                                   "Cu 0.0 0.5 1.0 63.5 0.1 -0.2 0.3 29\n"
                                   "Au 2.0 2.0 2.5 197.0 -0.1 0.2 -0.3 79\n"
                                   "\n"
                                   "1\n"
                                   "Properties=species:S:1:pos:R:3 pbc=\"F F F\"\n"
                                   "O 1.5 -2.0 0.25\n");
  const std::vector<AtomStructure> f = read_extxyz(p);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].species, (std::vector<int32_t>{29, 79}));
  EXPECT_EQ(f[0].pos, (std::vector<double>{0.0, 0.5, 1.0, 2.0, 2.0, 2.5}));
  EXPECT_EQ(f[0].forces, (std::vector<double>{0.1, -0.2, 0.3, -0.1, 0.2, -0.3}));
  EXPECT_TRUE(f[0].has_energy);
  EXPECT_EQ(f[0].energy, -7.25);
  EXPECT_EQ(f[0].cell.lattice[8], 5.0);
  EXPECT_EQ(f[0].cell.pbc, (std::array<bool, 3>{true, true, false}));
  EXPECT_EQ(f[1].species, (std::vector<int32_t>{8}));
  EXPECT_FALSE(f[1].has_energy);
  EXPECT_FALSE(f[1].has_forces());
  EXPECT_EQ(f[1].cell.pbc, (std::array<bool, 3>{false, false, false}));
}

TEST(ExtXyz, GeneratedStructuresRoundTripBitwise) {
  LjSetOptions o;
  o.structures = 5;
  std::vector<AtomStructure> frames;
  for (int64_t i = 0; i < o.structures; ++i) frames.push_back(lj_structure(o, i));
  AtomStructure mol;  // a molecule without energy or forces
  mol.species = {6, 1};
  mol.pos = {0.0, 0.0, 0.0, 1.09, 0.0, -1e-300};
  frames.push_back(mol);
  const std::string p = write_text("roundtrip.xyz", "");
  write_extxyz(p, frames);
  const std::vector<AtomStructure> back = read_extxyz(p);
  ASSERT_EQ(back.size(), frames.size());
  for (size_t k = 0; k < frames.size(); ++k) {
    EXPECT_EQ(back[k].species, frames[k].species) << k;
    EXPECT_EQ(back[k].pos, frames[k].pos) << k;
    EXPECT_EQ(back[k].forces, frames[k].forces) << k;
    EXPECT_EQ(back[k].energy, frames[k].energy) << k;
    EXPECT_EQ(back[k].has_energy, frames[k].has_energy) << k;
    EXPECT_EQ(back[k].cell.lattice, frames[k].cell.lattice) << k;
    EXPECT_EQ(back[k].cell.pbc, frames[k].cell.pbc) << k;
  }
}

TEST(ExtXyz, BadFilesNameTheFrameLineAndField) {
  const std::string good = "1\nProperties=species:S:1:pos:R:3\nAr 0 0 0\n";
  const struct {
    std::string second_frame, expect;
  } cases[] = {
      {"x\n", "frame 2 (line 4): atom count 'x'"},
      {"2\nProperties=species:S:1:pos:R:3\nAr 0 0 0\n", "frame 2 (from line 4): the file ends after 1 of its 2 atoms"},
      {"1\nProperties=species:S:1:pos:R:3\nXx 0 0 0\n", "frame 2 (line 6): species: 'Xx' is not an element symbol"},
      {"1\nProperties=species:S:1:pos:R:3\nAr 0 zero 0\n", "frame 2 (line 6): pos: 'zero' is not a number"},
      {"1\nProperties=species:S:1:pos:R:3\nAr 0 nan 0\n", "pos: 'nan' is not finite"},
      {"1\nLattice=\"1 0 0 0 1 0 0 0\" Properties=species:S:1:pos:R:3\nAr 0 0 0\n", "Lattice: 8 numbers, expected 9"},
      {"1\npbc=\"T T T\" Properties=species:S:1:pos:R:3\nAr 0 0 0\n", "pbc is periodic but there is no Lattice"},
      {"1\nProperties=species:S:1:xyz:R:3\nAr 0 0 0\n", "Properties: no pos:R:3"},
      {"1\nProperties=species:S:1:pos:R:3:forces:R:2\nAr 0 0 0 1 1\n", "forces is R:2, expected R:3"},
      {"1\nProperties=species:S:1:pos:R:3\nAr 0 0 0 7\n", "atom 1: 5 columns, Properties say 4"},
      {"1\nProperties=species:S:1:pos:Q:3\nAr 0 0 0\n", "Properties: pos has type 'Q'"},
      {"1\nenergy=low Properties=species:S:1:pos:R:3\nAr 0 0 0\n", "energy: 'low' is not a number"},
      {"1\nLattice=\"1 0 0 0 1 0 0 0 1 Properties=species:S:1:pos:R:3\nAr 0 0 0\n", "has no closing \""},
  };
  for (const auto& c : cases) {
    const std::string p = write_text("bad.xyz", good + c.second_frame);
    const std::string msg = test::input_error_message([&] { read_extxyz(p); });
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "want '" << c.expect << "' in: " << msg;
  }
  EXPECT_NE(test::input_error_message([&] { read_extxyz(write_text("empty.xyz", "\n\n")); }).find("no frames"),
            std::string::npos);
  EXPECT_NE(test::input_error_message([&] { read_extxyz("/nonexistent/x.xyz"); }).find("/nonexistent/x.xyz"),
            std::string::npos);
}

TEST(Elements, SymbolsAndNumbers) {
  EXPECT_EQ(atomic_number("H"), 1);
  EXPECT_EQ(atomic_number("Ar"), 18);
  EXPECT_EQ(atomic_number("Og"), 118);
  EXPECT_EQ(atomic_number("ar"), 0);
  EXPECT_EQ(element_symbol(79), "Au");
  EXPECT_THROW(element_symbol(0), InputError);
}

}  // namespace
}  // namespace weft
