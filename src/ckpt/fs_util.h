// Small POSIX file helpers of the checkpoint code (src/ckpt; train/run_folder uses the
// writer-suffix rule for its own leftovers).
#pragma once
#include <cstddef>
#include <string>

namespace weft::ckpt_io {

// Writes all n bytes (retrying short writes and EINTR). Throws RuntimeError naming `path`.
void write_all(int fd, const void* data, size_t n, const std::string& path);

// Writes `contents` to `path` (created or truncated) and fsyncs it. Not atomic on its own:
// callers write into a temporary name or folder and rename.
void write_file_synced(const std::string& path, const std::string& contents);

// fsyncs a file or a folder (a folder: to make renames and creations inside it durable).
// Filesystems that cannot fsync a folder (EINVAL) are tolerated.
void fsync_path(const std::string& path);

// The folder holding `path` ("." for a bare name).
std::string parent_dir(const std::string& path);

// Reads a whole (small) text file. Throws InputError "<path>: cannot read <what>: <reason>"
// when it cannot be opened.
std::string read_text_file(const std::string& path, const char* what);

// Temporary names (<dir>.tmp-*, <dir>.old-*, <dir>.trash-*) end in "<host>-<pid>" of the
// process that made them, so that a cleanup can tell its own and dead processes' leftovers
// from those of a live process (which it must never delete).
// This process' suffix: its host name (characters other than [A-Za-z0-9.] as '_') and pid.
std::string writer_suffix();
// Whether the process that named a leftover `suffix` is provably gone: the suffix is this
// process' own, or names this host and a pid that is not running. A suffix without a host
// (the bare pid of older weft versions) or of another host is never provably gone.
bool writer_gone(const std::string& suffix);

}  // namespace weft::ckpt_io
