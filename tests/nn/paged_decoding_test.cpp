// Many sequences in one step over a paged KV cache (nn/paged_kv_cache.h, ops/paged_attention.h):
// the pool's pages, and GPT's and Llama's step_paged against each sequence decoded alone with its
// own dense KV cache (step): three prompts of different lengths prefilled together — one of a single
// token; one whole and the third's first chunk fed from position 0 (attending over their own keys
// with the dense kernels); the third's second chunk through the pages beside the others' first
// decoding steps, or densely over its keys gathered from the pages — then decoded together, their
// pages scattered through the pool. The logits agree to rounding (the products see other rows
// beside them); a sequence that ends returns its pages, and the next one reuses them.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "qkv/nn/gpt.h"
#include "qkv/nn/init.h"
#include "qkv/nn/llama.h"
#include "testing.h"

namespace qkv {
namespace {

TEST(PagedKVCache, ReservesReleasesAndPlans) {
  nn::PagedKVCache c(2, 6, 4, 2, 8, 8);
  EXPECT_EQ(c.free_pages(), 6);
  EXPECT_EQ(c.bytes_per_token(), 2 * (2 * 8 + 2 * 8) * 4);
  nn::PagedSequence a, b;
  ASSERT_TRUE(c.reserve(a, 9));  // 3 pages
  EXPECT_EQ(a.pages, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(c.reserve(b, 13)) << "4 pages, 3 free";
  EXPECT_TRUE(b.pages.empty()) << "nothing taken";
  ASSERT_TRUE(c.reserve(b, 5));
  b.length = 3;
  const nn::PagedStep s = c.plan({&a, &b}, {2, 2});
  EXPECT_EQ(s.positions.to_vector(), (std::vector<float>{0, 1, 3, 4}));
  EXPECT_EQ(s.seq_len.to_vector(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(s.seq.to_vector(), (std::vector<float>{0, 0, 1, 1}));
  EXPECT_EQ(s.slots.to_vector(), (std::vector<float>{0, 1, 3 * 4 + 3, 4 * 4 + 0}));  // b's pages 3, 4
  EXPECT_EQ(s.block_table.shape(), (Shape{2, 3}));
  EXPECT_EQ(s.block_table.to_vector(), (std::vector<float>{0, 1, 2, 3, 4, -1}));
  EXPECT_EQ(s.last, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(s.fresh, (std::vector<std::pair<int64_t, int64_t>>{{0, 2}})) << "a's prompt, whole from position 0";
  EXPECT_EQ(s.paged_len.to_vector(), (std::vector<float>{0, 0, 4, 5})) << "its tokens skip the paged kernel";
  EXPECT_EQ(a.length, 2);
  EXPECT_EQ(b.length, 5);
  EXPECT_NE(testing::error_of([&] { c.plan({&b}, {4}); }).find("too few"), std::string::npos) << "b holds 8 slots, 5 used";
  c.release(a);
  EXPECT_EQ(c.free_pages(), 4);
  EXPECT_TRUE(a.pages.empty());
  nn::PagedSequence d;
  ASSERT_TRUE(c.reserve(d, 4));
  EXPECT_EQ(d.pages, (std::vector<int32_t>{0})) << "the last freed first";
}

// Prefix caching: a sequence's full pages, once published, are matched by a later sequence whose
// tokens begin with theirs — only whole pages, the longest run, never the page of its last token, and
// never a page whose tokens (or whose earlier pages' tokens) differ; released pages stay findable
// until their room is needed, the least recently released (a sequence's tail first) evicted first.
TEST(PagedKVCache, SharesPublishedPrefixPagesExactly) {
  nn::PagedKVCache c(1, 6, 4, 1, 8, 8);
  std::vector<int32_t> t(12);
  for (int i = 0; i < 12; ++i) t[static_cast<size_t>(i)] = i;
  nn::PagedSequence a;
  ASSERT_TRUE(c.reserve(a, 12));
  a.length = 10;  // pages 0 and 1 written whole, page 2 in part
  c.publish(a, t.data());
  EXPECT_EQ(c.cached_pages(), 2);
  EXPECT_EQ(a.shared, 2);

  nn::PagedSequence b, d, e, f;
  EXPECT_EQ(c.match_prefix(b, t.data(), 12), 8) << "both full pages (11 tokens may match: 2 pages)";
  EXPECT_EQ(b.pages, (std::vector<int32_t>{a.pages[0], a.pages[1]}));
  EXPECT_EQ(b.length, 8);
  EXPECT_EQ(c.match_prefix(d, t.data(), 8), 4) << "8 tokens: the second page holds the last, computed for its logits";
  std::vector<int32_t> other = t;
  other[5] = 99;  // the second page differs
  EXPECT_EQ(c.match_prefix(e, other.data(), 12), 4);
  other[1] = 99;  // and the first
  EXPECT_EQ(c.match_prefix(f, other.data(), 12), 0);
  EXPECT_TRUE(f.pages.empty());
  EXPECT_EQ(c.free_pages(), 3) << "shared pages are taken once";
  ASSERT_TRUE(c.reserve(b, 12));
  EXPECT_EQ(b.pages.size(), 3u) << "its own third page";
  EXPECT_NE(b.pages[2], a.pages[2]);

  // e publishes its own second page (other tokens): a second chain beside a's
  ASSERT_TRUE(c.reserve(e, 8));
  e.length = 8;
  c.publish(e, std::vector<int32_t>{0, 1, 2, 3, 4, 99, 6, 7}.data());
  EXPECT_EQ(c.cached_pages(), 3);
  nn::PagedSequence g;
  EXPECT_EQ(c.match_prefix(g, std::vector<int32_t>{0, 1, 2, 3, 4, 99, 6, 7, 8}.data(), 9), 8);
  EXPECT_EQ(g.pages[1], e.pages[1]);

  // a page equal to a cached one is left private, and so are the pages after it
  nn::PagedSequence h;
  ASSERT_TRUE(c.reserve(h, 4));
  h.length = 4;
  c.publish(h, t.data());
  EXPECT_FALSE(h.publishing);
  EXPECT_EQ(c.cached_pages(), 3);

  for (nn::PagedSequence* s : {&a, &b, &d, &e, &f, &g, &h}) c.release(*s);
  EXPECT_EQ(c.free_pages(), 6);
  EXPECT_EQ(c.cached_pages(), 3) << "released, still findable";
  nn::PagedSequence k;
  EXPECT_EQ(c.match_prefix(k, t.data(), 12), 8);
  c.release(k);
  // 3 pages not cached are reused first; the fourth evicts the least recently released cached page:
  // e's second (released before a's two, which k's release put last)
  nn::PagedSequence big;
  ASSERT_TRUE(c.reserve(big, 16));
  EXPECT_EQ(c.cached_pages(), 2);
  EXPECT_EQ(c.match_prefix(g, std::vector<int32_t>{0, 1, 2, 3, 4, 99, 6, 7, 8}.data(), 9), 4) << "e's second page is gone";
  c.release(g);
  ASSERT_TRUE(c.reserve(big, 20));  // one more: a's chain is evicted from its tail
  EXPECT_EQ(c.cached_pages(), 1);
  EXPECT_EQ(c.match_prefix(k, t.data(), 12), 4) << "its first page is left";
  c.release(k);
  c.release(big);
  EXPECT_EQ(c.free_pages(), 6);

  // a salt starts a chain of its own: found under that salt only
  nn::PagedSequence salted, plain, other_salt, same_salt;
  ASSERT_TRUE(c.reserve(salted, 8));
  salted.length = 8;
  std::vector<int32_t> u = {7, 7, 7, 7, 8, 8, 8, 8, 9};
  c.publish(salted, u.data(), "alice");
  EXPECT_EQ(salted.shared, 2);
  EXPECT_EQ(c.match_prefix(plain, u.data(), 9), 0);
  EXPECT_EQ(c.match_prefix(other_salt, u.data(), 9, "bob"), 0);
  EXPECT_EQ(c.match_prefix(same_salt, u.data(), 9, "alice"), 8);
  for (nn::PagedSequence* s : {&salted, &plain, &other_salt, &same_salt}) c.release(*s);
}

// The op checks every index it reads, naming it; no gradient is recorded.
TEST(PagedAttention, RefusesIndicesOutsideTheCacheAndGradients) {
  const Tensor q = Tensor::zeros({2, 2, 4}), kc = Tensor::zeros({2, 1, 4, 4}), vc = Tensor::zeros({2, 1, 4, 4});
  const Tensor table = Tensor::from_ints({0, 1}, {1, 2}), seq = Tensor::from_ints({0, 0}, {2});
  EXPECT_EQ(paged_attention(q, kc, vc, table, seq, Tensor::from_ints({3, 8}, {2})).shape(), (Shape{2, 2, 4}));
  auto err = [&](const Tensor& t, const Tensor& s, const Tensor& n) {
    return testing::error_of([&] { paged_attention(q, kc, vc, t, s, n); });
  };
  EXPECT_NE(err(Tensor::from_ints({0, 2}, {1, 2}), seq, Tensor::from_ints({3, 8}, {2})).find("block_table[0, 1] = 2"), std::string::npos);
  EXPECT_NE(err(Tensor::from_ints({0, -1}, {1, 2}), seq, Tensor::from_ints({3, 5}, {2})).find("block_table[0, 1] = -1"), std::string::npos);
  EXPECT_NE(err(table, Tensor::from_ints({0, 1}, {2}), Tensor::from_ints({3, 5}, {2})).find("seq[1] = 1"), std::string::npos);
  EXPECT_NE(err(table, seq, Tensor::from_ints({3, 9}, {2})).find("seq_len[1] = 9"), std::string::npos);
  EXPECT_NE(err(table, seq, Tensor::from_ints({-1, 2}, {2})).find("seq_len[0] = -1"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { paged_kv_write(kc, vc, Tensor::zeros({1, 1, 4}), Tensor::zeros({1, 1, 4}), Tensor::from_ints({8}, {1})); })
                .find("slots[0] = 8"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { paged_attention(q.clone().requires_grad_(), kc, vc, table, seq, Tensor::from_ints({3, 8}, {2})); })
                .find("no backward"),
            std::string::npos);
}

// The GPU's cascade plan, found on the host: which tokens share their first pages, laid out as the
// kernels read it (blocks {first, count, keys}, the tokens, each token's first own key); its inputs
// checked by name; none where no tokens share.
TEST(PagedAttention, PagedPrefixesFindsTheTokensSharingTheirFirstPages) {
  // rows 0, 1, 3 begin with pages 0 … 19 (320 keys at pages of 16), row 2 with its own; tokens of rows
  // 3, 0, 2, 1, 0 (two of row 0), lengths 330, 400, 500, 321, 399
  const int64_t width = 32;
  std::vector<int32_t> table(static_cast<size_t>(4 * width));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t p = 0; p < width; ++p)
      table[static_cast<size_t>(r * width + p)] = static_cast<int32_t>(r == 2 || p >= 20 ? 100 + r * width + p : p);
  const Tensor tb = Tensor::from_ints(table, {4, width}), seq = Tensor::from_ints({3, 0, 2, 1, 0}, {5}),
               len = Tensor::from_ints({330, 400, 500, 321, 399}, {5});
  const PagedPrefixes p = paged_prefixes(tb, seq, len, 16, 0, Device::cpu());
  ASSERT_EQ(p.blocks(), 1);
  EXPECT_EQ(p.tokens(), 4);
  EXPECT_EQ(p.max_keys(), 256);  // 320 keys, whole tiles of 128
  EXPECT_EQ(p.data().to_ints(), (std::vector<int32_t>{0, 4, 256, 0, 1, 3, 4, 256, 256, -1, 256, 256}));
  // a window hiding keys of the longer ones: tokens 0 and 3 still share
  EXPECT_EQ(paged_prefixes(tb, seq, len, 16, 350, Device::cpu()).tokens(), 2);
  EXPECT_TRUE(paged_prefixes(tb, seq, len, 16, 325, Device::cpu()).empty());
  // too short to share two tiles; one token
  EXPECT_TRUE(paged_prefixes(tb, seq, Tensor::from_ints({200, 250, 500, 255, 90}, {5}), 16, 0, Device::cpu()).empty());
  EXPECT_TRUE(paged_prefixes(tb, Tensor::from_ints({0}, {1}), Tensor::from_ints({400}, {1}), 16, 0, Device::cpu()).empty());
  // hostile plans: a row outside the table, a length past it, not the cpu's
  EXPECT_NE(testing::error_of([&] { paged_prefixes(tb, Tensor::from_ints({3, 0, 4, 1, 0}, {5}), len, 16, 0, Device::cpu()); })
                .find("seq[2] = 4"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { paged_prefixes(tb, seq, Tensor::from_ints({330, 400, 513, 321, 399}, {5}), 16, 0, Device::cpu()); })
                .find("seq_len[2] = 513"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { paged_prefixes(tb, seq, len, 0, 0, Device::cpu()); }).find("page_size"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { paged_prefixes(tb.to(DType::f32), seq, len, 16, 0, Device::cpu()); }).find("block_table"),
            std::string::npos);
}

TEST(PagedAttention, ABf16OrFp8CacheHoldsTheRoundedKeysAndAttendsAsAnF32CacheHoldingThem) {
  // 3 tokens written into pages 1 and 0 (slots 5, 6, 1) of a bf16 (or e4m3) cache and of an f32 one,
  // then two queries over them (sequence 0: its keys 0 … 2 in slots 5, 6 and — its page 1 — 1 … )
  for (DType dtype : {DType::bf16, DType::f8e4m3}) {
    SCOPED_TRACE(dtype_name(dtype));
    Generator g(3);
    Tensor k = Tensor::randn({3, 2, 8}, g), v = Tensor::randn({3, 2, 6}, g);
    const Tensor q = Tensor::randn({2, 4, 8}, g);
    if (dtype == DType::f8e4m3) {  // beyond e4m3's ±448 (saturated), and below its least normal 2⁻⁶
      k.data()[3] = 1000.f, k.data()[4] = -3e4f, v.data()[5] = 0.004f, v.data()[6] = -0.0011f;
    }
    const Tensor slots = Tensor::from_ints({5, 6, 1}, {3});
    Tensor kn = Tensor::zeros({2, 2, 4, 8}).to(dtype), vn = Tensor::zeros({2, 2, 4, 6}).to(dtype);
    Tensor k32 = Tensor::zeros({2, 2, 4, 8}), v32 = Tensor::zeros({2, 2, 4, 6});
    NoGradGuard no_grad;
    paged_kv_write(kn, vn, k, v, slots);
    paged_kv_write(k32, v32, k, v, slots);
    // each written element rounded to nearest even (dtype.h's f32_to_bf16, f32_to_f8e4m3), bit for bit
    auto rounded = [&](float x) {
      return dtype == DType::bf16 ? bf16_to_f32(f32_to_bf16(x)) : f8e4m3_to_f32(f32_to_f8e4m3(x));
    };
    for (const auto& [narrow, wide] : {std::pair{kn, k32}, std::pair{vn, v32}}) {
      const std::vector<float> w = wide.to_vector(), r = narrow.to(DType::f32).to_vector();
      for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(r[i], rounded(w[i])) << i << ": " << w[i];
    }
    EXPECT_EQ(kn.dtype(), dtype);
    // the attention: as over the f32 cache holding the rounded values, and not as over the unrounded ones
    const Tensor table = Tensor::from_ints({1, 0}, {1, 2}), seq = Tensor::from_ints({0, 0}, {2}),
                 len = Tensor::from_ints({2, 7}, {2});
    const Tensor got = paged_attention(q, kn, vn, table, seq, len);
    EXPECT_TENSOR_NEAR(got, paged_attention(q, kn.to(DType::f32), vn.to(DType::f32), table, seq, len), 1e-6);
    EXPECT_GT(testing::rel_error(got.to_vector(), paged_attention(q, k32, v32, table, seq, len).to_vector()), 1e-4);
    // a narrow cache beside an f32 one is refused, by name
    EXPECT_NE(testing::error_of([&] { paged_attention(q, kn, v32, table, seq, len); }).find("both f32, both bf16 or both f8e4m3"),
              std::string::npos);
  }
}

// Each sequence decoded alone (its own dense cache, step) against all together (step_paged); the
// pool's pages are handed out shuffled by a sequence taken and released first. A bf16 or e4m3 cache
// holds the keys and values rounded: its logits within `tol` of the dense f32 cache's.
template <class Net>
void expect_paged_equals_dense(const Net& net, int64_t vocab, int64_t dense_from, DType dtype = DType::f32,
                               double tol = 1e-4) {
  const std::vector<std::vector<int32_t>> prompts = {{3, 1, 4, 1, 5, 9, 2}, {6}, {5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6}};
  const std::vector<std::vector<int32_t>> next = {{2, 6, 5, 3}, {5, 8, 9, 7}, {2, 6, 4, 3}};  // fed after the prompts
  // alone: logits after the prompt, then after each next token
  std::vector<std::vector<Tensor>> alone(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto st = net.start_decoding();
    alone[i].push_back(net.step(Tensor::from_ints(prompts[i], {1, static_cast<int64_t>(prompts[i].size())}), st));
    for (int32_t id : next[i]) alone[i].push_back(net.step(Tensor::from_ints({id}, {1, 1}), st));
  }
  nn::PagedKVCache cache = net.make_paged_cache(16, 4, Device::cpu(), dtype);
  nn::PagedSequence spacer;  // takes pages 0 … 2, then gives them back: the sequences' pages interleave
  ASSERT_TRUE(cache.reserve(spacer, 12));
  std::vector<nn::PagedSequence> s(3);
  ASSERT_TRUE(cache.reserve(s[0], 11));
  cache.release(spacer);
  ASSERT_TRUE(cache.reserve(s[1], 5));
  ASSERT_TRUE(cache.reserve(s[2], 17));
  auto step = [&](const std::vector<size_t>& which, const std::vector<std::vector<int32_t>>& ids) {
    std::vector<nn::PagedSequence*> seqs;
    std::vector<int64_t> n;
    std::vector<int32_t> flat;
    for (size_t j = 0; j < which.size(); ++j) {
      seqs.push_back(&s[which[j]]);
      n.push_back(static_cast<int64_t>(ids[j].size()));
      flat.insert(flat.end(), ids[j].begin(), ids[j].end());
    }
    const nn::PagedStep p = cache.plan(seqs, n, dense_from);
    Tensor logits = net.step_paged(Tensor::from_ints(flat, {static_cast<int64_t>(flat.size())}), p, cache);
    EXPECT_EQ(logits.shape(), (Shape{static_cast<int64_t>(which.size()), vocab}));
    return logits;
  };
  auto prompt_part = [&](size_t i, size_t b, size_t e) {
    return std::vector<int32_t>(prompts[i].begin() + static_cast<std::ptrdiff_t>(b), prompts[i].begin() + static_cast<std::ptrdiff_t>(e));
  };
  // step 1: prompts 0 and 1 whole, prompt 2's first 5 tokens (its logits unused)
  Tensor l = step({0, 1, 2}, {prompts[0], prompts[1], prompt_part(2, 0, 5)});
  EXPECT_TENSOR_NEAR(l.select(0, 0).unsqueeze(0), alone[0][0], tol);
  EXPECT_TENSOR_NEAR(l.select(0, 1).unsqueeze(0), alone[1][0], tol);
  // step 2: 0 and 1 decode their first next token; 2's prompt ends
  l = step({0, 1, 2}, {{next[0][0]}, {next[1][0]}, prompt_part(2, 5, prompts[2].size())});
  EXPECT_TENSOR_NEAR(l.select(0, 0).unsqueeze(0), alone[0][1], tol);
  EXPECT_TENSOR_NEAR(l.select(0, 1).unsqueeze(0), alone[1][1], tol);
  EXPECT_TENSOR_NEAR(l.select(0, 2).unsqueeze(0), alone[2][0], tol);
  // steps 3 …: one token each, in another order
  for (size_t k = 1; k < 4; ++k) {
    SCOPED_TRACE(k);
    if (k == 3) {  // sequence 1 ends: its pages back to the pool; the others go on
      cache.release(s[1]);
      l = step({2, 0}, {{next[2][k - 1]}, {next[0][k]}});
      EXPECT_TENSOR_NEAR(l.select(0, 0).unsqueeze(0), alone[2][k], tol);
      EXPECT_TENSOR_NEAR(l.select(0, 1).unsqueeze(0), alone[0][k + 1], tol);
      continue;
    }
    l = step({2, 0, 1}, {{next[2][k - 1]}, {next[0][k]}, {next[1][k]}});
    EXPECT_TENSOR_NEAR(l.select(0, 0).unsqueeze(0), alone[2][k], tol);
    EXPECT_TENSOR_NEAR(l.select(0, 1).unsqueeze(0), alone[0][k + 1], tol);
    EXPECT_TENSOR_NEAR(l.select(0, 2).unsqueeze(0), alone[1][k + 1], tol);
  }
}

TEST(PagedDecoding, GptStepsTogetherAsAlone) {
  nn::GPTConfig c;
  c.vocab_size = 11, c.block_size = 32, c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.bias = true;
  Generator g(5);
  nn::GPT net(c, &g);
  net.eval();
  expect_paged_equals_dense(net, c.vocab_size, 32);  // prompt 2's second chunk (8 tokens) through the pages
  expect_paged_equals_dense(net, c.vocab_size, 8);   // … attending densely over its gathered keys
  expect_paged_equals_dense(net, c.vocab_size, 32, DType::bf16, 5e-3);  // a bf16 cache, both ways
  expect_paged_equals_dense(net, c.vocab_size, 8, DType::bf16, 5e-3);
  expect_paged_equals_dense(net, c.vocab_size, 32, DType::f8e4m3, 3e-2);  // e4m3: 3 fraction bits, not 7 (48 seen: median 1.8e-3, max 1.2e-2)
  expect_paged_equals_dense(net, c.vocab_size, 8, DType::f8e4m3, 3e-2);
}

// grouped-query attention, 4 query heads on 2; a sliding window; Qwen3's qk_norm; Gemma 3's form (every
// second layer global, the windowed ones on their own RoPE base, sandwich norms, tanh-GELU gate); Gemma
// 2's (its scores scaled by 1/√6 and soft-capped, its logits soft-capped)
TEST(PagedDecoding, LlamaStepsTogetherAsAlone) {
  for (const auto& [window, form] : std::vector<std::pair<int64_t, std::string>>{
           {0, "plain"}, {5, "plain"}, {0, "qk_norm"}, {5, "gemma"}, {5, "gemma2"}}) {
    SCOPED_TRACE(window);
    SCOPED_TRACE(form);
    nn::LlamaConfig c;
    c.vocab_size = 11, c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.block_size = 32, c.sliding_window = window;
    c.qkv_bias = true, c.qk_norm = form == "qk_norm" || form == "gemma";
    if (form == "gemma" || form == "gemma2") {
      c.embed_scale = true, c.sandwich_norms = true, c.hidden_act = nn::LlamaActivation::gelu_tanh;
      c.sliding_window_pattern = 2;
      if (form == "gemma")
        c.rope_local_theta = 100;
      else
        c.query_pre_attn_scalar = 6, c.attn_logit_softcapping = 0.5, c.final_logit_softcapping = 0.3;
    }
    Generator g(7);
    nn::Llama net(c, &g);
    for (auto& L : net.layers)  // qk_norm's γ away from 1
      for (Tensor* gamma : {&L->q_norm, &L->k_norm, &L->pre_feedforward_layernorm, &L->post_feedforward_layernorm})
        if (gamma->defined()) {
          Tensor t = gamma->detach();
          nn::init::normal_(t, g, 1.f, 0.3f);
        }
    net.eval();
    expect_paged_equals_dense(net, c.vocab_size, 32);
    expect_paged_equals_dense(net, c.vocab_size, 8);
    if (form == "gemma" || form == "gemma2")
      continue;  // (the rounded caches' own error is the other forms' to bound: the
                 // sandwich's norms rescale each branch's small rounding to unit size)
    expect_paged_equals_dense(net, c.vocab_size, 8, DType::bf16, 5e-3);
    expect_paged_equals_dense(net, c.vocab_size, 8, DType::f8e4m3, 3e-2);
  }
}

}  // namespace
}  // namespace qkv
