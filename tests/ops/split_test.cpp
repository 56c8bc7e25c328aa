// split's backward, and attention's gradients for the pieces of one projection: when the pieces'
// gradients arrive as the pieces of one buffer (attention writes dq, dk, dv so for q, k, v split off
// MultiheadAttention's in-projection), split hands that buffer on as the input's gradient instead of
// gathering a copy — with the values the gathering gives.
#include <gtest/gtest.h>

#include "qkv/autograd/node.h"
#include "qkv/ops.h"
#include "testing.h"

namespace qkv {
namespace {

// y = probe(pieces): an op whose backward hands each piece `grads[i]`.
Tensor probe(const std::vector<Tensor>& pieces, std::vector<Tensor> grads) {
  return autograd::record(Tensor::zeros({1}), "probe", pieces,
                          [grads](const Tensor&) { return grads; });
}

TEST(SplitBackward, GradientsAlreadyInOneBufferAreTakenAsTheyAre) {
  Generator g(3);
  const Tensor G = Tensor::randn({2, 3, 12}, g);
  // the pieces' gradients are G's own pieces: t's gradient is G itself, no copy
  {
    Tensor t = Tensor::randn({2, 3, 12}, g).requires_grad_();
    probe(split(t, 4, -1), {G.slice(2, 0, 4), G.slice(2, 4, 8), G.slice(2, 8, 12)}).backward();
    EXPECT_EQ(t.grad().data(), G.data()) << "the buffer was copied";
    EXPECT_EQ(t.grad().to_vector(), G.to_vector());
  }
  // out of order, or not all of one buffer: gathered into a fresh one, the same values as cat
  {
    Tensor t = Tensor::randn({2, 3, 12}, g).requires_grad_();
    probe(split(t, 4, -1), {G.slice(2, 4, 8), G.slice(2, 0, 4), G.slice(2, 8, 12)}).backward();
    EXPECT_NE(t.grad().data(), G.data());
    EXPECT_EQ(t.grad().to_vector(), cat({G.slice(2, 4, 8), G.slice(2, 0, 4), G.slice(2, 8, 12)}, 2).to_vector());
    Tensor u = Tensor::randn({2, 3, 12}, g).requires_grad_();
    const Tensor other = Tensor::randn({2, 3, 4}, g);
    probe(split(u, 4, -1), {G.slice(2, 0, 4), other, G.slice(2, 8, 12)}).backward();
    EXPECT_EQ(u.grad().to_vector(), cat({G.slice(2, 0, 4), other, G.slice(2, 8, 12)}, 2).to_vector());
  }
}

// Self-attention over q, k, v split off one projection (MultiheadAttention's way) gives the bits of
// the same attention over dense copies of them — forward, and the gradients of the input and the
// projection — in f32 and bf16, causal and with a padding mask.
TEST(SplitBackward, AttentionOverThePiecesOfOneProjectionGivesTheBitsOfDenseInputs) {
  const int64_t B = 2, L = 13, H = 3, D = 8, E = H * D;
  for (AttentionCompute dt : {AttentionCompute::f32, AttentionCompute::bf16}) {
    SCOPED_TRACE(enum_name(dt));
    Generator g(7);
    const Tensor x0 = Tensor::randn({B, L, E}, g), w0 = Tensor::randn({3 * E, E}, g, 0.f, 0.2f),
                 dy = Tensor::randn({B, H, L, D}, g);
    std::vector<float> out[2], dx[2], dw[2];
    for (int dense = 0; dense < 2; ++dense) {
      Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
      std::vector<Tensor> qkv = chunk(linear(x, w), 3, -1);
      std::vector<Tensor> heads;
      for (const Tensor& p : qkv) {
        Tensor h = p.view({B, L, H, D}).transpose(1, 2);
        heads.push_back(dense ? h.contiguous() : h);
      }
      AttentionOptions opt;
      opt.is_causal = true;
      opt.compute_dtype = dt;
      Tensor y = scaled_dot_product_attention(heads[0], heads[1], heads[2], opt);
      y.backward(dy);
      out[dense] = y.to_vector(), dx[dense] = x.grad().to_vector(), dw[dense] = w.grad().to_vector();
    }
    EXPECT_EQ(out[0], out[1]);
    EXPECT_EQ(dx[0], dx[1]);
    EXPECT_EQ(dw[0], dw[1]);
  }
}

// Empty extents (an empty batch, no positions) take the same path without a view past the buffer.
TEST(SplitBackward, EmptyPiecesOfOneProjection) {
  const int64_t H = 2, D = 4, E = H * D;
  for (auto [B, L] : {std::pair<int64_t, int64_t>{0, 5}, {2, 0}}) {
    Tensor x = Tensor::zeros({B, L, E}).requires_grad_(), w = Tensor::ones({3 * E, E}).requires_grad_();
    std::vector<Tensor> qkv = chunk(linear(x, w), 3, -1);
    std::vector<Tensor> heads;
    for (const Tensor& p : qkv) heads.push_back(p.view({B, L, H, D}).transpose(1, 2));
    Tensor y = scaled_dot_product_attention(heads[0], heads[1], heads[2]);
    sum(y).backward();
    EXPECT_EQ(x.grad().shape(), (Shape{B, L, E}));
    EXPECT_EQ(w.grad().to_vector(), std::vector<float>(3 * E * E, 0.f));
  }
}

}  // namespace
}  // namespace qkv
