// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11 "Parallel random numbers:
// as easy as 1, 2, 3"). A draw is a pure function of (seed, stream, index): a parameter's
// element gets the same value whichever rank owns it, which is what layout invariance needs.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

namespace weft {

struct Philox {
  using Block = std::array<uint32_t, 4>;

  // One Philox4x32-10 block for a 128-bit counter under a 64-bit key.
  static Block block(Block ctr, uint64_t key) {
    uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
    constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
    for (int r = 0; r < 10; ++r) {
      uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
      uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
      Block n = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ k0, static_cast<uint32_t>(p1),
                 static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ k1, static_cast<uint32_t>(p0)};
      ctr = n;
      k0 += kW0;
      k1 += kW1;
    }
    return ctr;
  }

  // Uniform in (0, 1], 24 random bits.
  static float to_unit(uint32_t x) { return (static_cast<float>(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

  // Four 32-bit words for (seed, stream, index).
  static Block draw(uint64_t seed, uint64_t stream, uint64_t index) {
    Block ctr = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                 static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
    return block(ctr, seed);
  }

  // Standard normal for (seed, stream, index), Box-Muller on the first two words.
  static float normal(uint64_t seed, uint64_t stream, uint64_t index) {
    Block b = draw(seed, stream, index);
    double u1 = (static_cast<double>(b[0]) + 1.0) / 4294967296.0;  // (0, 1]
    double u2 = static_cast<double>(b[1]) / 4294967296.0;          // [0, 1)
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  // Uniform float in (0, 1] for (seed, stream, index).
  static float uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return to_unit(draw(seed, stream, index)[0]);
  }
};

// Well-known stream ids, so that two uses of the same seed never share draws.
enum RngStream : uint64_t {
  kRngStreamInit = 1ull << 32,     // + parameter id
  kRngStreamData = 2ull << 32,     // data sampler
  kRngStreamSample = 3ull << 32,   // text generation
  kRngStreamBench = 4ull << 32,    // random tokens for benchmarks
  kRngStreamTune = 5ull << 32,     // the tuner: forests, random initial points (tune/draws.h)
};

}  // namespace weft
