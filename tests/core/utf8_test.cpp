// The one UTF-8 decoder: what Python's "utf-8" codec accepts decodes, everything else is an invalid
// byte (kInvalid, one byte) — overlong forms, surrogates, values past U+10FFFF, stray continuation
// bytes, truncated sequences.
#include <gtest/gtest.h>

#include "qkv/core/utf8.h"
#include "testing.h"

namespace qkv {
namespace {

TEST(Utf8, DecodesAndEncodesEveryLength) {
  const std::string s = "a\u00e9\u20ac\U0001F600";  // 1, 2, 3, 4 bytes
  EXPECT_EQ(utf8::decode(s), (std::vector<char32_t>{U'a', 0xE9, 0x20AC, 0x1F600}));
  std::string back;
  for (char32_t c : utf8::decode(s)) back += utf8::encode(c);
  EXPECT_EQ(back, s);
  EXPECT_EQ(utf8::length(s), 4u);
}

TEST(Utf8, RejectsWhatPythonRejects) {
  for (const std::string& bad : {std::string("\xC0\xAF"),          // overlong '/'
                                std::string("\xE0\x80\xAF"),      // overlong, 3 bytes
                                std::string("\xED\xA0\x80"),      // a surrogate
                                std::string("\xF4\x90\x80\x80"),  // past U+10FFFF
                                std::string("\x80"),              // a stray continuation byte
                                std::string("\xE2\x82")}) {       // truncated
    const utf8::CodePoint c = utf8::decode_one(bad, 0);
    EXPECT_FALSE(c.valid()) << ::testing::PrintToString(bad);
    EXPECT_EQ(c.length, 1u);
    EXPECT_NE(testing::error_of([&] { utf8::decode(bad); }).find("invalid UTF-8 at byte 0"), std::string::npos);
  }
  EXPECT_EQ(utf8::length(std::string("a\xC0\xAF") + "b"), 4u) << "an invalid byte counts as one";
}

TEST(Utf8, CutsOnlyOnBoundaries) {
  const std::string s = "ab\u20acc";  // the euro sign is bytes 2..4
  EXPECT_EQ(utf8::boundary_at_or_after(s, 2), 2u);
  EXPECT_EQ(utf8::boundary_at_or_after(s, 3), 5u);
  EXPECT_EQ(utf8::boundary_at_or_after(s, 4), 5u);
  EXPECT_EQ(utf8::boundary_at_or_after(s, 6), 6u);
}

}  // namespace
}  // namespace qkv
