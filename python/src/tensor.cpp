// qkv.Tensor: qkv's Tensor with PyTorch's Python names (shape, dtype, requires_grad, grad,
// backward, numpy, __dlpack__), and the ways in: qkv.tensor (a copy, as torch.tensor),
// qkv.as_tensor / from_numpy / from_dlpack (no copy where the layout allows, as their torch twins).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "qkv/ops.h"

namespace qkv::python {

namespace {

nb::tuple shape_tuple(const Shape& s) {
  nb::list l;
  for (int64_t v : s) l.append(v);
  return nb::tuple(l);
}

Shape shape_of(nb::handle dims) {
  Shape s;
  for (nb::handle d : dims) s.push_back(nb::cast<int64_t>(d));
  return s;
}

// t.reshape(2, 3) or t.reshape((2, 3)), as torch takes them.
Shape dims_of(nb::args dims) {
  return dims.size() == 1 && !nb::isinstance<nb::int_>(dims[0]) ? shape_of(dims[0]) : shape_of(dims);
}

// A Python number or array-like on the other side of an arithmetic operator.
// The other operand of an arithmetic operator: a Python number is an f32 scalar on `self`'s device
// (t * 2 is f32, as in torch, on a GPU too); anything else, a tensor as qkv.as_tensor makes it.
Tensor operand(const Tensor& self, nb::handle other) {
  if ((nb::isinstance<nb::int_>(other) && !nb::isinstance<nb::bool_>(other)) || nb::isinstance<nb::float_>(other)) {
    Tensor s = Tensor::scalar(nb::cast<float>(other));
    return self.device().is_cpu() ? s : s.to(self.device());
  }
  return to_tensor(other);
}

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor> t(m, "Tensor",
                       "An n-dimensional array with reverse-mode autograd (qkv/ops/tensor.h), on the CPU.\n\n"
                       "Make one with qkv.tensor (a copy), qkv.as_tensor / qkv.from_numpy / qkv.from_dlpack (no copy\n"
                       "for float32/int32/bool arrays: a dense or strided view of their memory, as torch's; a negative\n"
                       "stride or another dtype is copied); leave with .numpy(), torch.from_dlpack(t) or\n"
                       "np.from_dlpack(t) (no copy).");
  t.def(
       "__init__", [](Tensor* self, nb::handle data, bool requires_grad) {
         new (self) Tensor(to_tensor(data).contiguous_copy());
         self->requires_grad_(requires_grad);
       },
       "data"_a, "requires_grad"_a = false, "A copy of `data` (a NumPy array, torch tensor, number or nested list).")
      .def_prop_ro("shape", [](const Tensor& x) { return shape_tuple(x.shape()); }, "The sizes, as a tuple.")
      .def("size", [](const Tensor& x, std::optional<int64_t> dim) -> nb::object {
             if (dim) return nb::int_(x.size(*dim));
             return shape_tuple(x.shape());
           },
           "dim"_a = nb::none(), "The sizes (torch.Tensor.size), or the size of one dimension.")
      .def("stride", [](const Tensor& x) { return shape_tuple(x.strides()); }, "Strides in elements.")
      .def_prop_ro("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("__len__", [](const Tensor& x) {
        if (x.dim() == 0) throw nb::type_error("len() of a 0-d tensor");
        return x.size(0);
      })
      .def_prop_ro("dtype", [](const Tensor& x) { return dtype_str(x.dtype()); },
                   "'float32', 'bfloat16', 'int32' or 'bool'.")
      .def_prop_ro("device", [](const Tensor& x) { return x.device().str(); }, "'cpu' or 'cuda:N'.")
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("__repr__", [](const Tensor& x) {
        std::string s = "qkv." + x.str();
        if (x.requires_grad()) s += ", requires_grad=True";
        if (x.device().is_cpu() && x.numel() <= 64 && x.dtype() != DType::bf16 && x.dim() <= kMaxArrayDims) {
          nb::object arr = nb::cast(to_array<nb::numpy>(x), nb::rv_policy::reference);
          s += "\n" + std::string(nb::str(arr).c_str());
        }
        return s;
      })
      // ---- out of qkv, without a copy ----------------------------------------------------------
      .def("numpy", [](const Tensor& x) { return to_array<nb::numpy>(x); }, nb::rv_policy::reference,
           "A NumPy array viewing this tensor's memory (no copy; writes are seen by both).")
      .def("__array__", [](const Tensor& x, nb::handle dtype, nb::handle copy) {
             nb::object arr = nb::cast(to_array<nb::numpy>(x), nb::rv_policy::reference);
             if (!dtype.is_none()) arr = arr.attr("astype")(dtype);
             if (!copy.is_none() && nb::cast<bool>(copy)) arr = arr.attr("copy")();
             return arr;
           },
           "dtype"_a = nb::none(), "copy"_a = nb::none())
      .def("__dlpack__", [](const Tensor& x, nb::kwargs kwargs) {
             nb::object arr = nb::cast(to_array<nb::array_api>(x), nb::rv_policy::reference);
             return arr.attr("__dlpack__")(**kwargs);
           },
           "kwargs"_a, "A DLPack capsule viewing this tensor (torch.from_dlpack, np.from_dlpack).")
      .def("__dlpack_device__", [](const Tensor&) { return nb::make_tuple(1, 0); })  // kDLCPU, device 0
      .def("tolist", [](const Tensor& x) { return nb::cast(to_array<nb::numpy>(x), nb::rv_policy::reference).attr("tolist")(); })
      .def("item", [](const Tensor& x) -> nb::object {
        QKV_CHECK(x.numel() == 1, "item(): the tensor has ", x.numel(), " elements, not 1");
        if (x.dtype() == DType::i32) return nb::int_(x.to_ints()[0]);
        if (x.dtype() == DType::boolean) return nb::bool_(x.item() != 0.f);
        return nb::float_(x.item());
      })
      // ---- autograd ----------------------------------------------------------------------------
      .def_prop_rw(
          "requires_grad", [](const Tensor& x) { return x.requires_grad(); },
          [](Tensor& x, bool on) { x.requires_grad_(on); })
      .def("requires_grad_", [](Tensor& x, bool on) { return Tensor(x.requires_grad_(on)); }, "requires_grad"_a = true)
      .def_prop_rw(
          "grad", [](const Tensor& x) -> std::optional<Tensor> {
            Tensor g = x.grad();
            return g.defined() ? std::optional<Tensor>(g) : std::nullopt;
          },
          [](Tensor& x, std::optional<Tensor> g) {
            if (g) x.set_grad(*g);
            else x.zero_grad();
          },
          nb::arg("grad").none(), "The accumulated gradient (None until backward reaches this leaf).")
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def("backward", [](const Tensor& x, nb::handle gradient, bool retain_graph) {
             Tensor g = gradient.is_none() ? Tensor() : to_tensor(gradient);
             nb::gil_scoped_release release;
             x.backward(g, retain_graph);
           },
           "gradient"_a = nb::none(), "retain_graph"_a = false,
           "Reverse mode: accumulates d(self)/d(leaf) into every leaf's .grad (ones as the seed of a scalar).")
      .def("detach", [](const Tensor& x) { return x.detach(); })
      .def("retain_grad", &Tensor::retain_grad)
      // ---- views, copies, reductions (differentiable) ------------------------------------------
      .def("reshape", [](const Tensor& x, nb::args dims) { return x.reshape(dims_of(dims)); })
      .def("view", [](const Tensor& x, nb::args dims) { return x.view(dims_of(dims)); })
      .def("transpose", &Tensor::transpose, "dim0"_a, "dim1"_a)
      .def("permute", [](const Tensor& x, nb::args dims) { return x.permute(dims_of(dims)); })
      .def("unsqueeze", &Tensor::unsqueeze, "dim"_a)
      .def("squeeze", &Tensor::squeeze, "dim"_a)
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("sum", [](const Tensor& x, std::optional<std::vector<int64_t>> dim, bool keepdim) {
             return dim ? sum(x, *dim, keepdim) : x.sum();
           },
           "dim"_a = nb::none(), "keepdim"_a = false)
      .def("mean", [](const Tensor& x, std::optional<std::vector<int64_t>> dim, bool keepdim) {
             return dim ? mean(x, *dim, keepdim) : x.mean();
           },
           "dim"_a = nb::none(), "keepdim"_a = false)
      .def("float", [](const Tensor& x) { return x.dtype() == DType::f32 ? x : x.to(DType::f32); })
      .def("to", [](const Tensor& x, const std::string& what) {
        // a device ("cpu", "cuda", "cuda:1") or a dtype, as torch.Tensor.to takes either
        if (what == "cpu" || what.starts_with("cuda")) return x.to(Device::parse(what));
        const DType d = dtype_from_str(what);
        return d == x.dtype() ? x : x.to(d);
      }, "device_or_dtype"_a)
      .def("cuda", [](const Tensor& x, int device) { return x.to(Device::cuda(device)); }, "device"_a = 0,
           "A copy on GPU `device` (a build with the CUDA backend: docs/CUDA.md).")
      .def("cpu", [](const Tensor& x) { return x.to(Device::cpu()); })
      .def("__add__", [](const Tensor& a, nb::handle b) { return add(a, operand(a, b)); })
      .def("__radd__", [](const Tensor& a, nb::handle b) { return add(operand(a, b), a); })
      .def("__sub__", [](const Tensor& a, nb::handle b) { return sub(a, operand(a, b)); })
      .def("__rsub__", [](const Tensor& a, nb::handle b) { return sub(operand(a, b), a); })
      .def("__mul__", [](const Tensor& a, nb::handle b) { return mul(a, operand(a, b)); })
      .def("__rmul__", [](const Tensor& a, nb::handle b) { return mul(operand(a, b), a); })
      .def("__truediv__", [](const Tensor& a, nb::handle b) { return div(a, operand(a, b)); })
      .def("__rtruediv__", [](const Tensor& a, nb::handle b) { return div(operand(a, b), a); })
      .def("__matmul__", [](const Tensor& a, nb::handle b) {
        Tensor bt = operand(a, b);
        nb::gil_scoped_release release;
        return matmul(a, bt);
      })
      .def("__rmatmul__", [](const Tensor& a, nb::handle b) {
        Tensor at = operand(a, b);
        nb::gil_scoped_release release;
        return matmul(at, a);
      })
      .def("__neg__", [](const Tensor& a) { return neg(a); });

  m.def("tensor", [](nb::handle data, bool requires_grad) {
          Tensor x = to_tensor(data).contiguous_copy();
          return x.requires_grad_(requires_grad);
        },
        "data"_a, "requires_grad"_a = false, "A new tensor holding a copy of `data` (torch.tensor).");
  m.def("as_tensor", [](nb::handle data) { return to_tensor(data); }, "data"_a,
        "`data` as a tensor without a copy when it is a dense row-major CPU array of float32, bfloat16,\n"
        "int32 or bool (the tensor and the array share memory, and the tensor keeps the array alive);\n"
        "otherwise a copy (float64 and float16 → float32, other integers → int32).");
  m.def("from_numpy", [](nb::handle array) { return to_tensor(array); }, "array"_a,
        "A NumPy array as a tensor sharing its memory (see as_tensor).");
  m.def("from_dlpack", [](nb::handle obj) { return to_tensor(obj); }, "ext_tensor"_a,
        "Anything with __dlpack__ (a torch tensor, a NumPy array) as a tensor sharing its memory.");
  m.def("zeros", [](std::vector<int64_t> shape, bool requires_grad) {
    return Tensor::zeros(shape).requires_grad_(requires_grad);
  }, "size"_a, "requires_grad"_a = false);
  m.def("ones", [](std::vector<int64_t> shape, bool requires_grad) {
    return Tensor::ones(shape).requires_grad_(requires_grad);
  }, "size"_a, "requires_grad"_a = false);
  m.def("randn", [](std::vector<int64_t> shape, bool requires_grad) {
    return Tensor::randn(shape, default_generator()).requires_grad_(requires_grad);
  }, "size"_a, "requires_grad"_a = false, "Standard normal values from qkv's default generator (qkv.manual_seed).");
}

}  // namespace qkv::python
