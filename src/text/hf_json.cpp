// Reading tokenizer.json's fields, each error naming the file and the field.
#include <limits>

#include "hf_components.h"
#include "qkv/core/error.h"

namespace qkv::text::hf {

void Field::fail(const std::string& why) const {
  throw Error(file + ": " + (path.empty() ? std::string("top level") : path) + ": " + why);
}

const json& need(const json& j, std::string_view key, const Field& f) {
  if (!j.is_object()) f.fail("expected an object, got " + std::string(j.type_name()));
  auto it = j.find(std::string(key));
  if (it == j.end()) f.at(key).fail("missing");
  return *it;
}

const json* find(const json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(std::string(key));
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string as_string(const json& j, const Field& f) {
  if (!j.is_string()) f.fail("expected a string, got " + std::string(j.type_name()));
  return j.get<std::string>();
}

std::string need_string(const json& j, std::string_view key, const Field& f) { return as_string(need(j, key, f), f.at(key)); }

bool get_bool(const json& j, std::string_view key, bool fallback, const Field& f) {
  const json* v = find(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) f.at(key).fail("expected true or false, got " + std::string(v->type_name()));
  return v->get<bool>();
}

int64_t get_int(const json& j, std::string_view key, int64_t fallback, int64_t lo, int64_t hi, const Field& f) {
  const json* v = find(j, key);
  if (!v) return fallback;
  if (!v->is_number_integer()) f.at(key).fail("expected an integer, got " + v->dump().substr(0, 40));
  // an unsigned beyond int64 reads as negative through get<int64_t>: checked as unsigned first
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    f.at(key).fail(v->dump() + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) f.at(key).fail(std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

std::string type_of(const json& j, const Field& f) {
  if (!j.is_object()) f.fail("expected an object, got " + std::string(j.type_name()));
  return need_string(j, "type", f);
}

Vocab read_vocab(const json& j, const Field& f) {
  if (!j.is_object()) f.fail("expected an object {token: id}, got " + std::string(j.type_name()));
  Vocab v;
  v.ids.reserve(j.size());
  int64_t max_id = -1;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const json& id = it.value();
    if (!id.is_number_integer() || (id.is_number_unsigned() && id.get<uint64_t>() > (1ull << 31)) ||
        id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 31))
      f.at(it.key()).fail("expected an id in [0, 2^31), got " + id.dump().substr(0, 40));
    const int64_t x = id.get<int64_t>();
    if (x >= 2 * static_cast<int64_t>(j.size()) + 1024)
      f.at(it.key()).fail("id " + std::to_string(x) + " is far past the vocabulary's " + std::to_string(j.size()) +
                          " entries");
    v.ids[it.key()] = static_cast<int32_t>(x);
    max_id = std::max(max_id, x);
  }
  v.tokens.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [t, id] : v.ids) v.tokens[static_cast<size_t>(id)] = t;
  return v;
}

}  // namespace qkv::text::hf
