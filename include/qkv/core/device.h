// Device: where a tensor's memory lives and its ops run (torch.device's counterpart).
//
//   Device::cpu()       host memory, the CPU kernels (src/kernels/cpu)
//   Device::cuda(i)     GPU i — a device type qkv knows by name; this build has no backend for it, so
//                       allocating there, or an op meeting a tensor there, is a qkv::Error naming it
//
// A device contributes three things, each in one place: an allocator (core/allocator.h,
// allocator_for), byte copies to and from the host (copy_bytes below), and kernels that ops
// dispatch to by the device of their operands (src/ops/dispatch.h). docs/ARCHITECTURE.md,
// "Adding a device", lists the files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qkv {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // which device of its type (GPU 0, 1, …); always 0 for the CPU

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  // "cpu", "cuda", "cuda:1" (as PyTorch spells them); anything else is a qkv::Error naming it.
  static Device parse(std::string_view name);

  bool is_cpu() const { return type == DeviceType::cpu; }
  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const Device&) const = default;
};

// Whether this build of qkv can allocate and compute on `d` (the CPU always; another device when
// its backend was compiled in).
bool device_available(Device d);

// n bytes from src (on src_device) to dst (on dst_device): host↔host is memcpy; a device without a
// backend in this build is a qkv::Error naming it.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n);

}  // namespace qkv
