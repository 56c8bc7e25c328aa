// Grad mode: whether ops record their backward rules on the tape. NoGradGuard turns recording off
// for a scope (inference, the optimizer's update, the backward pass itself), like torch.no_grad().
#pragma once

namespace qkv::autograd {

bool grad_enabled();
void set_grad_enabled(bool on);

class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace qkv::autograd

namespace qkv {
using autograd::NoGradGuard;
}
