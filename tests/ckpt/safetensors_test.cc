#include "ckpt/safetensors.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt_test_util.h"
#include "core/error.h"

namespace weft {
namespace {

using testing_ckpt::read_bytes;
using testing_ckpt::run_python_reader;
using testing_ckpt::safetensors_bytes;
using testing_ckpt::TempDir;
using testing_ckpt::write_bytes;

// Expects `fn` to throw InputError whose message contains every one of `parts`.
template <typename Fn>
void expect_input_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no InputError thrown; expected one mentioning " << parts.front();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

// Test tensors of several dtypes, with values whose conversions are known in closed form.
struct Sample {
  std::vector<float> f32{1.5f, -2.0f, 0.0f, 3.25f, 1e-30f, -7.0f};         // [2, 3]
  std::vector<double> f64{1.0 / 3.0, -2.5, 1e-3, 12345.678};               // [4]
  std::vector<uint16_t> f16{0x3C00, 0xC000, 0x7BFF, 0x0001};              // 1, -2, 65504, 2^-24  [2, 2]
  std::vector<uint16_t> bf16{0x3F80, 0xC040, 0x4049};                     // 1, -3, 3.140625  [3]
  std::vector<int32_t> i32{-1, 7};                                        // [2]
  std::vector<int64_t> i64{int64_t{1} << 40};                             // [1]
  std::vector<uint8_t> u8{0, 1, 2, 254, 255};                             // [5]
  float scalar = 42.0f;                                                   // []
  std::vector<TensorRef> refs() const {
    return {
        {"f32", StDType::kF32, {2, 3}, f32.data()},   {"f64", StDType::kF64, {4}, f64.data()},
        {"f16", StDType::kF16, {2, 2}, f16.data()},   {"bf16", StDType::kBF16, {3}, bf16.data()},
        {"i32", StDType::kI32, {2}, i32.data()},      {"i64", StDType::kI64, {1}, i64.data()},
        {"u8", StDType::kU8, {5}, u8.data()},         {"scalar", StDType::kF32, {}, &scalar},
        {"empty", StDType::kF32, {0, 3}, nullptr},
    };
  }
};

TEST(SafetensorsTest, RoundTripDtypesAndShapes) {
  TempDir tmp;
  const std::string path = tmp / "a.safetensors";
  Sample s;
  write_safetensors(path, s.refs(), {});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  // Independent look at the bytes: length field, header padding, total size.
  const std::string raw = read_bytes(path);
  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const size_t data_bytes = 6 * 4 + 4 * 8 + 4 * 2 + 3 * 2 + 2 * 4 + 1 * 8 + 5 + 4 + 0;
  EXPECT_EQ(raw.size(), 8 + n + data_bytes);
  const auto header = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_FALSE(header.contains("__metadata__"));
  EXPECT_EQ(header["f32"]["data_offsets"], nlohmann::json::array({0, 24}));
  EXPECT_EQ(header["f64"]["data_offsets"], nlohmann::json::array({24, 56}));
  EXPECT_EQ(header["empty"]["data_offsets"], nlohmann::json::array({data_bytes, data_bytes}));
  EXPECT_EQ(header["scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(header["bf16"]["dtype"], "BF16");

  SafetensorsFile f(path);
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.names(), (std::vector<std::string>{"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "scalar", "empty"}));
  for (const TensorRef& r : s.refs()) {
    SCOPED_TRACE(r.name);
    ASSERT_TRUE(f.has(r.name));
    const auto& info = f.info(r.name);
    EXPECT_EQ(info.dtype, r.dtype);
    EXPECT_EQ(info.shape, r.shape);
    int64_t numel = 1;
    for (int64_t d : r.shape) numel *= d;
    EXPECT_EQ(info.numel, numel);
    EXPECT_EQ(info.nbytes(), static_cast<uint64_t>(numel) * dtype_size(r.dtype));
    if (numel > 0) {
      EXPECT_EQ(std::memcmp(f.data(r.name), r.data, info.nbytes()), 0);
    }
  }
  EXPECT_FALSE(f.has("nope"));

  std::vector<float> out(6, -1.0f);
  f.read_f32("f32", {2, 3}, out.data());
  EXPECT_EQ(out, s.f32);
  out.assign(4, -1.0f);
  f.read_f32("f64", {4}, out.data());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], static_cast<float>(s.f64[i]));
  f.read_f32("f16", {2, 2}, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, 65504.0f, 0x1p-24f}));
  out.assign(3, -1.0f);
  f.read_f32("bf16", {3}, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -3.0f, 3.140625f}));
  float scalar = 0.0f;
  f.read_f32("scalar", {}, &scalar);
  EXPECT_EQ(scalar, 42.0f);
  f.read_f32("empty", {0, 3}, nullptr);  // zero elements: nothing to write
}

TEST(SafetensorsTest, MetadataRoundTrip) {
  TempDir tmp;
  const std::string path = tmp / "m.safetensors";
  const std::vector<float> v{1.0f, 2.0f};
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "two words, \"quoted\""}};
  write_safetensors(path, {{"v", StDType::kF32, {2}, v.data()}}, meta);
  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata(), meta);
  // A file with no tensors at all is valid too.
  write_safetensors(tmp / "none.safetensors", {}, meta);
  SafetensorsFile g(tmp / "none.safetensors");
  EXPECT_EQ(g.size(), 0u);
  EXPECT_EQ(g.metadata(), meta);
}

TEST(SafetensorsTest, OverwriteIsAtomicRename) {
  TempDir tmp;
  const std::string path = tmp / "x.safetensors";
  const std::vector<float> a{1.0f}, b{2.0f, 3.0f};
  write_safetensors(path, {{"a", StDType::kF32, {1}, a.data()}}, {});
  SafetensorsFile old_map(path);  // a reader holding the old file keeps seeing it
  write_safetensors(path, {{"b", StDType::kF32, {2}, b.data()}}, {});
  SafetensorsFile fresh(path);
  EXPECT_TRUE(fresh.has("b"));
  EXPECT_FALSE(fresh.has("a"));
  float v = 0;
  old_map.read_f32("a", {1}, &v);
  EXPECT_EQ(v, 1.0f);
}

TEST(SafetensorsTest, F16ConversionKnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);  // largest finite half
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);  // below the midpoint to infinity
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // the midpoint rounds to even: infinity
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7C00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xFC00);
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);  // halfway to zero: ties to even
  EXPECT_EQ(f32_to_f16(0x1.8p-25f), 0x0001);
  EXPECT_EQ(f32_to_f16(0x3p-25f), 0x0002);  // 1.5 * 2^-24: tie, rounds to even 2
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);      // tie between 1 and 1+2^-10: even
  EXPECT_EQ(f32_to_f16(1.0f + 0x3p-11f), 0x3C02);      // tie between 1+2^-10 and 1+2^-9: even
  EXPECT_EQ(f32_to_f16(0.1f), 0x2E66);
  const uint16_t nan = f32_to_f16(NAN);
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_EQ(f16_to_f32(0x3555), 0x1.554p-2f);  // 0.333251953125
  EXPECT_EQ(f16_to_f32(0x03FF), 0x3FFp-24f);   // largest subnormal
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_EQ(f16_to_f32(0xFC00), -INFINITY);
  // Every non-NaN half survives half -> float -> half.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0;
    if (is_nan) continue;
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(SafetensorsTest, BF16ConversionKnownValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-3.0f), 0xC040);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie: even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie: even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const bool is_nan = (h & 0x7F80) == 0x7F80 && (h & 0x007F) != 0;
    if (is_nan) continue;
    ASSERT_EQ(f32_to_bf16(bf16_to_f32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(SafetensorsTest, DtypeNames) {
  for (const char* name : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
                           "F64", "I64", "U64"}) {
    StDType d;
    ASSERT_TRUE(parse_dtype(name, &d)) << name;
    EXPECT_STREQ(dtype_name(d), name);
  }
  StDType d;
  EXPECT_FALSE(parse_dtype("F12", &d));
  EXPECT_FALSE(parse_dtype("f32", &d));
  EXPECT_EQ(dtype_size(StDType::kBF16), 2u);
  EXPECT_EQ(dtype_size(StDType::kF64), 8u);
  EXPECT_EQ(dtype_size(StDType::kBool), 1u);
}

// Each malformed file: InputError naming the path and the offending values.
struct Malformed {
  const char* label;
  std::string bytes;
  std::vector<std::string> parts;  // expected in the message besides the path
};

TEST(SafetensorsTest, MalformedFilesAreInputErrors) {
  TempDir tmp;
  const std::string buf4(4, '\x01'), buf8(8, '\x02'), buf12(12, '\x03');
  const std::vector<Malformed> cases = {
      {"empty", "", {"has 0 bytes", "too short"}},
      {"five_bytes", "abcde", {"has 5 bytes"}},
      {"length_beyond_file", safetensors_bytes("{}", "", 1000), {"header length 1000", "2 bytes that follow"}},
      {"absurd_length", safetensors_bytes("{}", "", uint64_t{1} << 40), {"header length 1099511627776", "100000000"}},
      {"bad_json", safetensors_bytes("{\"a\": ", ""), {"not valid JSON"}},
      {"not_an_object", safetensors_bytes("[1, 2]", ""), {"header is a JSON array"}},
      {"entry_not_object", safetensors_bytes(R"({"a": 5})", ""), {"tensor 'a' entry is 5"}},
      {"missing_offsets", safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1]}})", buf4),
       {"tensor 'a' lacks the key 'data_offsets'"}},
      {"missing_dtype", safetensors_bytes(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", buf4),
       {"tensor 'a' lacks the key 'dtype'"}},
      {"unknown_dtype", safetensors_bytes(R"({"a": {"dtype": "F12", "shape": [1], "data_offsets": [0, 4]}})", buf4),
       {"tensor 'a' has unknown dtype 'F12'", "BF16"}},
      {"shape_offset_mismatch",
       safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", buf12),
       {"tensor 'w' (F32 [2, 2]) needs 16 bytes", "[0, 12] span 12 bytes"}},
      {"offsets_beyond_buffer",
       safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", buf8),
       {"data_offsets [0, 16] beyond the data buffer of 8 bytes"}},
      {"begin_after_end", safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", buf8),
       {"data_offsets [8, 4]", "begin is after end"}},
      {"overlap",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                         R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                         buf12),
       {"tensors 'a' (data_offsets [0, 8]) and 'b' (data_offsets [4, 12]) overlap"}},
      {"gap",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                         R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                         buf12),
       {"bytes [4, 8) of the data buffer belong to no tensor", "'b'"}},
      {"trailing_bytes", safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", buf8),
       {"cover 4 bytes but the data buffer has 8 bytes"}},
      {"negative_dim", safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", buf4),
       {"tensor 'a' has shape [-1]", "non-negative"}},
      {"float_dim", safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", buf4),
       {"tensor 'a' has shape [1.5]"}},
      {"huge_shape",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})",
                         buf4),
       {"tensor 'a' shape [4294967296, 4294967296] has too many elements"}},
      {"offsets_wrong_arity", safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", buf4),
       {"tensor 'a' has data_offsets [0]"}},
      {"metadata_not_string", safetensors_bytes(R"({"__metadata__": {"step": 5}})", ""),
       {"__metadata__ value of 'step' is 5"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = tmp / (std::string(c.label) + ".safetensors");
    write_bytes(path, c.bytes);
    std::vector<std::string> parts = c.parts;
    parts.insert(parts.begin(), path + ":");
    expect_input_error([&] { SafetensorsFile f(path); }, parts);
  }
}

TEST(SafetensorsTest, TruncatedFileIsInputError) {
  TempDir tmp;
  const std::string path = tmp / "t.safetensors";
  std::vector<float> v(100, 0.5f);
  write_safetensors(path, {{"v", StDType::kF32, {100}, v.data()}}, {{"format", "pt"}});
  const uint64_t full = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, full - 10);  // a copy that stopped early
  expect_input_error([&] { SafetensorsFile f(path); },
                     {path + ":", "tensor 'v' has data_offsets [0, 400] beyond the data buffer of 390 bytes"});
  std::filesystem::resize_file(path, 20);  // cut inside the header
  expect_input_error([&] { SafetensorsFile f(path); }, {path + ":", "12 bytes that follow it"});
}

TEST(SafetensorsTest, MissingFileIsInputError) {
  TempDir tmp;
  const std::string path = tmp / "absent.safetensors";
  expect_input_error([&] { SafetensorsFile f(path); }, {path + ":", "cannot open", "No such file"});
  expect_input_error([&] { SafetensorsFile f(tmp.path().string()); }, {tmp.path().string() + ":", "not a regular file"});
}

TEST(SafetensorsTest, ReadF32Errors) {
  TempDir tmp;
  const std::string path = tmp / "r.safetensors";
  const std::vector<float> w(6, 1.0f);
  const std::vector<int32_t> ids{1, 2};
  write_safetensors(path, {{"w", StDType::kF32, {2, 3}, w.data()}, {"ids", StDType::kI32, {2}, ids.data()}}, {});
  SafetensorsFile f(path);
  std::vector<float> out(6);
  expect_input_error([&] { f.read_f32("w", {3, 2}, out.data()); },
                     {path + ": w has shape [2, 3], the model expects [3, 2]"});
  expect_input_error([&] { f.read_f32("w", {6}, out.data()); }, {path + ": w has shape [2, 3], the model expects [6]"});
  expect_input_error([&] { f.read_f32("missing", {2}, out.data()); },
                     {path + ": tensor 'missing' is missing (the file has 2 tensors)"});
  expect_input_error([&] { f.read_f32("ids", {2}, out.data()); }, {path + ": ids has dtype I32"});
  expect_input_error([&] { (void)f.info("nope"); }, {path + ":", "'nope'"});
}

TEST(SafetensorsTest, LargeTensorParallelRead) {
  // More than one 1M-element chunk, in F16 and F32, to exercise the chunked conversion.
  TempDir tmp;
  const std::string path = tmp / "big.safetensors";
  const int64_t n = 2'500'003;
  std::vector<float> f(n);
  std::vector<uint16_t> h(n);
  for (int64_t i = 0; i < n; ++i) {
    f[i] = static_cast<float>(i % 2048) * 0.25f - 256.0f;  // |x| <= 256 in steps of 1/4: exact in half
    h[i] = f32_to_f16(f[i]);
  }
  write_safetensors(path, {{"f", StDType::kF32, {n}, f.data()}, {"h", StDType::kF16, {n}, h.data()}}, {});
  SafetensorsFile file(path);
  std::vector<float> out(n, NAN);
  file.read_f32("f", {n}, out.data());
  EXPECT_EQ(std::memcmp(out.data(), f.data(), n * sizeof(float)), 0);
  std::fill(out.begin(), out.end(), NAN);
  file.read_f32("h", {n}, out.data());
  EXPECT_EQ(std::memcmp(out.data(), f.data(), n * sizeof(float)), 0);
}

// The file reads back in Python with plain json + numpy into torch tensors, as written.
TEST(SafetensorsTest, PythonReaderAgrees) {
  TempDir tmp;
  const std::string path = tmp / "py.safetensors";
  Sample s;
  write_safetensors(path, s.refs(), {{"format", "pt"}, {"k", "v"}});
  const std::string out = run_python_reader("'" + path + "'", tmp.path().string());
  ASSERT_FALSE(out.empty());
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["metadata"], nlohmann::json({{"format", "pt"}, {"k", "v"}}));
  const auto& t = j["tensors"];
  ASSERT_EQ(t.size(), 9u);
  for (const TensorRef& r : s.refs()) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(t[r.name]["dtype"], dtype_name(r.dtype));
    EXPECT_EQ(t[r.name]["shape"], nlohmann::json(r.shape));
  }
  // Sums computed here in closed form from the inputs; torch decodes F16/BF16 itself.
  EXPECT_DOUBLE_EQ(t["f32"]["sum"].get<double>(), 1.5 - 2.0 + 0.0 + 3.25 + static_cast<double>(1e-30f) - 7.0);
  EXPECT_NEAR(t["f64"]["sum"].get<double>(), 1.0 / 3.0 - 2.5 + 1e-3 + 12345.678, 1e-9);
  EXPECT_DOUBLE_EQ(t["f16"]["sum"].get<double>(), 1.0 - 2.0 + 65504.0 + std::ldexp(1.0, -24));
  EXPECT_EQ(t["f16"]["first"], nlohmann::json::array({1.0, -2.0, 65504.0, std::ldexp(1.0, -24)}));
  EXPECT_DOUBLE_EQ(t["bf16"]["sum"].get<double>(), 1.0 - 3.0 + 3.140625);
  EXPECT_EQ(t["i32"]["sum"].get<double>(), 6.0);
  EXPECT_EQ(t["i64"]["sum"].get<double>(), std::ldexp(1.0, 40));
  EXPECT_EQ(t["u8"]["sum"].get<double>(), 512.0);
  EXPECT_EQ(t["scalar"]["sum"].get<double>(), 42.0);
  EXPECT_EQ(t["empty"]["sum"].get<double>(), 0.0);
}

}  // namespace
}  // namespace weft
