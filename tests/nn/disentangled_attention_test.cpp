// DeBERTa's disentangled attention (nn/disentangled_attention.h) inside nn::Bert, by finite
// differences: the gradient of a scalar of the token classifier's logits with respect to the relative
// embeddings, their LayerNorm, the projections that read them and the embeddings' projection — on 12
// tokens with 4 log buckets each way (m = 2: distances past 2 bucketed, the clamp at ±4 reached), both
// terms, c2p alone and p2c alone. (transformers' gradients of the same network: HfEncoders.
// DebertaGradientsEqualTransformers.)
#include <gtest/gtest.h>

#include "qkv/nn/bert.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"
#include "qkv/ops/gradcheck.h"
#include "testing.h"

namespace qkv::nn {
namespace {

BertConfig tiny_deberta(bool c2p, bool p2c) {
  BertConfig c;
  c.vocab_size = 30, c.hidden_size = 8, c.num_hidden_layers = 2, c.num_attention_heads = 2;
  c.intermediate_size = 12, c.max_position_embeddings = 16, c.type_vocab_size = 0, c.mlm_head = false;
  c.classifier = BertClassifier::token, c.num_labels = 3, c.labels = {"a", "b", "c"};
  c.embedding_size = 6, c.absolute_positions = false;
  c.relative_span = 4, c.position_buckets = 4, c.max_relative_positions = 8, c.c2p = c2p, c.p2c = p2c;
  c.norm_relative_embeddings = true;
  return c;
}

TEST(DisentangledAttention, GradientsMatchFiniteDifferences) {
  for (const auto& [c2p, p2c] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
    SCOPED_TRACE(::testing::Message() << "c2p " << c2p << " p2c " << p2c);
    Generator g(11);
    Bert m(tiny_deberta(c2p, p2c), &g);
    for (auto& [name, p] : m.named_parameters()) {  // spread beyond N(0, 0.02), so that every term counts
      Tensor t = p.detach();
      if (name.find("norm") == std::string::npos) init::normal_(t, g, 0.f, 0.4f);
    }
    const Tensor ids = Tensor::from_ints({3, 7, 1, 9, 4, 12, 5, 2, 8, 6, 11, 10}, {1, 12});
    const Tensor w = Tensor::from_vector({0.3f, -1.f, 0.7f}, {1, 1, 3});
    for (const std::string name : {"rel_embeddings.weight", "rel_embeddings_norm.weight", "layers.0.self_attn.in_proj_weight",
                                   "layers.1.self_attn.in_proj_bias", "embed_proj.weight"}) {
      SCOPED_TRACE(name);
      Tensor p;
      for (auto& [n, t] : m.named_parameters())
        if (n == name) p = t;
      ASSERT_TRUE(p.defined());
      autograd::GradcheckOptions o;
      o.eps = 1e-2, o.atol = 3e-3, o.rtol = 3e-2;
      auto r = autograd::gradcheck([&](const std::vector<Tensor>&) { return sum(mul(m.classify(ids), w)); }, {p}, o);
      EXPECT_TRUE(r.ok) << r.message;
    }
  }
}

// The positions' side alone: every distance of 12 tokens lands on δ(i, j) = clamp(bucket(i − j) + k),
// the rows it reads are those δ reaches, and the term's scale is 1/√(D·f).
TEST(DisentangledAttention, ScaleCountsTheTerms) {
  const Tensor rel = Tensor::zeros({8, 4});
  DisentangledOptions o;
  o.span = 4, o.position_buckets = 4, o.max_relative_positions = 8;
  EXPECT_FLOAT_EQ(DisentangledPositions(rel, 12, o).scale(16), 1.f / std::sqrt(48.f));
  o.p2c = false;
  EXPECT_FLOAT_EQ(DisentangledPositions(rel, 12, o).scale(16), 1.f / std::sqrt(32.f));
  EXPECT_THROW(DisentangledPositions(Tensor::zeros({6, 4}), 12, o), Error);  // not [2k, E]
}

}  // namespace
}  // namespace qkv::nn
