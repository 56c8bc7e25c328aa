// io::parse_csv (libcsv) against what Python's csv module reads from the same bytes (the expected
// values below; `csv.reader(io.StringIO(text, newline=""))`): quoted commas, doubled quotes, line
// breaks inside quotes, CRLF, a byte-order mark, spaces kept, blank lines skipped — and malformed
// files refused naming the line.
#include <gtest/gtest.h>

#include "qkv/core/error.h"
#include "qkv/io/csv.h"
#include "testing.h"

namespace qkv::io::csv_test {
namespace {

using Fields = std::vector<std::string>;

TEST(Csv, ReadsWhatPythonsCsvModuleReads) {
  const std::string text =
      "\xEF\xBB\xBF"
      "sent1,sent2,label\r\n"
      "plain, spaced ,0\r\n"
      "\"a, quoted\",\"say \"\"hi\"\"\",1\r\n"
      "\r\n"
      "\"two\nlines\",,2\n"
      "\"\",last,3";  // (no line break at the end)
  const CsvTable t = parse_csv(text, "t.csv");
  EXPECT_EQ(t.header, (Fields{"sent1", "sent2", "label"}));
  ASSERT_EQ(t.records.size(), 4u);
  EXPECT_EQ(t.records[0].fields, (Fields{"plain", " spaced ", "0"}));
  EXPECT_EQ(t.records[1].fields, (Fields{"a, quoted", "say \"hi\"", "1"}));
  EXPECT_EQ(t.records[2].fields, (Fields{"two\nlines", "", "2"}));
  EXPECT_EQ(t.records[3].fields, (Fields{"", "last", "3"}));
  EXPECT_EQ(t.records[0].line, 2u);
  EXPECT_EQ(t.records[1].line, 3u);
  EXPECT_EQ(t.records[2].line, 5u);  // (line 4 blank)
  EXPECT_EQ(t.records[3].line, 7u);  // (its field before spanned lines 5 and 6)
  EXPECT_TRUE(parse_csv("a,b\n", "h.csv").records.empty());
}

TEST(Csv, RefusesMalformedFilesNamingTheLine) {
  auto error = [](const std::string& text) {
    try {
      parse_csv(text, "'bad.csv'");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(read)");
  };
  auto has = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  std::string e = error("a,b\n1,2\n1,2,3\n");
  EXPECT_TRUE(has(e, "'bad.csv' line 3: 3 fields, but the header names 2")) << e;
  e = error("a,b\n1,2\n\"open,2\n3,4\n");
  EXPECT_TRUE(has(e, "'bad.csv' line 4: not CSV")) << e;  // (the quote never closes: the end of the text)
  e = error("a,b\nx\"y,2\n");
  EXPECT_TRUE(has(e, "'bad.csv' line 2: not CSV")) << e;
  e = error("a,b\n\"x\"y,2\n");
  EXPECT_TRUE(has(e, "'bad.csv' line 2: not CSV")) << e;
  e = error("a,a\n1,2\n");
  EXPECT_TRUE(has(e, "the column name \"a\" is empty or given twice")) << e;
  e = error("a,,c\n1,2,3\n");
  EXPECT_TRUE(has(e, "the column name \"\" is empty or given twice")) << e;
  e = error("");
  EXPECT_TRUE(has(e, "holds no header line")) << e;
  e = error("\r\n\n");
  EXPECT_TRUE(has(e, "holds no header line")) << e;
}

}  // namespace
}  // namespace qkv::io::csv_test
