// Whole-file reads and atomic whole-file writes (write a temporary file, fsync, rename).
#include "qkv/io/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "qkv/core/error.h"

namespace qkv::io {

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(detail::concat("cannot open '", path, "': ", std::strerror(errno)));
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  // fopen succeeds on a directory; the read then fails (EISDIR).
  if (err) throw Error(detail::concat("cannot read '", path, "': ", std::strerror(err)));
  return out;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = detail::concat(path, ".tmp-", ::getpid());
  auto fail = [&](const char* what, int err) {
    std::remove(tmp.c_str());
    throw Error(detail::concat("cannot write '", path, "': ", what, ": ", std::strerror(err)));
  };
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(detail::concat("cannot write '", path, "': cannot create '", tmp, "': ", std::strerror(errno)));
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    int err = errno;
    std::fclose(f);
    fail("write", err);
  }
  if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0) {
    int err = errno;
    std::fclose(f);
    fail("flush", err);
  }
  if (std::fclose(f) != 0) fail("close", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("rename", errno);
  // Make the rename itself durable (best effort: some file systems refuse to fsync a directory).
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace qkv::io
