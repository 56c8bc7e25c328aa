// Whole-file reads and atomic whole-file writes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace qkv::io {

// The whole file as bytes. Throws qkv::Error("cannot open 'PATH': <strerror>") when it is missing or
// unreadable.
std::string read_file(const std::string& path);
// The same, reading no more than `max_bytes` (a config: io::kMaxConfigBytes): a file that holds
// more — /dev/zero, a data set given where a config goes — is a qkv::Error
// "<what> 'PATH' is larger than the limit of 4 MiB" as soon as its bytes pass the limit
// (issue 43: a config of /dev/zero read on until the memory ran out). Read as a stream: a pipe works.
std::string read_file(const std::string& path, int64_t max_bytes, const std::string& what);

// What a file of this st_mode is, in words: "a regular file", "a FIFO", "a directory", "a character
// device", "a block device", "a socket".
const char* file_kind_name(unsigned mode);

// Refuses at once, before any open (stat() never blocks, an open of a FIFO with no writer does),
// anything at `path` but a regular file: "<what> 'PATH' is a FIFO, not <needed>", or
// "<what>: cannot open 'PATH': <strerror>" when stat() fails. For files read at random or to their
// size: model files, training data. Text inputs and configs may be pipes and are not checked.
void require_regular_file(const std::string& path, const std::string& what, const std::string& needed);

// Writes `bytes` so that `path` is always either the old file or the complete new one, never a
// half-written one: the bytes go to a fresh "<path>.tmp-<pid>" in the same directory (created
// O_EXCL | O_NOFOLLOW: a planted file or link there is never written through), are fsync'ed, and the
// temporary file is renamed over `path` (and removed on any failure). The one writer of qkv's output
// files. A symbolic link to a regular file is kept and the file it points to is replaced; a device,
// a FIFO or a link to one (/dev/null, /dev/stdout) is written in place, never replaced; a directory
// or a dangling link is refused. Creates no directories. Throws qkv::Error naming the path on failure.
void write_file_atomic(const std::string& path, std::string_view bytes);
// The same for bytes made as they are written: `produce(write)` calls write(piece) for each piece in
// order (the file is the pieces joined), so a file of gigabytes — a checkpoint, a converted model —
// never needs its bytes in memory at once. A qkv::Error thrown by `produce` (or a failing write)
// leaves `path` as it was (a special file: what was written so far).
using ByteSink = std::function<void(std::string_view)>;
void write_file_atomic(const std::string& path, const std::function<void(const ByteSink& write)>& produce);

// Removes the "<name>.tmp-<pid>[-<k>]" files write_file_atomic leaves in `dir` when its process was killed
// mid-write (those of processes still running are kept). Returns how many it removed.
int remove_stale_temporaries(const std::string& dir);

}  // namespace qkv::io
