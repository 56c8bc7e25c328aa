// The CUDA kernels: kernels::cpu's names and signatures (the formulas are in kernels/cpu/*.h beside
// each CPU declaration), computed on a GPU. Pointers are device memory of the current device
// (ops set it with cuda::DeviceGuard); work is queued on its current stream (qkv/core/cuda.h) and
// the functions return without waiting, except those that return a value to the host (sums,
// count_targets) and embedding_forward, which checks its ids. Compiled by nvcc into qkv_kernels
// only with -DQKV_CUDA=ON; ops include this header through src/ops/dispatch.h.
//
// Which ops have CUDA kernels, and which still run on the CPU only: docs/ARCHITECTURE.md,
// "Adding a device".
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/adam.h"
#include "kernels/conv.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/functors.h"
#include "kernels/pool.h"
#include "kernels/rnn.h"
#include "qkv/core/dtype.h"

namespace qkv::kernels::cuda {

// ---- elementwise (elementwise.cu), over strided, broadcast operands into a dense output ---------
// Explicitly instantiated in elementwise.cu for the functors of kernels/functors.h that ops pass.
template <typename F>
void binary(const std::vector<int64_t>& shape, float* out, const float* a, const std::vector<int64_t>& sa,
            const float* b, const std::vector<int64_t>& sb, F f);
template <typename F>
void unary(const std::vector<int64_t>& shape, float* out, const float* a, const std::vector<int64_t>& sa, F f);
template <typename TO, typename TA, typename F>
void map1(const std::vector<int64_t>& shape, TO* out, const TA* a, const std::vector<int64_t>& sa, F f);
template <typename TO, typename TA, typename TB, typename F>
void map2(const std::vector<int64_t>& shape, TO* out, const TA* a, const std::vector<int64_t>& sa, const TB* b,
          const std::vector<int64_t>& sb, F f);
// A dense copy of a strided tensor of `elem_size`-byte elements (1, 2, 4 or 8): Tensor::contiguous.
void copy_strided(const std::vector<int64_t>& shape, void* out, const void* src, const std::vector<int64_t>& strides,
                  size_t elem_size);
// The same into a strided view (Tensor::copy_): out and src each with their own strides (src's 0
// along broadcast dims).
void copy_strided_to(const std::vector<int64_t>& shape, void* out, const std::vector<int64_t>& out_strides,
                     const void* src, const std::vector<int64_t>& src_strides, size_t elem_size);
// Element type conversions of dense buffers (Tensor::to(DType)): f32 ↔ bf16 (round to nearest
// even, as f32_to_bf16), boolean → f32, i32 → f32.
void convert_to_bf16(const float* src, bf16* dst, int64_t n);
void round_to_bf16(const float* src, float* dst, int64_t n);
void round_to_f16(const float* src, float* dst, int64_t n);  // (IEEE half: attention's f16 compute)
void bf16_to_f32(const bf16* src, float* dst, int64_t n);
void bool_to_f32(const uint8_t* src, float* dst, int64_t n);
void i32_to_f32(const int32_t* src, float* dst, int64_t n);
void fill_zero(void* p, size_t bytes);
void fill_f32(float* p, int64_t n, float value);
void sum_to(const std::vector<int64_t>& in_shape, const float* in, const std::vector<int64_t>& out_shape, float* out);
double sum_f64(const float* x, int64_t n);          // waits for the result
double sum_squares_f64(const float* x, int64_t n);  // waits for the result
void scale_inplace(float* x, int64_t n, float c);
void broadcast_rows(float* out, const float* row, int64_t rows, int64_t n);

// ---- activations (activation.cu) -------------------------------------------------------------------
void relu_forward(const float* x, float* y, int64_t n);
void relu_backward(const float* x, const float* dy, float* dx, int64_t n);
void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx, float* cdf = nullptr);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx,
                   const float* cdf = nullptr);
// The same mask as the CPU's for the same (seed, counter): Generator::paired_uniform on both.
void dropout_apply(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t counter);

// ---- softmax and layer norm (softmax.cu, layer_norm.cu) -------------------------------------------
void softmax_forward(const float* x, float* y, int64_t rows, int64_t n);
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n);
void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t n);
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n);
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int64_t rows, int64_t n, float eps);
void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t n);
// (rms_norm.cu)
void rms_norm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int64_t n, float eps);
void rms_norm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                       float* dgamma, int64_t rows, int64_t n);

// ---- embedding, cross-entropy, indexing (embedding.cu, cross_entropy.cu, index.cu) ----------------
// Throws qkv::Error naming the first bad id (the check waits for the kernel).
void embedding_forward(const float* weight, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n, float* out);
void embedding_backward(const float* dout, const int32_t* ids, int64_t n, int64_t dim, int64_t padding_idx,
                        float* dweight);
int64_t count_targets(const int32_t* y, int64_t N, int64_t C, int64_t ignore, int64_t* bad_row);
void cross_entropy_forward(const float* x, const int32_t* y, int64_t N, int64_t C, float eps, int64_t ignore,
                           float* lse, float* loss);
void cross_entropy_backward(const float* x, const int32_t* y, const float* lse, const float* scale, int64_t N,
                            int64_t C, float eps, int64_t ignore, float* dx);
void index_select(const uint8_t* src, int64_t outer, int64_t n, int64_t inner_bytes, const int64_t* index,
                  int64_t n_index, uint8_t* out);  // `index` on the host, as ops pass it
void index_add(float* dst, int64_t outer, int64_t n, int64_t inner, const int64_t* index, int64_t n_index,
               const float* src);                   // `index` on the host
void causal_mask(uint8_t* out, int64_t Lq, int64_t Lk, int64_t offset);

// ---- optimizer (adam.cu) ------------------------------------------------------------------------------
void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const AdamCoefficients& c);

// ---- images: convolution (conv.cu: im2col + cuBLAS), pooling (pool.cu), batch and group norm
// (batch_norm.cu); NCHW, kernels/cpu/{conv,pool,batch_norm,group_norm}.h's contracts -------------
void conv2d_forward(const Conv2dProblem& p, const float* x, const float* w, const float* b, float* y);
void conv2d_backward_data(const Conv2dProblem& p, const float* dy, const float* w, float* dx);
void conv2d_backward_weights(const Conv2dProblem& p, const float* x, const float* dy, float* dw, float* db);
void max_pool2d_forward(const Pool2dProblem& p, const float* x, float* y, int32_t* argmax);
void max_pool2d_backward(const Pool2dProblem& p, const float* dy, const int32_t* argmax, float* dx);
void avg_pool2d_forward(const Pool2dProblem& p, const float* x, float* y);
void avg_pool2d_backward(const Pool2dProblem& p, const float* dy, float* dx);
void adaptive_avg_pool2d_forward(const float* x, float* y, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW);
void adaptive_avg_pool2d_backward(const float* dy, float* dx, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                  int64_t OW);
void batch_norm_forward(const float* x, const float* weight, const float* bias, float* running_mean,
                        float* running_var, bool training, float momentum, float eps, int64_t N, int64_t C, int64_t S,
                        float* y, float* mean, float* rstd);
void batch_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         bool training, int64_t N, int64_t C, int64_t S, float* dx, float* dweight, float* dbias);
void group_norm_forward(const float* x, const float* weight, const float* bias, float eps, int64_t N, int64_t C,
                        int64_t S, int64_t G, float* y, float* mean, float* rstd);
void group_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         int64_t N, int64_t C, int64_t S, int64_t G, float* dx, float* dweight, float* dbias);

// ---- ensembles (softmax.cu): y = log mean_i exp(x_i), k inputs (host array of device pointers) -----
void log_mean_exp(const float* const* x, int64_t k, float* y, int64_t n);

// ---- recurrent layers (rnn.cu) and additive scores (additive_score.cu): kernels/cpu/rnn.h's and
// additive_score.h's contracts; RnnProblem::lengths stays on the host ---------------------------
void gru_forward(const RnnProblem& p, const float* h0, float* y, float* h_n, float* saved_gates, float* saved_h);
void gru_backward(const RnnProblem& p, const float* saved_gates, const float* saved_h, const float* dy,
                  const float* dh_n, float* dx_proj, float* dh0, float* dw_hh, float* db_hh);
void lstm_forward(const RnnProblem& p, const float* h0, const float* c0, float* y, float* h_n, float* c_n,
                  float* saved_gates, float* saved_h, float* saved_c, float* saved_tanh_c);
void lstm_backward(const RnnProblem& p, const float* saved_gates, const float* saved_h, const float* saved_c,
                   const float* saved_tanh_c, const float* dy, const float* dh_n, const float* dc_n, float* dx_proj,
                   float* dh0, float* dc0, float* dw_hh, float* db_hh);
void additive_score_forward(const float* q, const float* k, const float* v, float* e, int64_t B, int64_t T, int64_t S,
                            int64_t A);
void additive_score_backward(const float* q, const float* k, const float* v, const float* de, float* dq, float* dk,
                             float* dv, int64_t B, int64_t T, int64_t S, int64_t A);

// ---- GEMM through cuBLAS (gemm.cu) -------------------------------------------------------------------
// Row-major, as kernels/cpu/gemm.h. f32 GEMMs use TF32 tensor cores (torch's
// allow_tf32 = True); QKV_CUDA_TF32=0 in the environment keeps them in full f32.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// bf16 operands, f32 accumulation and result; beta 0 or 1.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
               const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace qkv::kernels::cuda
