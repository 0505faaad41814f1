// Extended XYZ, as ASE reads and writes it (ase/io/extxyz.py): the de-facto exchange format of
// atomistic machine learning. A frame is
//
//   N
//   Lattice="ax ay az bx by bz cx cy cz" Properties=species:S:1:pos:R:3:forces:R:3 energy=-3.1 pbc="T T T"
//   Ar 0.0 0.0 0.0 0.1 -0.2 0.3        (N lines, one column group per property)
//
// Comment-line values are bare or in double quotes; keys lattice, properties, pbc and energy
// are matched without regard to case. Properties are name:type:count, type S (string), R (real),
// I (integer) or L (logical T/F); species (S, 1) and pos (R, 3) are required, forces (R, 3)
// read when present, other properties (masses, momenta, Z, ...) skipped. Without Properties
// the columns are species and pos. A Lattice without pbc is periodic in all three directions
// (ASE's rule); pbc with a periodic direction needs a Lattice. Bad input is one InputError line
// naming the file, the frame (from 1), its line and the field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/atoms/structure.h"

namespace weft {

// Every frame of `path`, in order.
std::vector<AtomStructure> read_extxyz(const std::string& path);
// Writes the structures as ASE does (energy and forces when present, %.17g: exact round trip),
// atomically.
void write_extxyz(const std::string& path, const std::vector<AtomStructure>& frames);

}  // namespace weft
