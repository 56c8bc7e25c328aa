#include "qkv/io/json.h"

#include "qkv/core/error.h"

namespace qkv::io {

// One pass over the bytes: depth +1 at '[' or '{', −1 at ']' or '}', outside strings (a '"' opens
// or closes one unless escaped by '\'). Malformed text is left to the parser to report.
int json_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

nlohmann::json parse_json(std::string_view text, const std::string& what) {
  QKV_CHECK(json_depth(text) <= kMaxJsonDepth, what, ": JSON nested deeper than ", kMaxJsonDepth, " levels");
  return nlohmann::json::parse(text);
}

}  // namespace qkv::io
