// Enums by name: one table per enum serves parsing (configs, the command line, model files) and
// printing, so a choice such as an activation or a schedule is a typed value everywhere inside qkv
// and a string only at the boundary. The table is a constexpr function declared next to its enum
// (found by argument-dependent lookup):
//
//   enum class Activation : uint8_t { relu, gelu, gelu_tanh };
//   constexpr EnumTable<Activation, 3> enum_table(Activation) {
//     return {"activation", {{{Activation::relu, "relu"}, {Activation::gelu, "gelu"}, {Activation::gelu_tanh, "gelu_tanh"}}}};
//   }
//   parse_enum<Activation>("gelu") → Activation::gelu;   enum_name(Activation::relu) → "relu"
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "qkv/core/error.h"

namespace qkv {

// An enum's names: what it is (for messages: "activation") and the name of each value.
template <class E, size_t N>
struct EnumTable {
  std::string_view what;
  std::array<std::pair<E, std::string_view>, N> names;
};

// An enum with a table: enum_table(E{}) is declared in E's namespace.
template <class E>
concept NamedEnum = std::is_enum_v<E> && requires { enum_table(E{}); };

template <NamedEnum E>
std::string_view enum_name(E value) {
  for (const auto& [v, name] : enum_table(E{}).names)
    if (v == value) return name;
  return "?";
}

// "relu, gelu or gelu_tanh"
template <NamedEnum E>
std::string enum_choices() {
  std::string s;
  const auto names = enum_table(E{}).names;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += i + 1 == names.size() ? " or " : ", ";
    s += names[i].second;
  }
  return s;
}

template <NamedEnum E>
bool try_parse_enum(std::string_view name, E* out) {
  for (const auto& [v, n] : enum_table(E{}).names)
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
  QKV_CHECK(try_parse_enum(name, &v), where.empty() ? std::string(enum_table(E{}).what) : std::string(where), ": \"",
            name, "\" is not a ", enum_table(E{}).what, " (expected ", enum_choices<E>(), ")");
  return v;
}

}  // namespace qkv
