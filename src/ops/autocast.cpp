#include "qkv/ops/autocast.h"

#include "qkv/core/error.h"

namespace qkv {

namespace {
thread_local DType g_autocast = DType::f32;
}

DType autocast_dtype() { return g_autocast; }

Autocast::Autocast(DType dtype) : prev_(g_autocast) {
  QKV_CHECK(dtype == DType::f32 || dtype == DType::bf16, "Autocast: dtype must be f32 or bf16, got ", dtype_name(dtype));
  g_autocast = dtype;
}

static DType autocast_dtype_named(const std::string& name) {
  QKV_CHECK(name == "f32" || name == "bf16", "Autocast: dtype must be \"f32\" or \"bf16\", got \"", name, "\"");
  return name == "bf16" ? DType::bf16 : DType::f32;
}

Autocast::Autocast(const std::string& dtype) : Autocast(autocast_dtype_named(dtype)) {}

Autocast::~Autocast() { g_autocast = prev_; }

}  // namespace qkv
