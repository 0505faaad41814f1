// Helpers of the families' config.json readers and writers (model/family.h): integers checked
// against limits, floats written as their shortest decimal.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace weft {

// Upper limits of config.json's sizes: far above any real model, low enough that every
// product the model makes of them (V x C, L x C x F, T x T) fits in 64 bits.
inline constexpr int kMaxJsonLayers = 100'000;
inline constexpr int kMaxJsonHeads = 65'536;
inline constexpr int kMaxJsonWidth = 1 << 20;    // n_embd, n_inner
inline constexpr int kMaxJsonContext = 1 << 24;  // n_positions / n_ctx
inline constexpr int kMaxJsonVocab = 1 << 26;    // vocab_size, padded_vocab

// Integer key in 1..max. A float (12.0), a negative, an overflowing (2^63) value is an
// InputError prefixed by `source`.
int json_int(const nlohmann::json& j, const char* key, const std::string& source, int max);

// A boolean key (absent or null: fallback); another type is an InputError prefixed by `source`.
bool json_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& source);
// A positive finite number (absent or null: fallback); anything else is an InputError.
float json_positive(const nlohmann::json& j, const char* key, float fallback, const std::string& source);

// A float as the shortest decimal that reads back to the same float (1e-05, not 9.99e-06).
double float_for_json(float v);


}  // namespace weft
