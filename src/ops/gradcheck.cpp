#include "qkv/ops/gradcheck.h"

#include <cmath>

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops/backward.h"
#include "qkv/core/rng.h"

namespace qkv::autograd {

namespace {
// sum(y * r) accumulated in double.
double project(const Tensor& y, const std::vector<float>& r) {
  std::vector<float> v = y.to_vector();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * r[i];
  return s;
}
}  // namespace

GradcheckResult gradcheck(const Function& f, const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  GradcheckResult res;
  Tensor y = f(inputs);
  Generator gen(1234);
  Tensor r = Tensor::randn(y.shape(), gen);
  std::vector<float> rv = r.to_vector();

  std::vector<Tensor> wrt;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) wrt.push_back(t);
  QKV_CHECK(!wrt.empty(), "gradcheck: no input requires grad");
  QKV_CHECK(y.requires_grad(), "gradcheck: the output does not depend on any input that requires grad");
  std::vector<Tensor> analytic = grad({y}, {r}, wrt);

  NoGradGuard no_grad;
  for (size_t k = 0; k < wrt.size(); ++k) {
    Tensor x = wrt[k];
    QKV_CHECK(x.is_contiguous(), "gradcheck: inputs must be contiguous");
    std::vector<float> a = analytic[k].to_vector();
    float* p = x.data();
    for (int64_t i = 0; i < x.numel(); ++i) {
      float orig = p[i];
      p[i] = static_cast<float>(orig + opt.eps);
      double up = project(f(inputs), rv);
      p[i] = static_cast<float>(orig - opt.eps);
      double down = project(f(inputs), rv);
      p[i] = orig;
      double numeric = (up - down) / (2 * opt.eps);
      double err = std::fabs(numeric - a[i]);
      res.max_abs_error = std::max(res.max_abs_error, err);
      if (res.ok && err > opt.atol + opt.rtol * std::fabs(numeric)) {
        res.ok = false;
        res.message = detail::concat("gradcheck: input ", k, " ", x.str(), " element ", i, ": analytic ", a[i],
                                     " vs numeric ", numeric);
      }
    }
  }
  return res;
}

}  // namespace qkv::autograd
