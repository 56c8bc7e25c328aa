// Module: a named tree of parameters and submodules, like torch.nn.Module. Parameter names are
// dotted paths ("self_attn.out_proj.weight") so a PyTorch state_dict maps one to one.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::nn {

class Module {
 public:
  virtual ~Module() = default;

  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;

  // Copies values (not storage) from `state` into parameters of the same names and shapes.
  // strict: every parameter must be present and no extra names may appear.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  std::map<std::string, Tensor> state_dict() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();

 protected:
  Tensor register_parameter(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace qkv::nn
