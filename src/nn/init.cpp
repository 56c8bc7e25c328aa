#include "qkv/nn/init.h"

#include <cmath>

namespace qkv::nn::init {

namespace {
thread_local bool skipping = false;  // a SkipInit lives on this thread
}

SkipInit::SkipInit() : outer_(skipping) { skipping = true; }
SkipInit::~SkipInit() { skipping = outer_; }

void uniform_(Tensor& t, Generator& gen, float low, float high) {
  if (!skipping) t.copy_(Tensor::rand(t.shape(), gen, low, high));
}

void normal_(Tensor& t, Generator& gen, float mean, float std) {
  if (!skipping) t.copy_(Tensor::randn(t.shape(), gen, mean, std));
}

void xavier_uniform_(Tensor& t, Generator& gen, float gain) {
  QKV_CHECK(t.dim() >= 2, "xavier_uniform_: needs a tensor of rank ≥ 2, got ", shape_str(t.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  const float fan_in = static_cast<float>(t.size(1) * receptive), fan_out = static_cast<float>(t.size(0) * receptive);
  const float a = gain * std::sqrt(6.f / (fan_in + fan_out));
  uniform_(t, gen, -a, a);
}

void zeros_(Tensor& t) {
  if (!skipping) t.fill_(0.f);
}
void ones_(Tensor& t) {
  if (!skipping) t.fill_(1.f);
}

}  // namespace qkv::nn::init
