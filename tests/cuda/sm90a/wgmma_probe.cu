// The wgmma layout probe (tests/kernels/wgmma_probe.h) on a Hopper GPU: compiled for sm_90a alone
// (tests/CMakeLists.txt), run by tests/cuda/wgmma_probe_test.cpp.
#include "kernels/wgmma_probe.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace qkv::testing::wgmma_probe {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("wgmma probe: ") + what + ": " + cudaGetErrorString(e));
}

template <int N, int TransA, int TransB>
void launch(const unsigned char* a, int a_bytes, uint32_t a_lbo, const unsigned char* b, int b_bytes, uint32_t b_lbo,
            uint32_t b_start, float* d) {
  kernels::cuda::wgmma_probe_kernel<N, TransA, TransB><<<1, 128, 32 * 1024 + 1024>>>(a, a_bytes, a_lbo, b, b_bytes,
                                                                                  b_lbo, b_start, d);
}

}  // namespace

bool gpu_is_hopper() {
  int count = 0, device = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "compute capability");
  return major == 9 && minor == 0;
}

std::vector<float> run_on_gpu(const Case& c, const Images& im) {
  unsigned char *a = nullptr, *b = nullptr;
  float* d = nullptr;
  const size_t d_bytes = sizeof(float) * kM * c.n;
  check(cudaMalloc(&a, im.a.size()), "cudaMalloc");
  check(cudaMalloc(&b, im.b.size()), "cudaMalloc");
  check(cudaMalloc(&d, d_bytes), "cudaMalloc");
  check(cudaMemcpy(a, im.a.data(), im.a.size(), cudaMemcpyHostToDevice), "copy A");
  check(cudaMemcpy(b, im.b.data(), im.b.size(), cudaMemcpyHostToDevice), "copy B");
  const int ab = static_cast<int>(im.a.size()), bb = static_cast<int>(im.b.size());
  const int key = c.n * 4 + (c.mn_a ? 2 : 0) + (c.mn_b ? 1 : 0);
  switch (key) {
    case 256: launch<64, 0, 0>(a, ab, im.a_lbo, b, bb, im.b_lbo, im.b_start, d); break;
    case 257: launch<64, 0, 1>(a, ab, im.a_lbo, b, bb, im.b_lbo, im.b_start, d); break;
    case 258: launch<64, 1, 0>(a, ab, im.a_lbo, b, bb, im.b_lbo, im.b_start, d); break;
    case 259: launch<64, 1, 1>(a, ab, im.a_lbo, b, bb, im.b_lbo, im.b_start, d); break;
    case 513: launch<128, 0, 1>(a, ab, im.a_lbo, b, bb, im.b_lbo, im.b_start, d); break;
    case 515: launch<128, 1, 1>(a, ab, im.a_lbo, b, bb, im.b_lbo, im.b_start, d); break;
    case 128: launch<32, 0, 0>(a, ab, im.a_lbo, b, bb, im.b_lbo, im.b_start, d); break;
    case 131: launch<32, 1, 1>(a, ab, im.a_lbo, b, bb, im.b_lbo, im.b_start, d); break;
    default: throw std::invalid_argument("wgmma probe: a case the probe has no kernel for");
  }
  check(cudaGetLastError(), "launch");
  check(cudaDeviceSynchronize(), "run");
  std::vector<float> out(static_cast<size_t>(kM) * c.n);
  check(cudaMemcpy(out.data(), d, d_bytes, cudaMemcpyDeviceToHost), "copy d");
  cudaFree(a), cudaFree(b), cudaFree(d);
  return out;
}

}  // namespace qkv::testing::wgmma_probe
