// linear_cross_entropy (ops/loss.h): the output layer's product and cross-entropy a chunk of rows at a
// time, the gradients made as each chunk's logits are (Liger-Kernel's fused linear cross-entropy). For
// a chunk of n rows x_c [n, d] (y_c its targets):
//   logits_c = x_c Wᵀ + b                                                  [n, C]
//   lse, ℓ   = cross_entropy_forward(logits_c)                             [n], [n]
// and where a gradient is wanted, for a loss gradient of 1 (written over logits_c):
//   dlogits_c = (softmax(logits_c) − ε/C − (1 − ε) onehot(y_c)) / divisor  [n, C]
//   dx_c = dlogits_c W        dW += dlogits_cᵀ x_c        db += Σ_rows dlogits_c
// divisor: the count of targets ≠ ignore_index ("mean") or 1 ("sum") — the targets' alone, so found
// before the first chunk. The backward: dx, dW, db times the loss's gradient g (a scalar tensor).
#include <algorithm>
#include <memory>

#include "qkv/ops/loss.h"

#include "dispatch.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/autocast.h"

namespace qkv {

using autograd::needs_grad;
using autograd::record;
using ops_detail::device_of;

namespace {

// The rows a chunk takes: as many as make its logits no larger than x (N × d) or 2²³ elements (32 MB),
// and at least 512, a multiple of 64 — each chunk's three products stream W (and dW) through once more,
// which fewer rows do not amortize (docs/BENCHMARKS.md: at GPT-2's head, 31 rows a chunk took 2.2× the
// unfused time; at the translation Transformer's, 128 rows 1.2×, 512 1.04×, 1,024 1.0×).
int64_t rows_a_chunk(int64_t N, int64_t d, int64_t C, int64_t asked) {
  const int64_t most = std::max<int64_t>(N, 1);
  if (asked > 0) return std::min(asked, most);
  const int64_t budget = std::max<int64_t>(N * d, int64_t{1} << 23);
  const int64_t rows = std::max<int64_t>(budget / std::max<int64_t>(C, 1), 512);
  return std::min((rows + 63) / 64 * 64, most);
}

// The gradients the forward made, for a loss gradient of 1, until the backward scales them in place
// and hands them over (no second copy of dW, the size of the weight).
struct Made {
  Tensor dx, dw, db;
  bool handed_over = false;
};

}  // namespace

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target, const Tensor& bias,
                            int64_t ignore_index, float label_smoothing, const std::string& reduction,
                            int64_t chunk_rows) {
  QKV_CHECK(x.dim() == 2 && x.dtype() == DType::f32, "linear_cross_entropy: x must be f32 [N, d], got ", x.str());
  QKV_CHECK(weight.dim() == 2 && weight.dtype() == DType::f32 && weight.size(1) == x.size(1),
            "linear_cross_entropy: weight must be f32 [C, ", x.size(1), "], got ", weight.str());
  const int64_t N = x.size(0), K = x.size(1), C = weight.size(0);
  QKV_CHECK(target.dtype() == DType::i32 && target.dim() == 1 && target.size(0) == N,
            "linear_cross_entropy: target must be i32 [", N, "], got ", target.str());
  QKV_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == C && bias.dtype() == DType::f32),
            "linear_cross_entropy: bias must be f32 [", C, "], got ", bias.str());
  QKV_CHECK(label_smoothing >= 0.f && label_smoothing <= 1.f,
            "linear_cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  QKV_CHECK(reduction == "mean" || reduction == "sum", "linear_cross_entropy: reduction must be mean or sum, got ",
            reduction, " (for per-row losses: cross_entropy(linear(x, weight, bias), target, …, \"none\"))");
  QKV_CHECK(chunk_rows >= 0, "linear_cross_entropy: chunk_rows must be ≥ 0 (0: chosen), got ", chunk_rows);
  const Device d = device_of("linear_cross_entropy", {&x, &weight, &target, &bias});
  const bool in_bf16 = autocast_dtype() == AutocastDType::bf16;
  const Tensor xc = dense(x), w = dense(weight), y = dense(target), b = bias.defined() ? dense(bias) : Tensor();
  // Under Autocast(bf16), as linear: the step's copies where its scope lends them, else cast here.
  Tensor xb, wb;
  if (in_bf16) {
    xb = AutocastWeights::lent_copy(x), wb = AutocastWeights::scope_copy(weight);
    if (!xb.defined()) xb = xc.to(DType::bf16);
    if (!wb.defined()) wb = w.to(DType::bf16);
  }
  const int32_t* yp = y.data<int32_t>();
  QKV_DISPATCH("linear_cross_entropy", d, k::check_targets(yp, N, C, ignore_index));

  const bool mean = reduction == "mean", grad = needs_grad({x, weight, bias});
  const bool gx = grad && x.requires_grad(), gw = grad && weight.requires_grad(),
             gb = grad && bias.defined() && bias.requires_grad();
  Tensor per_row = Tensor::zeros({N}, DType::f32, d);
  Tensor out = Tensor::empty({}, DType::f32, d), divisor = Tensor::empty({1}, DType::f32, d);
  // the divisor first: the reduction of the (still zero) losses writes it from the targets alone
  QKV_DISPATCH("linear_cross_entropy", d,
               k::cross_entropy_reduce(per_row.data(), yp, N, ignore_index, mean, out.data(), divisor.data()));
  Tensor one;
  auto made = std::make_shared<Made>();  // the gradients for a loss gradient of 1
  Tensor &dx = made->dx, &dw = made->dw, &db = made->db;
  if (grad) {
    one = Tensor::empty({1}, DType::f32, d);
    one.fill_(1.f);
    if (gx) dx = Tensor::empty({N, K}, DType::f32, d);
    // (with rows, the first chunk writes dW and db; without, they are zero)
    if (gw) dw = N > 0 ? Tensor::empty({C, K}, DType::f32, d) : Tensor::zeros({C, K}, DType::f32, d);
    if (gb) db = Tensor::zeros({C}, DType::f32, d);
  }

  const int64_t rows = rows_a_chunk(N, K, C, chunk_rows);
  Tensor logits = Tensor::empty({rows, C}, DType::f32, d);                              // [rows, C]
  Tensor lse = Tensor::empty({rows}, DType::f32, d);                                    // the chunk's rows'
  Tensor logits16 = grad && in_bf16 ? Tensor::empty({rows, C}, DType::bf16, d) : Tensor();  // dlogits' bf16 copy
  float* lg = logits.data();
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    // logits_c = x_c Wᵀ + b   (b added as the product is written: linear's way)
    if (in_bf16 && b.defined())
      QKV_DISPATCH(
          "linear_cross_entropy", d,
          k::gemm_bf16_bias(false, true, n, C, K, xb.data<bf16>() + r0 * K, K, wb.data<bf16>(), K, b.data(), lg, C));
    else if (in_bf16)
      QKV_DISPATCH("linear_cross_entropy", d,
                   k::gemm_bf16(false, true, n, C, K, xb.data<bf16>() + r0 * K, K, wb.data<bf16>(), K, 0.f, lg, C));
    else if (b.defined())
      QKV_DISPATCH("linear_cross_entropy", d,
                   k::sgemm_bias(false, true, n, C, K, xc.data() + r0 * K, K, w.data(), K, b.data(), lg, C));
    else
      QKV_DISPATCH("linear_cross_entropy", d,
                   k::sgemm(false, true, n, C, K, 1.f, xc.data() + r0 * K, K, w.data(), K, 0.f, lg, C));
    QKV_DISPATCH("linear_cross_entropy", d, k::cross_entropy_forward(lg, yp + r0, n, C, label_smoothing, ignore_index,
                                                                     lse.data(), per_row.data() + r0));
    if (!grad) continue;
    // dlogits_c over logits_c (and its bf16 copy, for the products under bf16)
    bf16* lg16 = logits16.defined() ? logits16.data<bf16>() : nullptr;
    QKV_DISPATCH("linear_cross_entropy", d,
                 k::cross_entropy_backward(lg, yp + r0, lse.data(), one.data(), 0, divisor.data(), n, C,
                                           label_smoothing, ignore_index, lg, lg16));
    if (gx) {  // dx_c = dlogits_c W   [n, K]
      if (in_bf16)
        QKV_DISPATCH("linear_cross_entropy", d,
                     k::gemm_bf16(false, false, n, K, C, lg16, C, wb.data<bf16>(), K, 0.f, dx.data() + r0 * K, K));
      else
        QKV_DISPATCH("linear_cross_entropy", d,
                     k::sgemm(false, false, n, K, C, 1.f, lg, C, w.data(), K, 0.f, dx.data() + r0 * K, K));
    }
    if (gw) {  // dW += dlogits_cᵀ x_c   [C, K]
      const float acc = r0 == 0 ? 0.f : 1.f;
      if (in_bf16)
        QKV_DISPATCH("linear_cross_entropy", d, k::gemm_bf16(true, false, C, K, n, lg16, C,
                                                             xb.data<bf16>() + r0 * K, K, acc, dw.data(), K));
      else
        QKV_DISPATCH("linear_cross_entropy", d,
                     k::sgemm(true, false, C, K, n, 1.f, lg, C, xc.data() + r0 * K, K, acc, dw.data(), K));
    }
    if (gb) {  // db += Σ_rows dlogits_c   [C]
      NoGradGuard no_grad;
      Tensor sum = sum_to(logits.slice(0, 0, n), {C});
      if (r0 == 0)
        db = std::move(sum);
      else
        add_(db, sum);
    }
  }
  QKV_DISPATCH("linear_cross_entropy", d,
               k::cross_entropy_reduce(per_row.data(), yp, N, ignore_index, mean, out.data(), divisor.data()));
  return record(out, "linear_cross_entropy", {x, weight, target, bias}, [made](const Tensor& g) {
    // dx, dW, db times g, the loss's gradient (a scalar on its device), in place, then handed over
    QKV_CHECK(!made->handed_over, "linear_cross_entropy: a second backward through it (retain_graph): its gradients, "
              "made in the forward, went to the first; cross_entropy(linear(x, weight, bias), …) keeps what it needs");
    made->handed_over = true;
    for (Tensor* t : {&made->dx, &made->dw, &made->db})
      if (t->defined()) mul_(*t, g);
    return std::vector<Tensor>{std::move(made->dx), std::move(made->dw), Tensor(), std::move(made->db)};
  });
}

}  // namespace qkv
