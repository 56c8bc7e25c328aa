// Whole-file reads and atomic whole-file writes.
#pragma once

#include <string>
#include <string_view>

namespace qkv::io {

// The whole file as bytes. Throws qkv::Error("cannot open 'PATH': <strerror>") when it is missing or
// unreadable.
std::string read_file(const std::string& path);

// Writes `bytes` so that `path` is always either the old file or the complete new one, never a
// half-written one: the bytes go to a fresh "<path>.tmp-<pid>" in the same directory (created
// O_EXCL | O_NOFOLLOW: a planted file or link there is never written through), are fsync'ed, and the
// temporary file is renamed over `path` (and removed on any failure). The one writer of qkv's output
// files. A symbolic link to a regular file is kept and the file it points to is replaced; a device,
// a FIFO or a link to one (/dev/null, /dev/stdout) is written in place, never replaced; a directory
// or a dangling link is refused. Creates no directories. Throws qkv::Error naming the path on failure.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Removes the "<name>.tmp-<pid>[-<k>]" files write_file_atomic leaves in `dir` when its process was killed
// mid-write (those of processes still running are kept). Returns how many it removed.
int remove_stale_temporaries(const std::string& dir);

}  // namespace qkv::io
