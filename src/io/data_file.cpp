#include "qkv/io/data_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
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

std::string config_path(const std::string& path, const std::string& base_dir) {
  std::filesystem::path p = path;
  if (p.is_relative() && !base_dir.empty()) p = std::filesystem::path(base_dir) / p;
  return p.string();
}

std::vector<std::pair<size_t, std::string_view>> numbered_lines(std::string_view text, bool keep_blank) {
  std::vector<std::pair<size_t, std::string_view>> out;
  size_t from = 0, number = 0;
  while (from < text.size()) {
    size_t end = text.find('\n', from);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(from, end - from);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++number;
    if (keep_blank || line.find_first_not_of(" \t") != std::string_view::npos) out.emplace_back(number, line);
    from = end + 1;
  }
  return out;
}

}  // namespace qkv::io
