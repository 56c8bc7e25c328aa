// GRU and LSTM against torch.nn.GRU / torch.nn.LSTM (tests/golden/rnn.json, written by
// tests/golden/make_rnn_golden.py): outputs, final states and every gradient — input, initial
// states, each parameter by its PyTorch name — at ≤ 1e-5, for uni- and bidirectional layers, one and
// two layers, batch-first and sequence-first, with and without biases, and ragged lengths
// (PyTorch's pack_padded_sequence), and LSTM(…, proj_size) (its weight_hr_l{k} loaded from torch's
// state_dict). Finite differences check the fused time loops themselves.
#include <gtest/gtest.h>

#include <map>

#include "golden_util.h"
#include "qkv/nn/alignment.h"
#include "qkv/nn/rnn.h"
#include "qkv/nn/rnn_seq2seq.h"
#include "qkv/ops.h"
#include "testing.h"

namespace qkv::golden {
namespace {

TEST(RnnGolden, GruAndLstmMatchPyTorch) {
  const json& file = golden_file("rnn.json");
  ASSERT_GE(file.at("cases").size(), 8u);
  int projected = 0;
  for (const json& c : file.at("cases")) {
    if (c.at("kind") == "alignment") continue;  // AlignmentMatchesThePyTorchFormula
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    const json& o = c.at("options");
    nn::RNNOptions opt;
    opt.input_size = o.at("input_size"), opt.hidden_size = o.at("hidden_size"), opt.num_layers = o.at("num_layers");
    opt.bidirectional = o.at("bidirectional"), opt.batch_first = o.at("batch_first"), opt.bias = o.at("bias");
    opt.proj_size = o.value("proj_size", int64_t{0});
    projected += opt.proj_size > 0;
    const bool lstm = c.at("kind") == "lstm";
    std::unique_ptr<nn::RecurrentBase> m;
    if (lstm) m = std::make_unique<nn::LSTM>(opt);
    else m = std::make_unique<nn::GRU>(opt);
    std::map<std::string, Tensor> state;
    for (const auto& [name, t] : c.at("parameters").items()) state[name] = json_tensor(t);
    m->load_state_dict(state);  // strict: the names are PyTorch's
    TensorMap in;
    for (const auto& [name, t] : c.at("inputs").items()) in[name] = json_tensor(t).requires_grad_();
    std::vector<int64_t> lengths;
    if (!c.at("lengths").is_null()) lengths = c.at("lengths").get<std::vector<int64_t>>();
    auto at = [&](const char* k) { return in.count(k) ? in.at(k) : Tensor(); };
    TensorMap out;
    if (lstm) {
      auto r = static_cast<nn::LSTM&>(*m).forward(at("input"), at("h0"), at("c0"), lengths);
      out = {{"output", r.output}, {"h_n", r.h_n}, {"c_n", r.c_n}};
    } else {
      auto r = static_cast<nn::GRU&>(*m).forward(at("input"), at("h0"), lengths);
      out = {{"output", r.output}, {"h_n", r.h_n}};
    }
    Tensor loss = Tensor::scalar(0.f);
    for (const auto& [name, t] : c.at("outputs").items()) {
      EXPECT_TRUE(all_close("output " + name, out.at(name), t));
      loss = loss + sum(out.at(name) * json_tensor(c.at("grad_outputs").at(name)));
    }
    loss.backward();
    std::map<std::string, Tensor> params;
    for (auto& [name, p] : m->named_parameters()) params[name] = p;
    for (const auto& [name, g] : c.at("grads").items()) {
      const Tensor& x = in.count(name) ? in.at(name) : params.at(name);
      EXPECT_TRUE(grad_close("grad " + name, x.grad(), g));
    }
  }
  EXPECT_EQ(projected, 4);  // the lstm_proj_* cases
}

TEST(RnnGolden, AlignmentMatchesThePyTorchFormula) {
  int seen = 0;
  for (const json& c : golden_file("rnn.json").at("cases")) {
    if (c.at("kind") != "alignment") continue;
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    ++seen;
    const auto dims = c.at("dims").get<std::vector<int64_t>>();
    nn::Alignment a(parse_enum<nn::AlignmentScore>(c.at("score").get<std::string>()), dims[0], dims[1], dims[2]);
    std::map<std::string, Tensor> state;
    for (const auto& [name, t] : c.at("parameters").items()) state[name] = json_tensor(t);
    a.load_state_dict(state);
    Tensor q = json_tensor(c.at("inputs").at("query")).requires_grad_(), k = json_tensor(c.at("inputs").at("keys")).requires_grad_();
    std::vector<bool> m;
    for (const auto& row : c.at("mask"))
      for (int v : row) m.push_back(v != 0);
    const Tensor mask = Tensor::from_bools(m, {k.size(0), 1, k.size(1)});
    auto r = a.forward(q, k, a.project_keys(k), mask);
    EXPECT_TRUE(all_close("context", r.context, c.at("outputs").at("context")));
    EXPECT_TRUE(all_close("weights", r.weights, c.at("outputs").at("weights")));
    (sum(r.context * json_tensor(c.at("grad_outputs").at("context"))) +
     sum(r.weights * json_tensor(c.at("grad_outputs").at("weights"))))
        .backward();
    std::map<std::string, Tensor> params;
    for (auto& [name, p] : a.named_parameters()) params[name] = p;
    for (const auto& [name, g] : c.at("grads").items()) {
      const Tensor& x = name == "query" ? q : name == "keys" ? k : params.at(name);
      EXPECT_TRUE(grad_close("grad " + name, x.grad(), g));
    }
  }
  EXPECT_EQ(seen, 4);
}

// Luong's scaled score: scale · qᵀ W k is the unscaled score of the weight scale · W, forward and in
// the query's gradient; and the scale reaches the model (rnn-attention's scaled_score, on by default).
TEST(RnnGolden, ScaledGeneralScoreIsTheUnscaledOfAScaledWeight) {
  Generator g(5);
  nn::Alignment scaled(nn::AlignmentScore::general, 4, 6, 0, &g), plain(nn::AlignmentScore::general, 4, 6, 0, &g);
  scaled.scale = 0.5f;
  plain.load_state_dict({{"weight", scaled.weight.detach() * 0.5f}});
  Tensor q = Tensor::randn({2, 3, 4}, g).requires_grad_(), k = Tensor::randn({2, 5, 6}, g);
  Tensor q2 = q.detach().clone().requires_grad_();
  const auto a = scaled.forward(q, k, scaled.project_keys(k), Tensor());
  const auto b = plain.forward(q2, k, plain.project_keys(k), Tensor());
  EXPECT_TENSOR_NEAR(a.weights, b.weights, 1e-6);
  sum(a.context * a.context).backward();
  sum(b.context * b.context).backward();
  EXPECT_TENSOR_NEAR(q.grad(), q2.grad(), 1e-5);
  nn::RNNSeq2SeqConfig c;
  c.vocab_size = 20, c.embedding_dim = 8, c.hidden_size = 16, c.attention = nn::RecurrentAttention::general;
  EXPECT_FLOAT_EQ(nn::RNNSeq2Seq(c).attention->scale, 0.25f);
  c.scaled_score = false;
  EXPECT_FLOAT_EQ(nn::RNNSeq2Seq(c).attention->scale, 1.f);
}

// The fused loops' backward rules by central differences: every input of gru_scan and lstm_scan,
// forward and reverse, with ragged lengths (a row of length 0 included).
TEST(RnnScan, GradientsByFiniteDifferences) {
  const std::vector<int64_t> lengths = {4, 1, 0, 3};
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    Tensor x = testing::param({4, 4, 9}, 41), h0 = testing::param({4, 3}, 42), w = testing::param({9, 3}, 43, 0.5f),
           b = testing::param({9}, 44);
    EXPECT_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          auto r = gru_scan(in[0], in[1], in[2], in[3], lengths, reverse);
          return r[0].sum() + mul(r[1], 0.7f).sum();
        },
        (std::vector<Tensor>{x, h0, w, b}));
    Tensor xl = testing::param({4, 4, 12}, 45), c0 = testing::param({4, 3}, 46), wl = testing::param({12, 3}, 47, 0.5f),
           bl = testing::param({12}, 48);
    EXPECT_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          auto r = lstm_scan(in[0], in[1], in[2], in[3], in[4], lengths, reverse);
          return r[0].sum() + mul(r[1], 0.7f).sum() + mul(r[2], -0.4f).sum();
        },
        (std::vector<Tensor>{xl, h0, c0, wl, bl}));
    // the projected LSTM (H = 3, P = 2): h0 [B, P], w_hh [4H, P], w_hr [P, H]
    Tensor hp = testing::param({4, 2}, 49), wp = testing::param({12, 2}, 50, 0.5f), wr = testing::param({2, 3}, 51, 0.5f);
    EXPECT_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          auto r = lstm_proj_scan(in[0], in[1], in[2], in[3], in[4], in[5], lengths, reverse);
          return r[0].sum() + mul(r[1], 0.7f).sum() + mul(r[2], -0.4f).sum();
        },
        (std::vector<Tensor>{xl, hp, c0, wp, bl, wr}));
    EXPECT_GRADCHECK(  // no bias, the full lengths
        [&](const std::vector<Tensor>& in) {
          auto r = lstm_proj_scan(in[0], in[1], in[2], in[3], Tensor(), in[4], {}, reverse);
          return mul(r[0], r[0]).sum() + mul(r[1], 0.3f).sum() + mul(r[2], 0.9f).sum();
        },
        (std::vector<Tensor>{xl, hp, c0, wp, wr}));
  }
}

// proj_size: torch's shapes and names, its refusals, the P = 0 module unchanged, the loop's shape
// checks, and on a GPU the CPU's outputs (the scan itself: Cuda.RecurrentScansMatchTheCpu).
TEST(RnnScan, ProjectedLstmShapesAndRefusals) {
  Generator g(7);
  nn::RNNOptions o;
  o.input_size = 5, o.hidden_size = 6, o.num_layers = 2, o.bidirectional = true, o.proj_size = 3;
  nn::LSTM lstm(o, &g);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, p] : lstm.named_parameters()) shapes[name] = p.shape();
  EXPECT_EQ(shapes.size(), 20u);
  EXPECT_EQ(shapes.at("weight_ih_l0"), (Shape{24, 5}));
  EXPECT_EQ(shapes.at("weight_hh_l0"), (Shape{24, 3}));
  EXPECT_EQ(shapes.at("weight_hr_l0_reverse"), (Shape{3, 6}));
  EXPECT_EQ(shapes.at("weight_ih_l1"), (Shape{24, 6}));  // P · directions
  Tensor x = Tensor::randn({4, 2, 5}, g);
  auto r = lstm.forward(x, Tensor::randn({4, 2, 3}, g), Tensor::randn({4, 2, 6}, g));
  EXPECT_EQ(r.output.shape(), (Shape{4, 2, 6}));
  EXPECT_EQ(r.h_n.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(r.c_n.shape(), (Shape{4, 2, 6}));
  EXPECT_NE(testing::error_of([&] { lstm.forward(x, Tensor::zeros({4, 2, 6}), Tensor()); }).find("initial state must be [4, 2, 3]"),
            std::string::npos);
  nn::RNNOptions bad = o;
  bad.proj_size = 6;
  EXPECT_NE(testing::error_of([&] { nn::LSTM l(bad); }).find("proj_size 6"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { nn::GRU l(o); }).find("LSTM only"), std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              lstm_proj_scan(Tensor::zeros({2, 3, 24}), Tensor::zeros({2, 3}), Tensor::zeros({2, 6}),
                             Tensor::zeros({24, 6}), Tensor(), Tensor::zeros({3, 6}));
            }).find("w_hh must be f32 [24, 3]"),
            std::string::npos);
  // P = 0 is the plain LSTM: no weight_hr, w_hh [4H, H]
  o.proj_size = 0;
  nn::LSTM plain(o, &g);
  EXPECT_EQ(plain.named_parameters().size(), 16u);
  if (device_available(Device::cuda(0))) {  // the module on a GPU gives the CPU's outputs (TF32 products)
    const auto want = lstm.forward(x, Tensor(), Tensor(), {4, 2});
    lstm.to(Device::cuda(0));
    const auto got = lstm.forward(x.to(Device::cuda(0)), Tensor(), Tensor(), {4, 2});
    EXPECT_TENSOR_NEAR(got.output.to(Device::cpu()), want.output, 2e-3);
    EXPECT_TENSOR_NEAR(got.h_n.to(Device::cpu()), want.h_n, 2e-3);
    EXPECT_TENSOR_NEAR(got.c_n.to(Device::cpu()), want.c_n, 2e-3);
  }
}

TEST(RnnScan, PaddingStaysZeroAndStatesStopAtEachLength) {
  Generator g(3);
  nn::RNNOptions o;
  o.input_size = 3, o.hidden_size = 4, o.batch_first = true, o.bidirectional = true;
  nn::GRU gru(o, &g);
  Tensor x = Tensor::randn({2, 5, 3}, g);
  auto ragged = gru.forward(x, Tensor(), {5, 2});
  // the second row alone, two steps long, gives the same outputs and final states
  auto alone = gru.forward(x.slice(0, 1, 2).slice(1, 0, 2));
  EXPECT_TENSOR_NEAR(ragged.output.slice(0, 1, 2).slice(1, 0, 2), alone.output, 1e-6);
  EXPECT_TENSOR_NEAR(ragged.h_n.slice(1, 1, 2), alone.h_n, 1e-6);
  for (float v : ragged.output.slice(0, 1, 2).slice(1, 2, 5).contiguous().to_vector()) EXPECT_EQ(v, 0.f);
  EXPECT_NE(testing::error_of([&] { gru.forward(x, Tensor(), {6, 1}); }).find("length 6"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { gru.forward(x.slice(2, 0, 2)); }).find("input must be"), std::string::npos);
}

}  // namespace
}  // namespace qkv::golden
