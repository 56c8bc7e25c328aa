// qkv.nn.functional (PyTorch's signatures) and qkv.autograd.grad. Every function takes qkv
// tensors or anything array-like (converted without a copy where the layout allows) and releases
// the GIL while qkv computes.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "qkv/ops.h"

namespace qkv::python {

namespace {

Tensor optional_tensor(nb::handle obj) { return obj.is_none() ? Tensor() : to_tensor(obj); }

std::vector<Tensor> tensor_list(nb::handle obj) {
  std::vector<Tensor> out;
  if (nb::isinstance<Tensor>(obj)) return {nb::cast<Tensor>(obj)};
  for (nb::handle x : obj) out.push_back(to_tensor(x));
  return out;
}

}  // namespace

void bind_functional(nb::module_& m) {
  nb::module_ f = m.def_submodule("functional", "torch.nn.functional's names over qkv's ops (qkv/ops.h)");

  //   Attention(Q, K, V) = softmax(Q Kᵀ · scale + M) V,    scale = 1/√d by default
  // q [..., L, E], k [..., S, E], v [..., S, Ev] → [..., L, Ev]
  f.def(
      "scaled_dot_product_attention",
      [](nb::handle query, nb::handle key, nb::handle value, nb::handle attn_mask, double dropout_p, bool is_causal,
         std::optional<double> scale, bool enable_gqa, double softcap) {
        AttentionOptions o;
        o.attn_mask = optional_tensor(attn_mask), o.dropout_p = static_cast<float>(dropout_p), o.is_causal = is_causal;
        if (scale) o.scale = static_cast<float>(*scale);
        o.enable_gqa = enable_gqa, o.softcap = static_cast<float>(softcap);
        const Tensor q = to_tensor(query), k = to_tensor(key), v = to_tensor(value);
        nb::gil_scoped_release release;
        return scaled_dot_product_attention(q, k, v, o);
      },
      "query"_a, "key"_a, "value"_a, "attn_mask"_a = nb::none(), "dropout_p"_a = 0.0, "is_causal"_a = false,
      "scale"_a = nb::none(), nb::kw_only(), "enable_gqa"_a = false, "softcap"_a = 0.0,
      "softmax(Q Kᵀ · scale + attn_mask) V with torch.nn.functional.scaled_dot_product_attention's semantics:\n"
      "a boolean attn_mask marks the keys a query may attend to (True), a float one is added to the scores;\n"
      "is_causal masks key j > query i; scale defaults to 1/√E; enable_gqa lets key/value have fewer heads.\n"
      "softcap > 0 (beyond PyTorch: flash-attn's softcap, Gemma 2's) caps the scores softcap·tanh(s/softcap)\n"
      "before the mask (the CPU only). Runs qkv's flash kernel (O(L) memory) forward and backward.");
  f.def(
      "scaled_dot_product_attention_with_weights",
      [](nb::handle query, nb::handle key, nb::handle value, nb::handle attn_mask, bool is_causal,
         std::optional<double> scale, double softcap) {
        AttentionOptions o;
        o.attn_mask = optional_tensor(attn_mask), o.is_causal = is_causal, o.softcap = static_cast<float>(softcap);
        if (scale) o.scale = static_cast<float>(*scale);
        const Tensor q = to_tensor(query), k = to_tensor(key), v = to_tensor(value);
        nb::gil_scoped_release release;
        AttentionResult r = scaled_dot_product_attention_with_weights(q, k, v, o);
        return std::make_pair(r.output, r.weights);
      },
      "query"_a, "key"_a, "value"_a, "attn_mask"_a = nb::none(), "is_causal"_a = false, "scale"_a = nb::none(),
      nb::kw_only(), "softcap"_a = 0.0,
      "(output, weights): attention and its weights softmax(Q Kᵀ · scale + M) [..., L, S], to look at\n"
      "(the weights carry no gradient).");
  f.def("softmax", [](nb::handle x, int64_t dim) { return softmax(to_tensor(x), dim); }, "input"_a, "dim"_a);
  f.def("log_softmax", [](nb::handle x, int64_t dim) { return log_softmax(to_tensor(x), dim); }, "input"_a, "dim"_a);
  f.def("relu", [](nb::handle x) { return relu(to_tensor(x)); }, "input"_a);
  f.def("gelu", [](nb::handle x, const std::string& approximate) { return gelu(to_tensor(x), approximate); }, "input"_a,
        "approximate"_a = "none");
  f.def(
      "linear",
      [](nb::handle input, nb::handle weight, nb::handle bias) {
        const Tensor x = to_tensor(input), w = to_tensor(weight), b = optional_tensor(bias);
        nb::gil_scoped_release release;
        return linear(x, w, b);
      },
      "input"_a, "weight"_a, "bias"_a = nb::none(),
      "y = x Wᵀ + b, W: [out_features, in_features] (torch.nn.functional.linear); under qkv.autocast its\n"
      "products take bf16 operands with f32 sums.");
  f.def(
      "cross_entropy",
      [](nb::handle input, nb::handle target, int64_t ignore_index, const std::string& reduction,
         double label_smoothing) {
        const Tensor x = to_tensor(input), y = to_tensor(target);
        nb::gil_scoped_release release;
        return cross_entropy(x, y, ignore_index, static_cast<float>(label_smoothing), reduction);
      },
      "input"_a, "target"_a, nb::kw_only(), "ignore_index"_a = -100, "reduction"_a = "mean", "label_smoothing"_a = 0.0,
      "torch.nn.functional.cross_entropy over logits [N, C] and class targets [N] (integers): the mean over\n"
      "the targets ≠ ignore_index, their sum, or each row's ('none'), with label smoothing.");
  f.def(
      "linear_cross_entropy",
      [](nb::handle input, nb::handle weight, nb::handle target, nb::handle bias, int64_t ignore_index,
         const std::string& reduction, double label_smoothing, int64_t chunk_rows) {
        const Tensor x = to_tensor(input), w = to_tensor(weight), y = to_tensor(target), b = optional_tensor(bias);
        nb::gil_scoped_release release;
        return linear_cross_entropy(x, w, y, b, ignore_index, static_cast<float>(label_smoothing), reduction, chunk_rows);
      },
      "input"_a, "weight"_a, "target"_a, "bias"_a = nb::none(), nb::kw_only(), "ignore_index"_a = -100,
      "reduction"_a = "mean", "label_smoothing"_a = 0.0, "chunk_rows"_a = 0,
      "cross_entropy(linear(input, weight, bias), target, …) without the [N, C] logits (Liger-Kernel's fused\n"
      "linear cross-entropy): the rows a chunk at a time, the gradients made as each chunk's logits are and\n"
      "scaled by the loss's gradient in the backward. reduction 'mean' or 'sum'; one backward per graph.");
  f.def("matmul", [](nb::handle a, nb::handle b) {
    const Tensor x = to_tensor(a), y = to_tensor(b);
    nb::gil_scoped_release release;
    return matmul(x, y);
  }, "input"_a, "other"_a);

  nb::module_ ag = m.def_submodule("autograd", "reverse mode (torch.autograd's names)");
  ag.def(
      "grad",
      [](nb::handle outputs, nb::handle inputs, nb::handle grad_outputs, bool retain_graph) {
        const std::vector<Tensor> outs = tensor_list(outputs), ins = tensor_list(inputs);
        std::vector<Tensor> seeds = grad_outputs.is_none() ? std::vector<Tensor>(outs.size()) : tensor_list(grad_outputs);
        QKV_CHECK(seeds.size() == outs.size(), "autograd.grad: ", outs.size(), " outputs but ", seeds.size(),
                  " grad_outputs");
        for (size_t i = 0; i < outs.size(); ++i)  // a scalar output's seed is 1, as in torch.autograd.grad
          if (!seeds[i].defined()) {
            QKV_CHECK(outs[i].numel() == 1, "autograd.grad: output ", i, " (", outs[i].str(),
                      ") is not a scalar: give its grad_outputs");
            seeds[i] = Tensor::ones(outs[i].shape());
          }
        nb::gil_scoped_release release;
        return autograd::grad(outs, seeds, ins, retain_graph);
      },
      "outputs"_a, "inputs"_a, "grad_outputs"_a = nb::none(), "retain_graph"_a = false,
      "d(outputs)/d(inputs), seeded with grad_outputs (ones for scalar outputs), returned instead of\n"
      "accumulated into .grad (torch.autograd.grad).");
}

}  // namespace qkv::python
