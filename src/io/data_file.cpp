#include "qkv/io/data_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/core/machine.h"
#include "qkv/io/file.h"

namespace qkv::io {

std::string read_data_file(const std::string& path, const std::string& what) {
  // stat() before the open: opening a FIFO with no writer would block. Data is read to its size.
  require_regular_file(path, what, "a regular file (a device, a pipe or a folder): data is read from files");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw Error(detail::concat(what, ": cannot open '", path, "': ", std::strerror(errno)));
  struct stat st {};
  QKV_CHECK(fstat(fileno(f.get()), &st) == 0, what, ": cannot stat '", path, "': ", std::strerror(errno));
  QKV_CHECK(S_ISREG(st.st_mode), what, " '", path,
            "' is not a regular file (a device, a pipe or a folder): data is read from files");
  const int64_t limit = machine_memory_bytes() / 2;
  QKV_CHECK(st.st_size <= limit, what, " '", path, "' holds ", memory_str(st.st_size), ", more than half of this machine's ",
            memory_str(machine_memory_bytes()), " of memory");
  // Its size, no more: a file that grows while it is read is read as it was.
  std::string out(static_cast<size_t>(st.st_size), '\0');
  const size_t n = std::fread(out.data(), 1, out.size(), f.get());
  QKV_CHECK(!std::ferror(f.get()), what, ": cannot read '", path, "': ", std::strerror(errno));
  out.resize(n);
  return out;
}

}  // namespace qkv::io
