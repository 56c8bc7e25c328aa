// What this machine holds, for limits derived from it rather than from a constant: the memory a
// job may plan to use (a training config whose model or batch cannot fit is refused before it
// allocates) and the hardware threads (an OpenMP thread count past a bound is refused before
// libgomp tries to start a million threads).
#pragma once

#include <cstdint>
#include <string>

namespace qkv {

// Bytes of memory this process can have: the machine's physical memory (sysconf), or the cgroup's
// memory.max when that is smaller (a container), or QKV_MEMORY_BYTES when that is smaller still
// (read once: the fuzz targets plan for a small machine so that nothing they accept is large).
// 1 GiB is assumed when nothing answers.
int64_t machine_memory_bytes();

// Hardware threads of the machine (std::thread::hardware_concurrency; 1 when unknown).
int hardware_threads();

// "24.0 GiB"
std::string memory_str(int64_t bytes);

}  // namespace qkv
