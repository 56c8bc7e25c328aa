// The parts of the qkv._qkv extension module, one function per file (python/src/*.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace qkv::python {

namespace nb = nanobind;
using namespace nb::literals;

void bind_tensor(nb::module_& m);      // tensor.cpp: qkv.Tensor and the ways in and out
void bind_functional(nb::module_& m);  // functional.cpp: qkv.nn.functional, qkv.autograd
void bind_nn(nb::module_& m);          // nn.cpp: qkv.nn modules, functional.multi_head_attention
void bind_models(nb::module_& m);      // models.cpp: Translator, LanguageModel, image models, load, train
void bind_metrics(nb::module_& m);     // metrics.cpp: evaluate_translations (qkv eval's scores)

}  // namespace qkv::python
