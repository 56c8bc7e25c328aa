// The op table: see op_table.h. Samples are drawn from fixed seeds (the gradcheck samples from the
// seeds the hand-written checks used), so every run sees the same values.
#include "op_table.h"

#include <cmath>
#include <optional>
#include <stdexcept>

namespace qkv::optable {
namespace {

// ---- inputs, params, samples ---------------------------------------------------------------------

Tensor randn(const Shape& s, uint64_t seed, float scale = 1.f) {
  Generator g(seed);
  return Tensor::randn(s, g, 0.f, scale);
}
Tensor uniform(const Shape& s, uint64_t seed, float low, float high) {
  Generator g(seed);
  return Tensor::rand(s, g, low, high);
}
Tensor bools(const Shape& s, uint64_t seed, float p_true = 0.5f) { return lt(uniform(s, seed, 0.f, 1.f), p_true); }

const Tensor& in(const TensorMap& m, const std::string& name) {
  auto it = m.find(name);
  if (it == m.end()) throw std::runtime_error("op table: no input \"" + name + "\"");
  return it->second;
}
Tensor opt(const TensorMap& m, const std::string& name) {
  auto it = m.find(name);
  return it == m.end() ? Tensor() : it->second;
}
TensorMap one(Tensor t) { return {{"out", std::move(t)}}; }
std::vector<Tensor> numbered(const TensorMap& m, const json& p) {  // x0, x1, … (p["n"] of them)
  std::vector<Tensor> xs;
  for (int64_t i = 0; i < p.at("n").get<int64_t>(); ++i) {
    std::string name = "x";  // (not "x" + to_string: GCC 12's -Wrestrict misfires on it)
    name += std::to_string(i);
    xs.push_back(in(m, name));
  }
  return xs;
}
float f32(const json& p, const char* k) { return p.at(k).get<float>(); }
int64_t i64(const json& p, const char* k) { return p.at(k).get<int64_t>(); }
Size2 size2(const json& v) {
  if (v.is_array()) return {v.at(0).get<int64_t>(), v.at(1).get<int64_t>()};
  return v.get<int64_t>();
}
std::optional<Size2> opt_size2(const json& p, const char* k) {
  if (!p.contains(k) || p.at(k).is_null()) return std::nullopt;
  return size2(p.at(k));
}

Sample S(std::string name, TensorMap inputs, json params = json::object()) {
  return Sample{std::move(name), std::move(inputs), std::move(params)};
}
Sample gpu_only(Sample s) {  // a larger shape: compared on the GPU, too big for finite differences
  s.gradcheck = false;
  return s;
}

// cos, sin [T, rot] of rotary embeddings: angle (start + t)·base^(−2j/rot), j = i mod rot/2
std::pair<Tensor, Tensor> rope_tables(int64_t T, int64_t rot, int64_t start, double base) {
  std::vector<float> c(static_cast<size_t>(T * rot)), s(c.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < rot; ++i) {
      const double ang = static_cast<double>(start + t) * std::pow(base, -2.0 * static_cast<double>(i % (rot / 2)) /
                                                                              static_cast<double>(rot));
      c[static_cast<size_t>(t * rot + i)] = static_cast<float>(std::cos(ang));
      s[static_cast<size_t>(t * rot + i)] = static_cast<float>(std::sin(ang));
    }
  return {Tensor::from_vector(c, {T, rot}), Tensor::from_vector(s, {T, rot})};
}
Sample rope_sample(std::string name, const Shape& x, int64_t rot, int64_t start, uint64_t seed) {
  auto [c, s] = rope_tables(x[2], rot, start, 10000.0);
  return S(std::move(name), {{"x", randn(x, seed)}, {"cos", c}, {"sin", s}});
}

// The GEMMs run on TF32 tensor cores on a GPU (10-bit products): ~3e-4 relative, as PyTorch's allow_tf32.
constexpr double kTf32 = 3e-3;

// ---- the entries ---------------------------------------------------------------------------------

using Run = std::function<TensorMap(const TensorMap&, const json&, Device)>;

OpInfo entry(std::string name, Run run, std::function<std::vector<Sample>()> samples,
             std::vector<std::string> differentiable) {
  OpInfo o;
  o.name = std::move(name);
  o.run = std::move(run);
  o.samples = std::move(samples);
  o.differentiable = std::move(differentiable);
  return o;
}

// x ∘ y with broadcasting
OpInfo binary(const std::string& name, Tensor (*fn)(const Tensor&, const Tensor&)) {
  const bool div = name == "div";
  return entry(
      name, [fn](const TensorMap& m, const json&, Device) { return one(fn(in(m, "a"), in(m, "b"))); },
      [div] {
        auto rhs = [div](const Shape& s, uint64_t seed) { return div ? uniform(s, seed, 1.f, 2.f) : randn(s, seed); };
        return std::vector<Sample>{S("bcast", {{"a", randn({2, 3, 4}, 1)}, {"b", rhs({3, 1}, 2)}}),
                                   gpu_only(S("gpu_bcast", {{"a", randn({3, 1, 33}, 10)}, {"b", rhs({5, 1}, 11)}})),
                                   gpu_only(S("gpu_same", {{"a", randn({3, 5, 33}, 12)}, {"b", rhs({3, 5, 33}, 13)}}))};
      },
      {"a", "b"});
}

// an elementwise function of one tensor; `gen` draws its inputs (positive ones for log and sqrt)
OpInfo unary(const std::string& name, Tensor (*fn)(const Tensor&), std::function<Tensor(const Shape&, uint64_t)> gen) {
  return entry(
      name, [fn](const TensorMap& m, const json&, Device) { return one(fn(in(m, "a"))); },
      [gen] {
        return std::vector<Sample>{S("3x4", {{"a", gen({3, 4}, 3)}}),
                                   gpu_only(S("gpu_17x9", {{"a", gen({17, 9}, 14)}})),
                                   gpu_only(S("gpu_odd", {{"a", gen({1001}, 30)}}))};
      },
      {"a"});
}
Tensor gen_randn(const Shape& s, uint64_t seed) { return randn(s, seed); }
Tensor gen_pos(const Shape& s, uint64_t seed) { return uniform(s, seed, 0.5f, 2.f); }

// x compared with a scalar: a boolean result, no gradient
OpInfo compare(const std::string& name, Tensor (*fn)(const Tensor&, float)) {
  return entry(
      name, [fn](const TensorMap& m, const json& p, Device) { return one(fn(in(m, "a"), f32(p, "scalar"))); },
      [] {
        Tensor ties = Tensor::from_vector({-1, 0, 1, 2, 1, 1, 0.5f, 3, -2, 1, 1, 0}, {3, 4});
        return std::vector<Sample>{S("ties", {{"a", ties}}, {{"scalar", 1.f}}),
                                   gpu_only(S("gpu_17x9", {{"a", randn({17, 9}, 14)}}, {{"scalar", 0.3f}}))};
      },
      {});
}

OpInfo logical(const std::string& name, Tensor (*fn)(const Tensor&, const Tensor&)) {
  return entry(
      name, [fn](const TensorMap& m, const json&, Device) { return one(fn(in(m, "a"), in(m, "b"))); },
      [] {
        return std::vector<Sample>{S("bcast", {{"a", bools({2, 1, 5}, 1)}, {"b", bools({3, 5}, 2)}}),
                                   gpu_only(S("gpu_17x9", {{"a", bools({17, 9}, 3)}, {"b", bools({17, 9}, 4)}}))};
      },
      {});
}

std::vector<OpInfo> build() {
  std::vector<OpInfo> t;

  // -- arithmetic
  t.push_back(binary("add", add));
  t.push_back(binary("sub", sub));
  t.push_back(binary("mul", mul));
  t.push_back(binary("div", div));
  for (const std::string name : {"mul_scalar", "add_scalar"}) {
    const bool is_mul = name == "mul_scalar";
    t.push_back(entry(
        name,
        [is_mul](const TensorMap& m, const json& p, Device) {
          return one(is_mul ? mul(in(m, "a"), f32(p, "scalar")) : add(in(m, "a"), f32(p, "scalar")));
        },
        [is_mul] {
          return std::vector<Sample>{S("2x3x4", {{"a", randn({2, 3, 4}, 1)}}, {{"scalar", is_mul ? 3.f : 1.f}}),
                                     gpu_only(S("gpu", {{"a", randn({7, 130}, 20)}}, {{"scalar", -0.5f}}))};
        },
        {"a"}));
  }
  t.push_back(unary("neg", neg, gen_randn));
  t.push_back(unary("exp", exp, gen_randn));
  t.push_back(unary("log", log, gen_pos));
  t.push_back(unary("tanh", tanh, gen_randn));
  t.push_back(unary("sigmoid", sigmoid, gen_randn));
  t.push_back(unary("sqrt", sqrt, gen_pos));

  // -- activations
  {
    OpInfo relu_op = unary("relu", relu, gen_randn);
    // with dropout_p: relu and its output's dropout in one pass (a Transformer FFN's hidden layer), the
    // mask drawn from a generator in the same state at every evaluation and on both devices
    relu_op.run = [](const TensorMap& m, const json& p, Device) {
      if (!p.contains("dropout_p") && !m.count("bias")) return one(relu(in(m, "a")));
      Generator g(p.value("seed", uint64_t{0}));  // with a bias: a linear layer's, added in the same pass
      return one(relu(in(m, "a"), p.contains("dropout_p") ? f32(p, "dropout_p") : 0.f, &g, opt(m, "bias")));
    };
    // finite differences: inputs away from the kink at 0
    relu_op.samples = [] {
      return std::vector<Sample>{
          S("away_from_0", {{"a", Tensor::from_vector({-1.5f, -0.5f, 0.3f, 1.2f, 2.f, -2.f}, {6})}}),
          S("dropout", {{"a", Tensor::from_vector({-1.5f, -0.5f, 0.3f, 1.2f, 2.f, -2.f, 0.7f, 1.1f}, {8})}},
            {{"dropout_p", 0.4f}, {"seed", 8}}),
          // x + bias away from 0 too: x [2, 4] and bias [4]
          S("bias_dropout", {{"a", Tensor::from_vector({-1.5f, -0.5f, 0.3f, 1.2f, 2.f, -2.f, 0.7f, 1.1f}, {2, 4})},
                             {"bias", Tensor::from_vector({0.25f, -0.15f, 0.1f, 0.35f}, {4})}},
            {{"dropout_p", 0.4f}, {"seed", 8}}),
          gpu_only(S("gpu_4x257", {{"a", randn({4, 257}, 31)}})),
          gpu_only(S("gpu_dropout", {{"a", randn({4, 257}, 32)}}, {{"dropout_p", 0.3f}, {"seed", 9}})),
          gpu_only(S("gpu_bias_dropout", {{"a", randn({4, 257}, 34)}, {"bias", randn({257}, 35)}},
                     {{"dropout_p", 0.3f}, {"seed", 9}}))};
    };
    relu_op.differentiable = {"a", "bias"};
    relu_op.cuda_tol = 0;  // gradients too: the bias's, both devices' column sums in kernels/column_strips.h's order
    t.push_back(relu_op);
  }
  t.push_back(entry(
      "gelu",
      [](const TensorMap& m, const json& p, Device) {
        const std::string approximate = p.at("approximate").get<std::string>();
        if (!p.contains("dropout_p") && !m.count("bias")) return one(gelu(in(m, "a"), approximate));
        // with dropout_p: the output dropped in the same pass; with a bias: a linear layer's, added there
        Generator g(p.value("seed", uint64_t{0}));
        return one(gelu(in(m, "a"), approximate, p.contains("dropout_p") ? f32(p, "dropout_p") : 0.f, &g,
                        opt(m, "bias")));
      },
      [] {
        std::vector<Sample> s;
        for (const char* approx : {"none", "tanh"}) {
          const std::string a = approx;
          s.push_back(S(a, {{"a", randn({3, 8}, 14)}}, {{"approximate", approx}}));
          s.push_back(S(a + "_dropout", {{"a", randn({3, 8}, 15)}}, {{"approximate", approx}, {"dropout_p", 0.3f}, {"seed", 3}}));
          s.push_back(gpu_only(S("gpu_" + a, {{"a", randn({1001}, 30, 3.f)}}, {{"approximate", approx}})));
          s.push_back(gpu_only(S("gpu_" + a + "_dropout", {{"a", randn({1001}, 33, 3.f)}},
                                 {{"approximate", approx}, {"dropout_p", 0.2f}, {"seed", 4}})));
          s.push_back(S(a + "_bias", {{"a", randn({3, 8}, 16)}, {"bias", randn({8}, 17)}}, {{"approximate", approx}}));
          s.push_back(S(a + "_bias_dropout", {{"a", randn({2, 3, 8}, 18)}, {"bias", randn({8}, 19)}},
                        {{"approximate", approx}, {"dropout_p", 0.3f}, {"seed", 5}}));
          s.push_back(gpu_only(S("gpu_" + a + "_bias", {{"a", randn({7, 143}, 36, 3.f)}, {"bias", randn({143}, 37)}},
                                 {{"approximate", approx}, {"dropout_p", 0.2f}, {"seed", 6}})));
        }
        return s;
      },
      {"a", "bias"}));
  t.push_back(unary("silu", silu, gen_randn));
  t.push_back(entry(
      "silu_mul", [](const TensorMap& m, const json&, Device) { return one(silu_mul(in(m, "gate"), in(m, "up"))); },
      [] {
        // past the vector loops' four registers, so both the vector body and the scalar tail run
        return std::vector<Sample>{S("3x5", {{"gate", randn({3, 5}, 21, 3.f)}, {"up", randn({3, 5}, 22)}}),
                                   S("2x83", {{"gate", randn({2, 83}, 23, 3.f)}, {"up", randn({2, 83}, 24)}}),
                                   gpu_only(S("gpu_odd", {{"gate", randn({1001}, 25, 3.f)}, {"up", randn({1001}, 26)}}))};
      },
      {"gate", "up"}));
  {
    // inference only: golden against PyTorch on gathered keys, compared on the GPU; no gradient
    OpInfo p = entry(
        "paged_attention",
        [](const TensorMap& m, const json& p, Device) {
          return one(paged_attention(in(m, "q"), in(m, "k_cache"), in(m, "v_cache"), in(m, "block_table"), in(m, "seq"),
                                     in(m, "seq_len"), std::nullopt, i64(p, "window"), nullptr,
                                     p.value("softcap", 0.0)));
        },
        [] {
          // 3 sequences of 9, 1 and 14 keys in 8 pages of 4 (shuffled), then a prompt's 9 causal queries
          const std::vector<int32_t> table = {6, 1, 4, -1, 0, -1, -1, -1, 7, 3, 2, 5};
          std::vector<int32_t> seq = {0, 1, 2}, len = {9, 1, 14};
          for (int32_t n = 1; n <= 9; ++n) seq.push_back(0), len.push_back(n);
          const auto T = static_cast<int64_t>(seq.size());
          auto sample = [&](const char* name, int64_t H, int64_t Hkv, int64_t D, int64_t window, uint64_t seed) {
            return S(name,
                     {{"q", randn({T, H, D}, seed)}, {"k_cache", randn({8, Hkv, 4, D}, seed + 1)},
                      {"v_cache", randn({8, Hkv, 4, D + 3}, seed + 2)}, {"block_table", Tensor::from_ints(table, {3, 4})},
                      {"seq", Tensor::from_ints(seq, {T})}, {"seq_len", Tensor::from_ints(len, {T})}},
                     {{"window", window}});
          };
          Sample capped = sample("softcap", 6, 2, 5, 4, 37);  // (Gemma 2's soft-capped scores)
          capped.params["softcap"] = 1.5;
          return std::vector<Sample>{sample("mha", 2, 2, 8, 0, 31), sample("gqa_window", 6, 2, 5, 4, 34), capped};
        },
        {});
    t.push_back(p);
  }
  {
    // the same generator state on every evaluation (and on both devices) draws the same mask
    OpInfo d = entry(
        "dropout",
        [](const TensorMap& m, const json& p, Device) {
          Generator g(p.at("seed").get<uint64_t>());
          return one(dropout(in(m, "a"), f32(p, "p"), true, &g));
        },
        [] {
          return std::vector<Sample>{S("4x5", {{"a", randn({4, 5}, 19)}}, {{"p", 0.3f}, {"seed", 42}}),
                                     gpu_only(S("gpu_4x257", {{"a", randn({4, 257}, 31)}}, {{"p", 0.3f}, {"seed", 99}}))};
        },
        {"a"});
    d.golden = false;  // random
    d.cuda_tol = 0;
    d.cuda_grad_tol = 2e-5;
    t.push_back(d);
  }

  // -- reductions
  for (const std::string name : {"sum", "mean"}) {
    const bool is_sum = name == "sum";
    OpInfo r = entry(
        name,
        [is_sum](const TensorMap& m, const json& p, Device) {
          const auto dims = p.at("dims").get<std::vector<int64_t>>();
          const bool keep = p.at("keepdim").get<bool>();
          return one(is_sum ? sum(in(m, "a"), dims, keep) : mean(in(m, "a"), dims, keep));
        },
        [is_sum] {
          auto s = [](std::string n, Shape shape, uint64_t seed, std::vector<int64_t> dims, bool keep) {
            return S(std::move(n), {{"a", randn(shape, seed)}}, {{"dims", dims}, {"keepdim", keep}});
          };
          if (is_sum)
            return std::vector<Sample>{s("all", {2, 3, 4}, 4, {}, false), s("d1_keep", {2, 3, 4}, 4, {1}, true),
                                       gpu_only(s("gpu_all", {7, 130, 3}, 20, {}, false)),
                                       gpu_only(s("gpu_d1", {7, 130, 3}, 20, {1}, false)),
                                       gpu_only(s("gpu_d02_keep", {7, 130, 3}, 20, {0, 2}, true))};
          return std::vector<Sample>{s("d02", {2, 3, 4}, 4, {0, 2}, false),
                                     gpu_only(s("gpu_d2", {7, 130, 3}, 20, {2}, false))};
        },
        {"a"});
    t.push_back(r);
  }

  // -- products
  {
    OpInfo mm = entry(
        "matmul", [](const TensorMap& m, const json&, Device) { return one(matmul(in(m, "a"), in(m, "b"))); },
        [] {
          return std::vector<Sample>{
              S("3d_2d", {{"a", randn({2, 3, 4}, 7)}, {"b", randn({4, 5}, 8)}}),
              S("batched", {{"a", randn({2, 3, 4}, 7)}, {"b", randn({2, 4, 5}, 9)}}),
              S("3d_vec", {{"a", randn({2, 3, 4}, 7)}, {"b", randn({4}, 10)}}),
              gpu_only(S("gpu_tails", {{"a", randn({2, 3, 37, 65}, 70)}, {"b", randn({65, 19}, 71)}})),
              gpu_only(S("gpu_bcast_batch", {{"a", randn({2, 3, 37, 19}, 72)}, {"b", randn({3, 19, 37}, 73)}}))};
        },
        {"a", "b"});
    mm.cuda_tol = kTf32;
    t.push_back(mm);
    OpInfo lin = entry(
        "linear",
        [](const TensorMap& m, const json&, Device) {
          return one(linear(in(m, "x"), in(m, "weight"), opt(m, "bias")));
        },
        [] {
          return std::vector<Sample>{
              S("bias", {{"x", randn({2, 3, 4}, 7)}, {"weight", randn({6, 4}, 11)}, {"bias", randn({6}, 12)}}),
              // no input features: y = b on every row (as torch's), and db sums the rows' gradients
              S("no_features", {{"x", randn({5, 0}, 13)}, {"weight", randn({3, 0}, 14)}, {"bias", randn({3}, 15)}}),
              gpu_only(S("gpu", {{"x", randn({5, 7, 96}, 74)}, {"weight", randn({130, 96}, 75, 0.1f)},
                                 {"bias", randn({130}, 76)}}))};
        },
        {"x", "weight", "bias"});
    lin.cuda_tol = kTf32;
    t.push_back(lin);
  }

  // -- softmax family
  for (const std::string name : {"softmax", "log_softmax"}) {
    const bool log_ = name == "log_softmax";
    OpInfo s = entry(
        name,
        [log_](const TensorMap& m, const json& p, Device) {
          return one(log_ ? log_softmax(in(m, "a"), i64(p, "dim")) : softmax(in(m, "a"), i64(p, "dim")));
        },
        [log_] {
          std::vector<Sample> v = {S("dim_last", {{"a", randn({3, 4, 5}, 13)}}, {{"dim", -1}}),
                                   S(log_ ? "dim0" : "dim1", {{"a", randn({3, 4, 5}, 13)}}, {{"dim", log_ ? 0 : 1}})};
          for (int64_t n : {1, 31, 1000, 4099})
            v.push_back(gpu_only(S("gpu_6x" + std::to_string(n), {{"a", randn({6, n}, 40 + n, 4.f)}}, {{"dim", -1}})));
          return v;
        },
        {"a"});
    s.cuda_grad_tol = 1e-4;
    t.push_back(s);
  }

  // -- normalization
  {
    OpInfo ln = entry(
        "layer_norm",
        [](const TensorMap& m, const json& p, Device) {
          return one(layer_norm(in(m, "x"), p.at("normalized_shape").get<Shape>(), opt(m, "weight"), opt(m, "bias"),
                                f32(p, "eps")));
        },
        [] {
          const json p = {{"normalized_shape", {8}}, {"eps", 1e-5}};
          return std::vector<Sample>{
              S("affine", {{"x", randn({3, 8}, 14)}, {"weight", randn({8}, 15)}, {"bias", randn({8}, 16)}}, p),
              S("plain", {{"x", randn({3, 8}, 14)}}, p),
              gpu_only(S("gpu", {{"x", randn({9, 3, 300}, 50, 2.f)}, {"weight", randn({300}, 51)}, {"bias", randn({300}, 52)}},
                         {{"normalized_shape", {300}}, {"eps", 1e-5}}))};
        },
        {"x", "weight", "bias"});
    ln.cuda_grad_tol = 1e-4;
    t.push_back(ln);
    OpInfo aln = entry(
        "add_layer_norm",
        [](const TensorMap& m, const json& p, Device) {
          // with dropout_p: the residual dropped in the same pass, the mask from a generator in the same
          // state at every evaluation and on both devices
          Generator g(p.value("seed", uint64_t{0}));
          return one(add_layer_norm(in(m, "x"), in(m, "residual"), p.at("normalized_shape").get<Shape>(),
                                    opt(m, "weight"), opt(m, "bias"), f32(p, "eps"), p.value("dropout_p", 0.f), &g));
        },
        [] {
          const json p = {{"normalized_shape", {8}}, {"eps", 1e-5}};
          json dropped = p, gpu = {{"normalized_shape", {300}}, {"eps", 1e-5}};
          dropped["dropout_p"] = 0.3f, dropped["seed"] = 6;
          json gpu_dropped = gpu;
          gpu_dropped["dropout_p"] = 0.2f, gpu_dropped["seed"] = 7;
          return std::vector<Sample>{
              S("affine", {{"x", randn({3, 8}, 17)}, {"residual", randn({3, 8}, 18)}, {"weight", randn({8}, 19)},
                           {"bias", randn({8}, 20)}}, p),
              S("plain", {{"x", randn({2, 3, 8}, 21)}, {"residual", randn({2, 3, 8}, 22)}}, p),
              S("dropout", {{"x", randn({3, 8}, 23)}, {"residual", randn({3, 8}, 24)}, {"weight", randn({8}, 25)}},
                dropped),
              gpu_only(S("gpu", {{"x", randn({9, 3, 300}, 53, 2.f)}, {"residual", randn({9, 3, 300}, 54)},
                                 {"weight", randn({300}, 55)}, {"bias", randn({300}, 56)}}, gpu)),
              gpu_only(S("gpu_dropout", {{"x", randn({9, 3, 300}, 57, 2.f)}, {"residual", randn({9, 3, 300}, 58)},
                                         {"weight", randn({300}, 59)}, {"bias", randn({300}, 60)}},
                         gpu_dropped))};
        },
        {"x", "residual", "weight", "bias"});
    aln.cuda_grad_tol = 1e-4;
    t.push_back(aln);
    OpInfo rms = entry(
        "rms_norm",
        [](const TensorMap& m, const json& p, Device) {
          return one(rms_norm(in(m, "x"), opt(m, "weight"), f32(p, "eps")));
        },
        [] {
          return std::vector<Sample>{
              S("weight", {{"x", randn({3, 8}, 14)}, {"weight", randn({8}, 15)}}, {{"eps", 1e-6}}),
              S("plain_4d", {{"x", randn({2, 2, 3, 5}, 16)}}, {{"eps", 1e-5}}),
              gpu_only(S("gpu", {{"x", randn({9, 3, 300}, 50, 2.f)}, {"weight", randn({300}, 51)}}, {{"eps", 1e-6}}))};
        },
        {"x", "weight"});
    rms.cuda_grad_tol = 1e-4;
    t.push_back(rms);
    OpInfo arms = entry(
        "add_rms_norm",
        [](const TensorMap& m, const json& p, Device) {
          Generator g(p.value("seed", uint64_t{0}));  // with dropout_p: as add_layer_norm's
          return one(add_rms_norm(in(m, "x"), in(m, "residual"), opt(m, "weight"), f32(p, "eps"),
                                  p.value("dropout_p", 0.f), &g));
        },
        [] {
          return std::vector<Sample>{
              S("weight", {{"x", randn({3, 8}, 57)}, {"residual", randn({3, 8}, 58)}, {"weight", randn({8}, 59)}},
                {{"eps", 1e-6}}),
              S("plain_3d", {{"x", randn({2, 3, 5}, 60)}, {"residual", randn({2, 3, 5}, 61)}}, {{"eps", 1e-5}}),
              S("dropout", {{"x", randn({3, 8}, 65)}, {"residual", randn({3, 8}, 66)}, {"weight", randn({8}, 67)}},
                {{"eps", 1e-6}, {"dropout_p", 0.3f}, {"seed", 8}}),
              gpu_only(S("gpu", {{"x", randn({9, 3, 300}, 62, 2.f)}, {"residual", randn({9, 3, 300}, 63)},
                                 {"weight", randn({300}, 64)}},
                         {{"eps", 1e-6}})),
              gpu_only(S("gpu_dropout", {{"x", randn({9, 3, 300}, 68, 2.f)}, {"residual", randn({9, 3, 300}, 69)},
                                         {"weight", randn({300}, 70)}},
                         {{"eps", 1e-6}, {"dropout_p", 0.2f}, {"seed", 9}}))};
        },
        {"x", "residual", "weight"});
    arms.cuda_grad_tol = 1e-4;
    t.push_back(arms);
    OpInfo bn = entry(
        "batch_norm",
        [](const TensorMap& m, const json& p, Device) {
          return one(batch_norm(in(m, "x"), opt(m, "running_mean"), opt(m, "running_var"), opt(m, "weight"),
                                opt(m, "bias"), p.at("training").get<bool>()));
        },
        [] {
          const Tensor rm = Tensor::from_vector({0.1f, -0.2f, 0.3f, 0.f}, {4});
          const Tensor rv = Tensor::from_vector({1.f, 0.5f, 2.f, 1.5f}, {4});
          return std::vector<Sample>{
              S("training", {{"x", randn({3, 4, 3, 2}, 44)}, {"weight", randn({4}, 45)}, {"bias", randn({4}, 46)}},
                {{"training", true}}),
              S("eval", {{"x", randn({3, 4, 3, 2}, 44)}, {"weight", randn({4}, 45)}, {"bias", randn({4}, 46)},
                         {"running_mean", rm}, {"running_var", rv}},
                {{"training", false}})};
        },
        {"x", "weight", "bias"});
    bn.golden = false;  // tests/ops/vision_golden_test.cpp (vision.json)
    bn.cuda_grad_tol = 1e-4;
    t.push_back(bn);
    OpInfo gn = entry(
        "group_norm",
        [](const TensorMap& m, const json& p, Device) {
          return one(group_norm(in(m, "x"), i64(p, "groups"), opt(m, "weight"), opt(m, "bias")));
        },
        [] {
          return std::vector<Sample>{
              S("2_groups", {{"x", randn({3, 4, 3, 2}, 44)}, {"weight", randn({4}, 45)}, {"bias", randn({4}, 46)}},
                {{"groups", 2}}),
              gpu_only(S("gpu", {{"x", randn({3, 8, 5, 4}, 60, 3.f)}, {"weight", randn({8}, 61)}, {"bias", randn({8}, 62)}},
                         {{"groups", 4}}))};
        },
        {"x", "weight", "bias"});
    gn.golden = false;
    gn.cuda_grad_tol = 1e-4;
    t.push_back(gn);
  }

  // -- lookups and losses
  {
    OpInfo e = entry(
        "embedding",
        [](const TensorMap& m, const json& p, Device) {
          return one(embedding(in(m, "ids"), in(m, "weight"), i64(p, "padding_idx")));
        },
        [] {
          return std::vector<Sample>{
              S("no_pad", {{"ids", Tensor::from_ints({1, 4, 1, 0, 6}, {5})}, {"weight", randn({7, 3}, 17)}},
                {{"padding_idx", -1}}),
              gpu_only(S("gpu_pad", {{"ids", Tensor::from_ints({3, 0, 49, 3, 7, 7, 7, 1, 0}, {3, 3})},
                                     {"weight", randn({50, 24}, 60)}},
                         {{"padding_idx", 0}}))};
        },
        {"weight"});
    e.cuda_tol = 0;
    e.cuda_grad_tol = 2e-5;
    t.push_back(e);
    t.push_back(entry(
        "cross_entropy",
        [](const TensorMap& m, const json& p, Device) {
          return one(cross_entropy(in(m, "logits"), in(m, "target"), i64(p, "ignore_index"), f32(p, "label_smoothing"),
                                   p.at("reduction").get<std::string>()));
        },
        [] {
          std::vector<Sample> v;
          for (auto [ls, red] : {std::pair{0.f, "mean"}, {0.1f, "mean"}, {0.1f, "none"}, {0.f, "sum"}})
            v.push_back(S(std::string(red) + (ls > 0 ? "_ls" : ""),
                          {{"logits", randn({4, 6}, 18)}, {"target", Tensor::from_ints({2, 5, -100, 0}, {4})}},
                          {{"ignore_index", -100}, {"label_smoothing", ls}, {"reduction", red}}));
          for (float ls : {0.f, 0.1f})
            v.push_back(gpu_only(S(ls > 0 ? "gpu_ls" : "gpu",
                                   {{"logits", randn({9, 50}, 63, 3.f)},
                                    {"target", Tensor::from_ints({1, 2, 3, -100, 49, 0, 5, 6, 7}, {9})}},
                                   {{"ignore_index", -100}, {"label_smoothing", ls}, {"reduction", "mean"}})));
          return v;
        },
        {"logits"}));
  {
    // the output layer and its loss without the logits: chunks of 1, 2, 3 rows and the chosen one
    OpInfo lce = entry(
        "linear_cross_entropy",
        [](const TensorMap& m, const json& p, Device) {
          return one(linear_cross_entropy(in(m, "x"), in(m, "weight"), in(m, "target"), opt(m, "bias"),
                                          i64(p, "ignore_index"), f32(p, "label_smoothing"),
                                          p.at("reduction").get<std::string>(), i64(p, "chunk_rows")));
        },
        [] {
          std::vector<Sample> v;
          for (auto [ls, red, chunk] : {std::tuple{0.f, "mean", 0}, {0.1f, "mean", 2}, {0.1f, "sum", 3}})
            v.push_back(S(std::string(red) + (ls > 0 ? "_ls" : "") + "_chunk" + std::to_string(chunk),
                          {{"x", randn({5, 4}, 64)}, {"weight", randn({6, 4}, 65, 0.5f)}, {"bias", randn({6}, 66)},
                           {"target", Tensor::from_ints({2, 5, -100, 0, 1}, {5})}},
                          {{"ignore_index", -100}, {"label_smoothing", ls}, {"reduction", red}, {"chunk_rows", chunk}}));
          v.push_back(gpu_only(S("gpu_chunks", {{"x", randn({37, 24}, 67)}, {"weight", randn({50, 24}, 68, 0.3f)},
                                                {"bias", randn({50}, 69)},
                                                {"target", Tensor::from_ints(std::vector<int32_t>(37, 7), {37})}},
                                 {{"ignore_index", -100}, {"label_smoothing", 0.1f}, {"reduction", "mean"},
                                  {"chunk_rows", 8}})));
          return v;
        },
        {"x", "weight", "bias"});
    lce.cuda_tol = kTf32;  // its chunks' GEMMs, as linear's
    t.push_back(lce);
  }
  }

  // -- joins, views, indexing
  t.push_back(entry(
      "cat", [](const TensorMap& m, const json& p, Device) { return one(cat(numbered(m, p), i64(p, "dim"))); },
      [] {
        return std::vector<Sample>{
            S("dim1", {{"x0", randn({2, 3, 4}, 5)}, {"x1", randn({2, 2, 4}, 6)}}, {{"dim", 1}, {"n", 2}}),
            gpu_only(S("gpu_last", {{"x0", randn({3, 5, 33}, 7)}, {"x1", randn({3, 5, 1}, 8)}, {"x2", randn({3, 5, 70}, 9)}},
                       {{"dim", -1}, {"n", 3}}))};
      },
      {"x0", "x1", "x2"}));
  t.push_back(entry(
      "transpose",
      [](const TensorMap& m, const json& p, Device) {
        return one(in(m, "a").transpose(i64(p, "d0"), i64(p, "d1")).contiguous());
      },
      [] {
        return std::vector<Sample>{S("02", {{"a", randn({2, 3, 4}, 5)}}, {{"d0", 0}, {"d1", 2}}),
                                   gpu_only(S("gpu", {{"a", randn({37, 129}, 1)}}, {{"d0", 0}, {"d1", 1}}))};
      },
      {"a"}));
  t.push_back(entry(
      "permute",
      [](const TensorMap& m, const json& p, Device) {
        return one(in(m, "a").permute(p.at("dims").get<Shape>()).contiguous());
      },
      [] { return std::vector<Sample>{S("120", {{"a", randn({2, 3, 4}, 5)}}, {{"dims", {1, 2, 0}}})}; }, {"a"}));
  t.push_back(entry(
      "transpose_reshape",
      [](const TensorMap& m, const json& p, Device) {
        return one(in(m, "a").transpose(i64(p, "d0"), i64(p, "d1")).reshape(p.at("shape").get<Shape>()));
      },
      [] {
        return std::vector<Sample>{S("3x8", {{"a", randn({2, 3, 4}, 5)}}, {{"d0", 0}, {"d1", 1}, {"shape", {3, -1}}})};
      },
      {"a"}));
  {
    OpInfo s = entry(
        "slice",
        [](const TensorMap& m, const json& p, Device) {
          return one(in(m, "a").slice(i64(p, "dim"), i64(p, "start"), i64(p, "end")));
        },
        [] {
          return std::vector<Sample>{S("mid", {{"a", randn({2, 3, 4}, 5)}}, {{"dim", 1}, {"start", 1}, {"end", 3}}),
                                     gpu_only(S("gpu", {{"a", randn({37, 129}, 1)}}, {{"dim", 1}, {"start", 3}, {"end", 70}}))};
        },
        {"a"});
    s.computes = false;  // a view
    s.cuda_tol = 0;
    t.push_back(s);
  }
  {
    OpInfo mf = entry(
        "masked_fill",
        [](const TensorMap& m, const json& p, Device) { return one(masked_fill(in(m, "a"), in(m, "mask"), f32(p, "value"))); },
        [] {
          return std::vector<Sample>{S("bcast", {{"a", randn({2, 3, 4}, 5)}, {"mask", bools({3, 1}, 6)}}, {{"value", 7.f}}),
                                     gpu_only(S("gpu", {{"a", randn({17, 9}, 14)}, {"mask", bools({17, 9}, 15)}},
                                                {{"value", -5.f}}))};
        },
        {"a"});
    mf.cuda_tol = 0;
    t.push_back(mf);
  }
  {
    OpInfo is = entry(
        "index_select",
        [](const TensorMap& m, const json& p, Device) {
          return one(index_select(in(m, "a"), i64(p, "dim"), p.at("index").get<std::vector<int64_t>>()));
        },
        [] {
          return std::vector<Sample>{S("mid_repeats", {{"a", randn({4, 6, 5}, 62)}}, {{"dim", 1}, {"index", {5, 0, 5, 2}}}),
                                     S("rows", {{"a", randn({5, 3}, 63)}}, {{"dim", 0}, {"index", {4, 0, 0, 2}}}),
                                     // rows of 16-byte multiples (a KV cache's): the GPU's vector gather
                                     gpu_only(S("cache_rows", {{"a", randn({6, 2, 5, 8}, 64)}},
                                                {{"dim", 0}, {"index", {5, 0, 0, 3, 1, 5, 2}}}))};
        },
        {"a"});
    is.cuda_tol = 0;
    is.cuda_grad_tol = 2e-5;
    t.push_back(is);
  }

  {
    // topk: the values (backpropagated: scattered to the picked entries) and the i32 indices; the
    // samples' values are apart by more than gradcheck's steps, so that no step reorders them
    OpInfo tk = entry(
        "topk",
        [](const TensorMap& m, const json& p, Device) {
          const TopK r = topk(in(m, "a"), i64(p, "k"));
          return TensorMap{{"out", r.values}, {"indices", r.indices}};
        },
        [] {
          return std::vector<Sample>{S("rows", {{"a", randn({3, 10}, 64)}}, {{"k", 4}}),
                                     S("all_3d", {{"a", randn({2, 2, 5}, 65)}}, {{"k", 5}}),
                                     gpu_only(S("vocab", {{"a", randn({37, 1000}, 66)}}, {{"k", 9}}))};
        },
        {"a"});
    tk.cuda_tol = 0;
    t.push_back(tk);
  }
  {
    // sample_rows: each row's next token (i32, no gradient) — greedy rows (temperature 0), tempered
    // ones, top-k and top-p, for the draws u given; the reference's tokens on the CPU:
    // tests/decode/sampling_test.cpp
    OpInfo sr = entry(
        "sample_rows",
        [](const TensorMap& m, const json& p, Device) {
          std::vector<RowSampling> rows;
          for (const json& r : p.at("rows")) {
            RowSampling s;
            s.temperature = r.at(0).get<double>(), s.top_k = r.at(1).get<int64_t>(), s.top_p = r.at(2).get<double>(),
            s.u = r.at(3).get<double>();
            if (r.size() > 4) {  // [repetition, frequency, presence, [[token, count, in prompt], …]]
              const json& q = r.at(4);
              s.repetition_penalty = q.at(0).get<float>(), s.frequency_penalty = q.at(1).get<float>(),
              s.presence_penalty = q.at(2).get<float>();
              for (const json& t : q.at(3)) s.seen.push_back({t.at(0).get<int32_t>(), t.at(1).get<int32_t>(), t.at(2).get<bool>()});
            }
            rows.push_back(s);
          }
          return one(sample_rows(in(m, "a"), rows));
        },
        [] {
          // (temperature, top_k, top_p, u) a row
          return std::vector<Sample>{
              S("rows", {{"a", randn({3, 10}, 67)}},
                {{"rows",
                  {{0.0, 0, 1.0, 0.5, {1.3, 0.0, 0.0, {{2, 0, true}, {5, 1, false}}}},
                   {0.8, 0, 1.0, 0.25},
                   {1.5, 3, 0.7, 0.9, {1.0, 0.5, 1.5, {{0, 3, false}, {9, 1, true}}}}}}}),
              gpu_only(S("vocab", {{"a", randn({6, 5000}, 68)}},
                         {{"rows",
                           {{1.0, 0, 1.0, 0.1}, {0.0, 0, 1.0, 0.2}, {0.7, 50, 1.0, 0.3}, {1.0, 0, 0.9, 0.999}, {2.0, 40, 0.5, 0.5},
                            {1.0, 1, 1.0, 0.7, {1.2, 0.4, 0.6, {{17, 2, true}, {4999, 0, true}, {300, 7, false}}}}}}}))};
        },
        {});
    sr.golden = false;  // PyTorch's multinomial draws with its own generator
    sr.cuda_tol = 0;
    t.push_back(sr);
  }

  // -- comparisons and logic (boolean results)
  t.push_back(compare("eq", eq));
  t.push_back(compare("ne", ne));
  t.push_back(compare("lt", lt));
  t.push_back(compare("le", le));
  t.push_back(compare("gt", gt));
  t.push_back(compare("ge", ge));
  t.push_back(logical("logical_and", logical_and));
  t.push_back(logical("logical_or", logical_or));
  t.push_back(entry(
      "logical_not", [](const TensorMap& m, const json&, Device) { return one(logical_not(in(m, "a"))); },
      [] { return std::vector<Sample>{S("4x6", {{"a", bools({4, 6}, 1)}})}; }, {}));

  // -- masks
  t.push_back(entry(
      "causal_mask",
      [](const TensorMap&, const json& p, Device d) {
        return one(causal_mask(i64(p, "Lq"), i64(p, "Lk"), i64(p, "offset"), d));
      },
      [] {
        return std::vector<Sample>{S("4x4", {}, {{"Lq", 4}, {"Lk", 4}, {"offset", 0}}),
                                   S("5x7_off2", {}, {{"Lq", 5}, {"Lk", 7}, {"offset", 2}})};
      },
      {}));
  t.push_back(entry(
      "attention_mask_from_padding",
      [](const TensorMap& m, const json&, Device) { return one(attention_mask_from_padding(in(m, "key_padding_mask"))); },
      [] { return std::vector<Sample>{S("3x6", {{"key_padding_mask", bools({3, 6}, 1, 0.3f)}})}; }, {}));

  // -- an ensemble's log mean probability (no gradient)
  t.push_back(entry(
      "log_mean_exp", [](const TensorMap& m, const json& p, Device) { return one(log_mean_exp(numbered(m, p))); },
      [] {
        return std::vector<Sample>{
            S("3", {{"x0", randn({3, 50}, 1, 4.f)}, {"x1", randn({3, 50}, 2, 4.f)}, {"x2", randn({3, 50}, 3, 4.f)}},
              {{"n", 3}}),
            // a position every member rules out stays −∞
            S("ruled_out", {{"x0", Tensor::full({2}, -INFINITY)}, {"x1", Tensor::full({2}, -INFINITY)}}, {{"n", 2}})};
      },
      {}));

  // -- Llama's ops
  t.push_back(entry(
      "apply_rotary_pos_emb",
      [](const TensorMap& m, const json&, Device) {
        return one(apply_rotary_pos_emb(in(m, "x"), in(m, "cos"), in(m, "sin")));
      },
      [] {
        return std::vector<Sample>{rope_sample("full", {2, 2, 3, 8}, 8, 0, 80),
                                   rope_sample("partial", {1, 2, 4, 6}, 4, 3, 81),
                                   gpu_only(rope_sample("gpu_partial", {2, 4, 33, 64}, 32, 7, 82))};
      },
      {"x"}));

  // -- attention (its PyTorch cases are attention.json's, tests/ops/golden_test.cpp's GoldenAttention)
  {
    OpInfo a = entry(
        "scaled_dot_product_attention",
        [](const TensorMap& m, const json& p, Device) {
          AttentionOptions o;
          o.attn_mask = opt(m, "attn_mask");
          o.is_causal = p.value("is_causal", false);
          o.enable_gqa = p.value("enable_gqa", false);
          o.dropout_p = p.value("dropout_p", 0.f);
          o.softcap = p.value("softcap", 0.f);
          Generator g(p.value("seed", uint64_t{5}));
          o.generator = &g;
          return one(scaled_dot_product_attention(in(m, "q"), in(m, "k"), in(m, "v"), o));
        },
        [] {
          auto qkv = [](int64_t hkv) {
            return TensorMap{{"q", randn({2, 2, 3, 4}, 20)}, {"k", randn({2, hkv, 5, 4}, hkv == 2 ? 21 : 24)},
                             {"v", randn({2, hkv, 5, 3}, hkv == 2 ? 22 : 25)}};
          };
          auto with = [](TensorMap m, const std::string& k, Tensor v) {
            m[k] = std::move(v);
            return m;
          };
          // row 1 sees no key
          const Tensor keep = Tensor::from_bools({1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, {3, 5});
          return std::vector<Sample>{
              S("plain", qkv(2)), S("causal", qkv(2), {{"is_causal", true}}),
              S("float_mask_grad", with(qkv(2), "attn_mask", randn({3, 5}, 23))),
              S("bool_mask_dead_row", with(qkv(2), "attn_mask", keep)), S("gqa", qkv(1), {{"enable_gqa", true}}),
              S("dropout", qkv(2), {{"dropout_p", 0.25f}, {"seed", 5}}),
              // soft-capped scores (a cap of 0.7 bends them all), with a float mask's gradient
              S("softcap_float_mask_grad", with(qkv(2), "attn_mask", randn({3, 5}, 23)), {{"softcap", 0.7f}}),
              S("softcap_gqa_causal", qkv(1), {{"enable_gqa", true}, {"is_causal", true}, {"softcap", 0.7f}})};
        },
        {"q", "k", "v", "attn_mask"});
    a.golden = false;
    a.cuda_tol = 1e-4;
    t.push_back(a);
  }
  {
    OpInfo s = entry(
        "additive_score",
        [](const TensorMap& m, const json&, Device) { return one(additive_score(in(m, "q"), in(m, "k"), in(m, "v"))); },
        [] {
          // A = 19: the vector loops and the scalar tail; B = 3 sentences over the threads' chunks
          return std::vector<Sample>{
              S("A19", {{"q", randn({3, 2, 19}, 26)}, {"k", randn({3, 4, 19}, 27)}, {"v", randn({19}, 28)}}),
              gpu_only(S("gpu", {{"q", randn({2, 5, 24}, 64)}, {"k", randn({2, 7, 24}, 65)}, {"v", randn({24}, 66)}}))};
        },
        {"q", "k", "v"});
    s.golden = false;
    s.cuda_grad_tol = 1e-4;
    t.push_back(s);
  }

  // -- images (their PyTorch cases: vision.json, tests/ops/vision_golden_test.cpp)
  {
    OpInfo c = entry(
        "conv2d",
        [](const TensorMap& m, const json& p, Device) {
          return one(conv2d(in(m, "x"), in(m, "weight"), opt(m, "bias"), size2(p.at("stride")), size2(p.at("padding")),
                            size2(p.at("dilation")), i64(p, "groups")));
        },
        [] {
          const Tensor x = randn({2, 4, 5, 4}, 40);
          std::vector<Sample> v = {
              S("strided_groups", {{"x", x}, {"weight", randn({4, 2, 3, 2}, 41)}, {"bias", randn({4}, 42)}},
                {{"stride", {2, 1}}, {"padding", {1, 2}}, {"dilation", 1}, {"groups", 2}}),
              S("dilated_nobias", {{"x", randn({2, 4, 5, 4}, 40)}, {"weight", randn({2, 4, 2, 2}, 43)}},
                {{"stride", 1}, {"padding", 2}, {"dilation", {2, 1}}, {"groups", 1}})};
          struct C {
            Shape x, w;
            json stride, pad, dil;
            int64_t groups;
            bool bias;
          };
          uint64_t seed = 700;
          for (const C& c : std::vector<C>{{{2, 3, 9, 11}, {5, 3, 3, 3}, 1, 1, 1, 1, true},
                                           {{3, 4, 13, 10}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, false},
                                           {{1, 8, 7, 7}, {8, 1, 3, 3}, 1, 1, 1, 8, true},  // depthwise
                                           {{4, 16, 6, 6}, {32, 16, 1, 1}, 2, 0, 1, 1, true},
                                           // 27 × 1200² column floats a sample: one sample a chunk, three
                                           // chunks (the chunks' offsets, dW accumulated over them)
                                           {{3, 3, 1200, 1200}, {4, 3, 3, 3}, 1, 1, 1, 1, true}}) {
            TensorMap m = {{"x", randn(c.x, seed++)}, {"weight", randn(c.w, seed++, 0.3f)}};
            if (c.bias) m["bias"] = randn({c.w[0]}, seed++);
            v.push_back(gpu_only(S("gpu_" + shape_str(c.x) + "_g" + std::to_string(c.groups), m,
                                   {{"stride", c.stride}, {"padding", c.pad}, {"dilation", c.dil}, {"groups", c.groups}})));
          }
          return v;
        },
        {"x", "weight", "bias"});
    c.golden = false;
    c.cuda_tol = kTf32;
    t.push_back(c);
  }
  {
    // max pooling: values at least 0.05 apart, so that no finite-difference step changes a window's winner
    auto spread = [] {
      std::vector<float> s(160);
      for (size_t i = 0; i < s.size(); ++i) s[i] = 0.05f * static_cast<float>((i * 37) % 160) - 4.f;
      return Tensor::from_vector(s, {2, 4, 5, 4});
    };
    OpInfo mp = entry(
        "max_pool2d",
        [](const TensorMap& m, const json& p, Device) {
          return one(max_pool2d(in(m, "x"), size2(p.at("kernel")), opt_size2(p, "stride"), size2(p.at("padding")),
                                size2(p.value("dilation", json(1))), p.value("ceil_mode", false)));
        },
        [spread] {
          return std::vector<Sample>{
              S("k3_s2_p1", {{"x", spread()}}, {{"kernel", 3}, {"stride", 2}, {"padding", 1}}),
              S("k2_ceil", {{"x", spread()}}, {{"kernel", 2}, {"stride", nullptr}, {"padding", 0}, {"ceil_mode", true}})};
        },
        {"x"});
    mp.golden = false;
    mp.cuda_tol = 0;
    t.push_back(mp);
    OpInfo ap = entry(
        "avg_pool2d",
        [](const TensorMap& m, const json& p, Device) {
          return one(avg_pool2d(in(m, "x"), size2(p.at("kernel")), opt_size2(p, "stride"), size2(p.at("padding")),
                                p.value("ceil_mode", false), p.value("count_include_pad", true)));
        },
        [] {
          return std::vector<Sample>{S("k3_s2_p1_ceil_exclude_pad", {{"x", randn({2, 4, 5, 4}, 40)}},
                                       {{"kernel", 3}, {"stride", 2}, {"padding", 1}, {"ceil_mode", true},
                                        {"count_include_pad", false}})};
        },
        {"x"});
    ap.golden = false;
    t.push_back(ap);
    OpInfo aap = entry(
        "adaptive_avg_pool2d",
        [](const TensorMap& m, const json& p, Device) { return one(adaptive_avg_pool2d(in(m, "x"), size2(p.at("size")))); },
        [] { return std::vector<Sample>{S("3x4", {{"x", randn({2, 4, 5, 4}, 40)}}, {{"size", {3, 4}}})}; }, {"x"});
    aap.golden = false;
    t.push_back(aap);
  }
  return t;
}

}  // namespace

const std::vector<OpInfo>& op_table() {
  static const std::vector<OpInfo> table = build();
  return table;
}

const OpInfo* find_op(const std::string& name) {
  for (const OpInfo& o : op_table())
    if (o.name == name) return &o;
  return nullptr;
}

std::vector<std::string> op_names(const std::function<bool(const OpInfo&)>& pred) {
  std::vector<std::string> out;
  for (const OpInfo& o : op_table())
    if (pred(o)) out.push_back(o.name);
  return out;
}

}  // namespace qkv::optable
