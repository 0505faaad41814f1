// Checksums of checkpoint bytes: XXH3 (64-bit) from Debian's libxxhash. Not cryptographic:
// it detects corruption (flipped bits, truncation, torn writes), not tampering.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace weft::ckpt_io {

inline constexpr const char* kChecksumName = "xxh3-64";

uint64_t checksum(const void* data, size_t n);
// "0x" and 16 lower-case hex digits, as the manifest stores them.
std::string format_checksum(uint64_t h);
// Parses format_checksum's form; false for anything else.
bool parse_checksum(const std::string& s, uint64_t* out);

}  // namespace weft::ckpt_io
