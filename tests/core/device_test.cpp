// The device seam: devices by name, an allocator per device, Tensor::to(device), borrowed memory
// (from_blob), and — what makes the seam safe — an op that meets a tensor of a device this build
// has no kernels for is a qkv::Error naming the op and the device, and touches no memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "qkv/core/allocator.h"
#include "qkv/core/cuda.h"
#include "ops/op_table.h"
#include "qkv/ops.h"
#include "testing.h"

namespace qkv {
namespace {

using testing::error_of;

TEST(Device, NamesAsPyTorch) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  EXPECT_EQ(Device::cpu().str(), "cpu");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "CPU", ""})
    EXPECT_NE(error_of([&] { Device::parse(bad); }).find("unknown device"), std::string::npos) << bad;
  EXPECT_TRUE(device_available(Device::cpu()));
  EXPECT_EQ(device_available(Device::cuda()), cuda::is_available());
  EXPECT_FALSE(device_available(Device::cuda(cuda::device_count()))) << "one past the last GPU";
}

TEST(Device, TensorsLiveOnTheCpuAndAnotherDeviceIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "this machine has a GPU: tests/cuda/ test the device";
  Tensor t = Tensor::from_vector({1, 2, 3}, {3});
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_TRUE(t.to(Device::cpu()).same(t)) << "to() the same device is the tensor itself";
  const std::string e = error_of([&] { t.to(Device::cuda()); });
  EXPECT_NE(e.find("cuda:0"), std::string::npos) << e;
  EXPECT_NE(error_of([] { Tensor::empty({2}, DType::f32, Device::cuda(1)); }).find("cuda:1"), std::string::npos);
  // a strided view moves too (contiguous first): its values, not its storage
  Tensor m = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  EXPECT_EQ(m.to(Device::cpu()).to_vector(), m.to_vector());
}

TEST(Device, FromBlobBorrowsMemoryAndCallsItsDeleterOnce) {
  std::vector<float> host = {1, 2, 3, 4, 5, 6};
  int deleted = 0;
  const int64_t before = allocated_bytes();
  {
    Tensor t = Tensor::from_blob(host.data(), {2, 3}, DType::f32, Device::cpu(), [&](void* p) {
      EXPECT_EQ(p, host.data());
      ++deleted;
    });
    EXPECT_EQ(allocated_bytes(), before) << "borrowed memory is not qkv's";
    EXPECT_EQ(t.to_vector(), host);
    host[4] = 50;  // no copy: the tensor sees the change
    EXPECT_EQ(t.to_vector()[4], 50.f);
    Tensor v = t.transpose(0, 1);  // a view keeps the storage alive
    t = Tensor();
    EXPECT_EQ(deleted, 0);
    EXPECT_EQ(mul(v, 2.f).to_vector(), (std::vector<float>{2, 8, 4, 100, 6, 12}));
  }
  EXPECT_EQ(deleted, 1);
}

// A tensor labelled as a GPU tensor over host memory: every op must refuse it before reading or
// writing a byte. (With a GPU present its kernels would run on this host memory: tests/cuda/ cover
// that case.) Every entry of the op table (tests/ops/op_table.h) on its first sample, its inputs
// copied to host memory labelled cuda:0; then the methods that are not table entries.
class ForeignDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(ForeignDevice, IsRefusedAndTouchesNothing) {
  if (cuda::is_available()) GTEST_SKIP() << "this machine has a GPU: the cuda tensors here are host memory";
  const optable::OpInfo& op = *optable::find_op(GetParam());
  const std::vector<optable::Sample> samples = op.samples();
  ASSERT_FALSE(samples.empty());
  const optable::Sample& s = samples.front();
  SCOPED_TRACE("sample " + s.name);
  std::map<std::string, std::vector<uint8_t>> bytes;
  optable::TensorMap in;
  for (const auto& [name, t] : s.inputs) {
    Tensor dense = t.detach().contiguous_copy();
    std::vector<uint8_t>& b = bytes[name];
    const size_t n = static_cast<size_t>(dense.numel()) * dtype_size(dense.dtype());
    b.resize(n + 1);  // (+1: never a null pointer for an empty tensor)
    if (n) std::memcpy(b.data(), dense.data(), n);
    in[name] = Tensor::from_blob(b.data(), dense.shape(), dense.dtype(), Device::cuda());
  }
  const std::map<std::string, std::vector<uint8_t>> before = bytes;
  const std::string e = error_of([&] {
    optable::TensorMap out = op.run(in, s.params, Device::cuda());
    for (auto& [name, t] : out) (void)t.contiguous();  // a view's values, read where they are
  });
  if (op.computes) {
    EXPECT_NE(e.find("cuda:0"), std::string::npos) << (e.empty() ? "no error" : e);
  }
  for (const auto& [name, b] : bytes) EXPECT_TRUE(b == before.at(name)) << "the op wrote to input " << name;
}

INSTANTIATE_TEST_SUITE_P(Device, ForeignDevice, ::testing::ValuesIn(optable::op_names([](const optable::OpInfo&) {
                           return true;
                         })),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The in-place and byte-moving methods, and the reductions to a number, which are not table entries.
TEST(Device, AMethodMeetingAnUnsupportedDeviceIsAnErrorAndTouchesNothing) {
  if (cuda::is_available()) GTEST_SKIP() << "this machine has a GPU: the cuda tensors here are host memory";
  std::vector<float> mem(64, 7.f);
  auto gpu = [&](const Shape& s) { return Tensor::from_blob(mem.data(), s, DType::f32, Device::cuda()); };
  Tensor x = gpu({4, 4}), cpu_x = Tensor::ones({4, 4});
  Tensor m = gpu({4, 4}), v = gpu({4, 4}), p = gpu({4, 4});
  const std::vector<std::pair<const char*, std::function<void()>>> ops = {
      {"sum_to", [&] { sum_to(x, {4}); }},
      {"add_", [&] { add_(x, x); }},
      {"mul_", [&] { mul_(x, 2.f); }},
      {"sum_of_squares", [&] { sum_of_squares(x); }},
      {"adam_update_", [&] { adam_update_(p, x, m, v, AdamUpdate{}); }},
      {"adam_update_ (lists)", [&] { adam_update_({p}, {x}, {m}, {v}, AdamUpdate{}); }},
      {"clip_coefficient", [&] { clip_coefficient({x, x}, 1.0); }},
      {"contiguous", [&] { x.transpose(0, 1).contiguous(); }},
      {"copy_", [&] { x.copy_(cpu_x); }},
      {"fill_", [&] { x.fill_(0.f); }},
  };
  for (const auto& [name, run] : ops) {
    const std::string e = error_of(run);
    EXPECT_NE(e.find("cuda:0"), std::string::npos) << name << ": " << (e.empty() ? "no error" : e);
  }
  for (float f : mem) ASSERT_EQ(f, 7.f) << "an op wrote to the unsupported device's memory";
  // operands on two devices: an error naming both
  const std::string e = error_of([&] { add(x, cpu_x); });
  EXPECT_NE(e.find("different devices"), std::string::npos) << e;
}

}  // namespace
}  // namespace qkv
