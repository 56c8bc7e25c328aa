#include "kernels/cpu/packed_linear.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <mutex>
#include <string>
#include <unordered_map>

#include "kernels/cpu/onednn_call.h"
#include "qkv/core/error.h"

namespace qkv::kernels::cpu {

using dnnl::memory;

namespace {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

}  // namespace

struct PackedLinear {
  int64_t N = 0, K = 0;
  memory::data_type src_type, weight_type, dst_type;
  memory::desc weights_md;  // the blocked layout the weights were reordered into
  memory weights;           // [K, N] in that layout
  // one primitive per batch size M (brgemm kernels are made for a known M), made on first use;
  // an empty handle where oneDNN has none for this layout (the caller's plain path then)
  mutable std::mutex mutex;
  mutable std::unordered_map<int64_t, dnnl::matmul> by_rows;
};

namespace {

// Batch sizes beyond this many distinct ones start the cache afresh (primitives are small, but a
// server's inputs could name every M).
constexpr size_t kMaxPrimitives = 256;
// The batch size whose primitive chooses the weights' layout: a translation step's.
constexpr int64_t kLayoutRows = 32;

dnnl::matmul::primitive_desc describe(const PackedLinear& w, int64_t M, const memory::desc& weights) {
  const memory::desc src({M, w.K}, w.src_type, memory::format_tag::ab);
  const memory::desc dst({M, w.N}, w.dst_type, memory::format_tag::ab);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), cpu_engine());
}

// W [N, K] row-major (which is [K, N] with strides {1, ldw}) reordered into the layout oneDNN's
// matmul picks ("any") for kLayoutRows rows.
std::shared_ptr<const PackedLinear> pack(int64_t N, int64_t K, const void* W, int64_t ldw, memory::data_type src,
                                         memory::data_type wt, memory::data_type dst) {
  QKV_CHECK(N > 0 && K > 0 && ldw >= K, "pack_linear: bad weight shape [", N, ", ", K, "] with row stride ", ldw);
  auto p = std::make_shared<PackedLinear>();
  p->N = N, p->K = K, p->src_type = src, p->weight_type = wt, p->dst_type = dst;
  try {
    const auto pd = describe(*p, kLayoutRows, memory::desc({K, N}, wt, memory::format_tag::any));
    // f32 where oneDNN has no brgemm for this CPU (2.6: none on AVX2) picks its GEMM ("gemm:jit") and
    // the plain [K, N] layout: then W [N, K] as it lies, through sgemm's transposed B (the plain
    // path), is faster — the 32 × 512 × 2,048 product 1.68 against ~1.2 ms, an OPUS-MT-sized f32
    // translation +10 % unpacked (Zen 3). int8 keeps its copy there: u8·s8 gained 6 % from it.
    if (wt == memory::data_type::f32 && std::string(pd.impl_info_str()).rfind("brg", 0) != 0) return nullptr;
    p->weights_md = pd.weights_desc();
    const memory::desc plain({K, N}, wt, memory::dims{1, ldw});
    memory from(plain, cpu_engine(), const_cast<void*>(W));
    p->weights = memory(p->weights_md, cpu_engine());
    dnnl::stream s(cpu_engine());
    const OneDnnCall call;  // (kernels/cpu/onednn_call.h)
    dnnl::reorder(from, p->weights).execute(s, from, p->weights);
    s.wait();
  } catch (const dnnl::error& e) {
    QKV_CHECK(false, "pack_linear: oneDNN could not pack a [", N, ", ", K, "] weight: ", e.what());
  }
  return p;
}

// The primitive for M rows over the packed weights (made once; empty if oneDNN has none).
dnnl::matmul primitive_for(const PackedLinear& w, int64_t M) {
  std::lock_guard<std::mutex> lock(w.mutex);
  auto it = w.by_rows.find(M);
  if (it != w.by_rows.end()) return it->second;
  if (w.by_rows.size() >= kMaxPrimitives) w.by_rows.clear();
  dnnl::matmul prim;
  try {
    prim = dnnl::matmul(describe(w, M, w.weights_md));
  } catch (const dnnl::error&) {
    // no implementation of this M for the weights' layout: the plain path serves it
  }
  return w.by_rows.emplace(M, prim).first->second;
}

bool run(const PackedLinear& w, int64_t M, const void* x, void* y) {
  if (M <= 0) return true;
  const dnnl::matmul prim = primitive_for(w, M);
  if (!prim) return false;
  thread_local dnnl::stream s(cpu_engine());
  const memory src(memory::desc({M, w.K}, w.src_type, memory::format_tag::ab), cpu_engine(), const_cast<void*>(x));
  const memory dst(memory::desc({M, w.N}, w.dst_type, memory::format_tag::ab), cpu_engine(), y);
  try {
    const OneDnnCall call;  // (kernels/cpu/onednn_call.h)
    prim.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w.weights}, {DNNL_ARG_DST, dst}});
    s.wait();
  } catch (const dnnl::error& e) {
    QKV_CHECK(false, "packed_linear: oneDNN's matmul failed for M=", M, " N=", w.N, " K=", w.K, ": ", e.what());
  }
  return true;
}

}  // namespace

std::shared_ptr<const PackedLinear> pack_linear_f32(int64_t N, int64_t K, const float* W, int64_t ldw) {
  return pack(N, K, W, ldw, memory::data_type::f32, memory::data_type::f32, memory::data_type::f32);
}

std::shared_ptr<const PackedLinear> pack_linear_s8(int64_t N, int64_t K, const int8_t* W8, int64_t ldw) {
  return pack(N, K, W8, ldw, memory::data_type::u8, memory::data_type::s8, memory::data_type::s32);
}

bool packed_linear_f32(const PackedLinear& w, int64_t M, const float* x, const float* bias, float* y) {
  QKV_CHECK(w.weight_type == memory::data_type::f32, "packed_linear_f32: the weight was packed as int8");
  if (!run(w, M, x, y)) return false;
  if (bias)  // y += b, row by row
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < w.N; ++n) y[m * w.N + n] += bias[n];
  return true;
}

bool packed_linear_u8s8(const PackedLinear& w, int64_t M, const uint8_t* xq, int32_t* acc) {
  QKV_CHECK(w.weight_type == memory::data_type::s8, "packed_linear_u8s8: the weight was packed as f32");
  return run(w, M, xq, acc);
}

}  // namespace qkv::kernels::cpu
