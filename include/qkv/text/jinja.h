// Jinja templates, as Hugging Face's chat templates use them: the language jinja2 compiles, with the
// environment transformers' apply_chat_template renders in (ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loopcontrols extension, `{% generation %}` blocks, its
// `tojson` filter and the globals `raise_exception` and `strftime_now`).
//
//   qkv::text::jinja::Template t("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}");
//   std::string prompt = t.render({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
//
// What it knows — anything else is a qkv::Error at compile time naming the line and the construct
// (a filter or test it does not know: when a render reaches it, as jinja2):
//   statements  if/elif/else, for (nested unpacking, `if` filter, else, recursive with loop(items);
//               loop.index, index0, revindex, revindex0, first, last, length, depth, depth0,
//               previtem, nextitem, cycle, changed), break, continue, set (names, tuples,
//               `ns.attr`, `{% set x %}…{% endset %}`), macro (varargs, kwargs, caller; .name,
//               .arguments), call blocks (`{% call(args) m() %}` and caller()), block (rendered
//               where it stands), with, filter blocks, raw, generation, comments, whitespace control
//   expressions literals (strings with Python's escapes but \N{…}, ints, floats, lists, tuples,
//               dicts with str, int, float, bool and None keys), the arithmetic, comparison, `in`,
//               `and`/`or`/`not`, `~` and conditional operators with Python's semantics, printf-style
//               `'%s' % x`, attribute and item lookup, slices, calls with keywords
//   filters     abs, attr, batch, capitalize, center, count, default/d, dictsort, escape/e, first,
//               float, forceescape, format, groupby, indent, int, items, join, last, length, list,
//               lower, map, max, min, pprint (one line of 80), reject, rejectattr, replace, reverse,
//               round, safe, select, selectattr, slice, sort, string, striptags, sum, title, tojson,
//               trim, truncate, unique, upper, wordcount, wordwrap
//   tests       boolean, callable, defined, divisibleby, eq/equalto/==, escaped, even, false,
//               filter, float, ge/>=, gt/>, in, integer, iterable, le/<=, lower, lt/<, mapping,
//               ne/!=, none, number, odd, sameas, sequence, string, test, true, undefined, upper
//   methods     str: capitalize, casefold, center, count, endswith, find, format, join, ljust,
//               lower, lstrip, partition, removeprefix, removesuffix, replace, rfind, rjust,
//               rpartition, rsplit, rstrip, split, splitlines, startswith, strip, swapcase, title,
//               upper, zfill, isdigit, isalpha, isalnum, isspace, islower, isupper; list and tuple:
//               index, count, (list) copy; dict: copy, get, items, keys, values
//   globals     range (printed as a range), dict (with dict.fromkeys), namespace, joiner, cycler,
//               raise_exception, strftime_now
// Not: extends, include, import, autoescape, the i18n and do extensions, a tuple as a dict's key.
//
// Values follow Python's: 7 // -2 is -4, str(1e-05) is "1e-05", a list prints as ['a', 1], a
// string is indexed, sliced and measured in code points. Ints are 64-bit: an overflow is an error,
// not a big number.
//
// A crafted template or context can neither hang nor exhaust memory: range() stops at 100,000 items
// (the sandbox's MAX_RANGE), macros, callers and recursive loops nest at most 64 deep and
// expressions 128, no string grows past 64 MiB (padding, formatting, wrapping), a render stops after
// Limits::max_steps evaluations, and no output passes Limits::max_output_bytes — each a qkv::Error
// naming the template (`what`) and the limit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"

namespace qkv::text::jinja {

// What the template raised through raise_exception(message): its message, as the client's fault
// (transformers' TemplateError).
class RaisedError : public Error {
 public:
  using Error::Error;
};

struct Limits {
  int64_t max_output_bytes = 16 << 20;  // any one output: the whole render, a macro's, a set block's
  int64_t max_steps = 2'000'000;        // statements run, loop items, and work on big values (~1 s)
};

struct Node;

class Template {
 public:
  // Compiles `source`; `what` names it in every error ("the model's chat template").
  explicit Template(std::string_view source, std::string what = "template");
  // Renders with `context`'s keys as the template's variables (objects keep their keys' order).
  std::string render(const nlohmann::ordered_json& context, const Limits& limits = {}) const;
  const std::string& what() const { return what_; }
  // The filters and tests the template names that are not known here ("the filter 'wordwrap'"):
  // as in jinja2, an error only where a render reaches one.
  const std::vector<std::string>& unknown() const { return unknown_; }

 private:
  std::shared_ptr<const Node> root_;
  std::string what_;
  std::vector<std::string> unknown_;
};

}  // namespace qkv::text::jinja
