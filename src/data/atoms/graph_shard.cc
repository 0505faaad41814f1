#include "data/atoms/graph_shard.h"

#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "data/text_util.h"

namespace weft {
namespace {

constexpr int64_t kHeaderInts = 8;
constexpr int64_t kFlagEnergy = 1, kFlagForces = 2;

template <class T>
void put(std::string& out, const T* p, size_t n) {
  if (n > 0) out.append(reinterpret_cast<const char*>(p), n * sizeof(T));
  while (out.size() % 8 != 0) out.push_back('\0');
}

// A bounds-checked reader of the body's sections.
class Cursor {
 public:
  Cursor(const std::string& path, const std::string& body) : path_(path), b_(body) {}
  template <class T>
  std::vector<T> take(int64_t n, const char* field) {
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
    if (n < 0 || at_ + bytes > b_.size()) {
      throw_input("{}: graph shard truncated: {} needs {} bytes at offset {}, the body has {}", path_, field, bytes, at_,
                  b_.size());
    }
    std::vector<T> v(static_cast<size_t>(n));
    if (bytes > 0) std::memcpy(v.data(), b_.data() + at_, bytes);
    at_ += (bytes + 7) / 8 * 8;
    return v;
  }
  uint64_t used() const { return at_; }

 private:
  const std::string& path_;
  const std::string& b_;
  uint64_t at_ = 0;
};

}  // namespace

GraphSample make_graph_sample(AtomStructure s, const RadiusGraphOptions& o) {
  const RadiusGraph g = radius_graph(s.pos.data(), s.atoms(), s.cell, o);
  GraphSample out;
  out.source = g.source;
  out.receiver = g.receiver;
  out.shift = g.shift;
  out.s = std::move(s);
  return out;
}

void write_graph_shard(const std::string& path, const std::vector<GraphSample>& samples) {
  const int64_t S = static_cast<int64_t>(samples.size());
  bool energy = true, forces = true, any_energy = false, any_forces = false;
  std::vector<int64_t> aoff{0}, eoff{0};
  for (const GraphSample& g : samples) {
    energy = energy && g.s.has_energy, any_energy = any_energy || g.s.has_energy;
    forces = forces && g.s.has_forces(), any_forces = any_forces || g.s.has_forces();
    aoff.push_back(aoff.back() + g.s.atoms());
    eoff.push_back(eoff.back() + g.edges());
  }
  if (S == 0) energy = forces = false;  // no labels to speak of
  if (energy != any_energy || forces != any_forces) {
    throw_input("graph shard {}: some structures have {} and others not; a shard holds labels for all or none", path,
                energy != any_energy ? "an energy" : "forces");
  }
  std::string body;
  put(body, aoff.data(), aoff.size());
  put(body, eoff.data(), eoff.size());
  std::vector<double> e, lat;
  std::vector<uint8_t> pbc;
  for (const GraphSample& g : samples) {
    e.push_back(g.s.energy);
    lat.insert(lat.end(), g.s.cell.lattice.begin(), g.s.cell.lattice.end());
    for (bool p : g.s.cell.pbc) pbc.push_back(p ? 1 : 0);
    pbc.resize(pbc.size() + 5, 0);
  }
  put(body, e.data(), e.size());
  put(body, lat.data(), lat.size());
  put(body, pbc.data(), pbc.size());
  std::vector<int32_t> species, src, dst, shift;
  std::vector<double> pos, f;
  for (const GraphSample& g : samples) {
    species.insert(species.end(), g.s.species.begin(), g.s.species.end());
    pos.insert(pos.end(), g.s.pos.begin(), g.s.pos.end());
    f.insert(f.end(), g.s.forces.begin(), g.s.forces.end());
    src.insert(src.end(), g.source.begin(), g.source.end());
    dst.insert(dst.end(), g.receiver.begin(), g.receiver.end());
    shift.insert(shift.end(), g.shift.begin(), g.shift.end());
  }
  put(body, species.data(), species.size());
  put(body, pos.data(), pos.size());
  if (forces) put(body, f.data(), f.size());
  put(body, src.data(), src.size());
  put(body, dst.data(), dst.size());
  put(body, shift.data(), shift.size());
  const int64_t header[kHeaderInts] = {kGraphShardMagic, kGraphShardVersion, S, aoff.back(), eoff.back(),
                                       (energy ? kFlagEnergy : 0) | (forces ? kFlagForces : 0),
                                       static_cast<int64_t>(XXH3_64bits(body.data(), body.size())), 0};
  std::string file(reinterpret_cast<const char*>(header), sizeof(header));
  file += body;
  write_file_atomic(path, file);
}

std::vector<GraphSample> read_graph_shard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input("graph shard {}: cannot be opened", path);
  int64_t h[kHeaderInts] = {};
  if (!in.read(reinterpret_cast<char*>(h), sizeof(h))) throw_input("graph shard {}: shorter than its 64-byte header", path);
  if (h[0] != kGraphShardMagic) throw_input("graph shard {}: not a weft graph shard (magic {:#x})", path, static_cast<uint64_t>(h[0]));
  if (h[1] != kGraphShardVersion) throw_input("graph shard {}: version {}, this weft reads {}", path, h[1], kGraphShardVersion);
  const int64_t S = h[2], A = h[3], E = h[4];
  if (S < 0 || A < 0 || E < 0 || S > (int64_t{1} << 40) || A > (int64_t{1} << 40) || E > (int64_t{1} << 40)) {
    throw_input("graph shard {}: counts {} structures, {} atoms, {} edges", path, S, A, E);
  }
  const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (static_cast<int64_t>(XXH3_64bits(body.data(), body.size())) != h[6]) {
    throw_input("graph shard {}: the body's checksum does not match the header (the file is damaged)", path);
  }
  Cursor c(path, body);
  const auto aoff = c.take<int64_t>(S + 1, "atom offsets"), eoff = c.take<int64_t>(S + 1, "edge offsets");
  const auto energy = c.take<double>(S, "energies"), lat = c.take<double>(9 * S, "lattices");
  const auto pbc = c.take<uint8_t>(8 * S, "pbc");
  const auto species = c.take<int32_t>(A, "species");
  const auto pos = c.take<double>(3 * A, "positions");
  const auto forces = (h[5] & kFlagForces) ? c.take<double>(3 * A, "forces") : std::vector<double>();
  const auto src = c.take<int32_t>(E, "edge sources"), dst = c.take<int32_t>(E, "edge receivers");
  const auto shift = c.take<int32_t>(3 * E, "edge shifts");
  if (c.used() != body.size()) throw_input("graph shard {}: {} bytes after the last section", path, body.size() - c.used());
  if (aoff[0] != 0 || eoff[0] != 0 || aoff[static_cast<size_t>(S)] != A || eoff[static_cast<size_t>(S)] != E) {
    throw_input("graph shard {}: offsets do not span the {} atoms and {} edges", path, A, E);
  }
  std::vector<GraphSample> out(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t a0 = aoff[static_cast<size_t>(s)], a1 = aoff[static_cast<size_t>(s + 1)];
    const int64_t e0 = eoff[static_cast<size_t>(s)], e1 = eoff[static_cast<size_t>(s + 1)];
    if (a1 < a0 || e1 < e0 || a1 > A || e1 > E) throw_input("graph shard {}: structure {}: offsets decrease", path, s);
    GraphSample& g = out[static_cast<size_t>(s)];
    g.s.has_energy = (h[5] & kFlagEnergy) != 0;
    g.s.energy = energy[static_cast<size_t>(s)];
    for (int k = 0; k < 9; ++k) g.s.cell.lattice[static_cast<size_t>(k)] = lat[static_cast<size_t>(9 * s + k)];
    for (int k = 0; k < 3; ++k) g.s.cell.pbc[static_cast<size_t>(k)] = pbc[static_cast<size_t>(8 * s + k)] != 0;
    g.s.species.assign(species.begin() + a0, species.begin() + a1);
    for (int32_t z : g.s.species) {
      if (z < 1 || z > 118) throw_input("graph shard {}: structure {}: species {} is not an atomic number", path, s, z);
    }
    g.s.pos.assign(pos.begin() + 3 * a0, pos.begin() + 3 * a1);
    if (!forces.empty()) g.s.forces.assign(forces.begin() + 3 * a0, forces.begin() + 3 * a1);
    g.source.assign(src.begin() + e0, src.begin() + e1);
    g.receiver.assign(dst.begin() + e0, dst.begin() + e1);
    g.shift.assign(shift.begin() + 3 * e0, shift.begin() + 3 * e1);
    const int64_t n = a1 - a0;
    for (int64_t e = 0; e < e1 - e0; ++e) {
      const int32_t i = g.source[static_cast<size_t>(e)], j = g.receiver[static_cast<size_t>(e)];
      if (i < 0 || i >= n || j < 0 || j >= n) {
        throw_input("graph shard {}: structure {}: edge {} joins atoms {} and {} of {}", path, s, e, i, j, n);
      }
      if (e > 0 && j < g.receiver[static_cast<size_t>(e - 1)]) {
        throw_input("graph shard {}: structure {}: edges are not ordered by receiver at edge {}", path, s, e);
      }
    }
  }
  return out;
}

}  // namespace weft
