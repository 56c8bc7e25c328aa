// Whole-file reads and atomic whole-file writes.
#pragma once

#include <string>
#include <string_view>

namespace qkv::io {

// The whole file as bytes. Throws qkv::Error("cannot open 'PATH': <strerror>") when it is missing or
// unreadable.
std::string read_file(const std::string& path);

// Writes `bytes` so that `path` is always either the old file or the complete new one, never a
// half-written one: the bytes go to "<path>.tmp-<pid>" in the same directory, are flushed and
// fsync'ed, and the temporary file is renamed over `path` (and removed on any failure). Creates no
// directories. Throws qkv::Error naming the path on failure.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Removes the "<name>.tmp-<pid>" files write_file_atomic leaves in `dir` when its process was killed
// mid-write (those of processes still running are kept). Returns how many it removed.
int remove_stale_temporaries(const std::string& dir);

}  // namespace qkv::io
