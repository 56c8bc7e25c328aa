#include "kernels/cpu/conv.h"

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/onednn_call.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DT = memory::data_type;

// The problem's operands as oneDNN sees them: in the caller's NCHW layout (`tag` plain) or in
// whatever layout the primitive prefers (`tag` any).
struct Descs {
  memory::desc x, w, b, y;
  memory::dims strides, dilates, pad_l, pad_r;
};

Descs descs(const Conv2dProblem& p, Tag tag) {
  Descs d;
  const bool grouped = p.groups > 1;
  const memory::dims wdims = grouped ? memory::dims{p.groups, p.O / p.groups, p.C / p.groups, p.KH, p.KW}
                                     : memory::dims{p.O, p.C, p.KH, p.KW};
  d.x = memory::desc({p.N, p.C, p.H, p.W}, DT::f32, tag == Tag::any ? Tag::any : Tag::nchw);
  d.w = memory::desc(wdims, DT::f32, tag == Tag::any ? Tag::any : grouped ? Tag::goihw : Tag::oihw);
  d.b = p.bias ? memory::desc({p.O}, DT::f32, Tag::x) : memory::desc();
  d.y = memory::desc({p.N, p.O, p.out_h(), p.out_w()}, DT::f32, tag == Tag::any ? Tag::any : Tag::nchw);
  d.strides = {p.stride_h, p.stride_w};
  d.dilates = {p.dilation_h - 1, p.dilation_w - 1};  // oneDNN counts the gaps
  d.pad_l = {p.pad_h, p.pad_w};
  // the right/bottom padding that gives PyTorch's output size (the last window may stop short)
  d.pad_r = {(p.out_h() - 1) * p.stride_h + p.dilation_h * (p.KH - 1) + 1 - p.H - p.pad_h,
             (p.out_w() - 1) * p.stride_w + p.dilation_w * (p.KW - 1) + 1 - p.W - p.pad_w};
  return d;
}

// A layout change between the caller's NCHW buffer and a primitive's preferred layout, built once
// (creating a reorder primitive costs about as much as running it at small sizes).
struct Reorder {
  memory::desc from, to;
  dnnl::reorder prim;  // empty when the layouts agree
  Reorder() = default;
  Reorder(const memory::desc& f, const memory::desc& t, const dnnl::engine& e) : from(f), to(t) {
    if (f != t) prim = dnnl::reorder(dnnl::reorder::primitive_desc(e, f, e, t));
  }
};

// One problem's primitives and their reorders, built on first use and kept.
struct Primitives {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  Reorder fwd_x, fwd_w, fwd_y;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_data bwd_data;
  Reorder bd_dy, bd_w, bd_dx;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd;
  dnnl::convolution_backward_weights bwd_weights;
  Reorder bw_dy, bw_x, bw_dw;
};

using Key = std::array<int64_t, 16>;

// The problem and the threads a convolution may use now: oneDNN's convolutions split their work
// over the threads there were when they were made and keep that split whatever the count when they
// run (measured, oneDNN 2.6's jit:avx512_core: one made for 2 threads and run 200 times with 1
// allowed kept a second thread busy), so a convolution made for 2 threads would go on using 2
// after the thread budget (core/thread_budget.h) chose 1 beside a busy core — a ConvNet then
// trained at 0.80× its 1-thread speed with 2 threads there (docs/BENCHMARKS.md). oneDNN's matmul
// reads the count when it runs (the same test: no second thread).
Key key_of(const Conv2dProblem& p) {
  return {p.N, p.C, p.H, p.W, p.O, p.KH, p.KW, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w,
          p.groups, p.bias ? 1 : 0, num_threads()};
}

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mutex;  // one convolution at a time: the primitives and the cache are shared
  std::map<Key, std::unique_ptr<Primitives>> cache;

  Primitives& get(const Conv2dProblem& p) {
    std::unique_ptr<Primitives>& e = cache[key_of(p)];
    if (!e) {
      e = std::make_unique<Primitives>();
      const Descs d = descs(p, Tag::any);
      const auto algo = dnnl::algorithm::convolution_direct;
      auto fd = p.bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, d.x, d.w, d.b, d.y,
                                                         d.strides, d.dilates, d.pad_l, d.pad_r)
                       : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, d.x, d.w, d.y,
                                                         d.strides, d.dilates, d.pad_l, d.pad_r);
      e->fwd_pd = dnnl::convolution_forward::primitive_desc(fd, engine);
      e->fwd = dnnl::convolution_forward(e->fwd_pd);
      const Descs u = descs(p, Tag::nchw);
      e->fwd_x = Reorder(u.x, e->fwd_pd.src_desc(), engine);
      e->fwd_w = Reorder(u.w, e->fwd_pd.weights_desc(), engine);
      e->fwd_y = Reorder(e->fwd_pd.dst_desc(), u.y, engine);
    }
    return *e;
  }
  Primitives& get_backward(const Conv2dProblem& p) {
    Primitives& e = get(p);
    if (!e.bwd_data) {
      const Descs d = descs(p, Tag::any);
      const auto algo = dnnl::algorithm::convolution_direct;
      e.bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(
          dnnl::convolution_backward_data::desc(algo, d.x, d.w, d.y, d.strides, d.dilates, d.pad_l, d.pad_r), engine,
          e.fwd_pd);
      e.bwd_data = dnnl::convolution_backward_data(e.bwd_data_pd);
      auto wd = p.bias ? dnnl::convolution_backward_weights::desc(algo, d.x, d.w, d.b, d.y, d.strides, d.dilates,
                                                                  d.pad_l, d.pad_r)
                       : dnnl::convolution_backward_weights::desc(algo, d.x, d.w, d.y, d.strides, d.dilates, d.pad_l,
                                                                  d.pad_r);
      e.bwd_weights_pd = dnnl::convolution_backward_weights::primitive_desc(wd, engine, e.fwd_pd);
      e.bwd_weights = dnnl::convolution_backward_weights(e.bwd_weights_pd);
      const Descs u = descs(p, Tag::nchw);
      e.bd_dy = Reorder(u.y, e.bwd_data_pd.diff_dst_desc(), engine);
      e.bd_w = Reorder(u.w, e.bwd_data_pd.weights_desc(), engine);
      e.bd_dx = Reorder(e.bwd_data_pd.diff_src_desc(), u.x, engine);
      e.bw_dy = Reorder(u.y, e.bwd_weights_pd.diff_dst_desc(), engine);
      e.bw_x = Reorder(u.x, e.bwd_weights_pd.src_desc(), engine);
      e.bw_dw = Reorder(e.bwd_weights_pd.diff_weights_desc(), u.w, engine);
    }
    return e;
  }

  // The caller's buffer in the primitive's layout: itself when they agree, else a reordered copy.
  memory in(const Reorder& r, const float* data) {
    memory u(r.from, engine, const_cast<float*>(data));
    if (!r.prim) return u;
    memory m(r.to, engine);
    r.prim.execute(stream, u, m);
    return m;
  }
  // Where a primitive writes a result for the caller's buffer: the buffer itself when the layouts
  // agree, else a scratch buffer that `out` reorders into it afterwards.
  memory out_buffer(const Reorder& r, float* data) {
    return r.prim ? memory(r.from, engine) : memory(r.to, engine, data);
  }
  void out(const Reorder& r, memory& m, float* data) {
    if (!r.prim) return;
    memory u(r.to, engine, data);
    r.prim.execute(stream, m, u);
  }
};

Context& context() {
  static Context ctx;
  return ctx;
}

bool empty(const Conv2dProblem& p) { return p.N == 0 || p.O == 0 || p.C == 0 || p.out_h() <= 0 || p.out_w() <= 0; }

void zero(float* p, int64_t n) {
  if (p && n > 0) std::memset(p, 0, sizeof(float) * static_cast<size_t>(n));
}

template <typename F>
void guarded(const char* what, const Conv2dProblem& p, F&& f) {
  try {
    const OneDnnCall call;  // (kernels/cpu/onednn_call.h)
    f();
  } catch (const dnnl::error& e) {
    QKV_CHECK(false, what, ": oneDNN failed (", e.what(), ") for input [", p.N, ", ", p.C, ", ", p.H, ", ", p.W,
              "], weight [", p.O, ", ", p.C / p.groups, ", ", p.KH, ", ", p.KW, "], stride ", p.stride_h, "×",
              p.stride_w, ", padding ", p.pad_h, "×", p.pad_w, ", dilation ", p.dilation_h, "×", p.dilation_w,
              ", groups ", p.groups);
  }
}

}  // namespace

void conv2d_forward(const Conv2dProblem& p, const float* x, const float* w, const float* b, float* y) {
  if (empty(p)) return;
  guarded("conv2d", p, [&] {
    Context& ctx = context();
    std::lock_guard<std::mutex> lock(ctx.mutex);
    Primitives& e = ctx.get(p);
    memory mx = ctx.in(e.fwd_x, x), mw = ctx.in(e.fwd_w, w), my = ctx.out_buffer(e.fwd_y, y);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, my}};
    if (p.bias) args[DNNL_ARG_BIAS] = memory(memory::desc({p.O}, DT::f32, Tag::x), ctx.engine, const_cast<float*>(b));
    e.fwd.execute(ctx.stream, args);
    ctx.out(e.fwd_y, my, y);
    ctx.stream.wait();
  });
}

void conv2d_backward_data(const Conv2dProblem& p, const float* dy, const float* w, float* dx) {
  if (empty(p)) return zero(dx, p.N * p.C * p.H * p.W);
  guarded("conv2d backward", p, [&] {
    Context& ctx = context();
    std::lock_guard<std::mutex> lock(ctx.mutex);
    Primitives& e = ctx.get_backward(p);
    memory mdy = ctx.in(e.bd_dy, dy), mw = ctx.in(e.bd_w, w), mdx = ctx.out_buffer(e.bd_dx, dx);
    e.bwd_data.execute(ctx.stream, {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, mdx}});
    ctx.out(e.bd_dx, mdx, dx);
    ctx.stream.wait();
  });
}

void conv2d_backward_weights(const Conv2dProblem& p, const float* x, const float* dy, float* dw, float* db) {
  if (empty(p)) {
    zero(dw, p.O * (p.groups ? p.C / p.groups : 0) * p.KH * p.KW);
    return zero(db, p.bias ? p.O : 0);
  }
  guarded("conv2d backward", p, [&] {
    Context& ctx = context();
    std::lock_guard<std::mutex> lock(ctx.mutex);
    Primitives& e = ctx.get_backward(p);
    memory mdy = ctx.in(e.bw_dy, dy), mx = ctx.in(e.bw_x, x), mdw = ctx.out_buffer(e.bw_dw, dw);
    std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_WEIGHTS, mdw}};
    std::vector<float> db_scratch;
    if (p.bias) {
      if (!db) db_scratch.resize(static_cast<size_t>(p.O));
      args[DNNL_ARG_DIFF_BIAS] = memory(memory::desc({p.O}, DT::f32, Tag::x), ctx.engine, db ? db : db_scratch.data());
    }
    e.bwd_weights.execute(ctx.stream, args);
    ctx.out(e.bw_dw, mdw, dw);
    ctx.stream.wait();
  });
}

}  // namespace qkv::kernels::cpu
