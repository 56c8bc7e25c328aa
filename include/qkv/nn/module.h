// Module: a named tree of parameters and submodules, like torch.nn.Module. Parameter names are
// dotted paths ("self_attn.out_proj.weight") so a PyTorch state_dict maps one to one.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/names.h"
#include "qkv/ops/inference_weight.h"
#include "qkv/ops/tensor.h"

namespace qkv::nn {

// The weights decoding steps read: the f32 parameters, bf16 copies or int8 rows
// (ops/inference_weight.h). Set on a loaded model (models/load.h's LoadOptions), never while training.
using qkv::InferenceWeight;
using qkv::InferenceWeights;

class Module {
 public:
  virtual ~Module() = default;

  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  // State that is not trained by gradients but saved with the parameters (BatchNorm2d's running
  // statistics), under dotted names as PyTorch's buffers.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;

  // Copies values (not storage) from `state` into parameters and buffers of the same names and
  // shapes. strict: every one must be present and no extra names may appear.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  std::map<std::string, Tensor> state_dict() const;  // parameters and buffers

  // Moves every parameter and buffer to `device` in place (torch's module.to(device)): each keeps
  // its TensorImpl — so the modules' own handles (Linear::weight, …) follow — and gets a storage
  // on the device with the same bytes; tensors that shared a storage (tied weights) still share
  // one. Gradients are dropped. A device this build or machine lacks is a qkv::Error.
  void to(Device device);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();

 protected:
  Tensor register_parameter(const std::string& name, Tensor value);
  Tensor register_buffer(const std::string& name, Tensor value);
  // A constant the module computes rather than loads (a sinusoidal table): not saved or loaded, but
  // moved by to(device) with the rest (PyTorch's register_buffer(…, persistent=False)).
  Tensor register_constant(Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool buffers) const;
  void move_constants(const std::function<void(const Tensor&)>& move);
  std::vector<std::pair<std::string, Tensor>> params_, buffers_;
  std::vector<Tensor> constants_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace qkv::nn
