#include "qkv/ops/matmul.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <utility>

#include "dispatch.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/onednn_call.h"
#include "packed_copy.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"
#include "qkv/core/parallel.h"
#include "qkv/ops/activation.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/autocast.h"
#include "qkv/ops/softmax.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;
namespace kc = kernels::cpu;

namespace {

// How a strided [rows, cols] matrix can be handed to GEMM without copying.
struct MatView {
  bool trans = false;
  int64_t ld = 0;
  bool ok = false;
};
MatView as_gemm_operand(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col) {
  if ((s_col == 1 || cols == 1) && s_row >= std::max<int64_t>(cols, 1)) return {false, s_row, true};
  if ((s_row == 1 || rows == 1) && s_col >= std::max<int64_t>(rows, 1)) return {true, s_col, true};
  if (rows == 1 && cols == 1) return {false, 1, true};
  return {};
}

// C [..., M, N] = A [..., M, K] · B [..., K, N] for tensors of rank ≥ 2 with broadcast batch dims.
Tensor matmul_nd(Tensor a, Tensor b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  QKV_CHECK(b.size(-2) == K, "matmul: ", shape_str(a.shape()), " x ", shape_str(b.shape()), ": inner dimensions ", K,
            " and ", b.size(-2), " differ");
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  const Device d = device_of("matmul", {&a, &b});
  if (K == 0) return Tensor::zeros(out_shape, DType::f32, d);  // an empty sum (and no 0-d view of empty storage)
  Tensor out = Tensor::empty(out_shape, DType::f32, d);
  if (out.numel() == 0) return out;

  MatView va = as_gemm_operand(M, K, a.stride(-2), a.stride(-1));
  if (!va.ok) {
    a = a.contiguous_copy();
    va = {false, K, true};
  }
  MatView vb = as_gemm_operand(K, N, b.stride(-2), b.stride(-1));
  if (!vb.ok) {
    b = b.contiguous_copy();
    vb = {false, N, true};
  }

  // Fold A's batch into M when B is a single matrix and A's rows are evenly spaced:
  // one big GEMM instead of many small ones (the x·W case of every linear layer).
  if (bb.empty() && !va.trans && a.dim() > 2) {
    bool foldable = true;
    int64_t expect = a.stride(-2) * M;
    for (int64_t d = a.dim() - 3; d >= 0; --d) {
      if (a.size(d) != 1 && a.stride(d) != expect) foldable = false;
      expect *= a.size(d);
    }
    if (foldable) {
      QKV_DISPATCH("matmul", d, k::sgemm(false, vb.trans, numel_of(batch) * M, N, K, 1.f, a.data(), va.ld, b.data(),
                                         vb.ld, 0.f, out.data(), N));
      return out;
    }
  }

  const int64_t nb = numel_of(batch);
  Shape sa = broadcast_strides(a.as_strided(ba, Shape(a.strides().begin(), a.strides().end() - 2), a.offset()), batch);
  Shape sb = broadcast_strides(b.as_strided(bb, Shape(b.strides().begin(), b.strides().end() - 2), b.offset()), batch);
  std::vector<int64_t> off_a(nb), off_b(nb);
  for (int64_t i = 0; i < nb; ++i) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    off_a[i] = oa;
    off_b[i] = ob;
  }
  const float* pa = a.data();
  const float* pb = b.data();
  float* pc = out.data();
  // Small products in parallel over the batch (each GEMM then runs on one thread), large ones in turn.
  const bool parallel = d.is_cpu() && nb > 1 && 2.0 * M * N * K < 4e6 && num_threads() > 1 && !in_parallel_region();
  std::optional<kernels::cpu::OneDnnCall> held;  // one hold for the batch's GEMMs (kernels/cpu/onednn_call.h)
  if (d.is_cpu()) held.emplace();
  QKV_DISPATCH("matmul", d, {
    auto one = [&](int64_t i) {
      k::sgemm(va.trans, vb.trans, M, N, K, 1.f, pa + off_a[i], va.ld, pb + off_b[i], vb.ld, 0.f, pc + i * M * N, N);
    };
    if (parallel) {
      _Pragma("omp parallel for schedule(static)")  // (#pragma cannot stand inside a macro argument)
      for (int64_t i = 0; i < nb; ++i) one(i);
    } else {
      for (int64_t i = 0; i < nb; ++i) one(i);
    }
  });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  QKV_CHECK(a_in.dtype() == DType::f32 && b_in.dtype() == DType::f32, "matmul: expected f32 tensors, got ",
            dtype_name(a_in.dtype()), " and ", dtype_name(b_in.dtype()));
  QKV_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul: ", shape_str(a_in.shape()), " x ", shape_str(b_in.shape()),
            ": both operands need at least one dimension");
  // 1-D operands, as torch.matmul: a vector is a row (left) or a column (right), removed after.
  if (a_in.dim() == 1 && b_in.dim() == 1) return matmul(a_in.unsqueeze(0), b_in.unsqueeze(-1)).reshape({});  // dot
  if (a_in.dim() == 1) return matmul(a_in.unsqueeze(0), b_in).squeeze(-2);
  if (b_in.dim() == 1) return matmul(a_in, b_in.unsqueeze(-1)).squeeze(-1);
  Tensor out = matmul_nd(a_in, b_in);
  Tensor a = a_in.detach(), b = b_in.detach();
  bool ga = a_in.requires_grad(), gb = b_in.requires_grad();
  return record(out, "matmul", {a_in, b_in}, [a, b, ga, gb](const Tensor& g) {
    Tensor da, db;
    // dA = dC Bᵀ
    if (ga) da = sum_to(matmul(g, b.transpose(-1, -2)), a.shape());
    // dB = Aᵀ dC — one GEMM over all rows when B is a single matrix.
    if (gb) {
      if (b.dim() == 2) {
        Tensor a2 = a.reshape({-1, a.size(-1)}), g2 = g.reshape({-1, g.size(-1)});
        db = matmul(a2.transpose(0, 1), g2);
      } else {
        db = sum_to(matmul(a.transpose(-1, -2), g), b.shape());
      }
    }
    return std::vector<Tensor>{da, db};
  });
}

// out [rows, out_f] = bf16(x) [rows, in_f] · bf16(W)ᵀ (+ b): a bias added as the product is written
// (kernels' gemm_bf16_bias: on a GPU cuBLASLt's epilogue, where filling out with it first wrote out twice)
static void linear_product_bf16(const char* op, Device d, const Tensor& xb, const Tensor& wb, const Tensor& bias,
                                int64_t rows, int64_t in_f, int64_t out_f, Tensor& out) {
  if (!bias.defined()) {
    QKV_DISPATCH(op, d,
                 k::gemm_bf16(false, true, rows, out_f, in_f, xb.data<bf16>(), in_f, wb.data<bf16>(), in_f, 0.f,
                              out.data(), out_f));
    return;
  }
  const Tensor bc = dense(bias);
  QKV_DISPATCH(op, d,
               k::gemm_bf16_bias(false, true, rows, out_f, in_f, xb.data<bf16>(), in_f, wb.data<bf16>(), in_f,
                                 bc.data(), out.data(), out_f));
}

static Tensor to_bf16_dense(const Tensor& t) {
  Tensor tc = dense(t);
  Tensor out = Tensor::empty(t.shape(), DType::bf16, t.device());
  QKV_DISPATCH("linear", t.device(), k::convert_to_bf16(tc.data(), out.data<bf16>(), t.numel()));
  return out;
}

// Under Autocast(bf16): the same products with bf16-rounded operands and f32 sums, f32 out.
//   y = bf16(x) bf16(W)ᵀ + b;   dx = bf16(dy) bf16(W);   dW = bf16(dy)ᵀ bf16(x);   db = Σ_rows dy
// The tape keeps the bf16 copies of x and W (half the memory of f32 ones).
static Tensor linear_bf16(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t rows, int64_t in_f,
                          int64_t out_f) {
  const Device d = device_of("linear", {&x, &weight, &bias});
  // The bf16 copies the step's AutocastWeights scope holds (ops/autocast.h), when it does: W's, made at
  // the step's start, and x's, written by the op that wrote x; else cast here.
  Tensor xb = AutocastWeights::lent_copy(x), wb = AutocastWeights::scope_copy(weight);
  if (!xb.defined()) xb = to_bf16_dense(x);
  if (!wb.defined()) wb = to_bf16_dense(weight);
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor out = Tensor::empty(out_shape, DType::f32, d);
  linear_product_bf16("linear", d, xb, wb, bias, rows, in_f, out_f, out);

  bool gx = x.requires_grad(), gw = weight.requires_grad(), gbias = bias.defined() && bias.requires_grad();
  Shape x_shape = x.shape();
  return record(out, "linear", {x, weight, bias}, [xb, wb, gx, gw, gbias, rows, in_f, out_f, x_shape, d](const Tensor& g) {
    Tensor gb = AutocastWeights::lent_copy(g);  // dy's copy, when the op that wrote dy lent one
    if (!gb.defined()) gb = to_bf16_dense(g);
    Tensor dx, dw, db;
    if (gx) {
      dx = Tensor::empty(x_shape, DType::f32, d);
      QKV_DISPATCH("linear", d, k::gemm_bf16(false, false, rows, in_f, out_f, gb.data<bf16>(), out_f, wb.data<bf16>(),
                                             in_f, 0.f, dx.data(), in_f));
    }
    if (gw) {
      dw = Tensor::empty({out_f, in_f}, DType::f32, d);
      QKV_DISPATCH("linear", d, k::gemm_bf16(true, false, out_f, in_f, rows, gb.data<bf16>(), out_f, xb.data<bf16>(),
                                             in_f, 0.f, dw.data(), in_f));
    }
    if (gbias) db = sum_to(g.reshape({rows, out_f}), {out_f});
    return std::vector<Tensor>{dx, dw, db};
  });
}

// The rows of x [..., in_f] (its leading dims' product: not numel / in_f, which is 0 at in_f = 0,
// where y = b still has rows).
static int64_t rows_of(const Tensor& x) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  return rows;
}

// y = x Wᵀ + b
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  QKV_CHECK(weight.dim() == 2, "linear: weight must be [out_features, in_features], got ", shape_str(weight.shape()));
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input ", shape_str(x.shape()), " x weight ",
            shape_str(weight.shape()), ": in_features ", x.dim() ? x.size(-1) : 0, " and ", weight.size(1), " differ");
  const int64_t out_f = weight.size(0), in_f = weight.size(1);
  QKV_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out_f), "linear: bias ", shape_str(bias.shape()),
            " does not match out_features ", out_f);
  QKV_CHECK(x.dtype() == DType::f32 && weight.dtype() == DType::f32, "linear: expected f32 input and weight, got ",
            dtype_name(x.dtype()), " and ", dtype_name(weight.dtype()));
  const int64_t rows = rows_of(x);
  if (autocast_dtype() == AutocastDType::bf16) return linear_bf16(x, weight, bias, rows, in_f, out_f);
  const Device d = device_of("linear", {&x, &weight, &bias});
  Tensor xc = dense(x);
  Tensor w = dense(weight);
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor out = Tensor::empty(out_shape, DType::f32, d);
  if (bias.defined()) {  // the bias added as the product is written (on a GPU cuBLASLt's epilogue)
    const Tensor bc = dense(bias);
    QKV_DISPATCH(
        "linear", d,
        k::sgemm_bias(false, true, rows, out_f, in_f, xc.data(), in_f, w.data(), in_f, bc.data(), out.data(), out_f));
  } else {
    QKV_DISPATCH(
        "linear", d,
        k::sgemm(false, true, rows, out_f, in_f, 1.f, xc.data(), in_f, w.data(), in_f, 0.f, out.data(), out_f));
  }

  bool gx = x.requires_grad(), gw = weight.requires_grad(), gbias = bias.defined() && bias.requires_grad();
  Shape x_shape = x.shape();
  return record(out, "linear", {x, weight, bias}, [xc, w, gx, gw, gbias, rows, in_f, out_f, x_shape, d](const Tensor& g) {
    Tensor gc = dense(g);
    Tensor dx, dw, db;
    if (gx) {  // dx = dy W
      dx = Tensor::empty(x_shape, DType::f32, d);
      QKV_DISPATCH("linear", d, k::sgemm(false, false, rows, in_f, out_f, 1.f, gc.data(), out_f, w.data(), in_f, 0.f,
                                         dx.data(), in_f));
    }
    if (gw) {  // dW = dyᵀ x
      dw = Tensor::empty({out_f, in_f}, DType::f32, d);
      QKV_DISPATCH("linear", d, k::sgemm(true, false, out_f, in_f, rows, 1.f, gc.data(), out_f, xc.data(), in_f, 0.f,
                                         dw.data(), in_f));
    }
    if (gbias) db = sum_to(gc.reshape({rows, out_f}), {out_f});  // db = Σ_rows dy
    return std::vector<Tensor>{dx, dw, db};
  });
}

// The bf16 copy must be where the input is: a model moved after loading left its copies behind.
static void check_copy_beside(const Tensor& x, const InferenceWeight& w) {
  QKV_CHECK(w.bf16().device() == x.device(), "linear_inference: the bf16 weight copy is on ", w.bf16().device().str(),
            ", the input on ", x.device().str(),
            " (a model moved after loading: make its inference copies again, set_inference_weights, or load it onto "
            "its device: models::LoadOptions::device)");
}

// On a GPU: the f32 weights through cuBLAS (TF32), or the bf16 copy — made on the GPU at load
// (models::LoadOptions::device) — through cuBLAS's bf16 GEMM at every batch size:
//   y = bf16(x) W_bf16ᵀ + b   (f32 sums, f32 out)
// The int8 copies are the CPU's kernels' (a model loaded for a GPU never has one).
static Tensor linear_inference_gpu(const Tensor& x, const Tensor& weight, const InferenceWeight& w, const Tensor& bias,
                                   int64_t rows, int64_t in_f, int64_t out_f) {
  QKV_CHECK(!w.int8(), "linear_inference: int8 weights are the CPU's; on ", x.device().str(),
            " load the model with f32 or bf16 weights");
  if (!w.bf16().defined()) return linear(x, weight, bias);
  check_copy_beside(x, w);
  QKV_CHECK(x.size(-1) == in_f && w.rows() == out_f && w.bf16().shape() == weight.shape() &&
                w.bf16().dtype() == DType::bf16 && w.bf16().is_contiguous(),
            "linear_inference: input ", shape_str(x.shape()), ", weight ", shape_str(weight.shape()), " and its bf16 copy ",
            shape_str(w.bf16().shape()), " do not fit");
  const Device d = device_of("linear_inference", {&x, &weight, &bias});
  Tensor xb = to_bf16_dense(x);  // [rows, in_f]
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor out = Tensor::empty(out_shape, DType::f32, d);  // [rows, out_f]
  linear_product_bf16("linear_inference", d, xb, w.bf16(), bias, rows, in_f, out_f, out);
  return out;
}

// The kernels' view of a weight's int8 rows for a product of `rows` rows (bias dense or undefined):
// the packed copy only for batches past the matrix–vector kernel's.
static kc::Int8Weights int8_operand(const Tensor& weight, const InferenceWeight& w, const Tensor& bias, int64_t rows) {
  const QuantizedRows* q = w.int8();
  const int64_t in_f = weight.size(1);
  const PackedCopy* packed = rows > kernels::cpu::kInt8GemvRows ? w.packed(weight) : nullptr;
  return {w.rows(),
          in_f,
          q->values.data() + w.row_begin() * in_f,
          in_f,
          q->scales.data() + w.row_begin(),
          q->sums.data() + w.row_begin(),
          bias.defined() ? bias.data() : nullptr,
          packed ? packed->linear.get() : nullptr};
}

Tensor linear_inference(const Tensor& x, const Tensor& weight, const InferenceWeight& w, const Tensor& bias) {
  const int64_t in_f = weight.size(1), out_f = weight.size(0);
  const int64_t rows = rows_of(x);
  const QuantizedRows* q = w.int8();
  if (!x.device().is_cpu()) return linear_inference_gpu(x, weight, w, bias, rows, in_f, out_f);
  // On the CPU the bf16 copy feeds the matrix–vector kernel (small batches: memory-bound); larger
  // batches read the f32 weights, whose GEMM is faster there than a bf16 one.
  const bool use_bf16 = w.bf16().defined() && rows <= 16;
  // f32 weights: batches of rows read the packed copy (made on a weight's second batch) once there
  // is one; a single row (a generation step) the matrix–vector kernel, which streams W front to back,
  // where W's rows are at most kGemvF32MaxK long (kernels/cpu/gemv.h); the training path (the tape on)
  // and longer rows take `linear`
  const bool no_tape = !autograd::grad_enabled();
  const PackedCopy* packed_f32 = !q && !use_bf16 && rows >= 2 && no_tape ? w.packed(weight) : nullptr;
  const bool gemv_f32 = !q && !use_bf16 && rows == 1 && no_tape && in_f <= kernels::cpu::kGemvF32MaxK &&
                        weight.dtype() == DType::f32 && weight.is_contiguous() && x.dtype() == DType::f32 &&
                        (!bias.defined() || bias.dim() == 1);
  if (!q && !use_bf16 && !packed_f32 && !gemv_f32) return linear(x, weight, bias);
  if (use_bf16) check_copy_beside(x, w);
  QKV_CHECK(x.size(-1) == in_f, "linear_inference: input ", shape_str(x.shape()), " x weight ",
            shape_str(weight.shape()), ": in_features differ");
  QKV_CHECK(
      (gemv_f32 || w.rows() == out_f) && (!q || q->cols == in_f) && (!use_bf16 || w.bf16().shape() == weight.shape()),
      "linear_inference: the inference copy does not match weight ", shape_str(weight.shape()));
  const Device d = ops_detail::cpu_device_of("linear_inference", {&x, &weight, &bias});
  Tensor xc = dense(x);
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor out = Tensor::empty(out_shape, DType::f32, d);
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  if (q) {
    const kc::Int8Weights o = int8_operand(weight, w, bc, rows);
    QKV_DISPATCH_CPU("linear_inference", d,
                     k::linear_int8(rows, out_f, in_f, xc.data(), in_f, o.W8, o.ldw, o.scale, o.row_sums, o.bias,
                                    out.data(), out_f, o.packed));
    return out;
  }
  if (gemv_f32) {  // y = x Wᵀ (+ b), one row: x [1, in_f], weight [out_f, in_f] → out [1, out_f]
    QKV_CHECK(!bc.defined() || bc.size(0) == out_f, "linear_inference: bias ", shape_str(bias.shape()),
              " does not match weight ", shape_str(weight.shape()));
    QKV_DISPATCH_CPU("linear_inference", d,
                     k::gemv_f32(1, out_f, in_f, xc.data(), in_f, weight.data(), bc.defined() ? bc.data() : nullptr,
                                 out.data(), out_f));
    return out;
  }
  if (packed_f32) {  // y = x Wᵀ (+ b) through the packed copy, or `linear` where it has no kernel
    bool done = false;
    QKV_DISPATCH_CPU("linear_inference", d,
                     done = k::packed_linear_f32(*packed_f32->linear, rows, xc.data(),
                                                 bc.defined() ? bc.data() : nullptr, out.data()));
    return done ? out : linear(x, weight, bias);
  }
  QKV_CHECK(w.bf16().dtype() == DType::bf16 && w.bf16().is_contiguous(),
            "linear_inference: the bf16 copy must be dense bf16 ", shape_str(weight.shape()));
  QKV_DISPATCH_CPU("linear_inference", d,
               k::gemv_bf16(rows, out_f, in_f, xc.data(), in_f, w.bf16().data<bf16>(),
                            bc.defined() ? bc.data() : nullptr, out.data(), out_f));
  return out;
}

// y = log_softmax(x Wᵀ + b) over the last dim: on int8 rows one kernel, each row's log-softmax taken
// as its logits are written.
Tensor linear_log_softmax_inference(const Tensor& x, const Tensor& weight, const InferenceWeight& w,
                                    const Tensor& bias) {
  const bool fused = w.int8() && x.device().is_cpu() && weight.dim() == 2 && x.dim() >= 1 &&
                     x.size(-1) == weight.size(1) && w.rows() == weight.size(0) && w.int8()->cols == weight.size(1);
  if (!fused) {
    Tensor logits = linear_inference(x, weight, w, bias);
    return logits.requires_grad() ? log_softmax(logits, -1) : log_softmax_(logits);
  }
  QKV_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "linear_log_softmax_inference: bias ",
            shape_str(bias.shape()), " does not match weight ", shape_str(weight.shape()));
  const Device d = ops_detail::cpu_device_of("linear_log_softmax_inference", {&x, &weight, &bias});
  const int64_t rows = rows_of(x);
  Tensor xc = dense(x), bc = bias.defined() ? bias.contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  Tensor out = Tensor::empty(out_shape, DType::f32, d);  // [..., N]
  const kc::Int8Weights o = int8_operand(weight, w, bc, rows);
  QKV_DISPATCH_CPU("linear_log_softmax_inference", d, k::linear_log_softmax_int8(rows, xc.data(), o, out.data()));
  return out;
}

// h = act(x W₁ᵀ + b₁), y = h W₂ᵀ + b₂. With int8 rows for both weights on the CPU, one kernel: h is
// quantized for the second product in the first one's epilogue, row by row, never written as f32.
Tensor feed_forward_inference(const Tensor& x, const Tensor& w1, const InferenceWeight& iw1, const Tensor& b1,
                              const std::string& activation, const Tensor& w2, const InferenceWeight& iw2,
                              const Tensor& b2) {
  static constexpr std::pair<const char*, kc::FfnActivation> kActivations[] = {
      {"relu", kc::FfnActivation::relu}, {"gelu", kc::FfnActivation::gelu},
      {"gelu_tanh", kc::FfnActivation::gelu_tanh}, {"silu", kc::FfnActivation::silu}};
  const auto* act = std::find_if(std::begin(kActivations), std::end(kActivations),
                                 [&](const auto& a) { return activation == a.first; });
  QKV_CHECK(act != std::end(kActivations), "feed_forward_inference: activation must be relu, gelu, gelu_tanh or silu, got \"",
            activation, "\"");
  QKV_CHECK(w1.dim() == 2 && w2.dim() == 2 && w2.size(1) == w1.size(0), "feed_forward_inference: weights ",
            shape_str(w1.shape()), " and ", shape_str(w2.shape()), " do not chain ([H, K] then [N, H])");
  const int64_t rows = rows_of(x);
  const bool fused = iw1.int8() && iw2.int8() && x.device().is_cpu() && x.dim() >= 1 && x.size(-1) == w1.size(1) &&
                     iw1.rows() == w1.size(0) && iw1.int8()->cols == w1.size(1) && iw2.rows() == w2.size(0) &&
                     iw2.int8()->cols == w2.size(1);
  if (!fused) {
    Tensor h = linear_inference(x, w1, iw1, b1);
    switch (act->second) {
      case kc::FfnActivation::relu: h = relu(h); break;
      case kc::FfnActivation::gelu: h = gelu(h, "none"); break;
      case kc::FfnActivation::gelu_tanh: h = gelu(h, "tanh"); break;
      case kc::FfnActivation::silu: h = silu(h); break;
    }
    return linear_inference(h, w2, iw2, b2);
  }
  QKV_CHECK((!b1.defined() || (b1.dim() == 1 && b1.size(0) == w1.size(0))) &&
                (!b2.defined() || (b2.dim() == 1 && b2.size(0) == w2.size(0))),
            "feed_forward_inference: biases ", shape_str(b1.shape()), " and ", shape_str(b2.shape()),
            " do not match weights ", shape_str(w1.shape()), " and ", shape_str(w2.shape()));
  const Device d = ops_detail::cpu_device_of("feed_forward_inference", {&x, &w1, &b1, &w2, &b2});
  Tensor xc = dense(x);
  Tensor b1c = b1.defined() ? b1.contiguous() : Tensor(), b2c = b2.defined() ? b2.contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = w2.size(0);
  Tensor out = Tensor::empty(out_shape, DType::f32, d);  // [..., N]
  const kc::Int8Weights l1 = int8_operand(w1, iw1, b1c, rows), l2 = int8_operand(w2, iw2, b2c, rows);
  // the hidden layer's sums (then its f32 rows) and its quantized rows, [rows, H] each
  Tensor hidden = Tensor::empty({rows, w1.size(0)}, DType::i32, d), hq = Tensor::empty({rows, w1.size(0)}, DType::i8, d);
  QKV_DISPATCH_CPU("feed_forward_inference", d,
                   k::feed_forward_int8(rows, xc.data(), l1, act->second, l2, out.data(), hidden.data<int32_t>(),
                                        reinterpret_cast<uint8_t*>(hq.data<int8_t>())));
  return out;
}

}  // namespace qkv
