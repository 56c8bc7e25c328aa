// The qkv._qkv extension module; python/qkv/__init__.py re-exports it under PyTorch's names.
#include <nanobind/nanobind.h>
#include <nlohmann/json.hpp>

#include <exception>

#include "bindings.h"
#include "qkv/core/allocator.h"
#include "qkv/core/cuda.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/core/machine.h"
#include "qkv/core/parallel.h"
#include "qkv/core/thread_budget.h"
#include "qkv/core/rng.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/ops/autocast.h"
#include "qkv/ops/inference_weight.h"

NB_MODULE(_qkv, m) {
  using namespace qkv::python;
  m.doc() = "qkv: attention and the models built on it (C++), from Python";
  // qkv's errors (a wrong shape, a bad file) arrive as qkv.Error, a RuntimeError, with qkv's message.
  nb::exception<qkv::Error> error_type(m, "Error", PyExc_RuntimeError);
  // Translators registered later are tried first. qkv's messages pass through plain_message (no
  // JSON library tags); a Python value nanobind could not convert inside a binding (nb::cast) is a
  // TypeError, not the bare "std::bad_cast" its default translation gives.
  nb::register_exception_translator([](const std::exception_ptr& p, void* error_type) {
    try {
      std::rethrow_exception(p);
    } catch (const qkv::Error& e) {
      PyErr_SetString(static_cast<PyObject*>(error_type), qkv::plain_message(e.what()).c_str());
    } catch (const nb::cast_error&) {
      PyErr_SetString(PyExc_TypeError, "qkv: an argument of a type this function cannot take (see its signature)");
    } catch (const nlohmann::json::exception& e) {  // without the library's "[json.exception.…]" tag
      PyErr_SetString(PyExc_ValueError, ("qkv: " + qkv::plain_message(e.what())).c_str());
    }
  }, error_type.ptr());
  // OMP_NUM_THREADS past qkv's bound (qkv::max_threads): the import goes on with the machine's
  // hardware threads and says so, rather than libgomp failing at the first parallel region.
  try {
    qkv::check_omp_num_threads();
  } catch (const qkv::Error& e) {
    qkv::set_num_threads(qkv::hardware_threads());
    const std::string msg = std::string(e.what()) + "; qkv uses " + std::to_string(qkv::hardware_threads());
    if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) != 0) throw nb::python_error();
  }
  m.def("set_num_threads", &qkv::set_num_threads, "n"_a, "Threads qkv's parallel loops use (torch.set_num_threads).");
  m.def("get_num_threads", &qkv::requested_threads,
        "Threads asked for (torch.get_num_threads); on a busy machine qkv may run fewer (docs/ARCHITECTURE.md).");
  // The host allocator's cache (core/allocator.h), as torch.cuda.empty_cache / memory_reserved for
  // qkv's CPU memory: a process that decodes holds less with qkv's decoding bound.
  m.def(
      "set_cache_limit",
      [](int64_t at_least, double peak_fraction, bool miss_evicts) {
        QKV_CHECK(at_least >= 0, "set_cache_limit: at_least must be a number of bytes ≥ 0, got ", at_least);
        qkv::set_cache_limit({static_cast<size_t>(at_least), peak_fraction, miss_evicts});
      },
      "at_least"_a = int64_t{256} << 20, "peak_fraction"_a = 2.0, "miss_evicts"_a = false,
      "Bounds the freed blocks qkv's host allocator keeps for reuse to max(at_least bytes, peak_fraction × "
      "the most bytes ever live at once); beyond it they go back to the system. miss_evicts: a block the "
      "cache cannot serve first sends as many cached bytes back, so the cache never raises the resident "
      "set past the most bytes live. The default suits training; qkv translate, generate and serve use "
      "qkv.set_cache_limit(0, 0.25, miss_evicts=True).");
  m.def("empty_cache", &qkv::empty_cache,
        "Gives every freed block qkv's host allocator keeps back to the system (torch.cuda.empty_cache).");
  m.def("cached_bytes", &qkv::cached_bytes,
        "Bytes of freed blocks qkv's host allocator keeps for reuse (torch.cuda.memory_reserved minus "
        "what is allocated).");
  m.def("manual_seed", &qkv::manual_seed, "seed"_a, "Seeds qkv's default generator (torch.manual_seed).");
  // qkv.cuda.is_available() / device_count() (torch.cuda's): false / 0 without the CUDA backend or a GPU.
  m.def("_cuda_is_available", &qkv::cuda::is_available);
  m.def("_cuda_device_count", &qkv::cuda::device_count);
  // The bits of int8 products' activations here (8 with VNNI or AMX, else 7: qkv/ops/inference_weight.h).
  m.def("_int8_activation_bits", &qkv::int8_activation_bits);
  // The per-thread modes behind qkv.no_grad / enable_grad / set_grad_enabled and qkv.autocast
  // (python/qkv/__init__.py makes them context managers, as torch's).
  m.def("_grad_enabled", &qkv::autograd::grad_enabled);
  m.def("_set_grad_enabled", &qkv::autograd::set_grad_enabled, "mode"_a);
  m.def("_autocast_bf16", [] { return qkv::autocast_dtype() == qkv::AutocastDType::bf16; });
  m.def("_set_autocast_bf16", [](bool on) {
    qkv::set_autocast_dtype(on ? qkv::AutocastDType::bf16 : qkv::AutocastDType::f32);
  }, "on"_a);
  bind_tensor(m);
  bind_functional(m);
  bind_nn(m);
  bind_models(m);
  bind_metrics(m);
}
