#include "qkv/io/json.h"

#include <unordered_set>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/message.h"

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

namespace {

// The objects and arrays open while the parser reads, outermost first: an object's keys so far
// (a second one is refused) and the key being read; an array's elements so far.
struct Open {
  bool object;
  std::unordered_set<std::string> keys{};
  std::string key{};
  int64_t elements = 0;
};

// "model", "layers"[2] … of the objects and arrays that hold the innermost one (its own key not
// included): `"train"`, `"layers"[2]."attn"`, or "" at the top level.
std::string path_of(const std::vector<Open>& open) {
  std::string p;
  for (size_t i = 0; i + 1 < open.size(); ++i) {
    if (open[i].object) p += (p.empty() ? "\"" : ".\"") + excerpt(open[i].key, 60) + "\"";
    else p += "[" + std::to_string(open[i].elements) + "]";
  }
  return p;
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& what) {
  QKV_CHECK(json_depth(text) <= kMaxJsonDepth, what, ": JSON nested deeper than ", kMaxJsonDepth, " levels");
  using Event = nlohmann::json::parse_event_t;
  std::vector<Open> open;  // at most kMaxJsonDepth deep (checked above)
  auto element_done = [&] {
    if (!open.empty() && !open.back().object) ++open.back().elements;
  };
  const nlohmann::json::parser_callback_t watch = [&](int, Event event, nlohmann::json& parsed) {
    switch (event) {
      case Event::object_start: open.push_back({true}); break;
      case Event::array_start: open.push_back({false}); break;
      case Event::key: {
        Open& o = open.back();
        o.key = parsed.get<std::string>();
        if (!o.keys.insert(o.key).second) {
          const std::string in = path_of(open);
          throw Error(detail::concat(what, ": key \"", excerpt(o.key), "\" appears twice",
                                     in.empty() ? "" : " (in " + in + ")"));
        }
        break;
      }
      case Event::object_end:
      case Event::array_end:
        open.pop_back();
        element_done();
        break;
      case Event::value: element_done(); break;
    }
    return true;
  };
  return nlohmann::json::parse(text, watch);
}

nlohmann::json parse_json_line(std::string_view line, const std::string& where) {
  try {
    return parse_json(line, where);
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat(where, ": not JSON (", e.what(), ")"));
  }
}

}  // namespace qkv::io
