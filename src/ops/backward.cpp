// Reverse mode over the tape of Nodes (autograd/node.h): the engine behind Tensor::backward and
// autograd::grad. It lives in ops, not beside the tape, because summing gradients is an op (add):
// the tape stays free of arithmetic and of devices.
#include "qkv/ops/backward.h"

#include <unordered_map>
#include <unordered_set>

#include "dispatch.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/arith.h"

namespace qkv::autograd {

namespace {

// Post-order DFS over grad_fn edges from `roots`; returns nodes with every consumer before its inputs.
std::vector<Node*> topo_order(const std::vector<Node*>& roots) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack;
  for (Node* r : roots) {
    if (!r || seen.count(r)) continue;
    seen.insert(r);
    stack.push_back({r, 0});
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->inputs.size()) {
        const auto& in = n->inputs[i++];
        Node* child = in && in->grad_fn ? in->grad_fn.get() : nullptr;
        if (child && !seen.count(child)) {
          seen.insert(child);
          stack.push_back({child, 0});
        }
      } else {
        order.push_back(n);
        stack.pop_back();
      }
    }
  }
  return {order.rbegin(), order.rend()};
}

// The engine proper. When `capture` is given, gradients reaching those tensors are stored there
// (and nothing is accumulated into .grad); otherwise leaves accumulate into .grad.
void run(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds, bool retain_graph,
         std::unordered_map<TensorImpl*, Tensor>* capture) {
  NoGradGuard no_grad;
  const ops_detail::BackwardPhase phase;  // (QKV_PROFILE=1 lists the backward's dispatches apart)
  std::unordered_map<Node*, std::vector<Tensor>> pending;  // per node, its outputs' gradients so far
  std::vector<Node*> root_nodes;

  auto deliver = [&](const std::shared_ptr<TensorImpl>& impl, const Tensor& g) {
    if (capture) {
      auto it = capture->find(impl.get());
      if (it != capture->end()) it->second = it->second.defined() ? add(it->second, g) : g;
    } else if (!impl->grad_fn || impl->retains_grad) {
      if (impl->requires_grad || impl->retains_grad) {
        if (!impl->grad) {
          // Share g's storage (no copy) through a fresh TensorImpl (not g's own, which dense() may
          // hand back: two leaves given one g must not share the .grad that each accumulates into).
          impl->grad = (g.is_contiguous() ? g.detach() : g.contiguous_copy()).impl_ptr();
        } else if (impl->grad->storage.use_count() == 1) {
          // Nobody else sees this storage: accumulate in place.
          Tensor acc(impl->grad);
          add_(acc, g);
        } else {
          // The storage is shared with another gradient (say, add's backward handed the same tensor
          // to both inputs): a new sum, so the other one is left as it was.
          impl->grad = add(Tensor(impl->grad), g).impl_ptr();
        }
      }
    }
    if (impl->grad_fn) {
      auto& slots = pending[impl->grad_fn.get()];
      slots.resize(static_cast<size_t>(impl->grad_fn->num_outputs));
      Tensor& slot = slots[static_cast<size_t>(impl->output_nr)];
      if (!slot.defined())
        slot = g;
      else if (slot.impl_ptr().use_count() == 1 && slot.impl_ptr()->storage.use_count() == 1 && slot.is_contiguous() &&
               slot.shape() == g.shape())
        add_(slot, g);  // a sum nothing else sees (a tensor used at every step of a loop): in place
      else
        slot = add(slot, g);
    }
  };

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    QKV_CHECK(r.requires_grad(), "backward: the tensor ", r.str(),
              " does not require grad and has no grad_fn (was it computed under NoGradGuard, or from "
              "inputs that do not require grad?)");
    const Tensor& s = seeds[i];
    QKV_CHECK(s.shape() == r.shape(), "backward: gradient of shape ", shape_str(s.shape()),
              " for an output of shape ", shape_str(r.shape()));
    deliver(r.impl_ptr(), s);
    if (r.grad_fn()) root_nodes.push_back(r.grad_fn().get());
  }
  // (a leaf that is itself a root gets its whole gradient here)
  if (!capture)
    for (const Tensor& r : roots)
      if (r.is_leaf())
        for (auto& hook : r.impl().post_accumulate_grad_hooks) hook.second();

  const std::vector<Node*> order = topo_order(root_nodes);
  // Leaves with post-accumulate-grad hooks: the inputs slots of the walk's nodes that still lead to
  // each (its deliveries to come), and whether any gradient reached it. When the last slot is
  // passed, its .grad is final for this pass and its hooks run — in the middle of the walk, which
  // is what lets the data-parallel reducer send early gradients while later ones are computed.
  struct Awaited {
    int slots = 0;
    bool reached = false;
  };
  std::unordered_map<TensorImpl*, Awaited> awaited;
  if (!capture)
    for (Node* n : order)
      for (const auto& in : n->inputs)
        if (in && !in->grad_fn && !in->post_accumulate_grad_hooks.empty()) ++awaited[in.get()].slots;
  auto passed = [&](const std::shared_ptr<TensorImpl>& impl, bool reached) {
    if (awaited.empty()) return;  // no hooks: no lookups
    auto it = awaited.find(impl.get());
    if (it == awaited.end()) return;
    it->second.reached |= reached;
    if (--it->second.slots == 0 && it->second.reached)
      for (auto& hook : impl->post_accumulate_grad_hooks) hook.second();
  };

  for (Node* node : order) {
    auto it = pending.find(node);
    if (it == pending.end()) {  // nothing flowed here
      for (const auto& in : node->inputs)
        if (in) passed(in, false);
      continue;
    }
    std::vector<Tensor> g = std::move(it->second);
    pending.erase(it);
    QKV_CHECK(node->backward, "backward: trying to backward through the graph a second time (at ", node->name,
              "); its saved tensors were freed — pass retain_graph=true the first time");
    const std::vector<TensorBase> returned = node->backward(std::vector<TensorBase>(g.begin(), g.end()));
    const std::vector<Tensor> grads(returned.begin(), returned.end());
    QKV_CHECK(grads.size() == node->inputs.size(), "backward of ", node->name, " returned ", grads.size(),
              " gradients for ", node->inputs.size(), " inputs");
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!node->inputs[i]) continue;
      if (grads[i].defined()) {
        QKV_CHECK(grads[i].shape() == node->input_shapes[i], "backward of ", node->name, ": gradient ", i,
                  " has shape ", shape_str(grads[i].shape()), ", input has ", shape_str(node->input_shapes[i]));
        deliver(node->inputs[i], grads[i]);
      }
      passed(node->inputs[i], grads[i].defined());
    }
    if (!retain_graph) {
      node->backward = nullptr;  // frees the saved tensors
    }
  }
}
}  // namespace

void backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  Tensor seed = grad;
  if (!seed.defined()) {
    QKV_CHECK(root.numel() == 1, "backward: grad can be implicitly created only for scalar outputs; ", root.str(),
              " needs an explicit gradient");
    // made where the root is (a fill there, no copy from the host: a recorded step's backward
    // queues nothing that a CUDA graph cannot hold)
    seed = Tensor::empty(root.shape(), DType::f32, root.device());
    seed.fill_(1.f);
  }
  run({root}, {seed}, retain_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs, bool retain_graph) {
  QKV_CHECK(outputs.size() == grads.size(), "autograd::grad: ", outputs.size(), " outputs but ", grads.size(),
            " gradients");
  std::unordered_map<TensorImpl*, Tensor> capture;
  for (const Tensor& t : inputs) capture[t.impl_ptr().get()] = Tensor();
  run(outputs, grads, retain_graph, &capture);
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) {
    Tensor g = capture[t.impl_ptr().get()];
    // as computed, without a copy (torch.autograd.grad's too): a kernel's layout stays, e.g. attention's
    // dq in q's heads-inner layout when q's heads were split off a projection
    out.push_back(g.defined() ? g.detach() : Tensor::zeros(t.shape(), DType::f32, t.device()));
  }
  return out;
}

}  // namespace qkv::autograd

namespace qkv {
void Tensor::backward(const Tensor& grad, bool retain_graph) const { autograd::backward(*this, grad, retain_graph); }
}  // namespace qkv
