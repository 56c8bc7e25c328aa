// Enums by name: one table per enum serves parsing (configs, the command line, model files) and
// printing, so a choice such as an activation or a schedule is a typed value everywhere inside qkv
// and a string only at the boundary.
//
//   enum class Activation { relu, gelu, gelu_tanh };
//   template <> struct EnumNames<Activation> {
//     static constexpr std::string_view what = "activation";
//     static constexpr std::array<std::pair<Activation, std::string_view>, 3> names{
//         {{Activation::relu, "relu"}, {Activation::gelu, "gelu"}, {Activation::gelu_tanh, "gelu_tanh"}}};
//   };
//   parse_enum<Activation>("gelu") → Activation::gelu;   enum_name(Activation::relu) → "relu"
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "qkv/core/error.h"

namespace qkv {

template <class E>
struct EnumNames;  // specialized next to each enum: `what` and `names`

template <class E>
concept NamedEnum = requires {
  EnumNames<E>::what;
  EnumNames<E>::names;
};

template <NamedEnum E>
std::string_view enum_name(E value) {
  for (const auto& [v, name] : EnumNames<E>::names)
    if (v == value) return name;
  return "?";
}

// "relu, gelu or gelu_tanh"
template <NamedEnum E>
std::string enum_choices() {
  std::string s;
  const auto& names = EnumNames<E>::names;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += i + 1 == names.size() ? " or " : ", ";
    s += names[i].second;
  }
  return s;
}

template <NamedEnum E>
bool try_parse_enum(std::string_view name, E* out) {
  for (const auto& [v, n] : EnumNames<E>::names)
    if (n == name) {
      *out = v;
      return true;
    }
  return false;
}

// The value called `name`; anything else is a qkv::Error naming `where` (a config key, an option),
// the value and the choices.
template <NamedEnum E>
E parse_enum(std::string_view name, std::string_view where = {}) {
  E v{};
  QKV_CHECK(try_parse_enum(name, &v), where.empty() ? std::string(EnumNames<E>::what) : std::string(where),
            ": \"", name, "\" is not a ", EnumNames<E>::what, " (expected ", enum_choices<E>(), ")");
  return v;
}

}  // namespace qkv
