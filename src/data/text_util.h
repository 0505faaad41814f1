// Small helpers shared by the data module: UTF-8 checks and whole-file I/O.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

// Offset of the first byte that does not start a well-formed UTF-8 sequence (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF), or std::string_view::npos if `s` is valid.
size_t utf8_invalid_offset(std::string_view s);
inline bool is_valid_utf8(std::string_view s) { return utf8_invalid_offset(s) == std::string_view::npos; }

// `s` with every maximal ill-formed subsequence replaced by U+FFFD (the WHATWG/Unicode
// "substitution of maximal subparts" rule that TextDecoder and Python's errors="replace" use).
std::string sanitize_utf8(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` (must be a valid scalar value).
void append_utf8(std::string& out, uint32_t cp);

// The whole file as bytes. Throws InputError naming the path and the reason.
std::string read_file(const std::string& path);
// The whole of a text file weft wrote (JSON, TOML) that must hold at most `max_bytes`: InputError
// naming the path before reading when it is larger, and when it holds a NUL byte (no text weft
// writes does: a file extended with zeros, or not text), naming the offset.
std::string read_text_file(const std::string& path, int64_t max_bytes);
// fn(line, line_no) for each line of the text file `path`, read a block at a time (memory
// bounded by the longest line, whatever the file's size): InputError naming the path and line
// for a line longer than `max_line` bytes or one holding a NUL byte.
void for_each_file_line(const std::string& path, int64_t max_line,
                        const std::function<void(std::string_view, int64_t)>& fn);

// "a, b,,c " -> {"a", "b", "c"}: the comma-separated items, trimmed of blanks, empty ones dropped
// (field names on the command line and in configs).
std::vector<std::string> split_comma_list(std::string_view list);
// A comma-separated list of names the user gave (`what`: the option or key): "" is no list ({}:
// the caller's default, e.g. every field); otherwise every item, trimmed of blanks, must be a
// name: "a,,b", " ,," and "a," are refused (InputError naming `what`, the list and the empty
// item's position) instead of silently meaning fewer names, or all of them.
std::vector<std::string> parse_name_list(std::string_view list, const std::string& what);
// fn(line, line_no) for each line of text (split at '\n', which is not part of the line; line_no
// counts from 1; a last line without '\n' counts, an empty one after a final '\n' does not).
void for_each_line(std::string_view text, const std::function<void(std::string_view, int64_t)>& fn);

// Writes `data` to `path` atomically: to a temporary file "<path>.tmp-<host>-<pid>-<random>"
// first (created exclusively, so that no two processes share one), synced, then renamed over
// `path`. Throws WriteError (core/durable_file.h: the path, the reason and the free space) on
// failure, after removing its own temporary file and nothing else.
void write_file_atomic(const std::string& path, std::string_view data);
// The same with the contents produced by `write` (returns false when an fwrite failed); `what`
// describes them in the error message ("1000 tokens").
void write_file_atomic(const std::string& path, const std::function<bool(std::FILE*)>& write, const std::string& what);

}  // namespace weft
