// Every JSON qkv reads from input (configs, --set values, model files' metadata, safetensors
// headers, checkpoints' state) is parsed here, with a bound on how deep it may nest. nlohmann's
// parser itself is iterative, but the values it builds are copied, compared, printed and destroyed
// by recursion: a config or a metadata key nested 100,000 deep overflowed the stack (issue 43).
// Real configs nest 3 or 4 levels; 256 is far past any of them and far within any thread's stack.
//
// A key given twice in one object is refused too: nlohmann keeps the last of them, so a safetensors
// header that listed a tensor twice, or a config with "lr" twice, was read as one of its meanings
// with no word said (issue 43).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace qkv::io {

constexpr int kMaxJsonDepth = 256;

// `text` parsed as JSON. Nesting deeper than kMaxJsonDepth is a qkv::Error
// "<what>: JSON nested deeper than 256 levels"; a key twice in one object a qkv::Error
// "<what>: key \"lr\" appears twice (in \"train\")" (the path of the object holding it: keys, and
// [i] for array elements; none at the top level). Malformed JSON throws nlohmann::json::parse_error
// as json::parse does (callers name the file in their own message).
nlohmann::json parse_json(std::string_view text, const std::string& what);

// One line of a JSONL data file parsed as parse_json parses it; malformed JSON too is a qkv::Error,
// "<where>: not JSON (…)".
nlohmann::json parse_json_line(std::string_view line, const std::string& where);

// The deepest nesting of arrays and objects in `text` (brackets inside strings not counted), at
// most `limit + 1`: the scan stops there.
int json_depth(std::string_view text, int limit = kMaxJsonDepth);

}  // namespace qkv::io
