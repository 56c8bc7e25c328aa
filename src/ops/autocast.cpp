#include "qkv/ops/autocast.h"

namespace qkv {

namespace {
thread_local AutocastDType g_autocast = AutocastDType::f32;
}

AutocastDType autocast_dtype() { return g_autocast; }

void set_autocast_dtype(AutocastDType dtype) { g_autocast = dtype; }

Autocast::Autocast(AutocastDType dtype) : prev_(g_autocast) { g_autocast = dtype; }

Autocast::~Autocast() { g_autocast = prev_; }

}  // namespace qkv
