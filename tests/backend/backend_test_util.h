// Helpers of the backend tests: the backends under test by name, random inputs.
#pragma once
#include <cctype>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu_guarded/guarded_backend.h"
#include "backend/device_buffer.h"

namespace weft::test {

// "cpu", "cpu-guarded", or "cpu-guarded-staged" (cpu-guarded refusing host access, as a
// GPU backend does).
inline std::unique_ptr<Backend> make_test_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  GuardedOptions o;
  o.host_access = name != "cpu-guarded-staged";
  return make_cpu_guarded_backend(o);
}

// A gtest parameter name: letters and digits only.
inline std::string param_name(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Every byte of a device buffer, through the contract.
inline std::vector<uint8_t> read_bytes(Backend& be, const DeviceBuffer& b) {
  std::vector<uint8_t> v(b.bytes());
  be.copy_to_host(v.data(), b.raw(), 0, v.size());
  return v;
}

// Normalised error ||x - ref|| / ||ref|| over n elements (the absolute ||x - ref|| when the
// reference is all zeros), accumulated in double: how tests compare a buffer to a reference.
template <typename R>
double rel_l2(const float* x, const R* ref, int64_t n) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace weft::test
