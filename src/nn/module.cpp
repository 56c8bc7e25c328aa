#include "qkv/nn/module.h"

#include <functional>
#include <map>
#include <memory>
#include <set>

namespace qkv::nn {

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  value.requires_grad_(true);
  params_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  buffers_.emplace_back(name, value);
  return value;
}

Tensor Module::register_constant(Tensor value) {
  constants_.push_back(value);
  return value;
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
                     bool buffers) const {
  for (const auto& [n, t] : buffers ? buffers_ : params_) out.emplace_back(prefix + n, t);
  for (const auto& [n, m] : children_) m->collect(prefix + n + ".", out, buffers);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, false);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, true);
  return out;
}

void Module::to(Device device) {
  QKV_CHECK(device_available(device), "Module::to(", device.str(), "): ", device.str(),
            " is not available in this build of qkv or on this machine");
  std::map<const Storage*, std::shared_ptr<Storage>> moved;  // old storage → its copy on `device`
  auto move = [&](const Tensor& t) {
    TensorImpl& impl = t.impl();
    impl.grad.reset();
    if (impl.storage->device == device) return;
    auto it = moved.find(impl.storage.get());
    if (it == moved.end()) {
      const Storage& old = *impl.storage;
      auto fresh = std::make_shared<Storage>(old.nbytes, device);
      copy_bytes(fresh->data, device, old.data, old.device, old.nbytes);
      it = moved.emplace(&old, std::move(fresh)).first;
    }
    impl.storage = it->second;
  };
  for (const auto& [name, t] : named_parameters()) move(t);
  for (const auto& [name, t] : named_buffers()) move(t);
  move_constants(move);
}

void Module::move_constants(const std::function<void(const Tensor&)>& move) {
  for (const Tensor& t : constants_) move(t);
  for (const auto& [name, m] : children_) m->move_constants(move);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : named_parameters()) out[n] = t.detach();
  for (auto& [n, t] : named_buffers()) out[n] = t.detach();
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::set<std::string> used;
  auto all = named_parameters();
  for (auto& nb : named_buffers()) all.push_back(nb);
  for (auto& [name, p] : all) {
    auto it = state.find(name);
    if (it == state.end()) {
      QKV_CHECK(!strict, "load_state_dict: missing parameter \"", name, "\" ", shape_str(p.shape()));
      continue;
    }
    QKV_CHECK(it->second.shape() == p.shape(), "load_state_dict: parameter \"", name, "\" has shape ",
              shape_str(p.shape()), " but the state has ", shape_str(it->second.shape()));
    p.detach().copy_(it->second);
    used.insert(name);
  }
  if (strict)
    for (auto& [name, t] : state)
      QKV_CHECK(used.count(name), "load_state_dict: unexpected parameter \"", name, "\" ", shape_str(t.shape()));
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) {
    Tensor p = t;
    p.zero_grad();
  }
}

}  // namespace qkv::nn
