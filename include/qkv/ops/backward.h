// Reverse mode (torch.autograd.backward / torch.autograd.grad) over the tape of autograd/node.h.
//
// A post-order walk over grad_fn edges orders the nodes so that every consumer comes before its
// inputs; each node's rule runs once, with the sum (ops' add) of the gradients its outputs received;
// leaves accumulate into .grad as in PyTorch (in place when nobody else shares the buffer). The
// rules' saved tensors are freed as the walk passes them, unless retain_graph. The walk itself runs
// under NoGradGuard.
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv::autograd {

// d(root)/d(leaves), seeded with `grad` (ones for a scalar when undefined); see Tensor::backward.
void backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// Gradients of `outputs` (seeded with `grads`) with respect to `inputs`, returned rather than
// accumulated into .grad (torch.autograd.grad), as computed: not copied, so in the layout the
// backward wrote (attention: q's). Inputs that do not influence the outputs get zeros.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs, bool retain_graph = false);

}  // namespace qkv::autograd
