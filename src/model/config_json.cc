#include "model/config_json.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <climits>
#include <cstdint>

#include "core/error.h"

namespace weft {

int json_int(const nlohmann::json& j, const char* key, const std::string& source, int max) {
  if (!j.contains(key)) throw_input("{}: key '{}' is missing", source, key);
  const auto& v = j.at(key);
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    x = u > static_cast<uint64_t>(INT_MAX) ? int64_t{INT_MAX} + 1 : static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    throw_input("{}: key '{}' is {}, expected an integer", source, key, v.dump());
  }
  if (x < 1 || x > max) throw_input("{}: key '{}' is {}, expected an integer from 1 to {}", source, key, v.dump(), max);
  return static_cast<int>(x);
}

double float_for_json(float v) {
  const std::string s = fmt::format("{}", v);
  double d = static_cast<double>(v);
  std::from_chars(s.data(), s.data() + s.size(), d);  // locale-independent, unlike strtod
  return d;
}

bool json_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_boolean()) throw_input("{}: key '{}' is {}, expected true or false", source, key, j.at(key).dump());
  return j.at(key).get<bool>();
}

float json_positive(const nlohmann::json& j, const char* key, float fallback, const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  const auto& v = j.at(key);
  if (!v.is_number() || !(v.get<double>() > 0.0) || !std::isfinite(static_cast<float>(v.get<double>()))) {
    throw_input("{}: key '{}' is {}, expected a positive number", source, key, v.dump());
  }
  return static_cast<float>(v.get<double>());
}

}  // namespace weft
