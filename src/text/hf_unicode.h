// The Unicode questions Hugging Face's tokenizers ask of a character, answered by utf8proc (general
// categories, case, NFC/NFD/NFKC/NFKD), and the repair of invalid UTF-8 input. Private to text/.
//
// Unicode versions: utf8proc's tables, PCRE2's and the Rust crates' behind `tokenizers` differ for
// characters assigned lately (HF's BERT punctuation test uses Unicode 9's tables: U+2E4E is not
// punctuation there, and is here).
#pragma once

#include <string>
#include <string_view>

namespace qkv::text::hf {

// Text made valid UTF-8 as Python's bytes.decode("utf-8", errors="replace") and Rust's
// String::from_utf8_lossy make it: each maximal invalid subpart (a lone byte, or the start of a
// sequence cut short) becomes one U+FFFD. Valid text is returned as it is.
std::string valid_utf8(std::string_view s);

// The code point at s[i] (s valid UTF-8); `len` gets its byte length.
char32_t decode_at(std::string_view s, size_t i, size_t* len);
void append_utf8(std::string& out, char32_t c);

// Rust's char::is_whitespace: the White_Space property (Z* and \t \n \v \f \r U+0085).
bool is_whitespace(char32_t c);
// Rust's char::is_alphanumeric (approximated by the categories L* and N*).
bool is_alphanumeric(char32_t c);
// General categories: C* but Cn (BertNormalizer's "control"), P*, Mn, M*.
bool is_other(char32_t c);
bool is_punctuation(char32_t c);
bool is_mark_nonspacing(char32_t c);
bool is_mark(char32_t c);
// Rust's char::is_numeric: Nd, Nl, No.
bool is_numeric(char32_t c);
// char::to_lowercase, appended (U+0130 is "i\u0307", the one multi-character lowercase).
void append_lowercase(std::string& out, char32_t c);

// The end of the extended grapheme cluster (UAX #29, utf8proc's rules: Unicode 15) that begins at
// s[i] (s valid UTF-8, i < s.size()): "e\u0301", "\r\n", a flag's two regional indicators, an
// emoji ZWJ sequence are one cluster each.
size_t grapheme_end(std::string_view s, size_t i);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view s, NormalForm form);

}  // namespace qkv::text::hf
