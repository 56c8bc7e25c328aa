// Jinja templates (qkv/text/jinja.h): a lexer as jinja2's (newlines normalized, the trailing one
// dropped, trim_blocks and lstrip_blocks), a recursive-descent parser with jinja2's precedence, and a
// tree walker whose values behave as Python's. The values, filters, tests and methods are in
// jinja_values.cpp; this file holds the syntax and the statements.
#include "qkv/text/jinja.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <set>
#include <vector>

#include "jinja_values.h"
#include "qkv/core/utf8.h"

namespace qkv::text::jinja {

using namespace detail;

namespace {

constexpr int kMaxNesting = 128;  // expressions and blocks inside one another, at compile time

// ---- the lexer -------------------------------------------------------------------------------

enum class T { data, var_begin, var_end, block_begin, block_end, name, string, integer, real, op, eof };

struct Token {
  T type;
  std::string text;  // data, a name, a string's value, an operator
  int line;
  int64_t i = 0;
  double f = 0;
};

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// jinja2 lexes "\n".join(lines) of the source split at \r\n, \r and \n, less one empty last line.
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else
      out += s[i];
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& what) : s_(src), what_(what) {}

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < s_.size()) {
      // the next tag: {{, {% or {#
      size_t tag = pos;
      while (true) {
        tag = s_.find('{', tag);
        if (tag == std::string::npos || tag + 1 >= s_.size()) {
          tag = std::string::npos;
          break;
        }
        const char c = s_[tag + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++tag;
      }
      const bool line_starting = pos == 0 || s_[pos - 1] == '\n';
      if (tag == std::string::npos) {
        data(s_.substr(pos), pos);
        break;
      }
      const char kind = s_[tag + 1];
      const char sign = tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
      size_t after = tag + 2 + (sign ? 1 : 0);
      const size_t raw_end = kind == '%' ? raw_begin(after) : 0;
      std::string text = s_.substr(pos, tag - pos);
      text = strip_before(std::move(text), sign, kind != '{', line_starting);
      data(text, pos);
      if (kind == '#') {
        pos = comment(after, tag);
      } else if (raw_end) {
        pos = raw(raw_end, tag);
      } else {
        out_.push_back({kind == '{' ? T::var_begin : T::block_begin, "", line_at(tag)});
        pos = expression(after, kind == '{');
      }
    }
    out_.push_back({T::eof, "", line_at(s_.size())});
    return std::move(out_);
  }

 private:
  const std::string& s_;
  const std::string& what_;
  std::vector<Token> out_;
  size_t line_pos_ = 0;
  int line_ = 1;

  int line_at(size_t pos) {  // (positions only grow)
    for (; line_pos_ < pos && line_pos_ < s_.size(); ++line_pos_)
      if (s_[line_pos_] == '\n') ++line_;
    return line_;
  }
  [[noreturn]] void fail(size_t pos, const std::string& msg) {
    throw Error(what_ + ": line " + std::to_string(line_at(pos)) + ": " + msg);
  }
  void data(const std::string& text, size_t pos) {
    if (!text.empty()) out_.push_back({T::data, text, line_at(pos)});
  }
  // The text before a tag: all its trailing whitespace goes before "-"; with lstrip_blocks, the
  // spaces and tabs between the line's start and a block or comment tag not marked "+".
  std::string strip_before(std::string text, char sign, bool block_or_comment, bool line_starting) const {
    if (sign == '-') {
      text.resize(py_rstrip_end(text));
    } else if (sign != '+' && block_or_comment) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        bool blank = true;
        for (size_t i = l_pos; i < text.size() && blank; ++i) blank = text[i] == ' ' || text[i] == '\t';
        if (blank) text.resize(l_pos);
      }
    }
    return text;
  }
  // After a block or comment end: "-" strips all the whitespace that follows, trim_blocks one "\n"
  // (not after "+").
  size_t after_end(size_t pos, char sign) const {
    if (sign == '-') return py_lstrip_begin(s_, pos);
    if (sign != '+' && pos < s_.size() && s_[pos] == '\n') return pos + 1;
    return pos;
  }
  size_t comment(size_t pos, size_t tag) {
    const size_t end = s_.find("#}", pos);
    if (end == std::string::npos) fail(tag, "the comment is not closed with #}");
    const char sign = end > pos && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    return after_end(end + 2, sign);
  }
  // `{%[-+] raw [-]%}`: the position after it, or 0 where the tag is not raw.
  size_t raw_begin(size_t pos) const {
    size_t p = pos;
    while (p < s_.size() && py_space_at(s_, p)) p = next_cp(s_, p);
    if (s_.compare(p, 3, "raw") != 0) return 0;
    p += 3;
    while (p < s_.size() && py_space_at(s_, p)) p = next_cp(s_, p);
    if (s_.compare(p, 3, "-%}") == 0) return py_lstrip_begin(s_, p + 3);
    if (s_.compare(p, 2, "%}") == 0) return p + 2;
    return 0;
  }
  size_t raw(size_t pos, size_t tag) {
    for (size_t p = s_.find("{%", pos); p != std::string::npos; p = s_.find("{%", p + 2)) {
      const char sign = p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+') ? s_[p + 2] : 0;
      size_t q = p + 2 + (sign ? 1 : 0);
      while (q < s_.size() && py_space_at(s_, q)) q = next_cp(s_, q);
      if (s_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < s_.size() && py_space_at(s_, q)) q = next_cp(s_, q);
      char end_sign = 0;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) end_sign = s_[q++];
      if (s_.compare(q, 2, "%}") != 0) continue;
      const bool line_starting = pos == 0 || s_[pos - 1] == '\n';
      data(strip_before(s_.substr(pos, p - pos), sign, true, line_starting), pos);
      return after_end(q + 2, end_sign);
    }
    fail(tag, "{% raw %} is not closed with {% endraw %}");
  }
  // The tokens of a {{ … }} or {% … %}, up to its end (matched only where brackets balance).
  size_t expression(size_t pos, bool variable) {
    std::vector<char> open;
    while (true) {
      while (pos < s_.size() && ascii_space(s_[pos])) ++pos;
      if (pos >= s_.size())
        fail(pos, variable ? "the expression is not closed with }}" : "the tag is not closed with %}");
      if (open.empty()) {
        if (variable) {
          if (s_.compare(pos, 3, "-}}") == 0) {
            out_.push_back({T::var_end, "", line_at(pos)});
            return py_lstrip_begin(s_, pos + 3);
          }
          if (s_.compare(pos, 2, "}}") == 0) {
            out_.push_back({T::var_end, "", line_at(pos)});
            return pos + 2;
          }
        } else {
          const char sign = s_[pos] == '-' || s_[pos] == '+' ? s_[pos] : 0;
          if (s_.compare(pos + (sign ? 1 : 0), 2, "%}") == 0) {
            out_.push_back({T::block_end, "", line_at(pos)});
            return after_end(pos + (sign ? 3 : 2), sign);
          }
        }
      }
      const int line = line_at(pos);
      const char c = s_[pos];
      if (c == '0' && pos + 2 < s_.size() && std::strchr("xXoObB", s_[pos + 1]) &&
          std::isxdigit(static_cast<unsigned char>(s_[pos + 2]))) {
        const int base = std::tolower(s_[pos + 1]) == 'x' ? 16 : std::tolower(s_[pos + 1]) == 'o' ? 8 : 2;
        size_t e = pos + 2;
        std::string t;
        while (e < s_.size() && (std::isxdigit(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) {
          if (s_[e] != '_') t += s_[e];
          ++e;
        }
        errno = 0;
        char* end = nullptr;
        Token tok{T::integer, t, line};
        tok.i = std::strtoll(t.c_str(), &end, base);
        if (errno == ERANGE || end != t.c_str() + t.size())
          fail(pos, "the integer literal '" + s_.substr(pos, e - pos) + "' is not one of 64 bits");
        out_.push_back(tok);
        pos = e;
      } else if (c >= '0' && c <= '9') {
        pos = number(pos, line);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
        out_.push_back({T::name, s_.substr(pos, e - pos), line});
        pos = e;
      } else if (c == '\'' || c == '"') {
        pos = string(pos, line);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : two)
          if (s_.compare(pos, 2, t) == 0) op = t;
        if (op.empty()) {
          if (!std::strchr("+-*/%~[](){}<>=.:|,;", c))
            fail(pos, std::string("unexpected character '") + cp_at(pos) + "'");
          op = std::string(1, c);
        }
        if (c == '(' || c == '[' || c == '{') open.push_back(c);
        if (c == ')' || c == ']' || c == '}') {
          const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
          if (open.empty() || open.back() != want) fail(pos, "unexpected '" + op + "'");
          open.pop_back();
        }
        out_.push_back({T::op, op, line});
        pos += op.size();
      }
    }
  }
  std::string cp_at(size_t pos) const { return s_.substr(pos, next_cp(s_, pos) - pos); }
  // An int (digits with single underscores between) or a float (a fraction, an exponent or both).
  size_t number(size_t pos, int line) {
    auto digits = [&](size_t p) {
      size_t e = p;
      while (e < s_.size() &&
             (std::isdigit(static_cast<unsigned char>(s_[e])) ||
              (s_[e] == '_' && e > p && e + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e + 1])))))
        ++e;
      return e;
    };
    size_t e = digits(pos);
    bool real = false;
    if (e + 1 < s_.size() && s_[e] == '.' && std::isdigit(static_cast<unsigned char>(s_[e + 1]))) {
      e = digits(e + 1);
      real = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t x = e + 1;
      if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
      if (x < s_.size() && std::isdigit(static_cast<unsigned char>(s_[x]))) {
        e = digits(x);
        real = true;
      }
    }
    std::string t;
    for (size_t i = pos; i < e; ++i)
      if (s_[i] != '_') t += s_[i];
    Token tok{real ? T::real : T::integer, t, line};
    if (real)
      tok.f = std::strtod(t.c_str(), nullptr);
    else {
      errno = 0;
      tok.i = std::strtoll(t.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(pos, "the integer " + t + " is past 64 bits");
    }
    out_.push_back(tok);
    return e;
  }
  // A quoted string with Python's escapes (\n \t \\ \' \" \xhh \uXXXX \UXXXXXXXX, octal; others kept).
  size_t string(size_t pos, int line) {
    const char q = s_[pos];
    std::string v;
    size_t p = pos + 1;
    while (true) {
      if (p >= s_.size()) fail(pos, "the string is not closed");
      const char c = s_[p];
      if (c == q) break;
      if (c != '\\') {
        v += c;
        ++p;
        continue;
      }
      if (p + 1 >= s_.size()) fail(pos, "the string is not closed");
      const char e = s_[p + 1];
      p += 2;
      switch (e) {
        case 'n':
          v += '\n';
          break;
        case 't':
          v += '\t';
          break;
        case 'r':
          v += '\r';
          break;
        case '\\':
          v += '\\';
          break;
        case '\'':
          v += '\'';
          break;
        case '"':
          v += '"';
          break;
        case 'a':
          v += '\a';
          break;
        case 'b':
          v += '\b';
          break;
        case 'f':
          v += '\f';
          break;
        case 'v':
          v += '\v';
          break;
        case '\n':
          break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (int k = 0; k < n; ++k, ++p) {
            if (p >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[p])))
              fail(pos, std::string("the string's \\") + e + " escape needs " + std::to_string(n) + " hex digits");
            const char h = s_[p];
            cp = cp * 16 + static_cast<char32_t>(
                               std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(pos, "the string's escape names no character");
          v += utf8::encode(cp);
          break;
        }
        case 'N':
          fail(pos, "the string's \\N{…} escape is not supported");
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < s_.size() && s_[p] >= '0' && s_[p] <= '7'; ++k, ++p)
              cp = cp * 8 + (s_[p] - '0');
            v += utf8::encode(cp);
          } else {
            v += '\\';
            v += e;
          }
      }
    }
    out_.push_back({T::string, v, line});
    return p + 1;
  }
};

}  // namespace

// ---- the tree --------------------------------------------------------------------------------

// A statement; the template's root is a Body.
struct Node {
  int line = 0;
  virtual ~Node() = default;
  virtual void run(Ctx& c) const = 0;
};

namespace {

using ExprP = std::unique_ptr<Expr>;
using NodeP = std::unique_ptr<Node>;

struct Body : Node {
  std::vector<NodeP> nodes;
  void run(Ctx& c) const override {
    for (const auto& n : nodes) {
      c.step(n->line);
      n->run(c);
      if (c.flow != Flow::normal) return;
    }
  }
};
using BodyP = std::unique_ptr<Body>;

struct Text : Node {
  std::string text;
  void run(Ctx& c) const override { c.write(text); }
};

struct Output : Node {
  ExprP e;
  void run(Ctx& c) const override { c.write(to_str(e->eval(c), c)); }
};

struct If : Node {
  std::vector<std::pair<ExprP, BodyP>> branches;
  BodyP otherwise;
  void run(Ctx& c) const override {
    for (const auto& [cond, body] : branches)
      if (truthy(cond->eval(c))) return body->run(c);
    if (otherwise) otherwise->run(c);
  }
};

// A for loop's or a set's target: a name, or targets to unpack an item into (`a, (b, c)`).
struct Target {
  std::string name;
  std::vector<Target> parts;
};

struct For : Node {
  Target target;
  ExprP iter;
  ExprP filter;  // `for x in xs if cond`
  BodyP body, otherwise;
  bool recursive = false;  // `for … recursive`: loop(items) renders the body over them, a level deeper
  void run(Ctx& c) const override { loop_over(c, iter->eval(c), 1); }
  void loop_over(Ctx& c, const Value& seq, int64_t depth) const {
    std::vector<Value> items = iterate(seq, c, "a for loop");
    c.push_frame();
    if (filter) {  // (the filter sees each item bound; loop.* counts what passes)
      std::vector<Value> kept;
      for (auto& it : items) {
        c.step(line);
        bind(c, target, it);
        if (truthy(filter->eval(c))) kept.push_back(std::move(it));
      }
      items = std::move(kept);
    }
    c.pop_frame();
    // jinja2 runs the else block unless some iteration reached its body's end (a break or a
    // continue skips that end), and gives each iteration a frame of its own
    const int64_t n = static_cast<int64_t>(items.size());
    auto changed = std::make_shared<std::pair<bool, Value>>();  // loop.changed's last values, once set
    bool completed = false;
    for (int64_t k = 0; k < n; ++k) {
      c.step(line);
      c.push_frame();
      bind(c, target, items[k]);
      c.set("loop", loop_value(items, k, depth, changed));
      body->run(c);
      c.pop_frame();
      const Flow f = c.flow;
      c.flow = Flow::normal;
      if (f == Flow::normal) completed = true;
      if (f == Flow::brk) break;
    }
    if (!completed && otherwise) otherwise->run(c);
  }
  static void bind(Ctx& c, const Target& t, const Value& item) {
    if (t.parts.empty()) return c.set(t.name, item);
    const std::vector<Value> parts = iterate(item, c, "unpacking a for loop's item");
    if (parts.size() != t.parts.size())
      c.fail("a for loop unpacks " + std::to_string(t.parts.size()) + " values from an item of " +
             std::to_string(parts.size()));
    for (size_t k = 0; k < parts.size(); ++k) bind(c, t.parts[k], parts[k]);
  }
  Value loop_value(const std::vector<Value>& items, int64_t k, int64_t depth,
                   const std::shared_ptr<std::pair<bool, Value>>& changed) const {
    const int64_t n = static_cast<int64_t>(items.size());
    auto d = std::make_shared<Dict>();  // (fresh keys: no lookups)
    d->items.reserve(14);
    d->items.emplace_back("index", Value::integer(k + 1));
    d->items.emplace_back("index0", Value::integer(k));
    d->items.emplace_back("revindex", Value::integer(n - k));
    d->items.emplace_back("revindex0", Value::integer(n - k - 1));
    d->items.emplace_back("first", Value::boolean(k == 0));
    d->items.emplace_back("last", Value::boolean(k == n - 1));
    d->items.emplace_back("length", Value::integer(n));
    d->items.emplace_back("depth", Value::integer(depth));
    d->items.emplace_back("depth0", Value::integer(depth - 1));
    d->items.emplace_back("previtem", k > 0 ? items[k - 1] : Value::undefined("there is no previous item"));
    d->items.emplace_back("nextitem", k + 1 < n ? items[k + 1] : Value::undefined("there is no next item"));
    d->items.emplace_back("cycle", Value::function("loop.cycle", [k](Args& a) {
                            if (a.pos.empty()) a.ctx.fail("loop.cycle() needs at least one value");
                            return a.pos[static_cast<size_t>(k) % a.pos.size()];
                          }));
    // loop.changed(*values): whether they differ from the last call's (true the first time)
    d->items.emplace_back("changed", Value::function("loop.changed", [changed](Args& a) {
                            Value now = Value::list(a.pos);
                            now.tuple = true;
                            if (changed->first && compare("==", changed->second, now, a.ctx))
                              return Value::boolean(false);
                            *changed = {true, std::move(now)};
                            return Value::boolean(true);
                          }));
    if (recursive)  // loop(items): the body over them, one level deeper (a nested call, as a macro's)
      d->items.emplace_back(
          "\x02"
          "call",
          Value::function("loop", [this, depth](Args& a) {
            if (a.pos.size() != 1 || !a.kw.empty()) a.ctx.fail("loop() takes one iterable");
            a.ctx.enter_recursion();
            std::string text;
            try {
              text = a.ctx.capture([&] { loop_over(a.ctx, a.pos[0], depth + 1); });
            } catch (...) {
              a.ctx.leave_recursion();
              throw;
            }
            a.ctx.leave_recursion();
            return Value::string(std::move(text));
          }));
    Value v = Value::of_dict(std::move(d));
    v.object = "LoopContext";
    return v;
  }
};

struct Set : Node {
  std::vector<std::string> targets;  // names (several: unpacking)
  std::string ns_attr;               // `set ns.attr = …`: targets[0] is ns
  ExprP e;
  BodyP block;                       // `{% set x %}…{% endset %}`
  std::vector<ExprP> block_filters;  // `{% set x | trim %}`: Filter nodes with a null input
  void run(Ctx& c) const override;
};

struct With : Node {
  std::vector<std::pair<std::string, ExprP>> vars;
  BodyP body;
  void run(Ctx& c) const override {
    std::vector<Value> values;
    for (const auto& [name, e] : vars) values.push_back(e->eval(c));
    c.push_frame();
    for (size_t k = 0; k < vars.size(); ++k) c.set(vars[k].first, values[k]);
    body->run(c);
    c.pop_frame();
  }
};

struct Break : Node {
  bool is_continue = false;
  void run(Ctx& c) const override { c.flow = is_continue ? Flow::cont : Flow::brk; }
};

struct FilterBlock : Node {
  std::vector<ExprP> filters;  // Filter nodes whose input is the body's text
  BodyP body;
  void run(Ctx& c) const override;
};

// A macro's or a call block's caller's parameters, and the special names its body uses: varargs
// (the extra positional arguments), kwargs (the extra keywords), caller (a call block's body).
struct Signature {
  std::string name;
  std::vector<std::pair<std::string, ExprP>> params;  // (a null default: none given)
  bool varargs = false, kwargs = false, caller = false;
  // Binds a call's arguments in the frame just entered, as jinja2's Macro does.
  void bind(Args& a) const;
  // The value a macro is: called, it renders `body` in a scope `enter` makes; with jinja2's
  // attributes name, arguments, catch_varargs, catch_kwargs and caller.
  Value function(const Node* body, std::function<void(Ctx&)> enter) const;
};

struct MacroDef : Node {
  Signature sig;
  BodyP body;
  void run(Ctx& c) const override;
};

// `{% call(params) macro(args) %}body{% endcall %}`: the macro called with caller=, a macro that
// renders the body where the call block stands.
struct CallBlock : Node {
  Signature sig;
  ExprP fn;  // the macro
  std::vector<ExprP> pos;
  std::vector<std::pair<std::string, ExprP>> kw;
  BodyP body;
  void run(Ctx& c) const override;
};

// `{% block name %}`: with no template extending this one, its body rendered where it stands, seeing
// the template's top level (and, when `scoped`, the variables around it).
struct Block : Node {
  bool scoped = false;
  BodyP body;
  void run(Ctx& c) const override {
    if (scoped) {
      c.push_frame();
      body->run(c);
      c.pop_frame();
      return;
    }
    c.enter_macro("block");
    try {
      body->run(c);
    } catch (...) {
      c.leave_macro();
      throw;
    }
    c.leave_macro();
  }
};

// ---- expressions -----------------------------------------------------------------------------

struct Literal : Expr {
  Value v;
  Value eval(Ctx&) const override { return v; }
};

struct Name : Expr {
  std::string name;
  Value eval(Ctx& c) const override { return c.lookup(name); }
};

struct ListLit : Expr {
  std::vector<ExprP> items;
  bool tuple = false;
  Value eval(Ctx& c) const override {
    List l;
    for (const auto& i : items) l.push_back(i->eval(c));
    Value v = Value::list(std::move(l));
    v.tuple = tuple;
    return v;
  }
};

struct DictLit : Expr {
  std::vector<std::pair<ExprP, ExprP>> items;
  Value eval(Ctx& c) const override {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, v] : items) {
      const std::string k_ = dict_key(k->eval(c), *d, c);
      d->set(k_, v->eval(c));
    }
    return Value::of_dict(std::move(d));
  }
};

struct Attr : Expr {
  ExprP obj;
  std::string name;
  Value eval(Ctx& c) const override { return get_attr(obj->eval(c), name, c); }
};

struct Item : Expr {
  ExprP obj, key;
  Value eval(Ctx& c) const override {
    const Value o = obj->eval(c);
    return get_item(o, key->eval(c), c);
  }
};

struct SliceExpr : Expr {
  ExprP obj, start, stop, stride;
  Value eval(Ctx& c) const override {
    const Value o = obj->eval(c);
    auto opt = [&](const ExprP& e) { return e ? e->eval(c) : Value::none(); };
    return slice(o, opt(start), opt(stop), opt(stride), c);
  }
};

struct CallExpr : Expr {
  ExprP fn;
  std::vector<ExprP> pos;
  std::vector<std::pair<std::string, ExprP>> kw;
  Value eval(Ctx& c) const override {
    const Value f = fn->eval(c);
    Args a{c, {}, {}};
    for (const auto& p : pos) a.pos.push_back(p->eval(c));
    for (const auto& [k, v] : kw) a.kw.emplace_back(k, v->eval(c));
    c.line = line;
    return call(f, a);
  }
};

struct FilterExpr : Expr {
  ExprP input;  // null in a filter block's or set block's chain
  std::string name;
  FilterFn fn;
  std::vector<ExprP> pos;
  std::vector<std::pair<std::string, ExprP>> kw;
  Value apply(Ctx& c, Value in) const {
    c.line = line;
    if (!fn) c.fail("no filter named '" + name + "'");
    Args a{c, {}, {}};
    a.pos.push_back(std::move(in));
    for (const auto& p : pos) a.pos.push_back(p->eval(c));
    for (const auto& [k, v] : kw) a.kw.emplace_back(k, v->eval(c));
    c.line = line;
    return fn(a);
  }
  Value eval(Ctx& c) const override { return apply(c, input->eval(c)); }
};

struct TestExpr : Expr {
  ExprP input;
  std::string name;
  TestFn fn;
  std::vector<ExprP> args;
  bool negated = false;
  Value eval(Ctx& c) const override {
    Args a{c, {}, {}};
    a.pos.push_back(input->eval(c));
    for (const auto& p : args) a.pos.push_back(p->eval(c));
    c.line = line;
    if (!fn) c.fail("no test named '" + name + "'");
    return Value::boolean(fn(a) != negated);
  }
};

struct Unary : Expr {
  char op;  // '!' not, '-', '+'
  ExprP e;
  Value eval(Ctx& c) const override {
    const Value v = e->eval(c);
    if (op == '!') return Value::boolean(!truthy(v));
    return unary(op, v, c);
  }
};

struct Binary : Expr {
  std::string op;
  ExprP a, b;
  Value eval(Ctx& c) const override {
    if (op == "and") {
      Value x = a->eval(c);
      return truthy(x) ? b->eval(c) : x;
    }
    if (op == "or") {
      Value x = a->eval(c);
      return truthy(x) ? x : b->eval(c);
    }
    const Value x = a->eval(c), y = b->eval(c);
    c.line = line;
    return binary(op, x, y, c);
  }
};

struct Compare : Expr {
  ExprP first;
  std::vector<std::pair<std::string, ExprP>> rest;  // ==, !=, <, <=, >, >=, in, notin
  Value eval(Ctx& c) const override {
    Value x = first->eval(c);
    for (const auto& [op, e] : rest) {
      Value y = e->eval(c);
      c.line = line;
      if (!compare(op, x, y, c)) return Value::boolean(false);
      x = std::move(y);
    }
    return Value::boolean(true);
  }
};

struct CondExpr : Expr {
  ExprP cond, yes, no;
  Value eval(Ctx& c) const override {
    if (truthy(cond->eval(c))) return yes->eval(c);
    return no ? no->eval(c) : Value::undefined("the conditional expression's else");
  }
};

// ---- statements that need the expressions ----------------------------------------------------

void Set::run(Ctx& c) const {
  Value v;
  if (block) {
    std::string text = c.capture([&] { block->run(c); });
    v = Value::string(std::move(text));
    for (const auto& f : block_filters) v = static_cast<const FilterExpr&>(*f).apply(c, std::move(v));
  } else
    v = e->eval(c);
  if (!ns_attr.empty()) {
    const Value ns = c.lookup(targets[0]);
    if (ns.kind != Kind::dict || !ns.ns)
      c.fail("cannot set '" + ns_attr + "' of '" + targets[0] + "': it is not a namespace()");
    if (ns_attr.rfind('_', 0) == 0) c.fail("the namespace attribute '" + ns_attr + "' is unsafe (it starts with '_')");
    ns.dict->set(ns_attr, std::move(v));
    return;
  }
  if (targets.size() == 1) return c.set(targets[0], std::move(v));
  const std::vector<Value> parts = iterate(v, c, "unpacking a set");
  if (parts.size() != targets.size())
    c.fail("set unpacks " + std::to_string(targets.size()) + " names from " + std::to_string(parts.size()) + " values");
  for (size_t k = 0; k < parts.size(); ++k) c.set(targets[k], parts[k]);
}

void FilterBlock::run(Ctx& c) const {
  Value v = Value::string(c.capture([&] { body->run(c); }));
  for (const auto& f : filters) v = static_cast<const FilterExpr&>(*f).apply(c, std::move(v));
  c.write(to_str(v, c));
}

void Signature::bind(Args& a) const {
  Ctx& c = a.ctx;
  const size_t n = params.size();
  if (a.pos.size() > n && !varargs)
    c.fail("macro '" + name + "' takes not more than " + std::to_string(n) + " argument(s)");
  std::vector<Value> bound(n);
  std::vector<bool> given(n, false);
  for (size_t k = 0; k < std::min(n, a.pos.size()); ++k) bound[k] = a.pos[k], given[k] = true;
  auto extra = std::make_shared<Dict>();
  Value caller_value = Value::undefined("No caller defined");
  for (auto& [key, v] : a.kw) {
    size_t k = 0;
    while (k < n && params[k].first != key) ++k;
    if (k < n) {
      if (given[k]) c.fail("macro '" + name + "' got multiple values for argument '" + key + "'");
      bound[k] = v, given[k] = true;
    } else if (key == "caller" && caller)
      caller_value = v;
    else if (kwargs)
      extra->set(detail::key(key), v);
    else if (key == "caller")
      c.fail("macro '" + name + "' was invoked with two values for the special caller argument");
    else
      c.fail("macro '" + name + "' takes no keyword argument '" + key + "'");
  }
  for (size_t k = 0; k < n; ++k) {
    if (!given[k])
      bound[k] =
          params[k].second ? params[k].second->eval(c) : Value::undefined("the argument '" + params[k].first + "'");
    c.set(params[k].first, bound[k]);
  }
  if (varargs) {
    Value rest =
        Value::list(a.pos.size() > n ? List(a.pos.begin() + static_cast<std::ptrdiff_t>(n), a.pos.end()) : List{});
    rest.tuple = true;
    c.set("varargs", std::move(rest));
  }
  if (kwargs) c.set("kwargs", Value::of_dict(std::move(extra)));
  if (caller) c.set("caller", std::move(caller_value));
}

Value Signature::function(const Node* body, std::function<void(Ctx&)> enter) const {
  const Signature* self = this;
  auto attrs = std::make_shared<Dict>();
  List names;
  for (const auto& p : params) names.push_back(Value::string(p.first));
  Value arguments = Value::list(std::move(names));
  arguments.tuple = true;
  attrs->set("name", Value::string(name));
  attrs->set("arguments", std::move(arguments));
  attrs->set("catch_varargs", Value::boolean(varargs));
  attrs->set("catch_kwargs", Value::boolean(kwargs));
  attrs->set("caller", Value::boolean(caller));
  return Value::function(
      name,
      [self, body, enter](Args& a) {
        Ctx& c = a.ctx;
        enter(c);
        std::string text;
        try {
          self->bind(a);
          text = c.capture([&] { body->run(c); });
        } catch (...) {
          c.leave_macro();
          throw;
        }
        c.leave_macro();
        return Value::string(std::move(text));
      },
      std::move(attrs));
}

void MacroDef::run(Ctx& c) const {
  const std::string& name = sig.name;
  c.set(name, sig.function(body.get(), [&name](Ctx& c) { c.enter_macro(name); }));
}

void CallBlock::run(Ctx& c) const {
  // the caller sees the call block's scope, for as long as the block runs
  auto alive = std::make_shared<bool>(true);
  const Ctx::Closure here = c.here();
  Value caller = sig.function(body.get(), [alive, here](Ctx& c) {
    if (!*alive) c.fail("caller() called after its call block ended");
    c.enter_caller(here);
  });
  const Value f = fn->eval(c);
  Args a{c, {}, {}};
  for (const auto& p : pos) a.pos.push_back(p->eval(c));
  for (const auto& [k, v] : kw) a.kw.emplace_back(k, v->eval(c));
  a.kw.emplace_back("caller", std::move(caller));
  c.line = line;
  std::string text;
  try {
    text = to_str(call(f, a), c);
  } catch (...) {
    *alive = false;
    throw;
  }
  *alive = false;
  c.write(text);
}

// ---- the parser ------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::vector<Token> toks, const std::string& what) : t_(std::move(toks)), what_(what) {}

  std::unique_ptr<Body> parse() {
    std::string end;
    auto body = statements({}, end);
    return body;
  }
  std::vector<std::string> unknown_;  // filters and tests named but not known (an error only when run)

 private:
  // jinja2 refuses an unknown filter or test at compile time, except in an if's body (a "soft"
  // frame: `{% if x is filter %}` guards), where it fails when run
  bool soft_ = false;
  void unknown(const std::string& what, int line) {
    if (!soft_) fail("no " + what.substr(4), line);
    unknown_.push_back(what);
  }
  struct Frame {
    Parser& p;
    bool saved;
    Frame(Parser& p, bool soft) : p(p), saved(p.soft_) { p.soft_ = soft; }
    ~Frame() { p.soft_ = saved; }
  };

 private:
  std::vector<Token> t_;
  size_t p_ = 0;
  const std::string& what_;
  int depth_ = 0;
  std::set<std::string> names_;  // the names read in the macro body being parsed

  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  Token next() { return t_[p_ < t_.size() - 1 ? p_++ : p_]; }
  [[noreturn]] void fail(const std::string& msg, int line = -1) const {
    throw Error(what_ + ": line " + std::to_string(line < 0 ? cur().line : line) + ": " + msg);
  }
  bool is_op(const char* op) const { return cur().type == T::op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == T::name && cur().text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
    next();
  }
  void expect_block_end() {
    if (cur().type != T::block_end) fail("expected the end of the tag (%}), got " + describe(cur()));
    next();
  }
  std::string expect_name(const char* what) {
    if (cur().type != T::name) fail(std::string("expected ") + what + ", got " + describe(cur()));
    return next().text;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::data:
        return "text";
      case T::var_begin:
        return "'{{'";
      case T::var_end:
        return "'}}'";
      case T::block_begin:
        return "'{%'";
      case T::block_end:
        return "'%}'";
      case T::name:
        return "'" + t.text + "'";
      case T::string:
        return "a string";
      case T::integer:
      case T::real:
        return "a number";
      case T::op:
        return "'" + t.text + "'";
      case T::eof:
        return "the end of the template";
    }
    return "?";
  }
  struct Deeper {
    Parser& p;
    explicit Deeper(Parser& p) : p(p) {
      if (++p.depth_ > kMaxNesting) p.fail("nested more than " + std::to_string(kMaxNesting) + " deep");
    }
    ~Deeper() { --p.depth_; }
  };

  // Statements up to one of `ends` (a block tag's name: "endif", "else", …), which is left in `end`
  // with its tag's begin consumed and its name consumed; none at the top level.
  std::unique_ptr<Body> statements(const std::vector<std::string>& ends, std::string& end) {
    Deeper d(*this);
    auto body = std::make_unique<Body>();
    body->line = cur().line;
    while (true) {
      const Token& t = cur();
      if (t.type == T::eof) {
        if (!ends.empty()) fail("expected '" + ends.back() + "', got the end of the template");
        end.clear();
        return body;
      }
      if (t.type == T::data) {
        auto n = std::make_unique<Text>();
        n->line = t.line;
        n->text = t.text;
        body->nodes.push_back(std::move(n));
        next();
      } else if (t.type == T::var_begin) {
        auto n = std::make_unique<Output>();
        n->line = t.line;
        next();
        n->e = expression();
        if (cur().type != T::var_end) fail("expected the end of the expression (}}), got " + describe(cur()));
        next();
        body->nodes.push_back(std::move(n));
      } else if (t.type == T::block_begin) {
        next();
        const int line = cur().line;
        const std::string tag = expect_name("a tag's name");
        if (std::find(ends.begin(), ends.end(), tag) != ends.end()) {
          end = tag;
          return body;
        }
        body->nodes.push_back(statement(tag, line));
      } else
        fail("unexpected " + describe(t));
    }
  }

  NodeP statement(const std::string& tag, int line) {
    NodeP n;
    if (tag == "if")
      n = if_stmt();
    else if (tag == "for")
      n = for_stmt();
    else if (tag == "set")
      n = set_stmt();
    else if (tag == "macro")
      n = macro_stmt();
    else if (tag == "filter")
      n = filter_stmt();
    else if (tag == "with")
      n = with_stmt();
    else if (tag == "call")
      n = call_stmt();
    else if (tag == "block")
      n = block_stmt();
    else if (tag == "break" || tag == "continue") {
      if (loops_ == 0) fail("'" + tag + "' outside a for loop", line);
      auto b = std::make_unique<Break>();
      b->is_continue = tag == "continue";
      expect_block_end();
      n = std::move(b);
    } else if (tag == "generation") {  // transformers' assistant-token tracking: the body as it is
      expect_block_end();
      std::string end;
      n = statements({"endgeneration"}, end);
      expect_block_end();
    } else {
      static const char* known[] = {"extends", "include", "import", "from", "autoescape", "do", "trans", "print"};
      for (const char* k : known)
        if (tag == k) fail("the tag '" + tag + "' is not supported", line);
      fail("unknown tag '" + tag + "'", line);
    }
    n->line = line;
    return n;
  }

  NodeP if_stmt() {
    auto n = std::make_unique<If>();
    ExprP cond = tuple_or_expression();
    expect_block_end();
    while (true) {
      std::string end;
      Frame soft(*this, true);
      auto body = statements({"elif", "else", "endif"}, end);
      n->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") {
        cond = tuple_or_expression();
        expect_block_end();
        continue;
      }
      if (end == "else") {
        expect_block_end();
        n->otherwise = statements({"endif"}, end);
      }
      expect_block_end();
      return n;
    }
  }

  int loops_ = 0;
  NodeP for_stmt() {
    auto n = std::make_unique<For>();
    n->target = target_tuple();
    if (!is_name("in")) fail("expected 'in' in the for loop, got " + describe(cur()));
    next();
    n->iter = tuple_or_expression(/*no_condexpr=*/true);
    if (is_name("if")) {
      next();
      n->filter = expression();
    }
    if (is_name("recursive")) {
      next();
      n->recursive = true;
    }
    expect_block_end();
    std::string end;
    {
      Frame hard(*this, false);
      ++loops_;
      n->body = statements({"else", "endfor"}, end);
      --loops_;
      if (end == "else") {
        expect_block_end();
        n->otherwise = statements({"endfor"}, end);
      }
    }
    expect_block_end();
    return n;
  }

  // A for loop's target: names and parenthesized targets, separated by commas (one alone is itself).
  Target target_tuple() {
    Deeper d(*this);
    std::vector<Target> parts;
    bool comma = false;
    while (true) {
      if (is_op("(")) {
        next();
        parts.push_back(target_tuple());
        expect_op(")");
      } else {
        const std::string nm = expect_name("a name");
        if (nm == "true" || nm == "false" || nm == "none" || nm == "True" || nm == "False" || nm == "None" ||
            nm == "loop")
          fail("cannot assign to '" + nm + "'");
        parts.push_back({nm, {}});
      }
      if (!is_op(",")) break;
      next();
      comma = true;
      if (!is_op("(") && (cur().type != T::name || is_name("in"))) break;
    }
    if (!comma) return std::move(parts[0]);
    return {"", std::move(parts)};
  }

  std::vector<std::string> target_names() {
    std::vector<std::string> names;
    const bool paren = is_op("(");
    if (paren) next();
    names.push_back(expect_name("a name"));
    while (is_op(",")) {
      next();
      if (cur().type != T::name) break;
      names.push_back(next().text);
    }
    if (paren) expect_op(")");
    for (const auto& nm : names)
      if (nm == "true" || nm == "false" || nm == "none" || nm == "True" || nm == "False" || nm == "None" ||
          nm == "loop")
        fail("cannot assign to '" + nm + "'");
    return names;
  }

  NodeP set_stmt() {
    auto n = std::make_unique<Set>();
    if (cur().type == T::name && peek().type == T::op && peek().text == ".") {
      n->targets.push_back(next().text);
      next();
      n->ns_attr = expect_name("an attribute's name");
    } else
      n->targets = target_names();
    if (is_op("=")) {
      next();
      n->e = tuple_or_expression();
      expect_block_end();
      return n;
    }
    if (!n->ns_attr.empty() || n->targets.size() != 1) fail("a set block assigns one name");
    while (is_op("|")) {
      next();
      n->block_filters.push_back(filter(nullptr));
    }
    expect_block_end();
    std::string end;
    n->block = statements({"endset"}, end);
    expect_block_end();
    return n;
  }

  // A macro's or a caller's parameters, `(a, b=1)`, into `sig`.
  void parameters(Signature& sig) {
    expect_op("(");
    bool defaults = false;
    while (!is_op(")")) {
      std::string p = expect_name("an argument's name");
      ExprP def;
      if (is_op("=")) {
        next();
        def = expression();
        defaults = true;
      } else if (defaults)
        fail("a macro argument without a default follows one with a default");
      sig.params.emplace_back(std::move(p), std::move(def));
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }
  // The body of a macro or a caller, up to `end`; which of varargs, kwargs and caller it names (as
  // jinja2, these are special only where not parameters).
  BodyP macro_body(Signature& sig, const char* end_tag) {
    std::string end;
    const int loops = loops_;
    loops_ = 0;
    std::set<std::string> outer;
    outer.swap(names_);
    BodyP body;
    {
      Frame hard(*this, false);
      body = statements({end_tag}, end);
    }
    loops_ = loops;
    auto uses = [&](const char* special) {
      if (!names_.count(special)) return false;
      for (const auto& p : sig.params)
        if (p.first == special) return false;
      return true;
    };
    sig.varargs = uses("varargs");
    sig.kwargs = uses("kwargs");
    sig.caller = uses("caller");
    names_.insert(outer.begin(), outer.end());
    return body;
  }

  NodeP macro_stmt() {
    auto n = std::make_unique<MacroDef>();
    n->sig.name = expect_name("the macro's name");
    parameters(n->sig);
    expect_block_end();
    n->body = macro_body(n->sig, "endmacro");
    if (cur().type == T::name && cur().text == n->sig.name) next();
    expect_block_end();
    return n;
  }

  NodeP call_stmt() {
    auto n = std::make_unique<CallBlock>();
    n->sig.name = "caller";
    if (is_op("(")) parameters(n->sig);
    const int line = cur().line;
    ExprP e = expression();
    auto* call = dynamic_cast<CallExpr*>(e.get());
    if (!call) fail("expected a call after 'call'", line);
    n->fn = std::move(call->fn);
    n->pos = std::move(call->pos);
    n->kw = std::move(call->kw);
    expect_block_end();
    n->body = macro_body(n->sig, "endcall");
    expect_block_end();
    return n;
  }

  std::set<std::string> blocks_;  // the block names defined (each once)
  NodeP block_stmt() {
    auto n = std::make_unique<Block>();
    const int line = cur().line;
    const std::string name = expect_name("the block's name");
    if (!blocks_.insert(name).second) fail("block '" + name + "' defined twice", line);
    while (is_name("scoped") || is_name("required")) n->scoped |= next().text == "scoped";
    expect_block_end();
    std::string end;
    const int loops = loops_;
    loops_ = 0;
    n->body = statements({"endblock"}, end);
    loops_ = loops;
    if (cur().type == T::name) {
      if (cur().text != name) fail("mismatching name of the block: '" + cur().text + "' ends '" + name + "'");
      next();
    }
    expect_block_end();
    return n;
  }

  NodeP with_stmt() {
    auto n = std::make_unique<With>();
    while (cur().type != T::block_end) {
      std::string name = expect_name("a name");
      expect_op("=");
      n->vars.emplace_back(std::move(name), expression());
      if (!is_op(",")) break;
      next();
    }
    expect_block_end();
    std::string end;
    n->body = statements({"endwith"}, end);
    expect_block_end();
    return n;
  }

  NodeP filter_stmt() {
    auto n = std::make_unique<FilterBlock>();
    n->filters.push_back(filter(nullptr));
    while (is_op("|")) {
      next();
      n->filters.push_back(filter(nullptr));
    }
    expect_block_end();
    std::string end;
    n->body = statements({"endfilter"}, end);
    expect_block_end();
    return n;
  }

  // ---- expressions, jinja2's precedence: condexpr < or < and < not < compare < + - < ~ < * / // %
  //      < ** < unary - + < postfix (. [] ()) and filters (|, is)

  ExprP tuple_or_expression(bool no_condexpr = false) {
    const int line = cur().line;
    ExprP first = no_condexpr ? or_expr() : expression();
    if (!is_op(",")) return first;
    auto t = std::make_unique<ListLit>();
    t->line = line;
    t->tuple = true;
    t->items.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (cur().type == T::block_end || cur().type == T::var_end || is_name("if")) break;
      t->items.push_back(no_condexpr ? or_expr() : expression());
    }
    return t;
  }

  ExprP expression() {
    Deeper d(*this);
    const int line = cur().line;
    ExprP e = or_expr();
    while (is_name("if")) {
      next();
      auto c = std::make_unique<CondExpr>();
      c->line = line;
      c->yes = std::move(e);
      c->cond = or_expr();
      if (is_name("else")) {
        next();
        c->no = expression();
      }
      e = std::move(c);
    }
    return e;
  }

  template <class Sub>
  ExprP binary_chain(Sub sub, std::initializer_list<const char*> ops, bool names) {
    ExprP e = (this->*sub)();
    while (true) {
      std::string op;
      for (const char* o : ops)
        if (names ? is_name(o) : is_op(o)) op = o;
      if (op.empty()) return e;
      const int line = cur().line;
      next();
      auto b = std::make_unique<Binary>();
      b->line = line;
      b->op = op;
      b->a = std::move(e);
      b->b = (this->*sub)();
      e = std::move(b);
    }
  }
  ExprP or_expr() { return binary_chain(&Parser::and_expr, {"or"}, true); }
  ExprP and_expr() { return binary_chain(&Parser::not_expr, {"and"}, true); }
  ExprP not_expr() {
    if (is_name("not")) {
      Deeper d(*this);
      const int line = cur().line;
      next();
      auto u = std::make_unique<Unary>();
      u->line = line;
      u->op = '!';
      u->e = not_expr();
      return u;
    }
    return compare();
  }
  ExprP compare() {
    const int line = cur().line;
    ExprP e = math1();
    auto c = std::make_unique<Compare>();
    c->line = line;
    while (true) {
      std::string op;
      if (cur().type == T::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
                                  cur().text == ">" || cur().text == ">="))
        op = next().text;
      else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == T::name && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else
        break;
      c->rest.emplace_back(op, math1());
    }
    if (c->rest.empty()) return e;
    c->first = std::move(e);
    return c;
  }
  ExprP math1() { return binary_chain(&Parser::concat, {"+", "-"}, false); }
  ExprP concat() { return binary_chain(&Parser::math2, {"~"}, false); }
  ExprP math2() { return binary_chain(&Parser::power, {"*", "/", "//", "%"}, false); }
  ExprP power() { return binary_chain(&Parser::unary_with_filters, {"**"}, false); }
  ExprP unary_with_filters() { return unary(true); }
  ExprP unary(bool with_filter) {
    Deeper d(*this);
    const int line = cur().line;
    ExprP e;
    if (is_op("-") || is_op("+")) {
      auto u = std::make_unique<Unary>();
      u->line = line;
      u->op = next().text[0];
      u->e = unary(false);
      e = std::move(u);
    } else
      e = primary();
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }

  ExprP primary() {
    const Token t = cur();
    if (t.type == T::name) {
      next();
      auto lit = std::make_unique<Literal>();
      lit->line = t.line;
      if (t.text == "true" || t.text == "True")
        lit->v = Value::boolean(true);
      else if (t.text == "false" || t.text == "False")
        lit->v = Value::boolean(false);
      else if (t.text == "none" || t.text == "None")
        lit->v = Value::none();
      else {
        auto n = std::make_unique<Name>();
        n->line = t.line;
        n->name = t.text;
        names_.insert(t.text);
        return n;
      }
      return lit;
    }
    if (t.type == T::string) {
      std::string s;
      while (cur().type == T::string) s += next().text;  // adjacent literals join
      auto lit = std::make_unique<Literal>();
      lit->line = t.line;
      lit->v = Value::string(std::move(s));
      return lit;
    }
    if (t.type == T::integer || t.type == T::real) {
      next();
      auto lit = std::make_unique<Literal>();
      lit->line = t.line;
      lit->v = t.type == T::integer ? Value::integer(t.i) : Value::real(t.f);
      return lit;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {  // the empty tuple
        next();
        auto l = std::make_unique<ListLit>();
        l->line = t.line;
        l->tuple = true;
        return l;
      }
      ExprP e = expression();
      if (is_op(",")) {
        auto l = std::make_unique<ListLit>();
        l->line = t.line;
        l->tuple = true;
        l->items.push_back(std::move(e));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          l->items.push_back(expression());
        }
        e = std::move(l);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto l = std::make_unique<ListLit>();
      l->line = t.line;
      while (!is_op("]")) {
        l->items.push_back(expression());
        if (!is_op(",")) break;
        next();
      }
      expect_op("]");
      return l;
    }
    if (is_op("{")) {
      next();
      auto d = std::make_unique<DictLit>();
      d->line = t.line;
      while (!is_op("}")) {
        ExprP k = expression();
        expect_op(":");
        d->items.emplace_back(std::move(k), expression());
        if (!is_op(",")) break;
        next();
      }
      expect_op("}");
      return d;
    }
    fail("unexpected " + describe(t));
  }

  ExprP postfix(ExprP e) {
    while (true) {
      const int line = cur().line;
      if (is_op(".")) {
        next();
        auto a = std::make_unique<Attr>();
        a->line = line;
        a->obj = std::move(e);
        if (cur().type == T::name)
          a->name = next().text;
        else if (cur().type == T::integer) {  // x.0 is x[0]
          auto it = std::make_unique<Item>();
          it->line = line;
          it->obj = std::move(a->obj);
          auto lit = std::make_unique<Literal>();
          lit->v = Value::integer(next().i);
          it->key = std::move(lit);
          e = std::move(it);
          continue;
        } else
          fail("expected an attribute's name after '.', got " + describe(cur()));
        e = std::move(a);
      } else if (is_op("[")) {
        next();
        e = subscript(std::move(e), line);
        expect_op("]");
      } else if (is_op("(")) {
        e = call(std::move(e), line);
      } else
        return e;
    }
  }

  ExprP subscript(ExprP obj, int line) {
    ExprP parts[3];
    bool sliced = false;
    for (int k = 0; k < 3; ++k) {
      if (!is_op(":") && !is_op("]")) parts[k] = expression();
      if (k < 2 && is_op(":")) {
        next();
        sliced = true;
      } else
        break;
    }
    if (!sliced) {
      if (!parts[0]) fail("expected an index in '[]'");
      auto it = std::make_unique<Item>();
      it->line = line;
      it->obj = std::move(obj);
      it->key = std::move(parts[0]);
      if (is_op(",")) fail("tuple indexes are not supported");
      return it;
    }
    auto s = std::make_unique<SliceExpr>();
    s->line = line;
    s->obj = std::move(obj);
    s->start = std::move(parts[0]);
    s->stop = std::move(parts[1]);
    s->stride = std::move(parts[2]);
    return s;
  }

  template <class Out>
  void arguments(std::vector<ExprP>& pos, std::vector<std::pair<std::string, ExprP>>& kw, Out&&) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().type == T::name && peek().type == T::op && peek().text == "=") {
        std::string k = next().text;
        next();
        kw.emplace_back(std::move(k), expression());
      } else {
        if (!kw.empty()) fail("a positional argument follows a keyword argument");
        pos.push_back(expression());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprP call(ExprP fn, int line) {
    auto c = std::make_unique<CallExpr>();
    c->line = line;
    c->fn = std::move(fn);
    arguments(c->pos, c->kw, 0);
    return c;
  }

  ExprP filter(ExprP input) {
    const int line = cur().line;
    auto f = std::make_unique<FilterExpr>();
    f->line = line;
    f->input = std::move(input);
    f->name = expect_name("a filter's name");
    while (is_op(".")) {  // (dotted names: none of the filters here)
      next();
      f->name += '.';
      f->name += expect_name("a filter's name");
    }
    f->fn = find_filter(f->name);
    if (!f->fn) unknown("the filter '" + f->name + "'", line);
    if (is_op("(")) arguments(f->pos, f->kw, 0);
    return f;
  }

  ExprP filters(ExprP e) {
    while (true) {
      if (is_op("|")) {
        next();
        e = filter(std::move(e));
      } else if (is_name("is")) {
        const int line = cur().line;
        next();
        auto t = std::make_unique<TestExpr>();
        t->line = line;
        t->input = std::move(e);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        // the test's name: a name, or none/true/false
        t->name = expect_name("a test's name");
        while (is_op(".")) {
          next();
          t->name += '.';  // (in two steps: GCC 12 warns of "." + a string by mistake)
          t->name += expect_name("a test's name");
        }
        t->fn = find_test(t->name);
        if (!t->fn) unknown("the test '" + t->name + "'", line);
        if (is_op("(")) {
          std::vector<std::pair<std::string, ExprP>> kw;
          arguments(t->args, kw, 0);
          if (!kw.empty()) fail("the test '" + t->name + "' takes no keyword arguments", line);
        } else if (cur().type == T::string || cur().type == T::integer || cur().type == T::real || is_op("[") ||
                   is_op("(") || is_op("{") ||
                   (cur().type == T::name && cur().text != "else" && cur().text != "or" && cur().text != "and" &&
                    cur().text != "if" && cur().text != "is" && cur().text != "in" && cur().text != "not")) {
          // `x is divisibleby 3`, `x is sameas false`: one argument without parentheses
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = call(std::move(e), cur().line);
      } else
        return e;
    }
  }
};

}  // namespace

Template::Template(std::string_view source, std::string what) : what_(std::move(what)) {
  const std::string src = normalize_newlines(source);
  if (utf8::length(src) != 0) {
    for (size_t i = 0; i < src.size();) {
      const auto cp = utf8::decode_one(src, i);
      if (!cp.valid()) throw Error(what_ + ": byte " + std::to_string(i) + " is not valid UTF-8");
      i += cp.length;
    }
  }
  Lexer lex(src, what_);
  Parser parser(lex.run(), what_);
  root_ = parser.parse();
  unknown_ = std::move(parser.unknown_);
}

std::string Template::render(const nlohmann::ordered_json& context, const Limits& limits) const {
  if (!context.is_object())
    throw Error(what_ + ": the context must be a JSON object, got " + std::string(context.type_name()));
  Ctx c(what_, limits);
  for (const auto& [k, v] : context.items()) c.set(k, from_json(v, c, 0));
  return c.capture([&] { root_->run(c); });
}

}  // namespace qkv::text::jinja
