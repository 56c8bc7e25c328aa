// CSV data files (RFC 4180), as Hugging Face's example scripts take them (run_glue.py, run_swag.py,
// run_mlm.py: `--train_file data.csv`, read by datasets through pandas): a header line naming the
// columns, then a record a line; a field in double quotes may hold commas, line breaks and doubled
// quotes ("say ""hi"""). Parsed by libcsv (strict mode); as Python's csv module and pandas read a
// file, spaces around a field are kept, "\r\n" and "\n" both end a record, a UTF-8 byte-order mark
// before the header is dropped, and blank lines are skipped.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::io {

struct CsvRecord {
  size_t line = 0;                  // the line it starts on, from 1 (a quoted field may span lines)
  std::vector<std::string> fields;  // as many as the header's
};
struct CsvTable {
  std::vector<std::string> header;  // the column names, each once
  std::vector<CsvRecord> records;
};

// The table `text` holds. `what` names it in errors ("text_classification task: 'train.csv'"): a quote
// inside an unquoted field, a quoted field never closed, a record of another width than the header
// ("… line 7: 3 fields, but the header names 4"), an empty or repeated column name, no header — each a
// qkv::Error naming the line.
CsvTable parse_csv(std::string_view text, const std::string& what);

}  // namespace qkv::io
