// Deterministic random draws for the tuner. Every random choice of the search (a tree's
// bootstrap sample and feature order, a random initial configuration) is a Philox draw keyed
// by (seed, stream, counter), so a fixed seed and the same sequence of calls give the same
// trees and the same proposals on any machine.
#pragma once
#include <cstdint>

#include "core/rng.h"

namespace weft::tune {

// Sub-streams of kRngStreamTune (core/rng.h): which use of a seed a draw belongs to.
enum TuneStream : uint64_t {
  kTuneStreamForest = kRngStreamTune,                  // + tree index
  kTuneStreamInitial = kRngStreamTune + (1ull << 31),  // CBO's random initial points
};

// The draws of one Philox stream, read in order: call i reads counter i.
class Draws {
 public:
  Draws(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  // A uniform integer in [0, n), n >= 1: 64 random bits scaled by n (multiply-high; the bias,
  // below n / 2^64, is far under anything a tuner could notice).
  uint64_t below(uint64_t n) {
    const Philox::Block b = Philox::draw(seed_, stream_, next_++);
    const uint64_t bits = (static_cast<uint64_t>(b[1]) << 32) | b[0];
    return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
  }

 private:
  uint64_t seed_, stream_, next_ = 0;
};

// A seed derived from (seed, salt) by splitmix64 (Steele et al., OOPSLA'14): nearby salts give
// unrelated Philox keys.
inline uint64_t mix_seed(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (salt + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace weft::tune
