// Graph shards (issue 33): labelled atomic structures with their radius graphs, the input of the
// graph-network family, written by `weft prepare --synthetic-lj` and `--xyz`. One file holds S
// structures, little-endian, 8-byte aligned sections (docs/formats-graphs.md):
//
//   header   8 int64: magic "WEFTGRPH", version 1, S, total atoms A, total edges E, flags
//            (bit 0: every structure has an energy, bit 1: forces), XXH3-64 of the body, 0
//   per structure (S): atom offsets (S+1 int64), edge offsets (S+1 int64), energy (f64),
//            lattice (9 f64, rows a, b, c), pbc (3 uint8, padded to 8 per structure)
//   per atom (A): species (int32, padded), position (3 f64), forces (3 f64, when flag bit 1)
//   per edge (E): source, receiver (int32, the structure's own atom indices), shift (3 int32),
//            ordered by receiver as data/atoms/radius_graph.h builds them
//
// The reader checks the magic, version, sizes, checksum, offsets (monotone, within A and E) and
// every index (species 1-118, edges within their structure), each failure one InputError line
// naming the file and the field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/atoms/radius_graph.h"
#include "data/atoms/structure.h"

namespace weft {

inline constexpr int64_t kGraphShardMagic = 0x4850524754464557;  // bytes "WEFTGRPH"
inline constexpr int64_t kGraphShardVersion = 1;

// One structure with its graph (the edges' vectors and distances are not stored: they follow
// from the positions, shifts and cell).
struct GraphSample {
  AtomStructure s;
  std::vector<int32_t> source, receiver, shift;  // shift: 3 per edge
  int64_t edges() const { return static_cast<int64_t>(source.size()); }
};

GraphSample make_graph_sample(AtomStructure s, const RadiusGraphOptions& o);

// Writes the samples atomically. InputError when some have energies (forces) and others not.
void write_graph_shard(const std::string& path, const std::vector<GraphSample>& samples);

// Reads a whole shard, validated as above.
std::vector<GraphSample> read_graph_shard(const std::string& path);

}  // namespace weft
