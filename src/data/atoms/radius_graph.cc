#include "data/atoms/radius_graph.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/error.h"

namespace weft {
namespace {

using Vec3 = std::array<double, 3>;

Vec3 row(const AtomCell& c, int a) { return {c.lattice[3 * a], c.lattice[3 * a + 1], c.lattice[3 * a + 2]}; }
Vec3 cross(const Vec3& u, const Vec3& v) {
  return {u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]};
}
double dot(const Vec3& u, const Vec3& v) { return u[0] * v[0] + u[1] * v[1] + u[2] * v[2]; }
double norm(const Vec3& u) { return std::sqrt(dot(u, u)); }

// The frame the search bins in: the cell when it spans space, else (a molecule, or a cell with
// zero vectors along non-periodic directions) the Cartesian axes.
struct Frame {
  AtomCell cell;
  std::array<double, 9> inverse{};  // rows: the reciprocal vectors / (2 pi)
  Vec3 height{};
};

Frame frame_of(const AtomCell& c) {
  Frame f;
  f.cell = c;
  const Vec3 a = row(c, 0), b = row(c, 1), cc = row(c, 2);
  const double vol = dot(a, cross(b, cc));
  const double scale = std::max({norm(a), norm(b), norm(cc), 1e-300});
  const bool any_pbc = c.pbc[0] || c.pbc[1] || c.pbc[2];
  if (!(std::fabs(vol) > 1e-9 * scale * scale * scale)) {
    if (any_pbc) {
      throw_input("a periodic cell needs three independent lattice vectors: a ({}, {}, {}), b ({}, {}, {}), c ({}, {}, "
                  "{}) span a volume of {}",
                  a[0], a[1], a[2], b[0], b[1], b[2], cc[0], cc[1], cc[2], vol);
    }
    f.cell.lattice = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    f.cell.pbc = {false, false, false};
  }
  const Vec3 A = row(f.cell, 0), B = row(f.cell, 1), C = row(f.cell, 2);
  const double V = dot(A, cross(B, C));
  const Vec3 ra = cross(B, C), rb = cross(C, A), rc = cross(A, B);
  for (int k = 0; k < 3; ++k) {
    f.inverse[k] = ra[k] / V;  // fractional coordinate a = x . (b x c) / V
    f.inverse[3 + k] = rb[k] / V;
    f.inverse[6 + k] = rc[k] / V;
  }
  f.height = {std::fabs(V) / norm(ra), std::fabs(V) / norm(rb), std::fabs(V) / norm(rc)};
  return f;
}

// One direction of the bin grid.
struct Axis {
  bool periodic = false;
  double lo = 0.0, span = 1.0;  // the fractional range binned (periodic: [0, 1))
  int64_t bins = 1, reach = 0;  // bins, and the bin offsets a neighbour can be at
  int64_t bin(double s) const {
    const double u = span > 0.0 ? (s - lo) / span : 0.0;
    return std::clamp<int64_t>(static_cast<int64_t>(std::floor(u * static_cast<double>(bins))), 0, bins - 1);
  }
};

Axis axis_of(bool periodic, double height, double cutoff, double lo, double hi, int64_t n) {
  Axis x;
  x.periodic = periodic;
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(64, n));
  if (periodic) {
    x.lo = 0.0, x.span = 1.0;
    x.bins = std::clamp<int64_t>(static_cast<int64_t>(std::floor(height / cutoff)), 1, most);
    // A source in a bin m away is at least (m - 1) / bins of the height from the receiver.
    x.reach = static_cast<int64_t>(std::floor(cutoff * static_cast<double>(x.bins) / height)) + 1;
  } else {
    x.lo = lo, x.span = hi - lo;
    const double extent = x.span * height;  // Angstrom across the atoms
    x.bins = extent > 0.0 ? std::clamp<int64_t>(static_cast<int64_t>(std::floor(extent / cutoff)), 1, most) : 1;
    const double width = extent / static_cast<double>(x.bins);
    x.reach = width > 0.0 ? std::min<int64_t>(x.bins - 1, static_cast<int64_t>(std::floor(cutoff / width)) + 1) : 0;
  }
  return x;
}

struct Candidate {
  double d;
  int32_t j;
  std::array<int32_t, 3> s;
  Vec3 v;
  bool operator<(const Candidate& o) const { return std::tie(d, j, s) < std::tie(o.d, o.j, o.s); }
};

}  // namespace

std::array<double, 3> cell_heights(const AtomCell& cell) {
  const Frame f = frame_of(cell);
  return f.height;
}

RadiusGraph radius_graph(const double* pos, int64_t n, const AtomCell& cell, const RadiusGraphOptions& o) {
  if (!(o.cutoff > 0.0) || !std::isfinite(o.cutoff)) throw_input("radius graph: cutoff {} must be positive and finite", o.cutoff);
  if (o.max_neighbours < 0) throw_input("radius graph: max_neighbours {} must be 0 (all) or positive", o.max_neighbours);
  if (n < 0 || n > std::numeric_limits<int32_t>::max()) throw_input("radius graph: {} atoms", n);
  for (int64_t i = 0; i < 3 * n; ++i) {
    if (!std::isfinite(pos[i])) throw_input("radius graph: atom {} has a non-finite coordinate {}", i / 3, pos[i]);
  }
  const Frame f = frame_of(cell);
  // Fractional coordinates; periodic ones wrapped into [0, 1) with the integer part kept.
  std::vector<Vec3> frac(static_cast<size_t>(n));
  std::vector<std::array<int32_t, 3>> whole(static_cast<size_t>(n));
  Vec3 lo{0, 0, 0}, hi{0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const double* x = pos + 3 * i;
    for (int a = 0; a < 3; ++a) {
      double s = x[0] * f.inverse[3 * a] + x[1] * f.inverse[3 * a + 1] + x[2] * f.inverse[3 * a + 2];
      int32_t w = 0;
      if (f.cell.pbc[a]) {
        const double fl = std::floor(s);
        if (std::fabs(fl) > 1e6) throw_input("radius graph: atom {} lies {} cells away along lattice vector {}", i, fl, a);
        w = static_cast<int32_t>(fl);
        s -= fl;
        if (s >= 1.0) s = 0.0, ++w;  // rounding
      }
      frac[static_cast<size_t>(i)][static_cast<size_t>(a)] = s;
      whole[static_cast<size_t>(i)][static_cast<size_t>(a)] = w;
      lo[static_cast<size_t>(a)] = i == 0 ? s : std::min(lo[static_cast<size_t>(a)], s);
      hi[static_cast<size_t>(a)] = i == 0 ? s : std::max(hi[static_cast<size_t>(a)], s);
    }
  }
  std::array<Axis, 3> ax;
  for (int a = 0; a < 3; ++a) {
    ax[static_cast<size_t>(a)] = axis_of(f.cell.pbc[a], f.height[static_cast<size_t>(a)], o.cutoff, lo[static_cast<size_t>(a)],
                                         hi[static_cast<size_t>(a)], n);
  }
  // Atoms by bin (counting sort: atoms in index order within a bin).
  const int64_t nb0 = ax[0].bins, nb1 = ax[1].bins, nb2 = ax[2].bins, nbins = nb0 * nb1 * nb2;
  std::vector<int64_t> bin_of(static_cast<size_t>(n)), start(static_cast<size_t>(nbins + 1), 0), order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Vec3& s = frac[static_cast<size_t>(i)];
    bin_of[static_cast<size_t>(i)] = (ax[0].bin(s[0]) * nb1 + ax[1].bin(s[1])) * nb2 + ax[2].bin(s[2]);
    ++start[static_cast<size_t>(bin_of[static_cast<size_t>(i)] + 1)];
  }
  for (int64_t b = 0; b < nbins; ++b) start[static_cast<size_t>(b + 1)] += start[static_cast<size_t>(b)];
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(fill[static_cast<size_t>(bin_of[static_cast<size_t>(i)])]++)] = i;
  }
  const Vec3 A = row(f.cell, 0), B = row(f.cell, 1), C = row(f.cell, 2);
  const double cut2 = o.cutoff * o.cutoff;
  // The candidate test runs on the wrapped coordinates with a margin; the kept edges' vectors
  // and distances are those of the positions as given (what a direct search computes).
  const double margin2 = (o.cutoff * (1.0 + 1e-9) + 1e-9) * (o.cutoff * (1.0 + 1e-9) + 1e-9);
  RadiusGraph g;
  g.nodes = n;
  std::vector<Candidate> cand;
  for (int64_t i = 0; i < n; ++i) {
    cand.clear();
    const Vec3& si = frac[static_cast<size_t>(i)];
    const int64_t bi[3] = {ax[0].bin(si[0]), ax[1].bin(si[1]), ax[2].bin(si[2])};
    const double* xi = pos + 3 * i;
    for (int64_t d0 = -ax[0].reach; d0 <= ax[0].reach; ++d0) {
      for (int64_t d1 = -ax[1].reach; d1 <= ax[1].reach; ++d1) {
        for (int64_t d2 = -ax[2].reach; d2 <= ax[2].reach; ++d2) {
          const int64_t d[3] = {d0, d1, d2};
          int64_t b[3];
          int32_t t[3];
          bool inside = true;
          for (int a = 0; a < 3; ++a) {
            const Axis& x = ax[static_cast<size_t>(a)];
            const int64_t u = bi[a] + d[a];
            if (x.periodic) {
              const int64_t q = u >= 0 ? u / x.bins : -((-u + x.bins - 1) / x.bins);
              b[a] = u - q * x.bins;
              t[a] = static_cast<int32_t>(q);
            } else {
              inside = inside && u >= 0 && u < x.bins;
              b[a] = u;
              t[a] = 0;
            }
          }
          if (!inside) continue;
          const int64_t bin = (b[0] * nb1 + b[1]) * nb2 + b[2];
          for (int64_t k = start[static_cast<size_t>(bin)]; k < start[static_cast<size_t>(bin + 1)]; ++k) {
            const int64_t j = order[static_cast<size_t>(k)];
            const Vec3& sj = frac[static_cast<size_t>(j)];
            Vec3 df;
            for (int a = 0; a < 3; ++a) df[static_cast<size_t>(a)] = sj[static_cast<size_t>(a)] + t[a] - si[static_cast<size_t>(a)];
            Vec3 v;
            for (int c = 0; c < 3; ++c) v[static_cast<size_t>(c)] = df[0] * A[static_cast<size_t>(c)] + df[1] * B[static_cast<size_t>(c)] + df[2] * C[static_cast<size_t>(c)];
            if (dot(v, v) >= margin2) continue;
            // The shift of the source as given: its wrapped image t, moved by both integer parts.
            std::array<int32_t, 3> s;
            for (int a = 0; a < 3; ++a) {
              s[static_cast<size_t>(a)] = t[a] - whole[static_cast<size_t>(j)][static_cast<size_t>(a)] + whole[static_cast<size_t>(i)][static_cast<size_t>(a)];
            }
            if (j == i && s[0] == 0 && s[1] == 0 && s[2] == 0) continue;  // no self-loop
            const double* xj = pos + 3 * j;
            Vec3 e;
            for (int c = 0; c < 3; ++c) {
              e[static_cast<size_t>(c)] = xj[c] + (s[0] * A[static_cast<size_t>(c)] + s[1] * B[static_cast<size_t>(c)] + s[2] * C[static_cast<size_t>(c)]) - xi[c];
            }
            const double r2 = dot(e, e);
            if (r2 >= cut2) continue;
            cand.push_back({std::sqrt(r2), static_cast<int32_t>(j), s, e});
          }
        }
      }
    }
    std::sort(cand.begin(), cand.end());
    const size_t keep = o.max_neighbours > 0 ? std::min(cand.size(), static_cast<size_t>(o.max_neighbours)) : cand.size();
    if (g.source.size() + keep > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      throw_input("radius graph: more than 2^31 - 1 edges ({} atoms, cutoff {})", n, o.cutoff);
    }
    for (size_t k = 0; k < keep; ++k) {
      const Candidate& c = cand[k];
      g.source.push_back(c.j);
      g.receiver.push_back(static_cast<int32_t>(i));
      g.shift.insert(g.shift.end(), c.s.begin(), c.s.end());
      g.vec.insert(g.vec.end(), c.v.begin(), c.v.end());
      g.dist.push_back(c.d);
    }
  }
  return g;
}

}  // namespace weft
