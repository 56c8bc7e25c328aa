// Whole-file reads and atomic whole-file writes (write a temporary file, fsync, rename).
#include "qkv/io/file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>

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

namespace {

// Whether process `pid` runs (and so may still be writing): it exists and is not a zombie (a killed
// process whose parent died before reaping it stays a zombie until init does).
bool process_running(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  std::FILE* f = std::fopen(detail::concat("/proc/", pid, "/stat").c_str(), "r");
  if (!f) return true;
  char state = 0;
  // "pid (comm) state …": the state follows the last ')' (comm may hold spaces and parentheses)
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  if (const char* close = std::strrchr(buf, ')'); close && close[1] == ' ') state = close[2];
  return state != 'Z' && state != 'X';
}

}  // namespace

int remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto at = name.rfind(".tmp-");
    if (at == std::string::npos || at + 5 >= name.size()) continue;
    const std::string digits = name.substr(at + 5);
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid == ::getpid() || process_running(pid)) continue;  // it may still be writing it
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

}  // namespace qkv::io
