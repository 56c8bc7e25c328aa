#include "qkv/ops/view.h"

#include <algorithm>
#include <optional>

#include "qkv/autograd/node.h"
#include "qkv/ops/arith.h"

namespace qkv {

using autograd::record;

namespace {

// Resolves one -1 in `shape` against numel.
Shape infer_shape(const Shape& shape, int64_t numel, const Shape& from, const char* op) {
  Shape out = shape, known_dims = shape;
  int64_t infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      QKV_CHECK(infer < 0, op, ": only one dimension can be -1 in ", shape_str(shape));
      infer = static_cast<int64_t>(i);
      known_dims[i] = 1;
    } else {
      QKV_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in ", shape_str(shape));
    }
  }
  const int64_t known = numel_of(known_dims);  // checked: no wrapped product
  if (infer >= 0) {
    QKV_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for input of shape ",
              shape_str(from));
    out[infer] = numel / known;
  }
  QKV_CHECK(numel_of(out) == numel, op, ": shape ", shape_str(shape), " is invalid for input of shape ",
            shape_str(from), " (", numel, " elements)");
  return out;
}

// Strides for viewing (shape, strides) as `target` without copying, if possible (PyTorch's
// computeStride): each group of old dims that merges into new dims must be contiguous in itself.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& target) {
  if (old_shape.empty()) return Shape(target.size(), 1);
  if (numel_of(old_shape) == 0) return contiguous_strides(target);
  Shape out(target.size());
  int64_t view_d = static_cast<int64_t>(target.size()) - 1;
  int64_t chunk_numel = 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= target[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
    (void)chunk_numel;
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
  return t.as_strided(std::move(shape), std::move(strides), offset);
}

// t seen as `target` with strides `st` (view_strides'), its backward a reshape back; the input's
// shape kept only where a rule is recorded (a decoding step reshapes thousands of times a second)
Tensor view_of(const Tensor& t, Shape target, Shape st) {
  Tensor out = make_view(t, std::move(target), std::move(st), t.offset());
  if (!autograd::needs_grad({t})) return out;
  Shape in_shape = t.shape();
  return record(out, "view", {t}, [in_shape](const Tensor& g) { return std::vector<Tensor>{g.reshape(in_shape)}; });
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape target = infer_shape(shape, numel(), this->shape(), "view");
  auto st = view_strides(this->shape(), strides(), target);
  QKV_CHECK(st.has_value(), "view: shape ", shape_str(target), " is not compatible with input of shape ",
            shape_str(this->shape()), " and strides ", shape_str(strides()), "; use reshape (which copies)");
  return view_of(*this, std::move(target), std::move(*st));
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape target = infer_shape(shape, numel(), this->shape(), "reshape");
  if (auto st = view_strides(this->shape(), strides(), target))
    return view_of(*this, std::move(target), std::move(*st));
  return contiguous().view(target);
}

Tensor Tensor::permute(const Shape& dims) const {
  QKV_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: ", dims.size(), " dims given for a tensor of shape ",
            shape_str(shape()));
  Shape shp(dims.size()), st(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i]);
    QKV_CHECK(!seen[d], "permute: dim ", d, " repeats in ", shape_str(dims));
    seen[d] = true;
    shp[i] = shape()[d];
    st[i] = strides()[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  return record(make_view(*this, std::move(shp), std::move(st), offset()), "permute", {*this},
                [inverse](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  Shape dims(dim());
  for (int64_t i = 0; i < dim(); ++i) dims[i] = i;
  std::swap(dims[wrap_dim(d0)], dims[wrap_dim(d1)]);
  return permute(dims);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  d = wrap_dim(d);
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shp = shape();
  shp[d] = end - start;
  Tensor out = make_view(*this, std::move(shp), strides(), offset() + start * strides()[d]);
  if (!autograd::needs_grad({*this})) return out;  // (no rule, no copy of the input's shape, to build)
  Shape in_shape = shape();
  return record(out, "slice", {*this}, [in_shape, d, start, end](const Tensor& g) {
    Tensor full = Tensor::zeros(in_shape, DType::f32, g.device());
    full.detach().slice(d, start, end).copy_(g);
    return std::vector<Tensor>{full};
  });
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d);
  const int64_t n = shape()[d];
  QKV_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  const int64_t nd = dim() + 1;
  QKV_CHECK(d >= -nd && d < nd, "unsqueeze: dim ", d, " is out of range for a tensor of shape ", shape_str(shape()));
  if (d < 0) d += nd;
  Shape shp = shape();
  shp.insert(shp.begin() + d, 1);
  return view(shp);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d);
  if (shape()[d] != 1) return *this;
  Shape shp = shape();
  shp.erase(shp.begin() + d);
  return view(shp);
}

Tensor Tensor::expand(const Shape& target_in) const {
  QKV_CHECK(target_in.size() >= shape().size(), "expand: cannot expand ", shape_str(shape()), " to ",
            shape_str(target_in));
  Shape target = target_in;
  const size_t lead = target.size() - shape().size();
  for (size_t i = 0; i < shape().size(); ++i)
    if (target[lead + i] == -1) target[lead + i] = shape()[i];
  Shape st = broadcast_strides(*this, target);
  Shape in_shape = shape();
  return record(make_view(*this, target, st, offset()), "expand", {*this},
                [in_shape](const Tensor& g) { return std::vector<Tensor>{sum_to(g, in_shape)}; });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = contiguous_copy();
  return record(out, "clone", {*this}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Tensor::sum() const { return qkv::sum(*this); }
Tensor Tensor::mean() const { return qkv::mean(*this); }

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  QKV_CHECK(!ts.empty(), "cat: no tensors given");
  const Tensor& first = ts[0];
  dim = first.wrap_dim(dim);
  Shape out_shape = first.shape();
  int64_t total = 0;
  for (const Tensor& t : ts) {
    QKV_CHECK(t.dim() == first.dim(), "cat: tensors of rank ", first.dim(), " and ", t.dim());
    QKV_CHECK(t.device() == first.device(), "cat: tensors on ", first.device().str(), " and ", t.device().str());
    for (int64_t d = 0; d < t.dim(); ++d)
      QKV_CHECK(d == dim || t.shape()[d] == first.shape()[d], "cat: shapes ", shape_str(first.shape()), " and ",
                shape_str(t.shape()), " differ outside dim ", dim);
    total += t.shape()[dim];
  }
  out_shape[dim] = total;
  Tensor out = Tensor::empty(out_shape, DType::f32, first.device());
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const Tensor& t : ts) {
    out.detach().slice(dim, at, at + t.shape()[dim]).copy_(t);
    at += t.shape()[dim];
    sizes.push_back(t.shape()[dim]);
  }
  return record(out, "cat", ts, [sizes, dim](const Tensor& g) {
    std::vector<Tensor> gs;
    int64_t at = 0;
    for (int64_t s : sizes) {
      gs.push_back(g.slice(dim, at, at + s));
      at += s;
    }
    return gs;
  });
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  QKV_CHECK(!ts.empty(), "stack: no tensors given");
  std::vector<Tensor> us;
  for (const Tensor& t : ts) us.push_back(t.unsqueeze(dim));
  return cat(us, dim < 0 ? dim : dim);
}

namespace {

// The pieces' gradients as one dense tensor of in_shape when they already are its pieces along dim —
// one buffer their producer wrote them into (attention's backward does, for the pieces of one
// projection) —, else undefined.
Tensor pieces_as_one(const std::vector<Tensor>& g, const Shape& in_shape, int64_t size, int64_t dim) {
  const Shape dense = contiguous_strides(in_shape);
  for (size_t i = 0; i < g.size(); ++i) {
    if (!g[i].defined() || g[i].dtype() != DType::f32 || g[i].strides() != dense ||
        g[i].impl().storage != g[0].impl().storage ||
        g[i].offset() != g[0].offset() + static_cast<int64_t>(i) * size * dense[static_cast<size_t>(dim)])
      return Tensor();
  }
  return Tensor(g[0].detach().as_strided(in_shape, dense, g[0].offset()));
}

}  // namespace

// Pieces of `size` along dim (the last may be shorter), views of t.
// Backward (one node for all the pieces, as PyTorch's SplitBackward): dt = cat(dpiece_0, dpiece_1, …)
// along dim, zeros for a piece that got no gradient. Written into one buffer, rather than each piece
// scattering into a zero-filled copy of t and the copies being summed — or, when the pieces'
// gradients already are the pieces of one such buffer, that buffer as it is.
std::vector<Tensor> split(const Tensor& t, int64_t size, int64_t dim) {
  QKV_CHECK(size > 0, "split: chunk size must be positive, got ", size);
  dim = t.wrap_dim(dim);
  const int64_t n = t.shape()[dim];
  std::vector<Tensor> out;
  for (int64_t at = 0; at < n; at += size) {
    Shape shp = t.shape();
    shp[dim] = std::min(size, n - at);
    out.push_back(make_view(t, std::move(shp), t.strides(), t.offset() + at * t.strides()[dim]));
  }
  if (!autograd::needs_grad({t})) return out;
  return autograd::record_outputs(std::move(out), "split", {t},
                                  [in_shape = t.shape(), device = t.device(), size, dim, n](const std::vector<Tensor>& g) {
                                    // zeros where a piece got no gradient (zeroed as a whole: a piece of
                                    // it is a strided view, which a GPU fills only densely)
                                    if (Tensor one = pieces_as_one(g, in_shape, size, dim); one.defined())
                                      return std::vector<Tensor>{one};
                                    const bool all = std::all_of(g.begin(), g.end(), [](const Tensor& x) { return x.defined(); });
                                    Tensor full = all ? Tensor::empty(in_shape, DType::f32, device)
                                                      : Tensor::zeros(in_shape, DType::f32, device);
                                    for (size_t i = 0; i < g.size(); ++i) {
                                      const int64_t at = static_cast<int64_t>(i) * size;
                                      if (g[i].defined()) full.slice(dim, at, std::min(at + size, n)).copy_(g[i]);
                                    }
                                    return std::vector<Tensor>{full};
                                  });
}

std::vector<Tensor> chunk(const Tensor& t, int64_t n, int64_t dim) {
  QKV_CHECK(n > 0, "chunk: number of chunks must be positive, got ", n);
  const int64_t len = t.size(dim);
  return split(t, (len + n - 1) / n, dim);
}

}  // namespace qkv
