// Messages as users read them (core/message.h): library tags stripped, echoed input cut short.
#include "qkv/core/message.h"

#include "qkv/core/error.h"

namespace qkv {

std::string plain_message(std::string m) {
  static constexpr std::string_view tag = "[json.exception.";
  for (size_t at = m.find(tag); at != std::string::npos; at = m.find(tag, at)) {
    const size_t close = m.find("] ", at);
    if (close == std::string::npos) break;
    const bool parse_error = std::string_view(m).substr(at + tag.size()).starts_with("parse_error");
    m.erase(at, close + 2 - at);
    // "parse error at line …" says JSON: the reader's own words before it name the file
    if (parse_error && std::string_view(m).substr(at).starts_with("parse error"))
      m.insert(at, "JSON ");
  }
  return m;
}

std::string excerpt(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return detail::concat(s.substr(0, cut), "… (", s.size(), " bytes)");
}

}  // namespace qkv
