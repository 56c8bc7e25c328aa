#include "qkv/core/machine.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace qkv {

namespace {

// cgroup v2's limit for this process ("max" or a byte count; −1 when there is none or none known).
int64_t cgroup_memory_max() {
  FILE* f = std::fopen("/sys/fs/cgroup/memory.max", "r");
  if (!f) return -1;
  char buf[64] = {0};
  const bool got = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!got || buf[0] < '0' || buf[0] > '9') return -1;
  return std::strtoll(buf, nullptr, 10);
}

}  // namespace

int64_t machine_memory_bytes() {
  static const int64_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t phys = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{1} << 30;
    const int64_t cg = cgroup_memory_max();
    if (cg > 0) phys = std::min(phys, cg);
    // the process's address-space limit (ulimit -v) bounds what it can allocate as surely
    rlimit as{};
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
      phys = std::min<int64_t>(phys, static_cast<int64_t>(as.rlim_cur));
    if (const char* e = std::getenv("QKV_MEMORY_BYTES")) {
      const long long v = std::strtoll(e, nullptr, 10);
      if (v > 0) phys = std::min<int64_t>(phys, v);
    }
    return phys;
  }();
  return bytes;
}

int hardware_threads() {
  static const int n = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(n);
}

std::string memory_str(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
  return buf;
}

}  // namespace qkv
