// qkv.nn: modules with torch.nn's names, constructor arguments and parameter names, so a PyTorch
// state_dict loads one to one (load_state_dict takes NumPy arrays, torch tensors or qkv tensors);
// and qkv.nn.functional.multi_head_attention, nn.MultiheadAttention's forward with the caller's
// weights.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "qkv/core/names.h"
#include "qkv/nn/embedding.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/nn/rnn.h"
#include "qkv/nn/transformer_layer.h"
#include "qkv/ops.h"

namespace qkv::python {

namespace {

Tensor opt_tensor(nb::handle obj) { return obj.is_none() ? Tensor() : to_tensor(obj); }

// nn.MultiheadAttention's (output, weights) as Python returns them: weights None unless asked for.
nb::tuple mha_output(const nn::MultiheadAttention::Output& o) {
  return nb::make_tuple(o.output, o.weights.defined() ? nb::cast(o.weights) : nb::none());
}

std::vector<int64_t> lengths_of(nb::handle obj) {
  if (obj.is_none()) return {};
  const Tensor t = to_tensor(obj);
  std::vector<int64_t> out;
  for (float v : t.to(DType::f32).to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}

// torch.nn.Transformer{Encoder,Decoder}Layer's constructor: its arguments → qkv's options.
template <typename Layer>
void init_layer(Layer* self, int64_t d_model, int64_t nhead, int64_t dim_feedforward, float dropout,
                const std::string& activation, float layer_norm_eps, bool batch_first, bool norm_first, bool bias) {
  nn::TransformerLayerOptions o;
  o.d_model = d_model, o.nhead = nhead, o.dim_feedforward = dim_feedforward, o.dropout = dropout;
  o.activation = parse_enum<nn::Activation>(activation), o.layer_norm_eps = layer_norm_eps;
  o.batch_first = batch_first, o.norm_first = norm_first, o.bias = bias;
  new (self) Layer(o);
}

}  // namespace

void bind_nn(nb::module_& m) {
  nb::module_ nnm = m.def_submodule("nn", "modules with torch.nn's names (qkv/nn/)");

  nb::class_<nn::Module>(nnm, "Module", "A module: parameters and buffers under torch.nn's dotted names.")
      .def("parameters", &nn::Module::parameters)
      .def("named_parameters", &nn::Module::named_parameters)
      .def("named_buffers", &nn::Module::named_buffers)
      .def("num_parameters", &nn::Module::num_parameters)
      .def("state_dict", &nn::Module::state_dict,
           "Parameters and buffers by dotted name (sharing memory with the module, as PyTorch's).")
      .def(
          "load_state_dict",
          [](nn::Module& mod, nb::dict state, bool strict) {
            std::map<std::string, Tensor> s;
            for (auto [k, v] : state) s[nb::cast<std::string>(k)] = to_tensor(v).to(DType::f32);
            mod.load_state_dict(s, strict);
          },
          "state_dict"_a, "strict"_a = true,
          "Copies values from a dict of arrays (NumPy, torch, qkv) into the parameters of the same names and\n"
          "shapes; strict: every name must be there and no other (qkv.Error naming the first that is not).")
      .def(
          "to",
          [](nn::Module& mod, const std::string& what) -> nn::Module& {
            // a device ("cpu", "cuda", "cuda:1"), in place, returning the module (torch.nn.Module.to);
            // qkv's modules hold f32, so "float32" is the one dtype, and a no-op
            if (what == "float32" || what == "torch.float32") return mod;
            QKV_CHECK(what == "cpu" || what.starts_with("cuda"), "Module.to: expected a device (cpu, cuda, cuda:N) or ",
                      "float32, got '", what, "'");
            mod.to(Device::parse(what));
            return mod;
          },
          "device"_a, nb::rv_policy::reference,
          "Moves every parameter and buffer to the device in place and returns the module (torch's\n"
          "module.to(device)); tied weights stay tied.")
      .def(
          "cuda",
          [](nn::Module& mod, int device) -> nn::Module& {
            mod.to(Device::cuda(device));
            return mod;
          },
          "device"_a = 0, nb::rv_policy::reference)
      .def(
          "cpu",
          [](nn::Module& mod) -> nn::Module& {
            mod.to(Device::cpu());
            return mod;
          },
          nb::rv_policy::reference)
      .def("train", [](nn::Module& mod, bool on) { mod.train(on); }, "mode"_a = true)
      .def("eval", &nn::Module::eval)
      .def_prop_ro("training", &nn::Module::is_training)
      .def("zero_grad", &nn::Module::zero_grad);

  nb::class_<nn::Linear, nn::Module>(nnm, "Linear", "y = x Wᵀ + b (torch.nn.Linear)")
      .def(nb::init<int64_t, int64_t, bool>(), "in_features"_a, "out_features"_a, "bias"_a = true)
      .def("forward", [](const nn::Linear& l, nb::handle x) { return l.forward(to_tensor(x)); }, "input"_a)
      .def("__call__", [](const nn::Linear& l, nb::handle x) { return l.forward(to_tensor(x)); }, "input"_a)
      .def_ro("weight", &nn::Linear::weight)
      .def_ro("bias", &nn::Linear::bias);

  nb::class_<nn::Embedding, nn::Module>(nnm, "Embedding", "torch.nn.Embedding")
      .def(nb::init<int64_t, int64_t, int64_t>(), "num_embeddings"_a, "embedding_dim"_a, "padding_idx"_a = -1)
      .def("__call__", [](const nn::Embedding& e, nb::handle ids) { return e.forward(to_tensor(ids).to(DType::i32)); })
      .def_ro("weight", &nn::Embedding::weight);

  nb::class_<nn::LayerNorm, nn::Module>(nnm, "LayerNorm", "torch.nn.LayerNorm over the last dimension")
      .def(nb::init<int64_t, float, bool, bool>(), "normalized_shape"_a, "eps"_a = 1e-5f, "elementwise_affine"_a = true,
           "bias"_a = true)
      .def("__call__", [](const nn::LayerNorm& n, nb::handle x) { return n.forward(to_tensor(x)); });

  nb::class_<nn::MultiheadAttention, nn::Module>(nnm, "MultiheadAttention",
                                                 "torch.nn.MultiheadAttention: its arguments, masks (True = masked "
                                                 "out) and parameter names")
      .def(nb::init<int64_t, int64_t, float, bool, int64_t, int64_t, bool>(), "embed_dim"_a, "num_heads"_a,
           "dropout"_a = 0.f, "bias"_a = true, "kdim"_a = 0, "vdim"_a = 0, "batch_first"_a = false)
      .def(
          "__call__",
          [](const nn::MultiheadAttention& a, nb::handle query, nb::handle key, nb::handle value,
             nb::handle key_padding_mask, bool need_weights, nb::handle attn_mask, bool average_attn_weights,
             bool is_causal) {
            const Tensor q = to_tensor(query), k = to_tensor(key), v = to_tensor(value);
            const Tensor kpm = opt_tensor(key_padding_mask), am = opt_tensor(attn_mask);
            nn::MultiheadAttention::Output o;
            {
              nb::gil_scoped_release release;
              o = a.forward(q, k, v, kpm, need_weights, am, average_attn_weights, is_causal);
            }
            return mha_output(o);
          },
          "query"_a, "key"_a, "value"_a, "key_padding_mask"_a = nb::none(), "need_weights"_a = true,
          "attn_mask"_a = nb::none(), "average_attn_weights"_a = true, "is_causal"_a = false,
          "(attn_output, attn_output_weights or None), as torch.nn.MultiheadAttention.forward.");

  nb::class_<nn::TransformerEncoderLayer, nn::Module>(nnm, "TransformerEncoderLayer", "torch.nn.TransformerEncoderLayer")
      .def(
          "__init__",
          &init_layer<nn::TransformerEncoderLayer>,
          "d_model"_a, "nhead"_a, "dim_feedforward"_a = 2048, "dropout"_a = 0.1f, "activation"_a = "relu",
          "layer_norm_eps"_a = 1e-5f, "batch_first"_a = false, "norm_first"_a = false, "bias"_a = true)
      .def(
          "__call__",
          [](const nn::TransformerEncoderLayer& l, nb::handle src, nb::handle src_mask, nb::handle src_key_padding_mask,
             bool is_causal) {
            const Tensor x = to_tensor(src), mask = opt_tensor(src_mask), kpm = opt_tensor(src_key_padding_mask);
            nb::gil_scoped_release release;
            return l.forward(x, mask, kpm, is_causal);
          },
          "src"_a, "src_mask"_a = nb::none(), "src_key_padding_mask"_a = nb::none(), "is_causal"_a = false);

  nb::class_<nn::TransformerDecoderLayer, nn::Module>(nnm, "TransformerDecoderLayer", "torch.nn.TransformerDecoderLayer")
      .def(
          "__init__",
          &init_layer<nn::TransformerDecoderLayer>,
          "d_model"_a, "nhead"_a, "dim_feedforward"_a = 2048, "dropout"_a = 0.1f, "activation"_a = "relu",
          "layer_norm_eps"_a = 1e-5f, "batch_first"_a = false, "norm_first"_a = false, "bias"_a = true)
      .def(
          "__call__",
          [](const nn::TransformerDecoderLayer& l, nb::handle tgt, nb::handle memory, nb::handle tgt_mask,
             nb::handle memory_mask, nb::handle tgt_key_padding_mask, nb::handle memory_key_padding_mask,
             bool tgt_is_causal) {
            const Tensor t = to_tensor(tgt), mem = to_tensor(memory), tm = opt_tensor(tgt_mask),
                         mm = opt_tensor(memory_mask), tk = opt_tensor(tgt_key_padding_mask),
                         mk = opt_tensor(memory_key_padding_mask);
            nb::gil_scoped_release release;
            return l.forward(t, mem, tm, mm, tk, mk, tgt_is_causal);
          },
          "tgt"_a, "memory"_a, "tgt_mask"_a = nb::none(), "memory_mask"_a = nb::none(),
          "tgt_key_padding_mask"_a = nb::none(), "memory_key_padding_mask"_a = nb::none(), "tgt_is_causal"_a = false);

  auto rnn_options = [](int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
                        float dropout, bool bidirectional) {
    nn::RNNOptions o;
    o.input_size = input_size, o.hidden_size = hidden_size, o.num_layers = num_layers, o.bias = bias;
    o.batch_first = batch_first, o.dropout = dropout, o.bidirectional = bidirectional;
    return o;
  };
  nb::class_<nn::GRU, nn::Module>(nnm, "GRU", "torch.nn.GRU; lengths: per-sequence lengths (pack_padded_sequence's)")
      .def(
          "__init__",
          [rnn_options](nn::GRU* self, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
                        bool batch_first, float dropout, bool bidirectional) {
            new (self) nn::GRU(rnn_options(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional));
          },
          "input_size"_a, "hidden_size"_a, "num_layers"_a = 1, "bias"_a = true, "batch_first"_a = false,
          "dropout"_a = 0.f, "bidirectional"_a = false)
      .def(
          "__call__",
          [](const nn::GRU& g, nb::handle input, nb::handle hx, nb::handle lengths) {
            const Tensor x = to_tensor(input), h0 = opt_tensor(hx);
            const std::vector<int64_t> len = lengths_of(lengths);
            nb::gil_scoped_release release;
            nn::GRU::Output o = g.forward(x, h0, len);
            return std::make_pair(o.output, o.h_n);
          },
          "input"_a, "hx"_a = nb::none(), "lengths"_a = nb::none(), "(output, h_n), as torch.nn.GRU.");
  nb::class_<nn::LSTM, nn::Module>(nnm, "LSTM",
                                   "torch.nn.LSTM (proj_size included); lengths: per-sequence lengths "
                                   "(pack_padded_sequence's)")
      .def(
          "__init__",
          [rnn_options](nn::LSTM* self, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
                        bool batch_first, float dropout, bool bidirectional, int64_t proj_size) {
            nn::RNNOptions o = rnn_options(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional);
            o.proj_size = proj_size;  // h_t = W_hr (o_t ⊙ tanh c_t): weight_hr_l{k}, h and output of proj_size
            new (self) nn::LSTM(o);
          },
          "input_size"_a, "hidden_size"_a, "num_layers"_a = 1, "bias"_a = true, "batch_first"_a = false,
          "dropout"_a = 0.f, "bidirectional"_a = false, "proj_size"_a = 0)
      .def(
          "__call__",
          [](const nn::LSTM& l, nb::handle input, nb::handle hx, nb::handle lengths) {
            Tensor x = to_tensor(input), h0, c0;
            if (!hx.is_none()) {
              nb::tuple hc = nb::cast<nb::tuple>(hx);
              h0 = to_tensor(hc[0]), c0 = to_tensor(hc[1]);
            }
            const std::vector<int64_t> len = lengths_of(lengths);
            nn::LSTM::Output o;
            {
              nb::gil_scoped_release release;
              o = l.forward(x, h0, c0, len);
            }
            return nb::make_tuple(o.output, nb::make_tuple(o.h_n, o.c_n));
          },
          "input"_a, "hx"_a = nb::none(), "lengths"_a = nb::none(), "(output, (h_n, c_n)), as torch.nn.LSTM.");

  // F.multi_head_attention_forward's core: nn.MultiheadAttention's forward over the caller's weights
  // (gradients flow to them), masks in its convention (boolean True = masked out).
  nb::module_ f = nb::borrow<nb::module_>(m.attr("functional"));  // made by bind_functional
  f.def(
      "multi_head_attention",
      [](nb::handle query, nb::handle key, nb::handle value, int64_t num_heads, nb::handle in_proj_weight,
         nb::handle in_proj_bias, nb::handle out_proj_weight, nb::handle out_proj_bias, nb::handle key_padding_mask,
         bool need_weights, nb::handle attn_mask, bool average_attn_weights, bool is_causal, bool batch_first) {
        const Tensor w_in = to_tensor(in_proj_weight), w_out = to_tensor(out_proj_weight);
        const Tensor b_in = opt_tensor(in_proj_bias), b_out = opt_tensor(out_proj_bias);
        const int64_t E = w_out.size(0);
        QKV_CHECK(w_in.dim() == 2 && w_in.size(0) == 3 * E && w_in.size(1) == E && w_out.dim() == 2 && w_out.size(1) == E,
                  "multi_head_attention: in_proj_weight ", shape_str(w_in.shape()), " and out_proj_weight ",
                  shape_str(w_out.shape()), " should be [3E, E] and [E, E]");
        QKV_CHECK(b_in.defined() == b_out.defined(), "multi_head_attention: give both biases or neither");
        nn::MultiheadAttention a(E, num_heads, 0.f, b_in.defined(), 0, 0, batch_first);
        a.in_proj_weight = w_in, a.out_proj->weight = w_out;
        if (b_in.defined()) a.in_proj_bias = b_in, a.out_proj->bias = b_out;
        a.eval();
        const Tensor q = to_tensor(query), k = to_tensor(key), v = to_tensor(value);
        const Tensor kpm = opt_tensor(key_padding_mask), am = opt_tensor(attn_mask);
        nn::MultiheadAttention::Output o;
        {
          nb::gil_scoped_release release;
          o = a.forward(q, k, v, kpm, need_weights, am, average_attn_weights, is_causal);
        }
        return mha_output(o);
      },
      "query"_a, "key"_a, "value"_a, "num_heads"_a, "in_proj_weight"_a, "in_proj_bias"_a, "out_proj_weight"_a,
      "out_proj_bias"_a, "key_padding_mask"_a = nb::none(), "need_weights"_a = true, "attn_mask"_a = nb::none(),
      "average_attn_weights"_a = true, "is_causal"_a = false, "batch_first"_a = false,
      "Multi-head attention with the caller's packed weights (F.multi_head_attention_forward's in_proj /\n"
      "out_proj, nn.MultiheadAttention's masks: boolean True = masked out, float added): (output, weights\n"
      "or None). Gradients flow to the inputs and the weights.");
}

}  // namespace qkv::python
