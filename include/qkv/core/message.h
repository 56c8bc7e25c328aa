// Messages as users read them: what the command, the Python module and the server print of an
// error passes through plain_message; input echoed in a message is cut short by excerpt.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace qkv {

// nlohmann::json's "[json.exception.parse_error.101] parse error at line 1, column 5: …" (wrapped
// into qkv's messages by the readers that name the file) becomes "JSON parse error at line 1,
// column 5: …", and its other kinds lose the bracketed tag.
std::string plain_message(std::string message);

// At most `max_bytes` of `input` for a message that echoes it, cut at a UTF-8 character boundary and
// followed by "… (N bytes)" when cut: a 10 MB vocabulary entry is not printed whole.
std::string excerpt(std::string_view input, size_t max_bytes = 80);

}  // namespace qkv
