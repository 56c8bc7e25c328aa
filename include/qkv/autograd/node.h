// The tape. Each differentiable op that sees an input requiring grad records a Node on its output:
// the inputs it needs gradients for, and its backward rule — a function from the gradient of the
// output to the gradients of the inputs (one per input, in order; undefined = no gradient).
// Reverse mode (engine.cpp) walks the nodes from the loss in reverse topological order,
// accumulating gradients into leaves (parameters) and freeing each node's saved tensors unless
// asked to retain the graph.
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

#include "qkv/core/tensor.h"

namespace qkv::autograd {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
using MultiBackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

struct Node {
  std::string name;                                  // the op, for messages ("matmul")
  std::vector<std::shared_ptr<TensorImpl>> inputs;   // null where the input needs no gradient
  std::vector<Shape> input_shapes;                   // to check what backward returns
  MultiBackwardFn backward;                          // outputs' gradients → inputs'; empty once freed
  int num_outputs = 1;
};

// True when grad mode is on and any of the inputs requires grad.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Records `fn` as the backward rule of `output` (which becomes a non-leaf requiring grad) when
// needs_grad(inputs); otherwise does nothing. Returns `output`.
Tensor record(Tensor output, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn);

// record for an op with several outputs: one Node whose rule gets all their gradients (output i's
// at index i, undefined where none flowed). Returns `outputs`.
std::vector<Tensor> record_outputs(std::vector<Tensor> outputs, const char* name, const std::vector<Tensor>& inputs,
                                   MultiBackwardFn fn);

// Runs reverse mode from `root`, seeded with `grad`; see Tensor::backward.
void backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// Gradients of `outputs` (seeded with `grads`) with respect to `inputs`, returned rather than
// accumulated into .grad (torch.autograd.grad). Inputs that do not influence the outputs get zeros.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs, bool retain_graph = false);

}  // namespace qkv::autograd
