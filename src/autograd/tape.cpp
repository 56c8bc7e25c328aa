// Grad mode and the recording of nodes (node.h, grad_mode.h).
#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"

#include <memory>
#include <vector>

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

// Freeing a graph: a Node owns its inputs' TensorImpls, each of which owns the Node that made it
// (grad_fn), and so on back to the leaves — freed by the default destructors as one nested call per
// op, so `qkv train --set model.n_layer=100000` overflowed the stack when its first step's graph
// was freed (PyTorch frees its graph the same iterative way, for the same reason). Here the
// outermost ~Node keeps a list of the inputs still to release, and a nested ~Node (a grad_fn whose
// last owner was released) adds its inputs to that list instead of releasing them itself: at most
// two destructors deep, whatever the graph's depth.
Node::~Node() {
  thread_local std::vector<std::shared_ptr<TensorImpl>>* pending = nullptr;
  if (pending) {  // inside the outermost ~Node's loop: hand the inputs over
    for (auto& t : inputs)
      if (t) pending->push_back(std::move(t));
    return;
  }
  std::vector<std::shared_ptr<TensorImpl>> list;
  for (auto& t : inputs)
    if (t) list.push_back(std::move(t));
  pending = &list;
  while (!list.empty()) {
    std::shared_ptr<TensorImpl> t = std::move(list.back());
    list.pop_back();
    // the last owner of t: take its grad_fn out first, so freeing t frees no Node itself
    std::shared_ptr<Node> node = t.use_count() == 1 ? std::move(t->grad_fn) : nullptr;
    t.reset();
    node.reset();  // its ~Node (when this was the last owner) appends its inputs to `list`
  }
  pending = nullptr;
}

void attach(const TensorBase& output, const std::shared_ptr<Node>& node, int output_nr) {
  output.impl().grad_fn = node;
  output.impl().output_nr = output_nr;
  output.impl().requires_grad = true;
}

}  // namespace qkv::autograd
