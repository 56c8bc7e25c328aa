// The tape. Each differentiable op that sees an input requiring grad records a Node on its output:
// the inputs it needs gradients for, and its backward rule — a function from the gradient of the
// output to the gradients of the inputs (one per input, in order; undefined = no gradient).
// Reverse mode (ops/backward.h) walks the nodes from the loss in reverse topological order,
// accumulating gradients into leaves (parameters) and freeing each node's saved tensors unless
// asked to retain the graph.
//
// This floor is the tape's data structure and nothing else: it knows tensors as TensorBase (core)
// and computes nothing. Summing gradients takes an op, so reverse mode itself lives one floor up,
// in ops/ (as PyTorch's engine sits above ATen).
//
// Most ops have one output. An op with several (split: the pieces of one tensor) records one Node
// for all of them with record_outputs; its rule receives every output's gradient at once
// (undefined where none flowed), so it can write them side by side instead of each piece
// scattering into its own zero-filled copy of the input (PyTorch's SplitBackward).
//
// Saved tensors must be detach()ed copies of views, never the output itself with its grad_fn,
// or the node would keep itself alive through a reference cycle.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/tensor.h"

namespace qkv::autograd {

// The rule as the engine calls it: all outputs' gradients → all inputs' gradients.
using MultiBackwardFn = std::function<std::vector<TensorBase>(const std::vector<TensorBase>& grad_outputs)>;

struct Node {
  std::string name;                                  // the op, for messages ("matmul")
  std::vector<std::shared_ptr<TensorImpl>> inputs;   // null where the input needs no gradient
  std::vector<Shape> input_shapes;                   // to check what backward returns
  MultiBackwardFn backward;                          // outputs' gradients → inputs'; empty once freed
  int num_outputs = 1;
  // Frees the graph behind it without recursion (tape.cpp): a chain of 10^5 layers overflowed the
  // stack through one nested destructor per op.
  ~Node();
};

// True when grad mode is on and any of the inputs requires grad.
bool needs_grad(std::initializer_list<TensorBase> inputs);
bool needs_grad(const std::vector<TensorBase>& inputs);
// (asked without copying the inputs: every op asks, and outside autograd — decoding — the answer is
// no, and nothing more is built)
template <class T>
bool needs_grad(const std::vector<T>& inputs) {
  if (!grad_enabled()) return false;
  for (const T& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

// A node for an op with these inputs (the engine's view of it), and its attachment to the outputs.
std::shared_ptr<Node> make_node(const char* name, const std::vector<TensorBase>& inputs, MultiBackwardFn fn,
                                int num_outputs);
void attach(const TensorBase& output, const std::shared_ptr<Node>& node, int output_nr);

// Records `fn` (const T& grad_output → std::vector<T>, one gradient per input) as the backward rule
// of `output`, which becomes a non-leaf requiring grad, when needs_grad(inputs); otherwise does
// nothing. Returns `output`. T is the tensor type of the caller (qkv::Tensor in ops/).
template <class T, class F>
T record(T output, const char* name, const std::vector<T>& inputs, F fn) {
  if (!needs_grad(inputs)) return output;
  std::vector<TensorBase> in(inputs.begin(), inputs.end());
  auto node = make_node(name, in, [fn = std::move(fn)](const std::vector<TensorBase>& g) {
    std::vector<T> r = fn(T(g[0]));
    return std::vector<TensorBase>(r.begin(), r.end());
  }, 1);
  attach(output, node, 0);
  return output;
}

// record for an op with several outputs: one Node whose rule gets all their gradients (output i's
// at index i, undefined where none flowed). Returns `outputs`.
template <class T, class F>
std::vector<T> record_outputs(std::vector<T> outputs, const char* name, const std::vector<T>& inputs, F fn) {
  if (!needs_grad(inputs)) return outputs;
  std::vector<TensorBase> in(inputs.begin(), inputs.end());
  auto node = make_node(name, in, [fn = std::move(fn)](const std::vector<TensorBase>& g) {
    std::vector<T> r = fn(std::vector<T>(g.begin(), g.end()));
    return std::vector<TensorBase>(r.begin(), r.end());
  }, static_cast<int>(outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) attach(outputs[i], node, static_cast<int>(i));
  return outputs;
}

}  // namespace qkv::autograd
