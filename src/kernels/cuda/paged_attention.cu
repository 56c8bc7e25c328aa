// Attention over a paged KV cache on the GPU, and the writes of new tokens' keys and values into it
// (formulas, layouts and contracts: kernels/paged_attention.inc; the kernels and their launch:
// paged_attention_kernels.cuh).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/paged_attention_kernels.cuh"

QKV_CUDA_LAUNCHERS_BEGIN

namespace {

// A launch's dynamic shared memory past the 48 KB a block has unasked: asked for, for `kernel`
template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    QKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Whether the tensor-core kernels take a step (QKV_CUDA_PAGED_KERNEL=mma; a bf16 or e4m3 cache on 16 bytes at
// head dims 64 or 128): paged_attention_mma_kernel for each token's keys, paged_cascade_mma_kernel for a cascade's
template <typename C>
bool uses_mma_kernels(const C* k_cache, const C* v_cache, const PagedShape& s) {
  const char* kind = std::getenv("QKV_CUDA_PAGED_KERNEL");
  const bool aligned = reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(v_cache) % 16 == 0;
  return kind && std::strcmp(kind, "mma") == 0 && aligned && paged_mma_serves(s);
}

// The decoding kernel over the tokens' keys (all of them, or from[t] on with a cascade), `grid` blocks:
// the tiled kernel, or with QKV_CUDA_PAGED_KERNEL=warps paged_attention_kernel (a key a warp in flight,
// the kernel before 2026-12-05), to compare the two on a GPU; with QKV_CUDA_PAGED_KERNEL=mma, a bf16
// or e4m3 cache at head dim 64 or 128 on 16-byte addresses, the tensor-core kernel (paged_attention_mma_kernel,
// 2026-12-05: to time against the tiled one before it is the default). Round: q, k and v read rounded to bf16 (1) or
// f16 (2), a 16-bit decoding step over an f32 cache (the tiled kernel only: attention_decode_tiled).
template <typename C, int Round = 0>
void launch_decoding(dim3 grid, const float* q, const C* k_cache, const C* v_cache, const int32_t* table,
                     const int32_t* seq, const int32_t* len, float* out, const PagedShape& s, const PagedSplit& split,
                     float* part, const int32_t* from) {
  const char* kind = std::getenv("QKV_CUDA_PAGED_KERNEL");
  if (Round == 0 && kind && std::strcmp(kind, "warps") == 0) {
    QKV_LAUNCH(grid, kPagedThreads, paged_attention_shared_bytes(s), stream(), paged_attention_kernel<C>)(
        q, k_cache, v_cache, table, seq, len, out, s, split, part, from);
    QKV_CUDA_LAUNCHED(paged_attention_kernel);
    return;
  }
  const bool aligned = reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(v_cache) % 16 == 0;
  if constexpr ((std::is_same_v<C, bf16> || std::is_same_v<C, f8e4m3>) && Round == 0) {
    if (uses_mma_kernels(k_cache, v_cache, s)) {
      const PagedMmaTiles tl = paged_mma_tiles(s, sizeof(C));
      auto kernel = s.D == 64 ? paged_attention_mma_kernel<C, 64> : paged_attention_mma_kernel<C, 128>;
      allow_shared(kernel, tl.bytes);
      QKV_LAUNCH(grid, kPagedThreads, tl.bytes, stream(), kernel)(
          q, k_cache, v_cache, table, seq, len, out, s, tl.stages, split, part, from);
      QKV_CUDA_LAUNCHED(paged_attention_mma_kernel);
      return;
    }
  }
  const PagedTiles tl = paged_tiles(s, sizeof(C), aligned);
  allow_shared(paged_attention_tiled_kernel<C, Round>, tl.bytes);
  QKV_LAUNCH(grid, kPagedThreads, tl.bytes, stream(), paged_attention_tiled_kernel<C, Round>)(
      q, k_cache, v_cache, table, seq, len, out, s, tl, split, part, from);
  QKV_CUDA_LAUNCHED(paged_attention_tiled_kernel);
}

// The cascade's groups over their shared keys (`grid`: blocks × prefix runs), into the runs' scratch:
// paged_cascade_kernel, or the tensor-core paged_cascade_mma_kernel where uses_mma_kernels says
template <typename C>
void launch_cascade(dim3 grid, const float* q, const C* k_cache, const C* v_cache, const int32_t* table,
                    const int32_t* seq, const PagedShape& s, const PagedCascade& cascade, const PagedSplit& split,
                    float* part) {
  if constexpr (std::is_same_v<C, bf16> || std::is_same_v<C, f8e4m3>) {
    if (uses_mma_kernels(k_cache, v_cache, s)) {
      const PagedMmaTiles tl = paged_cascade_mma_tiles(s, sizeof(C));
      auto kernel = s.D == 64 ? paged_cascade_mma_kernel<C, 64> : paged_cascade_mma_kernel<C, 128>;
      allow_shared(kernel, tl.bytes);
      QKV_LAUNCH(grid, kPagedThreads, tl.bytes, stream(), kernel)(
          q, k_cache, v_cache, table, seq, s, cascade, split, part, tl.stages);
      QKV_CUDA_LAUNCHED(paged_cascade_mma_kernel);
      return;
    }
  }
  const size_t bytes = paged_cascade_shared_bytes(s);
  allow_shared(paged_cascade_kernel<C>, bytes);
  QKV_LAUNCH(grid, kPagedThreads, bytes, stream(), paged_cascade_kernel<C>)(
      q, k_cache, v_cache, table, seq, s, cascade, split, part);
  QKV_CUDA_LAUNCHED(paged_cascade_kernel);
}

// one block per (query token, key/value head, chunk of ≤ 8 of its query heads), 4 warps; split over
// the keys where those blocks would leave SMs idle (paged_split); with a cascade, the groups' shared
// keys (launch_cascade), each token's others (launch_decoding from its from[t]), then their merge
// (most_keys > 0: no token sees more keys than that, for the split's runs; Round as launch_decoding's)
template <typename C, int Round = 0>
void forward(const float* q, const C* k_cache, const C* v_cache, const int32_t* table, const int32_t* seq,
             const int32_t* len, float* out, const PagedShape& s, const PagedCascade* cascade, int64_t most_keys = 0) {
  if (s.T == 0) return;
  QKV_CHECK(s.D <= kPagedMaxDim && s.Dv <= kPagedMaxDim, "paged_attention: head dims D = ", s.D, " and Dv = ", s.Dv,
            "; the CUDA kernel takes at most ", kPagedMaxDim);
  const int64_t blocks = paged_attention_blocks(s);
  if (blocks == 0) return;  // no query heads
  QKV_CHECK(blocks <= 2147483647, "paged_attention: ", blocks, " blocks are too many for one CUDA grid");
  const char* no_split = std::getenv("QKV_CUDA_PAGED_SPLIT");  // "0": never split (to compare)
  const bool may_split = !(no_split && std::strcmp(no_split, "0") == 0);
  static const bool cascades = [] {
    const char* e = std::getenv("QKV_PAGED_CASCADE");  // "0": every token on its own (to compare), as the CPU
    return !(e && std::strcmp(e, "0") == 0);
  }();
  if (cascade != nullptr && cascade->n_blocks > 0 && cascades) {
    // the groups' shared keys (paged_cascade_kernel), each token's own (paged_attention_kernel from
    // its from[t]), both into the scratch, then their merge
    PagedSplit split = paged_cascade_split(s, *cascade, sm_count());
    if (!may_split) split.splits = 1, split.keys = 0;
    Scratch part(paged_split_floats(s, split), stream());
    launch_decoding<C, Round>(dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(split.splits)), q, k_cache,
                              v_cache, table, seq, len, out, s, split, part.p, cascade->from);
    const int64_t cascade_blocks = paged_cascade_blocks(s, *cascade);
    QKV_CHECK(cascade_blocks <= 2147483647, "paged_attention: ", cascade_blocks, " cascade blocks are too many for one CUDA grid");
    launch_cascade(dim3(static_cast<unsigned>(cascade_blocks), static_cast<unsigned>(split.prefix_runs)), q, k_cache,
                   v_cache, table, seq, s, *cascade, split, part.p);
    QKV_LAUNCH(paged_merge_blocks(s), 256, 0, stream(), paged_attention_merge_kernel)(
        part.p, out, s, split, cascade->from);
    QKV_CUDA_LAUNCHED(paged_attention_merge_kernel);
    return;
  }
  const PagedSplit split = may_split ? paged_split(s, sm_count(), most_keys) : PagedSplit{};
  if (split.splits == 1)
    return launch_decoding<C, Round>(dim3(static_cast<unsigned>(blocks)), q, k_cache, v_cache, table, seq, len, out,
                                     s, PagedSplit{}, nullptr, nullptr);
  // few blocks, long contexts: S runs of the keys a block each, then their merge
  Scratch part(paged_split_floats(s, split), stream());
  launch_decoding<C, Round>(dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(split.splits)), q, k_cache,
                            v_cache, table, seq, len, out, s, split, part.p, nullptr);
  QKV_LAUNCH(paged_merge_blocks(s), 256, 0, stream(), paged_attention_merge_kernel)(part.p, out, s, split, nullptr);
  QKV_CUDA_LAUNCHED(paged_attention_merge_kernel);
}

template <typename C>
void write(C* k_cache, C* v_cache, const float* k, const float* v, const int32_t* slots, const PagedShape& s) {
  if (s.T == 0 || s.Hkv == 0) return;
  QKV_LAUNCH(paged_kv_write_blocks(s), 256, 0, stream(), paged_kv_write_kernel<C>)(k_cache, v_cache, k, v, slots, s);
  QKV_CUDA_LAUNCHED(paged_kv_write_kernel);
}

}  // namespace

// A decoding step over a dense f32 KV cache through the tiled kernel: k [B, Hkv, P, D] (P ≥ Lk: the cache's
// capacity) is a paged cache of B pages of P slots, each sequence one page. Serves where the layouts
// allow it — k and v rows dense (k_sl = D, k_sh = P·D, k_sb = Hkv·P·D; v alike with the same P), q and out
// [B, Lq, H, d] (Lq = 1: [B, H, 1, d] too) — with no mask, dropout or lse (bf16 and f16 steps too: q, k
// and v rounded as they are read, as attention.cu's kernels round them), and QKV_CUDA_PAGED_KERNEL other
// than warps (which keeps attention.cu's split-KV kernels, as before 2026-12-05); else false, nothing done.
bool attention_decode_tiled(const AttnProblem& p, float* out) {
  const char* kind = std::getenv("QKV_CUDA_PAGED_KERNEL");
  if (kind && std::strcmp(kind, "warps") == 0) return false;
  if (p.mask.kind != AttnMask::Kind::none || p.dropout_p > 0.f) return false;
  if (p.D < 1 || p.Dv < 1 || p.D > kPagedMaxDim || p.Dv > kPagedMaxDim || p.Hkv < 1 || p.H % p.Hkv != 0) return false;
  const int64_t T = p.B * p.Lq, P = p.k_sh / p.D;
  constexpr int64_t kInt32 = 2147483647;
  if (T < 1 || p.Lk < 1 || T > kInt32 || p.Lk > kInt32 || P < p.Lk || P > kInt32 || p.B > kInt32) return false;
  const bool keys = p.k_sl == p.D && p.k_sh == P * p.D && p.k_sb == p.Hkv * P * p.D;
  const bool values = p.v_sl == p.Dv && p.v_sh == P * p.Dv && p.v_sb == p.Hkv * P * p.Dv;
  const bool queries = p.q_sh == p.D && p.q_sb == p.Lq * p.H * p.D && (p.Lq == 1 || p.q_sl == p.H * p.D);
  const HeadLayout& o = p.out_l;
  const bool outputs = o.sh == p.Dv && o.sb == p.Lq * p.H * p.Dv && (p.Lq == 1 || o.sl == p.H * p.Dv);
  if (!keys || !values || !queries || !outputs) return false;
  PagedShape s;
  s.T = T, s.H = p.H, s.Hkv = p.Hkv, s.D = p.D, s.Dv = p.Dv, s.page_size = P, s.pages = p.B, s.rows = p.B;
  s.max_pages = 1, s.scale = p.scale, s.window = 0, s.softcap = p.softcap;
  // the block table, seq and len ([B], [T], [T] int32) made on the device, in stream order (a graph may
  // record them)
  Scratch index(p.B + 2 * T, stream());
  int32_t* table = reinterpret_cast<int32_t*>(index.p);
  int32_t* seq = table + p.B;
  int32_t* len = seq + T;
  QKV_LAUNCH(blocks_for(T), 256, 0, stream(), dense_as_paged_kernel)(table, seq, len, p.B, p.Lq, p.Lk, p.causal);
  QKV_CUDA_LAUNCHED(dense_as_paged_kernel);
  switch (operand_rounding(p.compute)) {
    case 1: forward<float, 1>(p.q, p.k, p.v, table, seq, len, out, s, nullptr, p.Lk); break;
    case 2: forward<float, 2>(p.q, p.k, p.v, table, seq, len, out, s, nullptr, p.Lk); break;
    default: forward<float, 0>(p.q, p.k, p.v, table, seq, len, out, s, nullptr, p.Lk);
  }
  return true;
}

void paged_attention_forward(const float* q, const float* k_cache, const float* v_cache, const int32_t* table,
                             const int32_t* seq, const int32_t* len, float* out, const PagedShape& s,
                             const PagedCascade* cascade) {
  forward(q, k_cache, v_cache, table, seq, len, out, s, cascade);
}
void paged_attention_forward(const float* q, const bf16* k_cache, const bf16* v_cache, const int32_t* table,
                             const int32_t* seq, const int32_t* len, float* out, const PagedShape& s,
                             const PagedCascade* cascade) {
  forward(q, k_cache, v_cache, table, seq, len, out, s, cascade);
}
void paged_attention_forward(const float* q, const f8e4m3* k_cache, const f8e4m3* v_cache, const int32_t* table,
                             const int32_t* seq, const int32_t* len, float* out, const PagedShape& s,
                             const PagedCascade* cascade) {
  forward(q, k_cache, v_cache, table, seq, len, out, s, cascade);
}
void paged_kv_write(float* k_cache, float* v_cache, const float* k, const float* v, const int32_t* slots,
                    const PagedShape& s) {
  write(k_cache, v_cache, k, v, slots, s);
}
void paged_kv_write(bf16* k_cache, bf16* v_cache, const float* k, const float* v, const int32_t* slots,
                    const PagedShape& s) {
  write(k_cache, v_cache, k, v, slots, s);
}
void paged_kv_write(f8e4m3* k_cache, f8e4m3* v_cache, const float* k, const float* v, const int32_t* slots,
                    const PagedShape& s) {
  write(k_cache, v_cache, k, v, slots, s);
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
