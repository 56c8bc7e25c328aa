// Whole-file reads and atomic whole-file writes (write a temporary file, fsync, rename).
#include "qkv/io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "qkv/core/error.h"

namespace qkv::io {

std::string read_file(const std::string& path) { return read_file(path, -1, ""); }

std::string read_file(const std::string& path, int64_t max_bytes, const std::string& what) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(detail::concat("cannot open '", path, "': ", std::strerror(errno)));
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    out.append(buf, n);
    if (max_bytes >= 0 && static_cast<int64_t>(out.size()) > max_bytes) {
      std::fclose(f);
      const bool mib = max_bytes % (int64_t{1} << 20) == 0;
      throw Error(detail::concat(what, what.empty() ? "" : " ", "'", path, "' is larger than the limit of ",
                                 mib ? max_bytes >> 20 : max_bytes, mib ? " MiB" : " bytes"));
    }
  }
  int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  // fopen succeeds on a directory; the read then fails (EISDIR).
  if (err) throw Error(detail::concat("cannot read '", path, "': ", std::strerror(err)));
  return out;
}

const char* file_kind_name(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

void require_regular_file(const std::string& path, const std::string& what, const std::string& needed) {
  const std::string prefix = what.empty() ? std::string() : what + " ";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    std::string w = what;
    if (!w.empty() && w.back() == ':') w.pop_back();
    throw Error(detail::concat(w, w.empty() ? "" : ": ", "cannot open '", path, "': ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode))
    throw Error(detail::concat(prefix, "'", path, "' is ", file_kind_name(st.st_mode), ", not ", needed));
}

namespace {

[[noreturn]] void write_error(const std::string& path, const std::string& what, int err) {
  throw Error(detail::concat("cannot write '", path, "': ", what, err ? ": " : "", err ? std::strerror(err) : ""));
}

// write(2) until every byte is out (a device or a pipe may take them in pieces; EINTR is retried).
bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// What following `path`'s symbolic links finds in /proc: /dev/stdout → /proc/self/fd/1, /dev/fd/N and
// /proc/self/fd/N name a descriptor this process already holds (`own_fd`), whose file the caller (the
// shell's `>` or `>>`) opened for us; another folder of /proc (`through_proc`) names one of another
// process.
struct ProcLink {
  bool through_proc = false;
  int own_fd = -1;
};

ProcLink proc_link(std::string p) {
  const std::string own = detail::concat("/proc/", ::getpid(), "/fd");
  for (int hop = 0; hop < 40; ++hop) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return {};
    const std::string dir = parent_of(p), name = p.substr(p.find_last_of('/') + 1);
    if (char* real = ::realpath(dir.c_str(), nullptr)) {
      const std::string r(real);
      std::free(real);
      if (r == own && !name.empty() && name.size() < 9 && name.find_first_not_of("0123456789") == std::string::npos)
        return {true, std::stoi(name)};
      if (r.starts_with("/proc/")) return {true, -1};
    }
    char target[4096];
    const ssize_t n = ::readlink(p.c_str(), target, sizeof target - 1);
    if (n <= 0) return {};
    target[n] = 0;
    p = target[0] == '/' ? std::string(target) : dir + "/" + target;
  }
  return {};
}

using Producer = std::function<void(const ByteSink&)>;

// A write(2) that failed inside a producer's piece, carried out to the writer that knows the file.
struct WriteFailed {
  int err;
};

// Every piece `produce` makes, written to fd (WriteFailed where one is not).
void write_pieces(int fd, const Producer& produce) {
  produce([fd](std::string_view piece) {
    if (!write_all(fd, piece)) throw WriteFailed{errno};
  });
}

// Straight into a descriptor this process holds (its offset, its O_APPEND: what `>` or `>>` chose),
// left open.
void write_to_descriptor(const std::string& path, int fd, const Producer& produce) {
  try {
    write_pieces(fd, produce);
  } catch (const WriteFailed& e) {
    write_error(path, "write", e.err);
  }
}

// Into what is there: a device, a FIFO (this waits for its reader, as `cat > fifo` does) or another
// process's descriptor's file, appended to.
void write_in_place(const std::string& path, const Producer& produce, bool append) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | (append ? O_APPEND : 0));
  if (fd < 0) write_error(path, "cannot open", errno);
  try {
    write_pieces(fd, produce);
  } catch (const WriteFailed& e) {
    ::close(fd);
    write_error(path, "write", e.err);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0 && errno != EINTR) write_error(path, "close", errno);
}

// A fresh temporary file beside `target`, opened O_EXCL | O_NOFOLLOW: a file or a symbolic link
// someone planted at the name is never opened (nor written through); the next name is tried.
// Names are "<target>.tmp-<pid>" then "<target>.tmp-<pid>-<k>" (what remove_stale_temporaries knows).
std::pair<int, std::string> create_temporary(const std::string& path, const std::string& target) {
  for (int k = 0; k < 100; ++k) {
    std::string tmp = k == 0 ? detail::concat(target, ".tmp-", ::getpid())
                             : detail::concat(target, ".tmp-", ::getpid(), "-", k);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) return {fd, std::move(tmp)};
    if (errno != EEXIST) write_error(path, detail::concat("cannot create '", tmp, "'"), errno);
  }
  write_error(path, detail::concat("cannot create a temporary file beside '", target, "': 100 names taken"), 0);
}

// temp + fsync + rename over `target` (a regular file or nothing yet), then fsync its folder.
void write_replacing(const std::string& path, const std::string& target, const Producer& produce,
                     const struct stat* existing) {
  auto [fd, tmp] = create_temporary(path, target);
  auto fail = [&, fd = fd, tmp = tmp](const char* what, int err, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(tmp.c_str());
    write_error(path, what, err);
  };
  // The new file keeps the old one's permission bits (a new one gets 0666 less the umask).
  if (existing) ::fchmod(fd, existing->st_mode & 07777);
  try {
    write_pieces(fd, produce);
  } catch (const WriteFailed& e) {
    fail("write", e.err, true);
  } catch (...) {  // the producer's own error: no half-written file left behind
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0) fail("flush", errno, true);
  if (::close(fd) != 0) fail("close", errno, false);
  if (std::rename(tmp.c_str(), target.c_str()) != 0) fail("rename", errno, false);
  // Make the rename itself durable (best effort: some file systems refuse to fsync a directory).
  const int dfd = ::open(parent_of(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

// Every output file of qkv comes here; what `path` names decides how it is written:
//  - nothing yet, or a regular file: a temporary file beside it, fsync'ed and renamed over it, so
//    the path holds the old bytes or all the new ones, never part of them;
//  - a symbolic link to a regular file: that file is replaced the same way in its own folder, and
//    the link is kept (so `-o link` updates what the link points to, as `>` would);
//  - a device, a FIFO, or a link to one (/dev/null, /dev/stdout onto a pipe): written in place —
//    renaming over it would replace the special file with a regular one;
//  - /dev/stdout, /dev/fd/N or /proc/self/fd/N: written to that descriptor of this process (at its
//    offset: the caller's `>` or `>>` chose where), whatever it is open on;
//  - a directory, or a link to nothing: refused.
void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [bytes](const ByteSink& write) { write(bytes); });
}

void write_file_atomic(const std::string& path, const std::function<void(const ByteSink& write)>& produce) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    struct stat lst;
    if (err == ENOENT && ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
      write_error(path, "it is a symbolic link to a file that does not exist", 0);
    if (err != ENOENT) write_error(path, "cannot look at it", err);
    write_replacing(path, path, produce, nullptr);
    return;
  }
  if (S_ISDIR(st.st_mode)) write_error(path, "it is a directory", 0);
  const ProcLink link = proc_link(path);
  if (link.own_fd >= 0) return write_to_descriptor(path, link.own_fd, produce);
  if (!S_ISREG(st.st_mode)) return write_in_place(path, produce, false);
  if (link.through_proc) return write_in_place(path, produce, true);
  struct stat lst;
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    char* real = ::realpath(path.c_str(), nullptr);
    if (!real) write_error(path, "cannot resolve the symbolic link", errno);
    const std::string target(real);
    std::free(real);
    return write_replacing(path, target, produce, &st);
  }
  write_replacing(path, path, produce, &st);
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
    // "<pid>" or "<pid>-<k>" (a second name when the first was taken)
    const std::string digits = name.substr(at + 5, name.find('-', at + 5) - (at + 5));
    if (const auto dash = name.find('-', at + 5); dash != std::string::npos &&
        (dash + 1 >= name.size() || name.find_first_not_of("0123456789", dash + 1) != std::string::npos))
      continue;
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid == ::getpid() || process_running(pid)) continue;  // it may still be writing it
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

}  // namespace qkv::io
