// The CUDA backend against the CPU: every entry of the op table (tests/ops/op_table.h) that has CUDA
// kernels, forward and backward, on each of its samples (awkward shapes: odd sizes, broadcasts, tails)
// at the entry's tolerances — TF32 ones for the GEMMs; then what the table does not say: strided
// operands, fully masked rows, bf16 paths, the attention kernels one by one, in-place updates, the
// recurrent scans, device memory, transfers, and the errors of the seam. Each test skips, saying
// so, where this build has no CUDA backend or this machine no GPU (CI builds them and skips them;
// a lent GPU runs them: docs/CUDA.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../ops/op_table.h"
#include "qkv/core/cuda.h"
#include "qkv/ops.h"
#include "qkv/ops/inference_weight.h"

namespace qkv {
namespace {

// (This file links against ops alone — the binary qkv_cuda_tests travels to a lent GPU with few
// libraries — so it has its own two helpers rather than tests/testing.h's.)
// max|a − b| / max(max|b|, floor)
double rel_error(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-6) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::fabs(b[i])));
  }
  return num / den;
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_built()) GTEST_SKIP() << "this build has no CUDA backend (scripts/build.sh builds one where the CUDA toolkit is)";
    if (!cuda::is_available()) GTEST_SKIP() << "this machine shows no CUDA GPU";
  }
  static Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }
  static std::vector<float> host(const Tensor& t) { return t.detach().to(Device::cpu()).contiguous().to_vector(); }
  static Tensor randn(const Shape& s, uint64_t seed, float scale = 1.f) {
    Generator g(seed);
    return mul(Tensor::randn(s, g), scale);
  }
  // An attention case's mask on the CPU: 1 boolean [B, 1, Lq, Lk], 2 additive [1, H, Lq, Lk], 3 every
  // fifth query row sees no key ([Lq, Lk]), 0 none (undefined)
  static Tensor attention_mask(int kind, int64_t B, int64_t H, int64_t Lq, int64_t Lk, uint64_t& seed) {
    if (kind == 1) return gt(randn({B, 1, Lq, Lk}, seed++), -1.f);
    if (kind == 2) return randn({1, H, Lq, Lk}, seed++);
    if (kind != 3) return Tensor();
    std::vector<bool> see(Lq * Lk, true);
    for (int64_t i = 0; i < Lq; i += 5) std::fill(see.begin() + i * Lk, see.begin() + (i + 1) * Lk, false);
    return Tensor::from_bools(see, {Lq, Lk});
  }
  // A CPU leaf and its copy on the GPU, both requiring grad.
  static std::pair<Tensor, Tensor> pair(const Shape& s, uint64_t seed, float scale = 1.f) {
    Tensor c = randn(s, seed, scale).detach().requires_grad_();
    Tensor g = gpu(c).detach().requires_grad_();
    return {c, g};
  }
};

// f32 kernels: the same formulas in another order; a few ulps of the values involved.
constexpr double kF32 = 2e-5;
// The GEMMs run on TF32 tensor cores (10-bit products): ~3e-4 relative, as PyTorch's allow_tf32.
constexpr double kTf32 = 3e-3;

#define EXPECT_SAME_ON_GPU(cpu_tensor, gpu_tensor, tol)                                         \
  do {                                                                                          \
    ASSERT_EQ((gpu_tensor).device(), Device::cuda());                                           \
    ASSERT_EQ((cpu_tensor).shape(), (gpu_tensor).shape());                                      \
    EXPECT_LE(rel_error(host(gpu_tensor), host(cpu_tensor)), (tol)) << #gpu_tensor;             \
  } while (0)

// The tiles' bf16/f16 attention pair for the scope of one of these: "wgmma", "wgmma64", "wgmma128",
// "wgmma-ws" (the forward on Hopper's wgmma, sm90a/attention_wgmma.cu — the overlapped kernel, one tile
// at a time with key tiles of 64 or 128, the warp-specialized kernel with TMA — the first the default on a compute capability 9.0 GPU, elsewhere the
// mma.sync default; the backward the one measured fastest on an H200 unless BackwardKernels says), "mma1" or "mma2" (attention_mma.cu, the products'
// accumulators in registers, its forward with one or two m-tiles of query rows a warp; "mma" takes one
// at head dim 64, two at 128) or "wmma" (the first pair) — QKV_CUDA_ATTENTION.
// An environment variable set for a scope, then unset
template <const char* Name>
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* value) { setenv(Name, value, 1); }
  ~ScopedEnv() { unsetenv(Name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};
constexpr char kTileKernels[] = "QKV_CUDA_ATTENTION", kF32Kernels[] = "QKV_CUDA_ATTENTION_F32",
               kBackwardKernels[] = "QKV_CUDA_ATTENTION_BACKWARD", kBackwardRows[] = "QKV_CUDA_ATTENTION_BACKWARD_ROWS",
               kTf32Rows[] = "QKV_CUDA_ATTENTION_TF32_ROWS";
using TileKernels = ScopedEnv<kTileKernels>;
// The bf16 backward for the scope of one of these made with "wgmma" (Hopper's wgmma, two warpgroups:
// sm90a/attention_wgmma_kernels.cuh), "wgmma-ws" (warp-specialized) or "mma" (mma.sync) —
// QKV_CUDA_ATTENTION_BACKWARD; without, the one measured fastest at the problem on an H200.
using BackwardKernels = ScopedEnv<kBackwardKernels>;

// The f32 flash pair for the scope of one of these: "tf32x3" (attention_tf32.cu, the tensor cores at
// f32's accuracy: the default where it serves) or "simt" (attention.cu, the CUDA cores) —
// QKV_CUDA_ATTENTION_F32.
using F32Kernels = ScopedEnv<kF32Kernels>;

// Steps of 64 query rows in the wgmma backwards at head dim 64 (128 their default), for the scope of a
// BackwardRows made with "64"; steps of 32 or 64 in the 3xTF32 backward at either head dim (by default 64
// at 64, 32 at 128), for the scope of a Tf32Rows made with "32" or "64" — QKV_CUDA_ATTENTION_BACKWARD_ROWS,
// QKV_CUDA_ATTENTION_TF32_ROWS
using BackwardRows = ScopedEnv<kBackwardRows>;
using Tf32Rows = ScopedEnv<kTf32Rows>;

// ---- the op table ---------------------------------------------------------------------------------

// max|a − b| / max(max|b|, 1e-6) over the finite expected values; a non-finite one must be matched
// exactly (the same infinity, NaN for NaN).
::testing::AssertionResult same_values(const std::string& what, const Tensor& cpu_t, const Tensor& gpu_t, double tol) {
  if (!gpu_t.defined() || !cpu_t.defined())
    return ::testing::AssertionFailure() << what << ": undefined on " << (gpu_t.defined() ? "the CPU" : "the GPU");
  if (gpu_t.device() != Device::cuda()) return ::testing::AssertionFailure() << what << " is not on the GPU";
  if (cpu_t.shape() != gpu_t.shape())
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(gpu_t.shape()) << ", on the CPU "
                                         << shape_str(cpu_t.shape());
  if (cpu_t.dtype() != gpu_t.dtype()) return ::testing::AssertionFailure() << what << ": another dtype";
  const std::vector<float> a = gpu_t.detach().to(Device::cpu()).contiguous().to_vector();
  const std::vector<float> b = cpu_t.detach().contiguous().to_vector();
  double num = 0, den = 1e-6;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(b[i])) {
      if (!(std::isnan(b[i]) ? std::isnan(a[i]) : a[i] == b[i]))
        return ::testing::AssertionFailure() << what << ": element " << i << " is " << a[i] << ", on the CPU " << b[i];
      continue;
    }
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= num)) num = std::isnan(d) ? INFINITY : d;
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  if (num / den <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": rel error " << num / den << " > " << tol;
}

class OpOnCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda::is_built()) GTEST_SKIP() << "this build has no CUDA backend (scripts/build.sh builds one where the CUDA toolkit is)";
    if (!cuda::is_available()) GTEST_SKIP() << "this machine shows no CUDA GPU";
  }
};

// Each sample on both devices: every output, then Σ sum(output · r) backpropagated and every
// differentiable input's gradient.
TEST_P(OpOnCuda, MatchesTheCpuForwardAndBackward) {
  const optable::OpInfo& op = *optable::find_op(GetParam());
  const double grad_tol = op.cuda_grad_tol < 0 ? op.cuda_tol : op.cuda_grad_tol;
  uint64_t seed = 1000;
  for (const optable::Sample& s : op.samples()) {
    if (!s.cuda) continue;
    SCOPED_TRACE("sample " + s.name);
    optable::TensorMap on_cpu, on_gpu;
    std::vector<std::string> leaves;
    for (const auto& [name, t] : s.inputs) {
      const bool leaf = t.dtype() == DType::f32 &&
                        std::find(op.differentiable.begin(), op.differentiable.end(), name) != op.differentiable.end();
      if (leaf) leaves.push_back(name);
      on_cpu[name] = leaf ? t.detach().contiguous_copy().requires_grad_() : t;
      on_gpu[name] = leaf ? on_cpu[name].detach().to(Device::cuda()).requires_grad_() : t.to(Device::cuda());
    }
    optable::TensorMap out_cpu, out_gpu;
    try {
      out_cpu = op.run(on_cpu, s.params, Device::cpu());
      out_gpu = op.run(on_gpu, s.params, Device::cuda());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
      continue;
    }
    Tensor loss_cpu, loss_gpu;
    for (const auto& [name, y] : out_cpu) {
      ASSERT_TRUE(out_gpu.count(name)) << "no output " << name << " on the GPU";
      EXPECT_TRUE(same_values("output " + name, y, out_gpu.at(name), op.cuda_tol));
      if (leaves.empty() || y.dtype() != DType::f32) continue;
      Generator g(seed++);
      const Tensor r = Tensor::randn(y.shape(), g);
      Tensor lc = sum(mul(y, r)), lg = sum(mul(out_gpu.at(name), r.to(Device::cuda())));
      loss_cpu = loss_cpu.defined() ? add(loss_cpu, lc) : lc;
      loss_gpu = loss_gpu.defined() ? add(loss_gpu, lg) : lg;
    }
    if (!loss_cpu.defined()) continue;
    loss_cpu.backward();
    loss_gpu.backward();
    for (const std::string& name : leaves)
      EXPECT_TRUE(same_values("grad " + name, on_cpu.at(name).grad(), on_gpu.at(name).grad(), grad_tol));
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, OpOnCuda, ::testing::ValuesIn(optable::op_names([](const optable::OpInfo& o) {
                           return o.cuda;
                         })),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- what the table does not say ------------------------------------------------------------------

TEST_F(Cuda, TransfersRoundTripEveryTypeAndAStridedView) {
  Tensor x = randn({37, 129}, 1);
  EXPECT_EQ(host(gpu(x)), x.to_vector());
  Tensor t = x.transpose(0, 1);  // strided: contiguous first, its values not its storage
  EXPECT_EQ(host(gpu(t)), t.contiguous().to_vector());
  Tensor ids = Tensor::from_ints({3, -1, 7, 2147483647}, {4});
  EXPECT_EQ(gpu(ids).to(Device::cpu()).to_vector(), ids.to_vector());
  Tensor b = gt(x, 0.f);
  EXPECT_EQ(gpu(b).to(Device::cpu()).to_vector(), b.to_vector());
  Tensor h = x.to(DType::bf16);
  EXPECT_EQ(gpu(h).to(Device::cpu()).to(DType::f32).to_vector(), h.to(DType::f32).to_vector());
  // conversions on the device round as the CPU's
  EXPECT_EQ(gpu(x).to(DType::bf16).to(DType::f32).to(Device::cpu()).to_vector(), h.to(DType::f32).to_vector());
  EXPECT_EQ(host(gpu(b).to(DType::f32)), b.to(DType::f32).to_vector());
  // a strided view of a GPU tensor made dense on the GPU
  EXPECT_EQ(host(gpu(x).transpose(0, 1).contiguous()), t.contiguous().to_vector());
  EXPECT_EQ(host(gpu(x).slice(1, 3, 70).contiguous()), x.slice(1, 3, 70).contiguous().to_vector());
}

TEST_F(Cuda, TheCachingAllocatorReusesBlocksAndEmptiesOnRequest) {
  cuda::synchronize();
  const int64_t before = cuda::memory_allocated();
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::f32, Device::cuda());
    first = t.data();
    EXPECT_GE(cuda::memory_allocated(), before + (4 << 20));
  }
  EXPECT_EQ(cuda::memory_allocated(), before);
  EXPECT_GE(cuda::memory_reserved(), 4 << 20) << "the freed block stays cached";
  Tensor again = Tensor::empty({1 << 20}, DType::f32, Device::cuda());
  EXPECT_EQ(again.data(), first) << "a block of the same size class comes back";
  again = Tensor();
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_reserved(), cuda::memory_allocated());
}

// The kernels' temporaries (bf16 attention's rounded copies of q, k, v) stay in their pool across a
// wait — the pool's default, a release threshold of 0, gave them back to the driver at every
// synchronization and mapped them again on the next call — and go back with empty_cache.
TEST_F(Cuda, KernelScratchStaysReservedAcrossWaitsUntilTheCacheIsEmptied) {
  const Tensor q = gpu(randn({2, 4, 256, 64}, 11)), k = gpu(randn({2, 4, 256, 64}, 12));
  AttentionOptions opt;
  opt.compute_dtype = AttentionCompute::bf16;
  {
    NoGradGuard g;
    scaled_dot_product_attention(q, k, k, opt);
  }
  cuda::synchronize();
  EXPECT_GE(cuda::scratch_reserved(), 3 * 2 * 4 * 256 * 64 * 2) << "the pool gave the copies' memory back at the wait";
  cuda::empty_cache();
  EXPECT_EQ(cuda::scratch_reserved(), 0);
}

TEST_F(Cuda, OutOfMemoryAndMissingDevicesAreClearErrors) {
  const std::string oom = error_of([] { Tensor::empty({int64_t{1} << 42}, DType::f32, Device::cuda()); });
  EXPECT_NE(oom.find("out of memory"), std::string::npos) << oom;
  EXPECT_NE(oom.find("cuda:0"), std::string::npos) << oom;
  const Device missing = Device::cuda(cuda::device_count());
  const std::string e = error_of([&] { Tensor::empty({4}, DType::f32, missing); });
  EXPECT_NE(e.find(missing.str()), std::string::npos) << e;
  // an op without CUDA kernels yet names itself; operands on two devices are refused
  const std::string c = error_of([&] { InferenceWeight(gpu(randn({4, 8}, 2)), InferenceWeights::int8); });
  EXPECT_NE(c.find("quantize"), std::string::npos) << c;
  EXPECT_NE(c.find("cuda:0"), std::string::npos) << c;
  EXPECT_NE(error_of([&] { add(gpu(randn({3}, 4)), randn({3}, 5)); }).find("different devices"), std::string::npos);
}

// (each elementwise op, broadcasts and backward: the table) a strided operand
TEST_F(Cuda, ElementwiseOpsReadStridedOperandsLikeTheCpu) {
  Tensor x = randn({17, 9}, 14), gx = gpu(x);
  EXPECT_SAME_ON_GPU(log(add(mul(x.transpose(0, 1), x.transpose(0, 1)), 1.f)),
                     log(add(mul(gx.transpose(0, 1), gx.transpose(0, 1)), 1.f)), kF32);
  Tensor m = gt(x, 0.3f), gm = gt(gx, 0.3f);
  EXPECT_EQ(logical_or(logical_not(gm.transpose(0, 1)), le(gx.transpose(0, 1), -1.f)).to(Device::cpu()).to_vector(),
            logical_or(logical_not(m.transpose(0, 1)), le(x.transpose(0, 1), -1.f)).to_vector());
}

// (sum and mean: the table) sum_to, the sum of squares, in-place updates
TEST_F(Cuda, ReductionsToShapesAndInPlaceUpdatesMatchTheCpu) {
  Tensor x = randn({7, 130, 3}, 20);
  Tensor gx = gpu(x);
  EXPECT_SAME_ON_GPU(sum_to(x, {130, 1}), sum_to(gx, {130, 1}), kF32);
  EXPECT_NEAR(sum_of_squares(gx), sum_of_squares(x), 1e-9 * sum_of_squares(x));
  Tensor y = gx.contiguous_copy();
  mul_(y, 0.5f);
  add_(y, gx);
  EXPECT_SAME_ON_GPU(mul(x, 1.5f), y, kF32);
}

// (softmax, log_softmax, layer_norm at every width: the table) rows that the CPU treats specially
TEST_F(Cuda, SoftmaxOfMaskedRowsAndLargeLogitsMatchesTheCpu) {
  // a fully masked row: zeros, not NaN
  Tensor masked = Tensor::full({2, 5}, -INFINITY);
  EXPECT_EQ(host(softmax(gpu(masked), -1)), std::vector<float>(10, 0.f));
  // log-softmax there: log 0/0 = NaN, as the CPU (and PyTorch); of logits near 1000, to the last
  // bits of the CPU's (x − m) − log s (x − (m + log s) would round to the precision of |m|)
  EXPECT_LE(rel_error(host(log_softmax(gpu(masked), -1)), host(log_softmax(masked, -1))), 0.0);
  EXPECT_TRUE(std::isnan(host(log_softmax(gpu(masked), -1))[0]));
  Tensor large = add(randn({3, 257}, 42), 1000.f);
  EXPECT_SAME_ON_GPU(log_softmax(large, -1), log_softmax(gpu(large), -1), 1e-6);
}

// (embedding, cross_entropy, index_select, causal_mask: the table) bad ids and targets name themselves
// at the host's next wait for the GPU — the op queues its check with its kernels and returns (deferred
// checks, qkv/core/cuda.h) — once, the first one asked for, on the thread that asked; the stream goes
// on working after one is reported.
TEST_F(Cuda, BadIdsAndTargetsAreClearErrorsAtTheNextWait) {
  auto [w, gw] = pair({50, 24}, 60);
  const auto npos = std::string::npos;
  Tensor looked_up;
  EXPECT_EQ(error_of([&] { looked_up = embedding(gpu(Tensor::from_ints({1, 50}, {2})), gw); }), "");
  const std::string bad = error_of([&] { host(looked_up); });
  EXPECT_NE(bad.find("embedding: id 50 at position 1 is outside the vocabulary [0, 50)"), npos) << bad;
  EXPECT_EQ(error_of([&] { host(looked_up); }), "") << "reported once";
  Tensor glogits = gpu(randn({9, 50}, 63));
  const std::string both = error_of([&] {
    Tensor a = cross_entropy(glogits, gpu(Tensor::from_ints({1, 2, 3, 4, 5, 6, 7, 8, 50}, {9})));
    Tensor b = embedding(gpu(Tensor::from_ints({-7}, {1})), gw);
    cuda::synchronize();
  });
  EXPECT_NE(both.find("cross_entropy: target 50 at row 8 is outside [0, 50)"), npos) << both;
  EXPECT_EQ(error_of([] { cuda::synchronize(); }), "") << "both checks were done with";
  const Tensor ids = Tensor::from_ints({49, 0, 7}, {3});
  EXPECT_EQ(host(embedding(gpu(ids), gw)), embedding(ids, w).to_vector());
  // another thread's wait does not report this thread's check
  Tensor pending = embedding(gpu(Tensor::from_ints({3, 77}, {2})), gw);
  std::string other = "not run";
  std::thread([&] { other = error_of([&] { host(gpu(randn({3}, 5))); }); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(error_of([] { cuda::synchronize(); }).find("id 77 at position 1"), npos);
  // more checks than a thread holds: asking for one more waits first, and reports the bad one
  const std::string many = error_of([&] {
    for (int i = 0; i <= cuda::kDeferredChecks; ++i) embedding(gpu(Tensor::from_ints({i == 5 ? 60 : i}, {1})), gw);
  });
  EXPECT_NE(many.find("id 60 at position 0"), npos) << many;
  EXPECT_EQ(error_of([] { cuda::synchronize(); }), "");
}

// A loss and its backward queue their work without the host waiting for the GPU (the targets'
// check, the mean's count and its division, a whole-tensor sum, the upload of the batch); reading the
// loss is the one wait — and the values are the CPU's.
TEST_F(Cuda, ALossAndItsBackwardWaitForTheGpuOnlyWhenTheHostReadsIt) {
  auto [w, gw] = pair({50, 24}, 61);
  auto [p, gp] = pair({24, 50}, 62);
  const Tensor ids = Tensor::from_ints({3, 9, 0, 49, 17, 3}, {6});
  const Tensor targets = Tensor::from_ints({1, -100, 49, 0, 7, -100}, {6});
  host(gw);  // (the uploads done)
  const int64_t before = cuda::host_waits();
  auto loss_of = [&](const Tensor& table, const Tensor& proj, Device d) {
    const Tensor logits = matmul(embedding(ids.to(d), table), proj);
    return add(cross_entropy(logits, targets.to(d), -100, 0.1f), mul(sum(logits), 1e-3f));
  };
  Tensor gl = loss_of(gw, gp, Device::cuda());
  gl.backward();
  EXPECT_EQ(cuda::host_waits(), before) << "a wait inside the forward or the backward";
  const std::vector<float> on_gpu = host(gl);
  EXPECT_EQ(cuda::host_waits(), before + 1);
  Tensor cl = loss_of(w, p, Device::cpu());
  cl.backward();
  EXPECT_LT(rel_error(on_gpu, cl.to_vector()), kTf32);
  EXPECT_LT(rel_error(host(gw.grad()), w.grad().to_vector()), kTf32);
  EXPECT_LT(rel_error(host(gp.grad()), p.grad().to_vector()), kTf32);
}

// (matmul and linear in f32: the table) an empty inner dimension, bf16 autocast and bf16 weights
TEST_F(Cuda, MatmulAndLinearMatchTheCpuAtBf16) {
  auto [x, gx] = pair({5, 7, 96}, 74);
  auto [w, gw] = pair({130, 96}, 75, 0.1f);
  auto [bias, gbias] = pair({130}, 76);
  // an empty inner dimension: zeros, as the CPU (cuBLAS is not asked: it refuses a leading dimension 0)
  for (const Shape& sa : {Shape{3, 0}, Shape{2, 3, 0}}) {
    Tensor e = matmul(gpu(Tensor::zeros(sa)), gpu(Tensor::zeros({0, 4})));
    EXPECT_EQ(host(e), std::vector<float>(static_cast<size_t>(e.numel()), 0.f)) << shape_str(sa);
  }
  {
    Autocast bf16(AutocastDType::bf16);  // bf16 operands, f32 sums on both devices
    EXPECT_SAME_ON_GPU(linear(x, w, bias), linear(gx, gw, gbias), 1e-4);
  }
  {
    // Decoding's bf16 weights on a GPU (a model loaded onto it with bf16 weights: the copy is made
    // there): cuBLAS's bf16 GEMM at every batch size, bf16(x) W_bf16ᵀ + b with f32 sums — what linear
    // computes under bf16 autocast on the CPU.
    NoGradGuard no_grad;
    const InferenceWeight on_cpu(w, InferenceWeights::bf16), on_gpu(gw, InferenceWeights::bf16);
    ASSERT_EQ(on_gpu.bf16().device(), Device::cuda());
    Tensor one = x.slice(0, 0, 1).slice(1, 0, 1), gone = gpu(one);  // a decoding step's single row
    for (auto [cx, g] : {std::pair{x.detach(), gx.detach()}, std::pair{one, gone}}) {
      Tensor expect;
      {
        Autocast bf16(AutocastDType::bf16);
        expect = linear(cx, w, bias);
      }
      EXPECT_SAME_ON_GPU(expect, linear_inference(g, gw, on_gpu, gbias), 1e-4);
      EXPECT_GT(rel_error(host(linear_inference(g, gw, on_gpu, gbias)), host(linear(cx, w, bias))), 1e-6)
          << "the bf16 copy was read";
    }
    EXPECT_NE(error_of([&] { linear_inference(gx, gw, on_cpu, gbias); }).find("load it onto its device"),
              std::string::npos);
  }
}

TEST_F(Cuda, AdamUpdatesLikeTheCpu) {
  Tensor p = randn({1000, 3}, 80), g = randn({1000, 3}, 81);
  Tensor m = Tensor::zeros({1000, 3}), v = Tensor::zeros({1000, 3});
  Tensor gp = gpu(p), gg = gpu(g), gm = gpu(m), gv = gpu(v);
  AdamUpdate u;
  u.lr = 0.01f;
  u.weight_decay = 0.1f;
  for (int step = 1; step <= 3; ++step) {
    u.step = step;
    adam_update_(p, g, m, v, u);
    adam_update_(gp, gg, gm, gv, u);
  }
  EXPECT_SAME_ON_GPU(p, gp, kF32);
  EXPECT_SAME_ON_GPU(m, gm, kF32);
  EXPECT_SAME_ON_GPU(v, gv, kF32);
}

// A training step's clipping and update as the trainer queues them on a GPU: clip_coefficient's
// [‖g‖, factor] left on the device and Adam's list update reading the factor there — 70 parameters
// (two launches of ≤ 64), the empty one and vector tails among them, every third gradient strided —
// against the CPU's list ops; with the norm under max_norm (factor 1) and over it.
TEST_F(Cuda, ClipCoefficientAndTheListAdamLikeTheCpu) {
  const int64_t sizes[] = {0, 1, 3, 16, 17, 33, 100, 1000, 40000};
  for (float scale : {0.001f, 3.f}) {
    std::vector<Tensor> p, g, m, v, gp, gg, gm, gv;
    for (int i = 0; i < 70; ++i) {
      const int64_t n = sizes[i % 9];
      p.push_back(randn({n}, 100 + i));
      Tensor two = randn({n, 2}, 300 + i, scale);
      g.push_back(i % 3 == 0 ? two.select(1, 0) : two.select(1, 1).contiguous());
      m.push_back(Tensor::zeros({n})), v.push_back(Tensor::zeros({n}));
      gp.push_back(gpu(p.back())), gm.push_back(gpu(m.back())), gv.push_back(gpu(v.back()));
      Tensor gtwo = gpu(two);
      gg.push_back(i % 3 == 0 ? gtwo.select(1, 0) : gtwo.select(1, 1).contiguous());
    }
    AdamUpdate u;
    u.lr = 0.01f, u.weight_decay = 0.1f;
    for (int step = 1; step <= 3; ++step) {
      u.step = step;
      const Tensor clip = clip_coefficient(g, 1.0), gclip = clip_coefficient(gg, 1.0);
      EXPECT_SAME_ON_GPU(clip, gclip, 1e-6);
      adam_update_(p, g, m, v, u, clip.slice(0, 1, 2));
      adam_update_(gp, gg, gm, gv, u, gclip.slice(0, 1, 2));
    }
    EXPECT_EQ(host(clip_coefficient(gg, 1.0))[1] < 1.f, scale > 1.f) << "the factor's case was not reached";
    for (size_t i = 0; i < p.size(); i += 7) {
      EXPECT_SAME_ON_GPU(p[i], gp[i], kF32);
      EXPECT_SAME_ON_GPU(m[i], gm[i], kF32);
      EXPECT_SAME_ON_GPU(v[i], gv[i], kF32);
    }
    EXPECT_SAME_ON_GPU(p[8], gp[8], kF32);  // the largest
  }
}

// Attention on the GPU against the CPU, forward and backward, on the flash and reference kernels:
// head dims 64, 128 and an odd one, Lq ≠ Lk, causal, boolean and additive masks, GQA, dropout, and
// q/k/v split off one projection (strided heads, as MultiheadAttention makes them).
TEST_F(Cuda, AttentionMatchesTheCpuForwardAndBackward) {
  struct Case {
    int64_t B, H, Hkv, Lq, Lk, D;
    bool causal;
    int mask;  // 0 none, 1 boolean, 2 additive
    float dropout;
    AttentionBackend backend;
  };
  const std::vector<Case> cases = {
      {2, 4, 4, 37, 37, 64, false, 0, 0.f, AttentionBackend::flash},
      {1, 8, 2, 70, 45, 128, false, 1, 0.f, AttentionBackend::flash},
      {2, 3, 3, 33, 33, 40, true, 2, 0.f, AttentionBackend::flash},
      {1, 2, 1, 65, 129, 64, true, 1, 0.f, AttentionBackend::flash},
      {2, 2, 2, 20, 31, 24, false, 0, 0.25f, AttentionBackend::flash},
      // few query rows against many keys: the split-KV (flash-decoding) forward
      {2, 4, 4, 1, 2000, 64, false, 1, 0.f, AttentionBackend::flash},
      {1, 8, 2, 3, 1500, 128, false, 2, 0.1f, AttentionBackend::flash},
      {1, 2, 2, 2, 700, 32, true, 0, 0.f, AttentionBackend::flash},
      {2, 4, 2, 19, 23, 64, true, 2, 0.f, AttentionBackend::reference},
      {1, 2, 2, 17, 29, 32, false, 1, 0.2f, AttentionBackend::reference},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B" << c.B << " H" << c.H << "/" << c.Hkv << " Lq" << c.Lq << " Lk" << c.Lk
                                      << " D" << c.D << (c.causal ? " causal" : "") << " mask" << c.mask << " p"
                                      << c.dropout << (c.backend == AttentionBackend::flash ? " flash" : " reference"));
    auto [q, gq] = pair({c.B, c.H, c.Lq, c.D}, seed++);
    auto [k, gk] = pair({c.B, c.Hkv, c.Lk, c.D}, seed++);
    auto [v, gv] = pair({c.B, c.Hkv, c.Lk, c.D}, seed++);
    AttentionOptions o;
    o.is_causal = c.causal;
    o.enable_gqa = c.H != c.Hkv;
    o.dropout_p = c.dropout;
    o.backend = c.backend;
    if (c.mask == 1) o.attn_mask = gt(randn({c.B, 1, c.Lq, c.Lk}, seed++), -1.f);
    if (c.mask == 2) o.attn_mask = randn({1, c.H, c.Lq, c.Lk}, seed++);
    AttentionOptions go = o;
    if (o.attn_mask.defined()) go.attn_mask = gpu(o.attn_mask);
    Generator g1(5), g2(5);
    o.generator = &g1, go.generator = &g2;
    Tensor y = scaled_dot_product_attention(q, k, v, o), gy = scaled_dot_product_attention(gq, gk, gv, go);
    EXPECT_SAME_ON_GPU(y, gy, 1e-4);
    Tensor r = randn(y.shape(), seed++);
    sum(mul(y, r)).backward();
    sum(mul(gy, gpu(r))).backward();
    EXPECT_SAME_ON_GPU(q.grad(), gq.grad(), 1e-4);
    EXPECT_SAME_ON_GPU(k.grad(), gk.grad(), 1e-4);
    EXPECT_SAME_ON_GPU(v.grad(), gv.grad(), 1e-4);
  }
  // the attention weights (reference kernels), a row that sees no key, heads split off a projection
  Tensor x = randn({2, 11, 3 * 64}, 200), gx = gpu(x);
  auto heads = [](const Tensor& t, int part) {
    return t.slice(2, part * 64, (part + 1) * 64).reshape({2, 11, 4, 16}).transpose(1, 2);
  };
  AttentionOptions o;
  o.attn_mask = Tensor::from_bools(std::vector<bool>(11 * 11, true), {11, 11});
  AttentionOptions go;
  go.attn_mask = gpu(o.attn_mask);
  auto w = scaled_dot_product_attention_with_weights(heads(x, 0), heads(x, 1), heads(x, 2), o);
  auto gw = scaled_dot_product_attention_with_weights(heads(gx, 0), heads(gx, 1), heads(gx, 2), go);
  EXPECT_SAME_ON_GPU(w.output, gw.output, 1e-4);
  EXPECT_SAME_ON_GPU(w.weights, gw.weights, 1e-5);
  Tensor none = Tensor::from_bools(std::vector<bool>(3 * 5, false), {3, 5});
  Tensor out = scaled_dot_product_attention(gpu(randn({1, 1, 3, 8}, 201)), gpu(randn({1, 1, 5, 8}, 202)),
                                            gpu(randn({1, 1, 5, 8}, 203)), gpu(none));
  EXPECT_EQ(host(out), std::vector<float>(24, 0.f)) << "a row with no visible key is zeros, not NaN";
}

// bf16 and f16 inference attention against the CPU in f32: within the format's rounding of q, k, v
// and P (bf16 2e-2, f16 2.5e-3). On the tiles (head dims 64 and 128, more than 16 query rows) P is
// rounded too, so the result is not the f32 kernels' at rounded operands; off them (head dim 40)
// and for decoding steps (≤ 16 query rows: split-KV against a long cache) it is, to f32's noise. Head
// dim 256 is on the tiles on Hopper under "wgmma-ws" (the warp-specialized forward), off them otherwise.
TEST_F(Cuda, Bf16AttentionOnTheTensorCoresMatchesTheCpu) {
  struct Case {
    int64_t B, H, Hkv, Lq, Lk, D;
    bool causal;
    int mask;
  };
  const std::vector<Case> cases = {{2, 4, 4, 100, 100, 64, false, 0}, {1, 8, 2, 65, 200, 128, false, 1},
                                   {2, 2, 2, 130, 130, 64, true, 2},  {1, 4, 4, 17, 300, 128, false, 0},
                                   {1, 2, 2, 33, 47, 40, true, 1},
                                   // many key tiles (the double-buffered copies), row blocks, causal
                                   {1, 2, 2, 300, 1000, 64, false, 0}, {1, 2, 1, 400, 450, 128, true, 1},
                                   // decoding steps
                                   {1, 4, 4, 1, 300, 128, false, 0},  {4, 8, 2, 1, 3000, 64, false, 1},
                                   {2, 4, 4, 16, 700, 128, true, 0},
                                   // head dim 256: the warp-specialized wgmma forward on Hopper under
                                   // "wgmma-ws" (P rounded), the f32 kernels over rounded copies otherwise
                                   {1, 4, 2, 150, 300, 256, true, 1}, {2, 2, 2, 70, 130, 256, false, 2}};
  uint64_t seed = 300;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "Lq" << c.Lq << " Lk" << c.Lk << " D" << c.D << " H" << c.H << "/" << c.Hkv
                                      << (c.causal ? " causal" : "") << " mask" << c.mask);
    Tensor q = randn({c.B, c.H, c.Lq, c.D}, seed++), k = randn({c.B, c.Hkv, c.Lk, c.D}, seed++),
           v = randn({c.B, c.Hkv, c.Lk, c.D}, seed++);
    AttentionOptions o;
    o.is_causal = c.causal;
    o.enable_gqa = c.H != c.Hkv;
    if (c.mask == 1) o.attn_mask = gt(randn({c.B, 1, c.Lq, c.Lk}, seed++), -1.f);
    if (c.mask == 2) o.attn_mask = randn({1, c.H, c.Lq, c.Lk}, seed++);
    NoGradGuard no_grad;
    const Tensor ref = scaled_dot_product_attention(q, k, v, o);  // f32 on the CPU
    const bool tiles = (c.D == 64 || c.D == 128) && c.Lq > 16;
    for (auto [dt, tol] : {std::pair{AttentionCompute::bf16, 2e-2}, std::pair{AttentionCompute::f16, 2.5e-3}}) {
      SCOPED_TRACE(enum_name(dt));
      auto round = [dt](const Tensor& t) {
        if (dt == AttentionCompute::bf16) return t.to(DType::bf16).to(DType::f32);
        std::vector<float> x = t.contiguous().to_vector();
        for (float& e : x) e = round_to_f16(e);
        return Tensor::from_vector(x, t.shape());
      };
      const Tensor at_rounded = scaled_dot_product_attention(round(q), round(k), round(v), o);
      AttentionOptions go = o;
      if (o.attn_mask.defined()) go.attn_mask = gpu(o.attn_mask);
      go.compute_dtype = dt;
      for (const char* kernel : {"wgmma", "wgmma64", "wgmma128", "wgmma-ws", "mma1", "mma2", "wmma"}) {
        SCOPED_TRACE(kernel);
        TileKernels use(kernel);
        const Tensor out = scaled_dot_product_attention(gpu(q), gpu(k), gpu(v), go);
        EXPECT_SAME_ON_GPU(ref, out, tol);
        if (c.D == 256) continue;  // either, by the GPU
        if (tiles) EXPECT_GT(rel_error(host(out), host(at_rounded)), 1e-6) << "P rounded on the tiles";
        else EXPECT_SAME_ON_GPU(at_rounded, out, 1e-4);
      }
    }
  }
}

// bf16 training attention on the tensor cores (head dims 64 and 128 on the tiles, 256 on Hopper's wgmma
// where asked; 40 on the f32 kernels over rounded operands) against the CPU's bf16 (the f32 kernels at the same rounded q, k,
// v and dO): the GPU also rounds P and dS to bf16, so within a few bf16 ulps of the values; and
// against f32 within bf16's rounding. Lq ≠ Lk both ways, causal, boolean and additive masks, GQA,
// dropout, rows that see no key, heads split off one projection. And the same in f16.
TEST_F(Cuda, Bf16AttentionTrainsOnTheTensorCoresAsOnTheCpu) {
  struct Case {
    int64_t B, H, Hkv, Lq, Lk, D;
    bool causal;
    int mask;  // 0 none, 1 boolean, 2 additive, 3 every fifth query row sees nothing
    float dropout;
    bool strided;
  };
  const std::vector<Case> cases = {
      {2, 4, 4, 100, 100, 64, false, 0, 0.f, false}, {1, 8, 2, 65, 200, 128, false, 1, 0.f, false},
      {2, 2, 2, 130, 130, 64, true, 2, 0.f, false},  {1, 4, 4, 190, 70, 128, true, 0, 0.f, false},
      {1, 2, 1, 70, 300, 64, true, 3, 0.f, false},   {2, 2, 2, 64, 64, 128, false, 0, 0.2f, false},
      {2, 4, 4, 77, 77, 64, true, 0, 0.f, true},     {1, 2, 2, 33, 47, 40, true, 1, 0.f, false},
      // whole tiles (no element-wise masking but the causal diagonal's), several key blocks and row steps
      {2, 2, 2, 256, 256, 64, false, 0, 0.f, false}, {1, 2, 2, 256, 256, 128, true, 0, 0.f, false},
      {1, 4, 2, 200, 330, 128, true, 0, 0.f, false},
      // dropout at head dim 64 (the GPT's): the one-tile kernel's general code, two blocks an SM
      {1, 2, 2, 100, 120, 64, true, 0, 0.1f, false},
      // head dim 256: the warp-specialized forward under "wgmma-ws", and its own wgmma backward (MN-major
      // reads) under "wgmma-backward" and "wgmma-ws-backward"; the f32 kernels over rounded copies otherwise
      {1, 4, 2, 150, 230, 256, true, 1, 0.f, false}, {1, 2, 2, 100, 70, 256, false, 3, 0.2f, true},
  };
  uint64_t seed = 500;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B" << c.B << " H" << c.H << "/" << c.Hkv << " Lq" << c.Lq << " Lk" << c.Lk
                                      << " D" << c.D << (c.causal ? " causal" : "") << " mask" << c.mask << " p"
                                      << c.dropout << (c.strided ? " strided" : ""));
    auto make = [&](int64_t heads, int64_t L) {
      if (!c.strided) return randn({c.B, heads, L, c.D}, seed++);
      return randn({c.B, L, heads, c.D}, seed++).transpose(1, 2);
    };
    Tensor q = make(c.H, c.Lq), k = make(c.Hkv, c.Lk), v = make(c.Hkv, c.Lk), r = make(c.H, c.Lq);
    AttentionOptions o;
    o.is_causal = c.causal;
    o.enable_gqa = c.H != c.Hkv;
    o.dropout_p = c.dropout;
    o.attn_mask = attention_mask(c.mask, c.B, c.H, c.Lq, c.Lk, seed);
    // out, dq, dk, dv of one run on device d in compute dtype dt
    auto run = [&](Device d, AttentionCompute dt) {
      Tensor lq = q.to(d).detach().requires_grad_(), lk = k.to(d).detach().requires_grad_(),
             lv = v.to(d).detach().requires_grad_();
      AttentionOptions od = o;
      if (o.attn_mask.defined()) od.attn_mask = o.attn_mask.to(d);
      od.compute_dtype = dt;
      Generator drop(77);
      od.generator = &drop;
      Tensor out = scaled_dot_product_attention(lq, lk, lv, od);
      sum(mul(out, r.to(d))).backward();
      return std::vector<Tensor>{out, lq.grad(), lk.grad(), lv.grad()};
    };
    const auto cpu_f32 = run(Device::cpu(), AttentionCompute::f32);
    // f16 (11 significant bits to bf16's 8): the same kernels on __half, an eighth of the tolerances
    for (auto [dt, tol] : {std::pair{AttentionCompute::bf16, 2e-2}, std::pair{AttentionCompute::f16, 2.5e-3}}) {
      SCOPED_TRACE(enum_name(dt));
      const auto on_cpu = run(Device::cpu(), dt);
      // the backward measured fastest on an H200 at the problem (attention_wgmma.cu's backward_kernel) but
      // "wgmma-backward": the wgmma forward and the two-warpgroup wgmma backward; "wgmma-ws-backward": the
      // warp-specialized forward and backward; "…-rows64": those backwards in steps of 64 query rows at
      // head dim 64; "mma1", "mma2": the mma.sync pair, its backward too
      for (const char* kernel : {"wgmma", "wgmma64", "wgmma128", "wgmma-overlap", "wgmma-ws", "mma1", "mma2", "wmma",
                                 "wgmma-backward", "wgmma-ws-backward", "wgmma-backward-rows64",
                                 "wgmma-ws-backward-rows64"}) {
        SCOPED_TRACE(kernel);
        const bool wgmma_backward = std::strncmp(kernel, "wgmma-backward", 14) == 0,
                   ws_backward = std::strncmp(kernel, "wgmma-ws-backward", 17) == 0;
        TileKernels use(wgmma_backward ? "wgmma" : ws_backward ? "wgmma-ws" : kernel);
        std::optional<BackwardKernels> backward;
        if (wgmma_backward) backward.emplace("wgmma");
        if (ws_backward) backward.emplace("wgmma-ws");
        std::optional<BackwardRows> rows;
        if (std::strstr(kernel, "-rows64")) rows.emplace("64");
        if (std::strncmp(kernel, "mma", 3) == 0) backward.emplace("mma");  // the mma.sync pair whole
        const auto on_gpu = run(Device::cuda(), dt);
        const char* what[] = {"out", "dq", "dk", "dv"};
        for (int t = 0; t < 4; ++t) {
          SCOPED_TRACE(what[t]);
          EXPECT_SAME_ON_GPU(on_cpu[t], on_gpu[t], tol);
          EXPECT_SAME_ON_GPU(cpu_f32[t], on_gpu[t], 2 * tol);
          const std::vector<float> g = host(on_gpu[t]);
          EXPECT_TRUE(std::none_of(g.begin(), g.end(), [](float x) { return std::isnan(x); }));
        }
      }
    }
  }
}

// f32 training attention on the tensor cores (3xTF32, attention_tf32.cu) against the CPU's f32 within
// the CUDA-core kernels' tolerance (one TF32 product a term would be ~1e-3 off), and against the
// CUDA-core kernels: other bits (the sums' order) where the tensor cores serve — head dims 64 and 128,
// rows on 16 bytes — and the same bits where they do not (head dim 40; rows off 16 bytes; a decoding
// step's forward, ≤ 16 query rows without the backward's lse).
TEST_F(Cuda, F32AttentionOnTheTensorCoresMatchesTheCpu) {
  struct Case {
    int64_t B, H, Hkv, Lq, Lk, D;
    bool causal;
    int mask;  // 0 none, 1 boolean, 2 additive, 3 every fifth query row sees nothing
    float dropout;
    int layout;  // 0 dense, 1 heads split off [B, L, H, D], 2 rows one float off 16 bytes
  };
  const std::vector<Case> cases = {
      {2, 4, 4, 100, 100, 64, false, 0, 0.f, 0}, {1, 8, 2, 65, 200, 128, false, 1, 0.f, 0},
      {2, 2, 2, 130, 130, 64, true, 2, 0.f, 0},  {1, 4, 4, 190, 70, 128, true, 0, 0.f, 0},
      {1, 2, 1, 70, 300, 64, true, 3, 0.f, 0},   {2, 2, 2, 64, 64, 128, false, 0, 0.2f, 0},
      {2, 4, 4, 77, 77, 64, true, 0, 0.f, 1},    {1, 2, 2, 256, 256, 64, false, 0, 0.f, 0},
      {1, 2, 2, 256, 256, 128, true, 0, 0.f, 0}, {1, 4, 2, 200, 330, 128, true, 0, 0.f, 1},
      {1, 2, 2, 33, 47, 40, true, 1, 0.f, 0},    {1, 2, 2, 50, 60, 64, false, 0, 0.f, 2},
  };
  uint64_t seed = 900;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B" << c.B << " H" << c.H << "/" << c.Hkv << " Lq" << c.Lq << " Lk" << c.Lk
                                      << " D" << c.D << (c.causal ? " causal" : "") << " mask" << c.mask << " p"
                                      << c.dropout << " layout" << c.layout);
    // each operand drawn in its base layout, its view taken on the device it is used on
    auto base = [&](int64_t heads, int64_t L) {
      if (c.layout == 1) return randn({c.B, L, heads, c.D}, seed++);
      if (c.layout == 2) return randn({c.B, heads, L, c.D + 1}, seed++);
      return randn({c.B, heads, L, c.D}, seed++);
    };
    auto view = [&](const Tensor& t) {
      if (c.layout == 1) return t.transpose(1, 2);
      if (c.layout == 2) return t.slice(3, 1, c.D + 1);
      return t;
    };
    const Tensor q = base(c.H, c.Lq), k = base(c.Hkv, c.Lk), v = base(c.Hkv, c.Lk), r = randn({c.B, c.H, c.Lq, c.D}, seed++);
    AttentionOptions o;
    o.is_causal = c.causal;
    o.enable_gqa = c.H != c.Hkv;
    o.dropout_p = c.dropout;
    o.attn_mask = attention_mask(c.mask, c.B, c.H, c.Lq, c.Lk, seed);
    // out, dq, dk, dv of one run on device d (the gradients of the views)
    auto run = [&](Device d) {
      Tensor bq = q.to(d).detach().requires_grad_(), bk = k.to(d).detach().requires_grad_(),
             bv = v.to(d).detach().requires_grad_();
      AttentionOptions od = o;
      if (o.attn_mask.defined()) od.attn_mask = o.attn_mask.to(d);
      Generator drop(77);
      od.generator = &drop;
      Tensor out = scaled_dot_product_attention(view(bq), view(bk), view(bv), od);
      sum(mul(out, r.to(d))).backward();
      return std::vector<Tensor>{out, bq.grad(), bk.grad(), bv.grad()};
    };
    const auto on_cpu = run(Device::cpu());
    std::vector<Tensor> simt, tensor_cores, rows64, rows32;
    {
      F32Kernels use("simt");
      simt = run(Device::cuda());
    }
    {
      F32Kernels use("tf32x3");
      tensor_cores = run(Device::cuda());
    }
    {  // the backward in steps of 64 and of 32 query rows at either head dim (by default 64 at 64, 32 at 128)
      F32Kernels use("tf32x3");
      Tf32Rows r("64");
      rows64 = run(Device::cuda());
    }
    {
      F32Kernels use("tf32x3");
      Tf32Rows r("32");
      rows32 = run(Device::cuda());
    }
    const bool served = (c.D == 64 || c.D == 128) && c.layout != 2;
    const char* what[] = {"out", "dq", "dk", "dv"};
    for (int t = 0; t < 4; ++t) {
      SCOPED_TRACE(what[t]);
      EXPECT_SAME_ON_GPU(on_cpu[t], tensor_cores[t], 1e-4);
      EXPECT_SAME_ON_GPU(on_cpu[t], rows64[t], 1e-4);
      EXPECT_SAME_ON_GPU(on_cpu[t], rows32[t], 1e-4);
      if (served) EXPECT_NE(host(simt[t]), host(tensor_cores[t])) << "the tensor cores' sums, in another order";
      else EXPECT_EQ(host(simt[t]), host(tensor_cores[t])) << "the CUDA-core kernels where the tensor cores do not serve";
    }
  }
  // a decoding step (4 query rows, no gradient: no lse) stays on the split-KV kernels (q [B, H, 4, D]: not the
  // [B, Lq, H, D] rows the paged decoding kernel takes)
  NoGradGuard no_grad;
  const Tensor q = gpu(randn({2, 4, 4, 64}, 990)), k = gpu(randn({2, 4, 900, 64}, 991)), v = gpu(randn({2, 4, 900, 64}, 992));
  std::vector<float> simt;
  {
    F32Kernels use("simt");
    simt = host(scaled_dot_product_attention(q, k, v));
  }
  F32Kernels use("tf32x3");
  EXPECT_EQ(host(scaled_dot_product_attention(q, k, v)), simt);
}

// Empty extents where the CPU still has something to say: attention with Dv = 0 (its lse is still
// written and read by the backward: zero gradients, not NaN), an empty batch on the bf16 tiles, an
// embedding of width 0 that still checks its ids.
TEST_F(Cuda, PagedAttentionOverLongContextsSplitsOverTheKeysAsTheCpu) {
  // two sequences of 3,000 and 700 keys and one of 5 in shuffled pages of 16, one decoding token each
  // (6 blocks on ~132 SMs: the split over the keys, kernels/cuda/paged_attention_kernels.cuh), with and
  // without a sliding window of 1,100, and with the split turned off (QKV_CUDA_PAGED_SPLIT=0), by the tiled
  // kernel and the key-a-warp one (QKV_CUDA_PAGED_KERNEL=warps); then
  // bf16 and e4m3 caches, converted and written on the GPU (bit for bit the CPU's rounding) and read
  // by the tiled kernel and the tensor-core one (QKV_CUDA_PAGED_KERNEL=mma)
  const int64_t H = 8, Hkv = 2, D = 64, P = 16, per = 3000 / P + 1, rows = 3;
  std::vector<int32_t> order(static_cast<size_t>(rows * per));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>((i * 97 + 13) % order.size());  // (97 ⊥ 564)
  const Tensor q = randn({3, H, D}, 1), k = randn({rows * per, Hkv, P, D}, 2), v = randn({rows * per, Hkv, P, D}, 3);
  const Tensor table = Tensor::from_ints(order, {rows, per}), seq = Tensor::from_ints({0, 1, 2}, {3}),
               len = Tensor::from_ints({3000, 700, 5}, {3});
  for (const char* kernel : {"tiled", "warps"})
    for (const char* split : {"1", "0"})
      for (int64_t window : {0, 1100}) {
        SCOPED_TRACE(std::string("QKV_CUDA_PAGED_KERNEL=") + kernel + ", QKV_CUDA_PAGED_SPLIT=" + split + ", window " +
                     std::to_string(window));
        ::setenv("QKV_CUDA_PAGED_KERNEL", kernel, 1);
        ::setenv("QKV_CUDA_PAGED_SPLIT", split, 1);
        NoGradGuard g;
        const Tensor want = paged_attention(q, k, v, table, seq, len, std::nullopt, window);
        const Tensor got =
            paged_attention(gpu(q), gpu(k), gpu(v), gpu(table), gpu(seq), gpu(len), std::nullopt, window);
        EXPECT_LT(rel_error(host(got), host(want)), 1e-5);
      }
  ::unsetenv("QKV_CUDA_PAGED_KERNEL");
  ::unsetenv("QKV_CUDA_PAGED_SPLIT");
  NoGradGuard g;
  const Tensor slots = Tensor::from_ints({7, 4000, 17, 9000}, {4});
  const Tensor nk = randn({4, Hkv, D}, 4), nv = randn({4, Hkv, D}, 5);
  for (DType dtype : {DType::bf16, DType::f8e4m3}) {  // (e4m3: one new key's values past ±448, saturated)
    const Tensor nkd = dtype == DType::f8e4m3 ? nk * 200.f : nk;
    Tensor k16 = k.to(dtype), v16 = v.to(dtype), gk16 = gpu(k16), gv16 = gpu(v16);
    EXPECT_EQ(host(gk16.to(DType::f32)), k16.to(DType::f32).to_vector()) << dtype_name(dtype) << ": the GPU's to(f32)";
    EXPECT_EQ(host(gpu(k).to(dtype).to(DType::f32)), k16.to(DType::f32).to_vector()) << dtype_name(dtype) << ": its to(dtype)";
    paged_kv_write(k16, v16, nkd, nv, slots);
    paged_kv_write(gk16, gv16, gpu(nkd), gpu(nv), gpu(slots));
    EXPECT_EQ(host(gk16.to(DType::f32)), k16.to(DType::f32).to_vector()) << dtype_name(dtype);
    EXPECT_EQ(host(gv16.to(DType::f32)), v16.to(DType::f32).to_vector()) << dtype_name(dtype);
    for (int64_t window : {0, 1100})
      for (const char* kernel : {"tiled", "mma"}) {  // (mma: the tensor-core kernel)
        ::setenv("QKV_CUDA_PAGED_KERNEL", kernel, 1);
        const Tensor want = paged_attention(q, k16, v16, table, seq, len, std::nullopt, window);
        const Tensor got = paged_attention(gpu(q), gk16, gv16, gpu(table), gpu(seq), gpu(len), std::nullopt, window);
        EXPECT_LT(rel_error(host(got), host(want)), 1e-5)
            << dtype_name(dtype) << " caches, window " << window << ", QKV_CUDA_PAGED_KERNEL=" << kernel;
      }
    ::unsetenv("QKV_CUDA_PAGED_KERNEL");
  }
}

TEST_F(Cuda, PagedAttentionCascadesOverSharedPagesAsTheCpu) {
  // 24 samples of one 2,000-key prompt (pages of 16) decoding together, each a few keys of its own,
  // with a sequence that shares nothing: the groups paged_prefixes finds on the host, read once for all
  // (paged_cascade_kernel; bf16 and e4m3 caches also on the tensor cores), as the CPU's cascade; and
  // QKV_PAGED_CASCADE=0 token by token, the same to 1e-5 (row r holds 2,000 + 3r keys: up to 72 of its own, in 5 pages)
  const int64_t H = 32, Hkv = 8, D = 128, P = 16, shared = 2000 / P, own = 5, rows = 25, per = shared + own;
  const int64_t pages = shared + rows * own + per;
  std::vector<int32_t> table(static_cast<size_t>(rows * per)), seq, len;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < per; ++p)
      table[static_cast<size_t>(r * per + p)] = static_cast<int32_t>(
          r == rows - 1 ? shared + rows * own + p : p < shared ? p : shared + r * own + (p - shared));
  for (int64_t r = 0; r < rows; ++r) seq.push_back(static_cast<int32_t>(r)), len.push_back(static_cast<int32_t>(2000 + 3 * r));
  const Tensor q = randn({rows, H, D}, 11), k = randn({pages, Hkv, P, D}, 12), v = randn({pages, Hkv, P, D}, 13);
  const Tensor tb = Tensor::from_ints(table, {rows, per}), sq = Tensor::from_ints(seq, {rows}), ln = Tensor::from_ints(len, {rows});
  NoGradGuard g;
  const PagedPrefixes prefixes = paged_prefixes(tb, sq, ln, P, 0, Device::cuda());
  ASSERT_EQ(prefixes.blocks(), 1);
  EXPECT_EQ(prefixes.max_keys(), 1920);  // 2,000 keys in common, whole tiles of 128
  for (DType dtype : {DType::f32, DType::bf16, DType::f8e4m3}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor kd = k.to(dtype), vd = v.to(dtype);
    const Tensor want = paged_attention(q, kd, vd, tb, sq, ln);
    const Tensor got = paged_attention(gpu(q), gpu(kd), gpu(vd), gpu(tb), gpu(sq), gpu(ln), std::nullopt, 0, &prefixes);
    EXPECT_LT(rel_error(host(got), host(want)), 1e-5);
    const Tensor alone = paged_attention(gpu(q), gpu(kd), gpu(vd), gpu(tb), gpu(sq), gpu(ln));
    EXPECT_LT(rel_error(host(alone), host(got)), 1e-5);
    if (dtype != DType::f32) {  // the tensor-core kernels, the groups' and the tokens' own (QKV_CUDA_PAGED_KERNEL=mma)
      ::setenv("QKV_CUDA_PAGED_KERNEL", "mma", 1);
      const Tensor mma =
          paged_attention(gpu(q), gpu(kd), gpu(vd), gpu(tb), gpu(sq), gpu(ln), std::nullopt, 0, &prefixes);
      ::unsetenv("QKV_CUDA_PAGED_KERNEL");
      EXPECT_LT(rel_error(host(mma), host(want)), 1e-5) << "QKV_CUDA_PAGED_KERNEL=mma";
    }
  }
  // a plan for other tokens is refused by name
  const PagedPrefixes other = paged_prefixes(tb, sq, ln, P, 0, Device::cuda());
  EXPECT_NE(error_of([&] {
              paged_attention(gpu(q), gpu(k), gpu(v), gpu(tb), gpu(sq), gpu(ln), std::nullopt, 500, &other);
            }).find("prefixes were found for"),
            std::string::npos);
}

// A decoding step over a dense KV cache (no gradient: q [B, H, 1, D] against k, v [B, Hkv, L, D], GQA):
// the paged decoding kernel over the cache as pages of one sequence (attention_decode_tiled), and with
// QKV_CUDA_PAGED_KERNEL=warps the split-KV pair it replaced — both the CPU's numbers, in f32 and in
// bf16 and f16 (q, k and v read rounded)
TEST_F(Cuda, DecodingOverADenseCacheTakesThePagedKernelAsTheCpu) {
  NoGradGuard no_grad;
  for (const Shape& ks : {Shape{2, 2, 3000, 128}, Shape{1, 8, 700, 64}}) {
    const Tensor q = randn({ks[0], 8, 1, ks[3]}, 995), k = randn(ks, 996), v = randn(ks, 997);
    for (AttentionCompute dt : {AttentionCompute::f32, AttentionCompute::bf16, AttentionCompute::f16}) {
      AttentionOptions o;
      o.enable_gqa = ks[1] != 8;
      o.compute_dtype = dt;
      const Tensor want = scaled_dot_product_attention(q, k, v, o);
      for (const char* kernel : {"tiled", "warps"}) {
        SCOPED_TRACE(std::string("QKV_CUDA_PAGED_KERNEL=") + kernel + ", keys " + shape_str(ks) + ", " +
                     std::string(enum_name(dt)));
        ::setenv("QKV_CUDA_PAGED_KERNEL", kernel, 1);
        const Tensor got = scaled_dot_product_attention(gpu(q), gpu(k), gpu(v), o);
        EXPECT_LT(rel_error(host(got), host(want)), 1e-5);
      }
      ::unsetenv("QKV_CUDA_PAGED_KERNEL");
    }
  }
}

TEST_F(Cuda, EmptyExtentsBehaveAsOnTheCpu) {
  for (AttentionCompute dt : {AttentionCompute::f32, AttentionCompute::bf16, AttentionCompute::f16}) {
    SCOPED_TRACE(enum_name(dt));
    for (const Shape& qs : {Shape{1, 2, 5, 64}, Shape{0, 2, 5, 64}}) {
      const bool empty_batch = qs[0] == 0;
      auto [q, gq] = pair(qs, 90);
      auto [k, gk] = pair({qs[0], 2, 6, 64}, 91);
      auto [v, gv] = pair({qs[0], 2, 6, empty_batch ? 64 : 0}, 92);
      AttentionOptions o;
      o.compute_dtype = dt;
      Tensor out = scaled_dot_product_attention(q, k, v, o), gout = scaled_dot_product_attention(gq, gk, gv, o);
      EXPECT_SAME_ON_GPU(out, gout, 0.0);
      sum(out).backward();
      sum(gout).backward();
      EXPECT_SAME_ON_GPU(q.grad(), gq.grad(), 0.0);
      EXPECT_SAME_ON_GPU(k.grad(), gk.grad(), 0.0);
      EXPECT_SAME_ON_GPU(v.grad(), gv.grad(), 0.0);
    }
  }
  auto [w, gw] = pair({5, 0}, 93);
  // (the ids are checked on the GPU, and a bad one is reported at the host's next wait)
  const std::string bad = error_of([&] {
    embedding(gpu(Tensor::from_ints({1, 7}, {2})), gw);
    cuda::synchronize();
  });
  EXPECT_NE(bad.find("id 7 at position 1"), std::string::npos) << bad;
  EXPECT_EQ(embedding(gpu(Tensor::from_ints({1, 4}, {2})), gw).shape(), (Shape{2, 0}));
}

// The image ops against the CPU beyond the table (which has conv2d's cases — stride, padding,
// dilation, groups, bias, a batch split in chunks — group norm, and each pooling once): pooling bit for
// bit with a NaN that wins (the gradients gathered in the CPU's order), batch norm's running
// statistics updated in place (training) and read (eval).
TEST_F(Cuda, PoolingAndBatchNormStatisticsMatchTheCpu) {
  uint64_t seed = 700;
  // pooling: bit for bit, forward and backward
  auto [x, gx] = pair({2, 3, 11, 9}, seed++);
  std::vector<float> xv = x.detach().to_vector();
  xv[5] = NAN;  // a NaN wins its windows, as in PyTorch
  Tensor xn = Tensor::from_vector(xv, x.shape()).requires_grad_(), gxn = gpu(xn).detach().requires_grad_();
  auto exact = [&](const Tensor& y, const Tensor& gy) {
    ASSERT_EQ(y.shape(), gy.shape());
    const std::vector<float> a = y.detach().contiguous().to_vector(), g = host(gy);
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::isnan(a[i]) && std::isnan(g[i]))) {
        EXPECT_EQ(a[i], g[i]) << "element " << i;
      }
  };
  const std::vector<std::function<Tensor(const Tensor&)>> pools = {
      [](const Tensor& t) { return max_pool2d(t, 3, 2, 1); },
      [](const Tensor& t) { return max_pool2d(t, {3, 2}, Size2(1, 2), 0, {2, 1}, true); },
      [](const Tensor& t) { return avg_pool2d(t, 3, 2, 1, true, false); },
      [](const Tensor& t) { return avg_pool2d(t, {2, 3}, 1, {1, 0}, false, true, 5); },
      [](const Tensor& t) { return adaptive_avg_pool2d(t, {4, 3}); },
      [](const Tensor& t) { return adaptive_avg_pool2d(t, 1); }};
  for (size_t k = 0; k < pools.size(); ++k) {
    SCOPED_TRACE(::testing::Message() << "pool " << k);
    const bool with_nan = k < 2;
    Tensor in = with_nan ? xn : x, gin = with_nan ? gxn : gx;  // (handles: zero_grad reaches the leaves)
    Tensor y = pools[k](in), gy = pools[k](gin);
    exact(y, gy);
    Tensor r = randn(y.shape(), seed++);
    in.zero_grad(), gin.zero_grad();
    sum(mul(y, r)).backward();
    sum(mul(gy, gpu(r))).backward();
    exact(in.grad(), gin.grad());
  }

  // batch norm (training: statistics and running statistics; eval)
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "batch_norm training" : "batch_norm eval");
    auto [a, ga] = pair({4, 6, 5, 7}, seed++, 2.f);
    auto [g, gg] = pair({6}, seed++);
    auto [bb, gbb] = pair({6}, seed++);
    Tensor rm = randn({6}, seed++, 0.1f), rv = add(randn({6}, seed++, 0.1f), 1.f);  // variances near 1
    Tensor grm = gpu(rm), grv = gpu(rv);
    Tensor y = batch_norm(a, rm, rv, g, bb, training, 0.1f, 1e-5f);
    Tensor gy = batch_norm(ga, grm, grv, gg, gbb, training, 0.1f, 1e-5f);
    EXPECT_SAME_ON_GPU(y, gy, kF32);
    EXPECT_SAME_ON_GPU(rm, grm, kF32);
    EXPECT_SAME_ON_GPU(rv, grv, kF32);
    Tensor r = randn(y.shape(), seed++);
    sum(mul(y, r)).backward();
    sum(mul(gy, gpu(r))).backward();
    EXPECT_SAME_ON_GPU(a.grad(), ga.grad(), 1e-4);
    EXPECT_SAME_ON_GPU(g.grad(), gg.grad(), 1e-4);
    EXPECT_SAME_ON_GPU(bb.grad(), gbb.grad(), kF32);
  }
}

// The recurrent scans against the CPU, forward and backward: GRU, LSTM and the projected LSTM
// (proj_size 7: gates 5 below), both directions, rows of their own lengths (one empty), with and
// without b_hh. (Bahdanau's scores and log_mean_exp: the table.)
TEST_F(Cuda, RecurrentScansMatchTheCpu) {
  const int64_t B = 3, T = 6, H = 20, P = 7;
  const std::vector<int64_t> lengths = {6, 0, 4};
  uint64_t seed = 900;
  for (int kind : {3, 4, 5})
    for (bool reverse : {false, true})
      for (bool bias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << (kind == 3 ? "gru" : kind == 4 ? "lstm" : "lstm proj_size 7")
                                          << (reverse ? " reverse" : "") << (bias ? " bias" : ""));
        const int64_t gates = kind == 3 ? 3 : 4, R = kind == 5 ? P : H;  // R: the width of h
        auto [x, gx] = pair({B, T, gates * H}, seed++);
        auto [h0, gh0] = pair({B, R}, seed++);
        auto [c0, gc0] = pair({B, H}, seed++);
        auto [w, gw] = pair({gates * H, R}, seed++, 0.3f);
        auto [b, gb] = pair({gates * H}, seed++);
        auto [wr, gwr] = pair({P, H}, seed++, 0.3f);
        const Tensor bb = bias ? b : Tensor(), gbb = bias ? gb : Tensor();
        std::vector<Tensor> y = kind == 3   ? gru_scan(x, h0, w, bb, lengths, reverse)
                                : kind == 4 ? lstm_scan(x, h0, c0, w, bb, lengths, reverse)
                                            : lstm_proj_scan(x, h0, c0, w, bb, wr, lengths, reverse);
        std::vector<Tensor> gy = kind == 3   ? gru_scan(gx, gh0, gw, gbb, lengths, reverse)
                                 : kind == 4 ? lstm_scan(gx, gh0, gc0, gw, gbb, lengths, reverse)
                                             : lstm_proj_scan(gx, gh0, gc0, gw, gbb, gwr, lengths, reverse);
        ASSERT_EQ(y.size(), gy.size());
        Tensor loss = Tensor::scalar(0.f), gloss = gpu(Tensor::scalar(0.f));
        for (size_t i = 0; i < y.size(); ++i) {
          EXPECT_SAME_ON_GPU(y[i], gy[i], kTf32);
          Tensor r = randn(y[i].shape(), seed++);
          loss = add(loss, sum(mul(y[i], r)));
          gloss = add(gloss, sum(mul(gy[i], gpu(r))));
        }
        loss.backward();
        gloss.backward();
        EXPECT_SAME_ON_GPU(x.grad(), gx.grad(), kTf32);
        EXPECT_SAME_ON_GPU(h0.grad(), gh0.grad(), kTf32);
        if (gates == 4) EXPECT_SAME_ON_GPU(c0.grad(), gc0.grad(), kTf32);
        EXPECT_SAME_ON_GPU(w.grad(), gw.grad(), kTf32);
        if (bias) EXPECT_SAME_ON_GPU(b.grad(), gb.grad(), kTf32);
        if (kind == 5) EXPECT_SAME_ON_GPU(wr.grad(), gwr.grad(), kTf32);
      }
}

// A small MLP classifier trained for 30 steps on each device follows the same loss curve (TF32
// products: within a few thousandths).
TEST_F(Cuda, AnMlpTrainsOnTheGpuAlongTheCpusLossCurve) {
  auto train = [](Device d) {
    Generator gen(7);
    Tensor w1 = mul(Tensor::randn({64, 32}, gen), 0.2f).to(d).detach().requires_grad_();
    Tensor w2 = mul(Tensor::randn({10, 64}, gen), 0.2f).to(d).detach().requires_grad_();
    Tensor ln_w = Tensor::ones({64}).to(d).detach().requires_grad_();
    Tensor x = Tensor::randn({128, 32}, gen).to(d);
    std::vector<int32_t> labels(128);
    for (int i = 0; i < 128; ++i) labels[i] = i % 10;
    Tensor y = Tensor::from_ints(labels, {128}).to(d);
    std::vector<Tensor> params = {w1, w2, ln_w}, ms, vs;
    for (const Tensor& p : params) {
      ms.push_back(Tensor::zeros(p.shape(), DType::f32, d));
      vs.push_back(Tensor::zeros(p.shape(), DType::f32, d));
    }
    std::vector<double> losses;
    AdamUpdate u;
    u.lr = 3e-3f;
    for (int step = 1; step <= 30; ++step) {
      Tensor h = layer_norm(gelu(linear(x, w1)), {64}, ln_w);
      Tensor loss = cross_entropy(linear(h, w2), y, -100, 0.1f);
      losses.push_back(loss.to(Device::cpu()).to_vector()[0]);
      loss.backward();
      u.step = step;
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor p = params[i];
        adam_update_(p, p.grad(), ms[i], vs[i], u);
        p.zero_grad();
      }
    }
    return losses;
  };
  const std::vector<double> cpu = train(Device::cpu()), gpu_losses = train(Device::cuda());
  ASSERT_EQ(cpu.size(), gpu_losses.size());
  EXPECT_LT(cpu.back(), cpu.front() - 0.3) << "the model learns";
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu_losses[i], cpu[i], 5e-3) << "step " << i + 1;
}

}  // namespace
}  // namespace qkv
