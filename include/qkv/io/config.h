// Typed configuration at the boundary: one field table per config struct serves reading JSON
// (each value checked, with a message naming the config, the key, what it must be and what it got),
// writing JSON, and the unknown-key error that lists every known key. A config lists its fields
// once:
//
//   const io::Fields<TrainConfig>& TrainConfig::fields() {
//     using F = io::Fields<TrainConfig>;
//     static const F f("train config", {
//         F::integer("max_iters", &TrainConfig::max_iters, 0),
//         F::choice("schedule", &TrainConfig::schedule),            // an enum, by its enum_table
//         F::number("learning_rate", &TrainConfig::learning_rate, 0, 10),
//     });
//     return f;
//   }
//   TrainConfig c = TrainConfig::fields().from_json(j);  json j2 = TrainConfig::fields().to_json(c);
//
// Everything past the boundary reads typed members; nothing inside qkv looks a size up in JSON.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/names.h"

namespace qkv::io {

// The most of a config file read (qkv train CONFIG, qkv.train(path)): configs are kilobytes; a
// larger file — /dev/zero, a data set named by mistake — is refused once it passes this
// (io::read_file with a limit), not read on until the memory runs out.
constexpr int64_t kMaxConfigBytes = int64_t{4} << 20;

// j[key] when j is an object holding `key` with a value of T's JSON type (a string for
// std::string, an integer for integral T, a number for floating T, true/false for bool), else
// `fallback`: never nlohmann's type_error, whatever a file holds. For checks whose own message
// says what was expected ("the config's \"task\" must be \"lm\"").
template <class T>
T get_or(const nlohmann::json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->template get<bool>() : fallback;
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) return fallback;
    if (it->is_number_unsigned()) {
      const auto u = it->template get<uint64_t>();
      return u <= static_cast<uint64_t>(std::numeric_limits<T>::max()) ? static_cast<T>(u) : fallback;
    }
    const auto v = it->template get<int64_t>();
    return v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                   (v < 0 || static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max()))
               ? static_cast<T>(v)
               : fallback;
  } else if constexpr (std::is_floating_point_v<T>) {
    return it->is_number() ? it->template get<T>() : fallback;
  } else {
    return it->is_string() ? T(it->template get<std::string>()) : fallback;
  }
}
inline std::string get_or(const nlohmann::json& j, const char* key, const char* fallback) {
  return get_or<std::string>(j, key, std::string(fallback));
}

template <class T>
class Fields {
 public:
  struct Field {
    std::string name;
    // Checks `v` and stores it into the config; `what` names the config in messages.
    std::function<void(T&, const nlohmann::json& v, const std::string& what)> read;
    std::function<nlohmann::json(const T&)> write;  // empty: the key is read elsewhere (e.g. "preset")
  };

  Fields(std::string what, std::initializer_list<Field> fields) : what_(std::move(what)), fields_(fields) {}

  // The config `j` describes, starting from `start` (defaults, or a preset): keys absent from j keep
  // their start values; an unknown key or a bad value is a qkv::Error.
  T from_json(const nlohmann::json& j, T start = T{}) const {
    QKV_CHECK(j.is_object(), what_, ": expected a JSON object, got ", j.dump());
    for (auto& [key, v] : j.items()) {
      const Field* f = find(key);
      QKV_CHECK(f != nullptr, what_, ": unknown key \"", key, "\" (known: ", known(), ")");
      f->read(start, v, what_);
    }
    return start;
  }
  nlohmann::json to_json(const T& c) const {
    nlohmann::json j = nlohmann::json::object();
    for (const Field& f : fields_)
      if (f.write) j[f.name] = f.write(c);
    return j;
  }
  std::string known() const {
    std::string s;
    for (const Field& f : fields_) s += (s.empty() ? "" : ", ") + f.name;
    return s;
  }
  const std::string& what() const { return what_; }

  // ---- the kinds of fields ---------------------------------------------------------------------
  // An integer in [lo, hi].
  template <class M>
    requires std::is_integral_v<M>
  static Field integer(const char* name, M T::*m, int64_t lo = std::numeric_limits<int64_t>::min(),
                       int64_t hi = std::numeric_limits<int64_t>::max()) {
    return {name,
            [=](T& c, const nlohmann::json& v, const std::string& what) {
              const bool is_int = v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX) : true);
              const int64_t x = is_int ? v.get<int64_t>() : 0;
              QKV_CHECK(is_int && x >= lo && x <= hi, what, ": \"", name, "\" must be an integer ", range_text(lo, hi),
                        ", got ", v.dump());
              c.*m = static_cast<M>(x);
            },
            [=](const T& c) { return nlohmann::json(c.*m); }};
  }
  // A non-negative integer of 64 bits (seeds).
  static Field unsigned_integer(const char* name, uint64_t T::*m) {
    return {name,
            [=](T& c, const nlohmann::json& v, const std::string& what) {
              QKV_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), what, ": \"", name,
                        "\" must be a non-negative integer, got ", v.dump());
              c.*m = v.get<uint64_t>();
            },
            [=](const T& c) { return nlohmann::json(c.*m); }};
  }
  // A number in [lo, hi] (or [lo, hi) when hi_open).
  template <class M>
    requires std::is_floating_point_v<M>
  static Field number(const char* name, M T::*m, double lo, double hi, bool hi_open = false) {
    return {name,
            [=](T& c, const nlohmann::json& v, const std::string& what) {
              const double x = v.is_number() ? v.get<double>() : 0;
              QKV_CHECK(v.is_number() && x >= lo && (hi_open ? x < hi : x <= hi), what, ": \"", name,
                        "\" must be a number in [", lo, ", ", hi, hi_open ? ")" : "]", ", got ", v.dump());
              c.*m = static_cast<M>(x);
            },
            [=](const T& c) { return nlohmann::json(c.*m); }};
  }
  static Field boolean(const char* name, bool T::*m) {
    return {name,
            [=](T& c, const nlohmann::json& v, const std::string& what) {
              QKV_CHECK(v.is_boolean(), what, ": \"", name, "\" must be true or false, got ", v.dump());
              c.*m = v.get<bool>();
            },
            [=](const T& c) { return nlohmann::json(c.*m); }};
  }
  static Field text(const char* name, std::string T::*m) {
    return {name,
            [=](T& c, const nlohmann::json& v, const std::string& what) {
              QKV_CHECK(v.is_string(), what, ": \"", name, "\" must be a string, got ", v.dump());
              c.*m = v.get<std::string>();
            },
            [=](const T& c) { return nlohmann::json(c.*m); }};
  }
  // A list of at most max_count integers, each in [lo, hi].
  static Field integers(const char* name, std::vector<int64_t> T::*m, int64_t lo, int64_t hi, size_t max_count) {
    return list(name, m, max_count, detail::concat("integers ", range_text(lo, hi)), [=](const nlohmann::json& e) {
      return e.is_number_integer() && e.get<int64_t>() >= lo && e.get<int64_t>() <= hi;
    });
  }
  // A list of at most max_count numbers, each in [lo, hi].
  static Field numbers(const char* name, std::vector<double> T::*m, double lo, double hi, size_t max_count) {
    return list(name, m, max_count, detail::concat("numbers in [", lo, ", ", hi, "]"), [=](const nlohmann::json& e) {
      return e.is_number() && e.get<double>() >= lo && e.get<double>() <= hi;
    });
  }
  // A list of at most max_count strings, each at most max_length bytes.
  static Field texts(const char* name, std::vector<std::string> T::*m, size_t max_count, size_t max_length = 256) {
    return list(name, m, max_count, detail::concat("strings of at most ", max_length, " bytes"),
                [=](const nlohmann::json& e) {
                  return e.is_string() && e.template get_ref<const std::string&>().size() <= max_length;
                });
  }
  // One of an enum's names (core/names.h), or of `allowed` when given.
  template <NamedEnum E>
  static Field choice(const char* name, E T::*m, std::vector<E> allowed = {}) {
    return {name,
            [=](T& c, const nlohmann::json& v, const std::string& what) {
              E e{};
              bool ok = v.is_string() && try_parse_enum<E>(v.get<std::string>(), &e);
              if (ok && !allowed.empty()) ok = std::find(allowed.begin(), allowed.end(), e) != allowed.end();
              std::string choices;
              if (allowed.empty()) {
                choices = enum_choices<E>();
              } else {
                for (size_t i = 0; i < allowed.size(); ++i)
                  choices += (i ? (i + 1 == allowed.size() ? " or " : ", ") : "") + std::string(enum_name(allowed[i]));
              }
              QKV_CHECK(ok, what, ": \"", name, "\" must be ", choices, ", got ", v.dump());
              c.*m = e;
            },
            [=](const T& c) { return nlohmann::json(std::string(enum_name(c.*m))); }};
  }
  // Any JSON value, kept as it is (a section read by its own table later, e.g. a tokenizer spec).
  static Field any(const char* name, nlohmann::json T::*m) {
    return {name, [=](T& c, const nlohmann::json& v, const std::string&) { c.*m = v; },
            [=](const T& c) { return c.*m; }};
  }
  // A nested section with its own table: S::fields().
  template <class S>
  static Field section(const char* name, S T::*m) {
    return {name,
            [=](T& c, const nlohmann::json& v, const std::string& what) {
              try {
                c.*m = S::fields().from_json(v, c.*m);
              } catch (const Error& e) {
                throw Error(detail::concat(what, ": \"", name, "\": ", e.what()));
              }
            },
            [=](const T& c) { return S::fields().to_json(c.*m); }};
  }
  // A key the table accepts and leaves to the caller (read before the table runs, not written back).
  static Field handled_elsewhere(const char* name) {
    return {name, [](T&, const nlohmann::json&, const std::string&) {}, nullptr};
  }

 private:
  // A list of at most max_count elements, each passing `element` ("a list of at most N <elements>").
  template <class E>
  static Field list(const char* name, std::vector<E> T::*m, size_t max_count, std::string elements,
                    std::function<bool(const nlohmann::json&)> element) {
    return {name,
            [=](T& c, const nlohmann::json& v, const std::string& what) {
              const bool ok = v.is_array() && v.size() <= max_count && std::all_of(v.begin(), v.end(), element);
              QKV_CHECK(ok, what, ": \"", name, "\" must be a list of at most ", max_count, " ", elements, ", got ",
                        v.dump().substr(0, 200));
              c.*m = v.template get<std::vector<E>>();
            },
            [=](const T& c) { return nlohmann::json(c.*m); }};
  }
  static std::string range_text(int64_t lo, int64_t hi) {
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
    if (lo == kMin && hi == kMax) return "";
    if (hi == kMax) return "≥ " + std::to_string(lo);
    if (lo == kMin) return "≤ " + std::to_string(hi);
    return "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }
  const Field* find(const std::string& key) const {
    for (const Field& f : fields_)
      if (f.name == key) return &f;
    return nullptr;
  }
  std::string what_;
  std::vector<Field> fields_;
};

}  // namespace qkv::io
