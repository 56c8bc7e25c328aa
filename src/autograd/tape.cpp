// Grad mode and the recording of nodes (node.h, grad_mode.h).
#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"

namespace qkv::autograd {

namespace {
thread_local bool g_grad_enabled = true;
}

bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }

bool needs_grad(std::initializer_list<TensorBase> inputs) {
  if (!g_grad_enabled) return false;
  for (const TensorBase& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<TensorBase>& inputs) {
  if (!g_grad_enabled) return false;
  for (const TensorBase& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::shared_ptr<Node> make_node(const char* name, const std::vector<TensorBase>& inputs, MultiBackwardFn fn,
                                int num_outputs) {
  auto node = std::make_shared<Node>();
  node->name = name;
  for (const TensorBase& t : inputs) {
    node->inputs.push_back(t.defined() && t.requires_grad() ? t.impl_ptr() : nullptr);
    node->input_shapes.push_back(t.defined() ? t.shape() : Shape{});
  }
  node->backward = std::move(fn);
  node->num_outputs = num_outputs;
  return node;
}

void attach(const TensorBase& output, const std::shared_ptr<Node>& node, int output_nr) {
  output.impl().grad_fn = node;
  output.impl().output_nr = output_nr;
  output.impl().requires_grad = true;
}

}  // namespace qkv::autograd
