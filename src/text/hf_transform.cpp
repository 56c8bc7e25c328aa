// Transform: a stage's rewrite of a piece with the alignments `tokenizers`' NormalizedString keeps
// (NormalizedString::transform_range): each new character's Align is that of the old character it
// takes the place of, or, for a new one, that of the old byte just before the place reached.
#include "hf_components.h"
#include "hf_unicode.h"

namespace qkv::text::hf {

void Transform::advance(size_t chars) {
  for (size_t k = 0; k < chars && pos_ < old_.text.size(); ++k) {
    size_t n = 0;
    decode_at(old_.text, pos_, &n);
    pos_ += n;
  }
}

void Transform::put(char32_t c, int change) {
  const size_t before = text.size();
  append_utf8(text, c);
  if (!tracked_) return;
  Align a{0, 0};
  if (change > 0) {
    if (pos_ > 0) a = old_.align[pos_ - 1];
  } else if (pos_ < old_.align.size()) {
    a = old_.align[pos_];
  } else if (!old_.align.empty()) {
    a = old_.align.back();  // (past the old text: tokenizers would fail; the last character's)
  }
  align_.insert(align_.end(), text.size() - before, a);
  if (change <= 0) advance(1);
  if (change < 0) advance(static_cast<size_t>(-change));
}

void Transform::put_all(std::string_view s, int change) {
  for (size_t i = 0, n = 0; i < s.size(); i += n) put(decode_at(s, i, &n), change);
}

void Transform::skip(size_t chars) {
  if (tracked_) advance(chars);
}

Piece Transform::done() && {
  Piece p{std::move(text), old_.id, old_.at_start, std::move(align_)};
  return p;
}

namespace {
size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
}  // namespace

// `old_part`'s characters (next in t's old text) replaced by `new_part`'s as `tokenizers`' Precompiled
// and unicode-normalization-alignments change them: one for one in place, the new ones past the old
// count new, the last one taking the place of those left over; none at all drops the old ones,
// unless nothing was written before (tokenizers then has no change to attach the drop to: the old
// characters stay in place for the new text that follows to take).
void replace_chars(Transform& t, std::string_view old_part, std::string_view new_part) {
  if (!t.tracked()) {
    t.text += new_part;
    return;
  }
  const size_t m = count_chars(old_part), n = count_chars(new_part);
  if (n == 0) {
    if (!t.text.empty()) t.skip(m);
    return;
  }
  size_t k = 0;
  for (size_t i = 0, len = 0; i < new_part.size(); i += len, ++k) {
    const char32_t c = decode_at(new_part, i, &len);
    int change = 0;
    if (k >= m)
      change = 1;
    else if (k + 1 == n && n < m)
      change = -static_cast<int>(m - n);
    t.put(c, change);
  }
}

// tokenizers' NormalizedString::prepend: s's first character in the place of p's first, the rest
// of s and p's first character new (so all with the Align of p's first).
void prepend(Piece& p, std::string_view s) {
  if (p.text.empty() || s.empty()) return;
  Transform t(p);
  size_t n = 0;
  const char32_t first = decode_at(p.text, 0, &n);
  size_t k = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len, ++k) t.put(decode_at(s, i, &len), k > 0);
  t.put(first, 1);
  for (size_t i = n, len = 0; i < p.text.size(); i += len) t.put(decode_at(p.text, i, &len));
  p = std::move(t).done();
}

}  // namespace qkv::text::hf
