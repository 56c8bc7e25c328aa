// CSV data files (io/csv.h) through libcsv: the text fed a physical line at a time, so that each
// record knows the line it starts on (libcsv calls back at a field's end, which for a quoted field
// may be lines later).
#include "qkv/io/csv.h"

#include <csv.h>

#include <algorithm>
#include <set>

#include "qkv/core/error.h"
#include "qkv/core/message.h"

namespace qkv::io {

namespace {

// What libcsv's callbacks fill: the record being read, and the table.
struct CsvReader {
  CsvTable table;
  std::vector<std::string> fields;
  size_t line = 1, record_line = 0;
  bool between = true;  // no record begun since the last ended (libcsv skips blank lines unseen)
  bool header_done = false;
  std::string what, error;  // (the callbacks run inside libcsv's C code: they note an error, never throw)

  void end_record() {
    if (!error.empty()) return;
    if (!header_done) {
      table.header = std::move(fields);
      header_done = true;
    } else if (fields.size() != table.header.size()) {
      error = detail::concat(what, " line ", record_line, ": ", fields.size(), " fields, but the header names ",
                             table.header.size());
    } else {
      table.records.push_back({record_line, std::move(fields)});
    }
    fields.clear();
  }
};

// libcsv's field callback: one field of the record (not NUL-terminated)
void on_field(void* s, size_t n, void* data) {
  auto* r = static_cast<CsvReader*>(data);
  if (!r->error.empty()) return;
  if (r->between) r->record_line = r->line, r->between = false;  // (a record begun after a lone "\r")
  r->fields.emplace_back(static_cast<const char*>(s), n);
}
// and its end of a record (c: the character that ended it, −1 at the end of the text)
void on_record(int, void* data) {
  auto* r = static_cast<CsvReader*>(data);
  r->end_record();
  r->between = true;
}

// Python's csv module and pandas keep the spaces around a field; libcsv trims spaces and tabs unless told
int no_space(unsigned char) { return 0; }

}  // namespace

CsvTable parse_csv(std::string_view text, const std::string& what) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // (a UTF-8 byte-order mark: Excel writes one)
  csv_parser p;
  QKV_CHECK(csv_init(&p, CSV_STRICT | CSV_STRICT_FINI) == 0, what, ": out of memory");
  csv_set_space_func(&p, no_space);
  CsvReader r;
  r.what = what;
  struct Free {
    csv_parser* p;
    ~Free() { csv_free(p); }
  } free_parser{&p};
  auto fail = [&]() {
    throw Error(detail::concat(what, " line ", r.line, ": not CSV (", csv_strerror(csv_error(&p)),
                               csv_error(&p) == CSV_EPARSE ? ": a quote inside a field that does not start with one, "
                                                             "or a quoted field that never closes"
                                                           : "",
                               ")"));
  };
  for (size_t from = 0; from < text.size();) {
    size_t end = text.find('\n', from);
    end = end == std::string_view::npos ? text.size() : end + 1;
    // a record begins on this line unless it is blank (libcsv skips those) or one goes on from above
    if (r.between && text.substr(from, end - from).find_first_not_of("\r\n") != std::string_view::npos)
      r.record_line = r.line, r.between = false;
    if (csv_parse(&p, text.data() + from, end - from, on_field, on_record, &r) != end - from) fail();
    if (!r.error.empty()) throw Error(r.error);
    from = end;
    ++r.line;
  }
  if (csv_fini(&p, on_field, on_record, &r) != 0) {
    --r.line;  // (the text's last line)
    fail();
  }
  if (!r.error.empty()) throw Error(r.error);
  QKV_CHECK(r.header_done, what, " holds no header line (the columns' names)");
  std::set<std::string> seen;
  for (const std::string& h : r.table.header)
    QKV_CHECK(!h.empty() && seen.insert(h).second, what, " line 1: the column name \"", excerpt(h),
              "\" is empty or given twice");
  return std::move(r.table);
}

}  // namespace qkv::io
