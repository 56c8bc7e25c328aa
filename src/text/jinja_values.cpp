// Jinja's values with Python's semantics (jinja_values.h): printing (str and repr, Python's float
// repr), arithmetic, comparison, lookup, slicing, and the filters, tests, methods and globals that
// chat templates call — each as jinja2 3.1 and CPython 3 define it.
#include "jinja_values.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>

#include <utf8proc.h>

#include "qkv/core/utf8.h"

namespace qkv::text::jinja::detail {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE
constexpr int kMaxMacroDepth = 64;
constexpr int kMaxJsonDepth = 256;

// ---- the render's state ----------------------------------------------------------------------

void Ctx::fail(const std::string& msg) const { throw Error(what_ + ": line " + std::to_string(line) + ": " + msg); }

Value Ctx::lookup(const std::string& name) const {
  auto find = [&](const Frame& f) -> const Value* {
    for (auto it = f.vars.rbegin(); it != f.vars.rend(); ++it)
      if (it->first == name) return &it->second;
    return nullptr;
  };
  size_t top = frames_.size();
  for (int s = static_cast<int>(scopes_.size()) - 1; s >= 0;) {
    for (size_t k = top; k-- > scopes_[s].base;)
      if (const Value* v = find(frames_[k])) return *v;
    top = scopes_[s].outer_top;
    s = scopes_[s].outer;
  }
  Value g = global(name);
  if (g.kind == Kind::undefined) g.s = "'" + name + "' is undefined";
  return g;
}

void Ctx::set(const std::string& name, Value v) {
  for (auto& [k, old] : frames_.back().vars)
    if (k == name) {
      old = std::move(v);
      return;
    }
  frames_.back().vars.emplace_back(name, std::move(v));
}

void Ctx::enter(const std::string& name, const Closure& outer) {
  if (depth_ >= kMaxMacroDepth)
    fail("macro '" + name + "' called " + std::to_string(kMaxMacroDepth) + " deep (the limit of nested macro calls)");
  ++depth_;
  frames_.emplace_back();
  scopes_.push_back({frames_.size() - 1, outer.scope, outer.top});
}

void Ctx::enter_recursion() {
  if (depth_ >= kMaxMacroDepth)
    fail("a recursive loop nested " + std::to_string(kMaxMacroDepth) +
         " deep (the limit of nested macro calls and recursive loops)");
  ++depth_;
}

// ---- text as Python's str sees it ------------------------------------------------------------

bool py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 28 && c <= 32) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
size_t next_cp(std::string_view s, size_t i) { return i + utf8::decode_one(s, i).length; }
bool py_space_at(std::string_view s, size_t i) { return py_space(utf8::decode_one(s, i).value); }
size_t py_rstrip_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    if (!py_space_at(s, start) || next_cp(s, start) != end) break;
    end = start;
  }
  return end;
}
size_t py_lstrip_begin(std::string_view s, size_t i) {
  while (i < s.size() && py_space_at(s, i)) i = next_cp(s, i);
  return i;
}

namespace {

using U32 = std::u32string;

U32 u32(const std::string& s) {
  U32 out;
  for (size_t i = 0; i < s.size();) {
    const auto cp = utf8::decode_one(s, i);
    out += cp.valid() ? cp.value : 0xFFFD;
    i += cp.length;
  }
  return out;
}
std::string u8(const U32& s) {
  std::string out;
  for (char32_t c : s) out += utf8::encode(c);
  return out;
}
char32_t upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t title(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }
utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
bool cased(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}
bool is_alpha(char32_t c) { return category(c) >= UTF8PROC_CATEGORY_LU && category(c) <= UTF8PROC_CATEGORY_LO; }
bool is_digit(char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; }
bool is_numeric(char32_t c) { return category(c) >= UTF8PROC_CATEGORY_ND && category(c) <= UTF8PROC_CATEGORY_NO; }
bool is_word(char32_t c) { return is_alpha(c) || is_numeric(c) || c == '_'; }

// The full case mappings that change a string's length (SpecialCasing.txt's unconditional ones,
// which Python's str.upper, lower, title, capitalize and swapcase apply and utf8proc's simple
// mappings do not; not the Greek ones): the character, its lower, title and upper case.
struct Special {
  char32_t cp;
  const char* lower;
  const char* title;
  const char* upper;
};
constexpr Special kSpecial[] = {
    {0x00DF, "\u00DF", "Ss", "SS"},
    {0x0130, "i\u0307", "\u0130", "\u0130"},
    {0x0149, "\u0149", "\u02BCN", "\u02BCN"},
    {0x01F0, "\u01F0", "J\u030C", "J\u030C"},
    {0x0587, "\u0587", "\u0535\u0582", "\u0535\u0552"},
    {0x1E96, "\u1E96", "H\u0331", "H\u0331"},
    {0x1E97, "\u1E97", "T\u0308", "T\u0308"},
    {0x1E98, "\u1E98", "W\u030A", "W\u030A"},
    {0x1E99, "\u1E99", "Y\u030A", "Y\u030A"},
    {0x1E9A, "\u1E9A", "A\u02BE", "A\u02BE"},
    {0xFB00, "\uFB00", "Ff", "FF"},
    {0xFB01, "\uFB01", "Fi", "FI"},
    {0xFB02, "\uFB02", "Fl", "FL"},
    {0xFB03, "\uFB03", "Ffi", "FFI"},
    {0xFB04, "\uFB04", "Ffl", "FFL"},
    {0xFB05, "\uFB05", "St", "ST"},
    {0xFB06, "\uFB06", "St", "ST"},
    {0xFB13, "\uFB13", "\u0544\u0576", "\u0544\u0546"},
    {0xFB14, "\uFB14", "\u0544\u0565", "\u0544\u0535"},
    {0xFB15, "\uFB15", "\u0544\u056B", "\u0544\u053B"},
    {0xFB16, "\uFB16", "\u054E\u0576", "\u054E\u0546"},
    {0xFB17, "\uFB17", "\u0544\u056D", "\u0544\u053D"},
};
enum class Case { lower, title, upper };
std::string full_case(char32_t c, Case to) {
  if (c >= 0xDF)
    for (const auto& sp : kSpecial)
      if (sp.cp == c) return to == Case::lower ? sp.lower : to == Case::title ? sp.title : sp.upper;
  return utf8::encode(to == Case::lower ? lower(c) : to == Case::title ? title(c) : upper(c));
}
// str.upper(), str.lower()
std::string map_case(const std::string& s, Case to) {
  std::string out;
  for (char32_t c : u32(s)) out += full_case(c, to);
  return out;
}
// str.swapcase(): upper-case letters lower-cased, lower-case ones upper-cased.
std::string py_swapcase(const std::string& s) {
  std::string out;
  for (char32_t c : u32(s)) {
    const auto k = category(c);
    out += k == UTF8PROC_CATEGORY_LU   ? full_case(c, Case::lower)
           : k == UTF8PROC_CATEGORY_LL ? full_case(c, Case::upper)
                                       : utf8::encode(c);
  }
  return out;
}
// str.title(): a cased character after an uncased one is title-cased, the others lower-cased.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev = false;
  for (char32_t c : u32(s)) {
    const bool is_cased = cased(c);
    out += is_cased ? full_case(c, prev ? Case::lower : Case::title) : utf8::encode(c);
    prev = is_cased;
  }
  return out;
}
std::string py_capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (char32_t c : u32(s)) {
    out += full_case(c, first ? Case::title : Case::lower);
    first = false;
  }
  return out;
}
bool line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}
std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  const U32 u = u32(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t k = 0; k < u.size(); ++k) {
    if (!line_break(u[k])) continue;
    size_t end = k + 1;
    if (u[k] == '\r' && k + 1 < u.size() && u[k + 1] == '\n') ++end;
    out.push_back(u8(u.substr(start, (keepends ? end : k) - start)));
    start = end;
    k = end - 1;
  }
  if (start < u.size()) out.push_back(u8(u.substr(start)));
  return out;
}
// str.strip(chars): chars none strips whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  const U32 u = u32(s);
  U32 set;
  if (chars && chars->kind == Kind::string) set = u32(chars->s);
  auto strip = [&](char32_t c) {
    return chars && chars->kind == Kind::string ? set.find(c) != U32::npos : py_space(c);
  };
  size_t a = 0, b = u.size();
  if (left)
    while (a < b && strip(u[a])) ++a;
  if (right)
    while (b > a && strip(u[b - 1])) --b;
  return u8(u.substr(a, b - a));
}

// ---- printing --------------------------------------------------------------------------------

// repr(float), as CPython: the shortest digits that round-trip, fixed notation for exponents in
// [-4, 16), "1e-05" style beyond.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string t(buf, r.ptr);
  std::string sign;
  if (t[0] == '-') sign = "-", t.erase(0, 1);
  const size_t e = t.find('e');
  const int exp = std::atoi(t.c_str() + e + 1);
  std::string digits;
  for (size_t k = 0; k < e; ++k)
    if (t[k] != '.') digits += t[k];
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      ip.resize(exp + 1, '0');
      std::string fp = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out = ip + "." + fp;
    } else
      out = "0." + std::string(-exp - 1, '0') + digits;
    return sign + out;
  }
  std::string m = digits.substr(0, 1);
  if (digits.size() > 1) m += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + m + eb;
}

// str.isprintable() of one character: not a control, format, surrogate, private, unassigned or
// separator character other than the space.
bool printable(char32_t c) {
  if (c == ' ') return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string str_repr(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    const auto cp = utf8::decode_one(s, i);
    const char32_t c = cp.valid() ? cp.value : 0xFFFD;
    if (c == static_cast<char32_t>(q) || c == '\\')
      out += '\\', out += static_cast<char>(c);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (!printable(c)) {
      char b[16];
      std::snprintf(b, sizeof b, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", static_cast<unsigned>(c));
      out += b;
    } else
      out += s.substr(i, cp.length);
    i += cp.length;
  }
  return out + q;
}

std::string repr(const Value& v, Ctx& c, int depth = 0);

std::string str_of(const Value& v, Ctx& c, bool as_repr, int depth) {
  if (depth > kMaxJsonDepth) c.fail("a value nested more than " + std::to_string(kMaxJsonDepth) + " deep");
  switch (v.kind) {
    case Kind::undefined:
      return as_repr ? "Undefined" : "";
    case Kind::none:
      return "None";
    case Kind::boolean:
      return v.b ? "True" : "False";
    case Kind::integer:
      return std::to_string(v.i);
    case Kind::real:
      return float_repr(v.f);
    case Kind::string:
      return as_repr ? str_repr(v.s) : v.s;
    case Kind::list: {
      if (v.range) return v.s;
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.l->size(); ++k) out += (k ? ", " : "") + repr((*v.l)[k], c, depth + 1);
      if (v.tuple && v.l->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Kind::dict: {
      if (v.ns) return "<Namespace " + repr(Value::of_dict(v.dict), c, depth + 1) + ">";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        out += (first ? "" : ", ") + repr(key_value(k), c, depth + 1) + ": " + repr(x, c, depth + 1);
        first = false;
      }
      return out + "}";
    }
    case Kind::function:
      return "<function " + v.fn->name + ">";
  }
  return "";
}
std::string repr(const Value& v, Ctx& c, int depth) { return str_of(v, c, true, depth); }

// markupsafe.escape: & < > " ' as HTML entities.
std::string html_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

[[noreturn]] void undefined_error(const Value& v, Ctx& c) { c.fail(v.s.empty() ? "a value is undefined" : v.s); }

}  // namespace

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return v.b;
    case Kind::integer:
      return v.i != 0;
    case Kind::real:
      return v.f != 0;
    case Kind::string:
      return !v.s.empty();
    case Kind::list:
      return !v.l->empty();
    case Kind::dict:
      return v.ns || v.object || !v.dict->items.empty();
    case Kind::function:
      return true;
  }
  return false;
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "NoneType";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::real:
      return "float";
    case Kind::string:
      return "str";
    case Kind::list:
      return v.tuple ? "tuple" : "list";
    case Kind::dict:
      return v.ns ? "Namespace" : v.object ? v.object : "dict";
    case Kind::function:
      return "function";
  }
  return "?";
}

std::string to_str(const Value& v, Ctx& c) {
  if (v.kind == Kind::string) return v.s;
  std::string s = str_of(v, c, false, 0);
  c.charge(static_cast<int64_t>(s.size() / 16));
  return s;
}

std::vector<Value> iterate(const Value& v, Ctx& c, const char* where) {
  switch (v.kind) {
    case Kind::undefined:
      return {};
    case Kind::list:
      c.charge(static_cast<int64_t>(v.l->size()));
      return *v.l;
    case Kind::dict: {
      c.charge(static_cast<int64_t>(v.dict->items.size()));
      if (v.ns || v.object) c.fail("'" + type_name(v) + "' object is not iterable (" + where + ")");
      std::vector<Value> keys;
      for (const auto& [k, x] : v.dict->items) keys.push_back(key_value(k));
      return keys;
    }
    case Kind::string: {
      c.charge(static_cast<int64_t>(v.s.size()));
      std::vector<Value> chars;
      for (size_t i = 0; i < v.s.size();) {
        const size_t n = next_cp(v.s, i);
        chars.push_back(Value::string(v.s.substr(i, n - i)));
        i = n;
      }
      return chars;
    }
    default:
      c.fail("'" + type_name(v) + "' object is not iterable (" + where + ")");
  }
}

namespace {

// ---- numbers ---------------------------------------------------------------------------------

bool numeric(const Value& v) { return v.kind == Kind::integer || v.kind == Kind::real || v.kind == Kind::boolean; }
bool integral(const Value& v) { return v.kind == Kind::integer || v.kind == Kind::boolean; }
int64_t as_int(const Value& v) { return v.kind == Kind::boolean ? v.b : v.i; }
double as_real(const Value& v) { return v.kind == Kind::real ? v.f : static_cast<double>(as_int(v)); }

[[noreturn]] void operand_error(const std::string& op, const Value& x, const Value& y, Ctx& c) {
  if (x.kind == Kind::undefined) undefined_error(x, c);
  if (y.kind == Kind::undefined) undefined_error(y, c);
  c.fail("unsupported operand type(s) for " + op + ": '" + type_name(x) + "' and '" + type_name(y) + "'");
}
int64_t checked(bool overflow, const int64_t& r, const std::string& op,
                Ctx& c) {  // (r by reference: set by the overflow builtin)
  if (overflow) c.fail("the integer result of " + op + " is past 64 bits");
  return r;
}
int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t pymod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
double pymod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  if (r == 0) r = std::copysign(0.0, b);
  return r;
}

Value repeat(const Value& seq, int64_t n, Ctx& c) {
  n = std::max<int64_t>(n, 0);
  if (seq.kind == Kind::string) {
    if (static_cast<double>(seq.s.size()) * static_cast<double>(n) > static_cast<double>(1 << 26))
      c.fail("a string repeated " + std::to_string(n) + " times would pass 64 MiB");
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  if (static_cast<double>(seq.l->size()) * static_cast<double>(n) > static_cast<double>(1 << 22))
    c.fail("a list repeated " + std::to_string(n) + " times would pass 4M items");
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.l->begin(), seq.l->end());
  Value v = Value::list(std::move(out));
  v.tuple = seq.tuple;
  return v;
}

}  // namespace

namespace {
std::string printf_format(const std::string& fmt, const Value& values, Ctx& c);
}

Value unary(char op, const Value& v, Ctx& c) {
  if (v.kind == Kind::undefined) undefined_error(v, c);
  if (!numeric(v)) c.fail(std::string("bad operand type for unary ") + op + ": '" + type_name(v) + "'");
  if (op == '+') return integral(v) ? Value::integer(as_int(v)) : v;
  if (integral(v)) return Value::integer(checked(as_int(v) == INT64_MIN, -as_int(v), "-", c));
  return Value::real(-v.f);
}

Value binary(const std::string& op, const Value& x, const Value& y, Ctx& c) {
  const bool markup = (x.kind == Kind::string && x.safe) || (y.kind == Kind::string && y.safe);
  // (Python's + on a Markup escapes the other string; jinja2 joins ~ as plain str without autoescape)
  if (markup && op == "+" && x.kind == Kind::string && y.kind == Kind::string) {
    auto part = [&](const Value& v) { return v.kind == Kind::string && v.safe ? v.s : html_escape(to_str(v, c)); };
    Value out = Value::string(part(x) + part(y));
    c.charge(static_cast<int64_t>(out.s.size() / 16));
    if (static_cast<int64_t>(out.s.size()) > (int64_t{1} << 26)) c.fail("a string would pass 64 MiB");
    out.safe = true;
    return out;
  }
  if (op == "~") {
    std::string out = to_str(x, c) + to_str(y, c);
    c.charge(static_cast<int64_t>(out.size() / 16));
    if (static_cast<int64_t>(out.size()) > (int64_t{1} << 26)) c.fail("a string would pass 64 MiB");
    return Value::string(std::move(out));
  }
  if (numeric(x) && numeric(y)) {
    const bool ints = integral(x) && integral(y);
    const int64_t a = ints ? as_int(x) : 0, b = ints ? as_int(y) : 0;
    const double p = as_real(x), q = as_real(y);
    int64_t r = 0;
    if (op == "+")
      return ints ? Value::integer(checked(__builtin_add_overflow(a, b, &r), r, op, c)) : Value::real(p + q);
    if (op == "-")
      return ints ? Value::integer(checked(__builtin_sub_overflow(a, b, &r), r, op, c)) : Value::real(p - q);
    if (op == "*")
      return ints ? Value::integer(checked(__builtin_mul_overflow(a, b, &r), r, op, c)) : Value::real(p * q);
    if (op == "/") {
      if (q == 0) c.fail(ints ? "division by zero" : "float division by zero");
      return Value::real(ints ? static_cast<double>(a) / static_cast<double>(b) : p / q);
    }
    if (op == "//" || op == "%") {
      if (q == 0) c.fail(ints ? "integer division or modulo by zero" : "float divmod()");
      if (ints) {
        if (a == INT64_MIN && b == -1) c.fail("the integer result of " + op + " is past 64 bits");
        return Value::integer(op == "//" ? floordiv(a, b) : pymod(a, b));
      }
      if (op == "%") return Value::real(pymod(p, q));
      return Value::real(std::floor((p - pymod(p, q)) / q + 0.0));
    }
    if (op == "**") {
      if (ints && b >= 0) {
        int64_t acc = 1, base = a, e = b;
        bool over = false;
        while (e > 0 && !over) {
          if (e & 1) over |= __builtin_mul_overflow(acc, base, &acc);
          e >>= 1;
          if (e > 0) over |= __builtin_mul_overflow(base, base, &base);
        }
        return Value::integer(checked(over, acc, op, c));
      }
      if (p == 0 && q < 0) c.fail("0.0 cannot be raised to a negative power");
      return Value::real(std::pow(p, q));
    }
  }
  if (op == "+") {
    if (x.kind == Kind::string && y.kind == Kind::string) {
      c.charge(static_cast<int64_t>((x.s.size() + y.s.size()) / 16));
      if (static_cast<int64_t>(x.s.size() + y.s.size()) > (int64_t{1} << 26)) c.fail("a string would pass 64 MiB");
      return Value::string(x.s + y.s);
    }
    if (x.kind == Kind::list && y.kind == Kind::list && x.tuple == y.tuple) {
      List l = *x.l;
      l.insert(l.end(), y.l->begin(), y.l->end());
      Value v = Value::list(std::move(l));
      v.tuple = x.tuple;
      return v;
    }
  }
  if (op == "*") {
    if ((x.kind == Kind::string || x.kind == Kind::list) && integral(y)) return repeat(x, as_int(y), c);
    if ((y.kind == Kind::string || y.kind == Kind::list) && integral(x)) return repeat(y, as_int(x), c);
  }
  if (op == "%" && x.kind == Kind::string) return Value::string(printf_format(x.s, y, c));
  operand_error(op, x, y, c);
}

namespace {

bool equals(const Value& x, const Value& y) {
  if (numeric(x) && numeric(y))
    return as_real(x) == as_real(y) && (!integral(x) || !integral(y) || as_int(x) == as_int(y));
  if (x.kind != y.kind) return false;
  switch (x.kind) {
    case Kind::undefined:
    case Kind::none:
      return true;
    case Kind::string:
      return x.s == y.s;
    case Kind::list:
      if (x.tuple != y.tuple || x.range != y.range || x.l->size() != y.l->size()) return false;
      for (size_t k = 0; k < x.l->size(); ++k)
        if (!equals((*x.l)[k], (*y.l)[k])) return false;
      return true;
    case Kind::dict:
      if (x.ns || y.ns || x.object || y.object) return x.dict == y.dict;
      if (x.dict->items.size() != y.dict->items.size()) return false;
      for (const auto& [k, v] : x.dict->items) {
        const Value* o = y.dict->find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    case Kind::function:
      return x.fn == y.fn;
    default:
      return false;
  }
}

// x < y, or an error where Python has no order.
bool less(const Value& x, const Value& y, Ctx& c, const char* op) {
  if (numeric(x) && numeric(y)) {
    if (integral(x) && integral(y)) return as_int(x) < as_int(y);
    return as_real(x) < as_real(y);
  }
  if (x.kind == Kind::string && y.kind == Kind::string) return x.s < y.s;  // (UTF-8 orders as code points)
  if (x.kind == Kind::list && y.kind == Kind::list && x.tuple == y.tuple) {
    for (size_t k = 0; k < std::min(x.l->size(), y.l->size()); ++k) {
      if (equals((*x.l)[k], (*y.l)[k])) continue;
      return less((*x.l)[k], (*y.l)[k], c, op);
    }
    return x.l->size() < y.l->size();
  }
  if (x.kind == Kind::undefined) undefined_error(x, c);
  if (y.kind == Kind::undefined) undefined_error(y, c);
  c.fail(std::string("'") + op + "' not supported between instances of '" + type_name(x) + "' and '" + type_name(y) +
         "'");
}

bool contains(const Value& seq, const Value& item, Ctx& c) {
  c.charge(seq.kind == Kind::list     ? static_cast<int64_t>(seq.l->size())
           : seq.kind == Kind::string ? static_cast<int64_t>(seq.s.size() / 16)
                                      : 0);
  switch (seq.kind) {
    case Kind::undefined:
      return false;
    case Kind::string:
      if (item.kind != Kind::string) c.fail("'in <string>' requires string as left operand, not " + type_name(item));
      return seq.s.find(item.s) != std::string::npos;
    case Kind::list:
      for (const auto& v : *seq.l)
        if (equals(v, item)) return true;
      return false;
    case Kind::dict:
      if (seq.ns || seq.object) break;
      return dict_find(*seq.dict, item) != nullptr;
    default:
      break;
  }
  c.fail("argument of type '" + type_name(seq) + "' is not iterable");
}

}  // namespace

bool compare(const std::string& op, const Value& x, const Value& y, Ctx& c) {
  if (op == "==") return equals(x, y);
  if (op == "!=") return !equals(x, y);
  if (op == "<") return less(x, y, c, "<");
  if (op == ">") return less(y, x, c, ">");
  if (op == "<=") return !less(y, x, c, "<=");
  if (op == ">=") return !less(x, y, c, ">=");
  if (op == "in") return contains(y, x, c);
  return !contains(y, x, c);  // notin
}

namespace {
// range(start, stop, step)'s value: a list of its ints, printed as Python prints the range.
Value range_value(int64_t start, int64_t stop, int64_t step) {
  List out;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) out.push_back(Value::integer(k));
  Value v = Value::list(std::move(out));
  v.range = true;
  v.s = "range(" + std::to_string(start) + ", " + std::to_string(stop) +
        (step != 1 ? ", " + std::to_string(step) : "") + ")";
  return v;
}
}  // namespace

// ---- dict keys -------------------------------------------------------------------------------

namespace {
// The keys a number equal to x may be stored under: as an int, a bool, a float.
std::vector<std::string> number_keys(const Value& x) {
  std::vector<std::string> out;
  const double d = as_real(x);
  const bool whole = integral(x) || (std::isfinite(d) && std::trunc(d) == d && std::fabs(d) < 9.2e18);
  const int64_t i = integral(x) ? as_int(x) : whole ? static_cast<int64_t>(d) : 0;
  if (whole) out.push_back(key(i));
  if (whole && (i == 0 || i == 1))
    out.push_back(i ? "\x01T"
                    : "\x01"
                      "F");
  if (std::isfinite(d)) out.push_back("\x01R" + float_repr(d));
  return out;
}
// A hashable value's own key, or "" (a NaN, a container).
std::string own_key(const Value& k) {
  switch (k.kind) {
    case Kind::string:
      return key(k.s);
    case Kind::integer:
      return key(k.i);
    case Kind::boolean:
      return k.b ? "\x01T"
                 : "\x01"
                   "F";
    case Kind::none:
      return "\x01N";
    case Kind::real:
      return std::isfinite(k.f) ? "\x01R" + float_repr(k.f) : "";
    default:
      return "";
  }
}
}  // namespace

const Value* dict_find(const Dict& d, const Value& k) {
  if (numeric(k)) {
    for (const auto& n : number_keys(k))
      if (const Value* v = d.find(n)) return v;
    return nullptr;
  }
  const std::string own = own_key(k);
  return own.empty() ? nullptr : d.find(own);
}

std::string dict_key(const Value& k, const Dict& d, Ctx& c) {
  if (numeric(k))
    for (const auto& n : number_keys(k))
      if (d.find(n)) return n;
  const std::string own = own_key(k);
  if (!own.empty()) return own;
  if (k.kind == Kind::list && k.tuple) c.fail("a tuple as a dict's key is not supported");
  if (k.kind == Kind::real) c.fail("a float that is not finite as a dict's key is not supported");
  c.fail("unhashable type: '" + type_name(k) + "'");
}

// ---- lookup, slicing, calls ------------------------------------------------------------------

namespace {

// Python's slice indices for a length n (PySlice_AdjustIndices): the positions taken.
struct Bounds {
  int64_t a, b, step;  // slice.indices(n)
};
Bounds slice_bounds(int64_t n, const Value& start, const Value& stop, const Value& step, Ctx& c) {
  auto idx = [&](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.kind == Kind::none || v.kind == Kind::undefined) return std::nullopt;
    if (!integral(v)) c.fail(std::string("slice ") + what + " must be an integer or none, not " + type_name(v));
    return as_int(v);
  };
  const int64_t st = idx(step, "step").value_or(1);
  if (st == 0) c.fail("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0)
      x = std::max<int64_t>(x + n, st < 0 ? -1 : 0);
    else
      x = std::min<int64_t>(x, st < 0 ? n - 1 : n);
    return x;
  };
  return {clamp(idx(start, "start"), st < 0 ? n - 1 : 0), clamp(idx(stop, "stop"), st < 0 ? -1 : n), st};
}
std::vector<int64_t> slice_positions(int64_t n, const Value& start, const Value& stop, const Value& step, Ctx& c) {
  const Bounds s = slice_bounds(n, start, stop, step, c);
  std::vector<int64_t> out;
  for (int64_t k = s.a; s.step > 0 ? k < s.b : k > s.b; k += s.step) out.push_back(k);
  return out;
}

Value method(const Value& self, const std::string& name, Ctx& c);

}  // namespace

namespace {
Value v_or_int(const Value& v) { return v.kind == Kind::boolean ? Value::integer(v.b) : v; }
}  // namespace

Value get_attr(const Value& obj, const std::string& name, Ctx& c) {
  const std::string missing = "'" + type_name(obj) + " object' has no attribute '" + name + "'";
  switch (obj.kind) {
    case Kind::undefined:
      undefined_error(obj, c);
    case Kind::dict: {
      if (!obj.ns && !obj.object) {
        Value m = method(obj, name, c);
        if (m.kind == Kind::function) return m;
      }
      if (const Value* v = obj.dict->find(key(name))) return *v;
      return Value::undefined(missing);
    }
    case Kind::function:
      if (obj.fn->attrs)
        if (const Value* v = obj.fn->attrs->find(key(name))) return *v;
      return Value::undefined(missing);
    case Kind::list:
      if (obj.group && (name == "grouper" || name == "list")) return (*obj.l)[name == "grouper" ? 0 : 1];
      [[fallthrough]];
    case Kind::string: {
      Value m = method(obj, name, c);
      if (m.kind == Kind::function) return m;
      return Value::undefined(missing);
    }
    case Kind::boolean:
    case Kind::integer:
    case Kind::real:  // Python's numbers' data attributes
      if (name == "real") return v_or_int(obj);
      if (name == "imag") return obj.kind == Kind::real ? Value::real(0) : Value::integer(0);
      if (name == "numerator" && obj.kind != Kind::real) return v_or_int(obj);
      if (name == "denominator" && obj.kind != Kind::real) return Value::integer(1);
      return Value::undefined(missing);
    default:
      return Value::undefined(missing);
  }
}

Value get_item(const Value& obj, const Value& key, Ctx& c) {
  if (obj.kind == Kind::undefined) undefined_error(obj, c);
  if (obj.kind == Kind::dict && key.kind == Kind::string && !obj.ns) {
    if (const Value* v = obj.dict->find(detail::key(key.s))) return *v;
    return get_attr(obj, key.s, c);
  }
  if (obj.kind == Kind::dict && key.kind != Kind::string && !obj.ns) {
    if (const Value* v = dict_find(*obj.dict, key)) return *v;
    return Value::undefined("'dict object' has no item " + repr(key, c));
  }
  if ((obj.kind == Kind::list || obj.kind == Kind::string) && integral(key)) {
    int64_t k = as_int(key);
    if (obj.kind == Kind::list) {
      const int64_t n = static_cast<int64_t>(obj.l->size());
      if (k < 0) k += n;
      if (k < 0 || k >= n) return Value::undefined(type_name(obj) + " index out of range");
      return (*obj.l)[static_cast<size_t>(k)];
    }
    c.charge(static_cast<int64_t>(obj.s.size() / 16));
    const U32 u = u32(obj.s);
    const int64_t n = static_cast<int64_t>(u.size());
    if (k < 0) k += n;
    if (k < 0 || k >= n) return Value::undefined("string index out of range");
    return Value::string(utf8::encode(u[static_cast<size_t>(k)]));
  }
  if (key.kind == Kind::string) return get_attr(obj, key.s, c);
  return Value::undefined("'" + type_name(obj) + " object' has no item " + to_str(key, c));
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step, Ctx& c) {
  if (obj.kind == Kind::undefined) undefined_error(obj, c);
  if (obj.kind == Kind::list && obj.range) {  // a range's slice is a range: its start and step from its text
    long long first = 0, last = 0, stride = 1;
    std::sscanf(obj.s.c_str(), "range(%lld, %lld, %lld", &first, &last, &stride);
    const Bounds s = slice_bounds(static_cast<int64_t>(obj.l->size()), start, stop, step, c);
    return range_value(first + s.a * stride, first + s.b * stride, stride * s.step);
  }
  if (obj.kind == Kind::list) {
    List out;
    for (int64_t k : slice_positions(static_cast<int64_t>(obj.l->size()), start, stop, step, c))
      out.push_back((*obj.l)[k]);
    Value v = Value::list(std::move(out));
    v.tuple = obj.tuple;
    return v;
  }
  if (obj.kind == Kind::string) {
    c.charge(static_cast<int64_t>(obj.s.size() / 16));
    const U32 u = u32(obj.s);
    U32 out;
    for (int64_t k : slice_positions(static_cast<int64_t>(u.size()), start, stop, step, c)) out += u[k];
    return Value::string(u8(out));
  }
  c.fail("'" + type_name(obj) + "' object is not subscriptable");
}

Value call(const Value& fn, Args& a) {
  if (fn.kind == Kind::undefined) undefined_error(fn, a.ctx);
  if (fn.kind == Kind::dict && fn.object)
    if (const Value* f = fn.dict->find("\x02"
                                       "call"))
      return call(*f, a);
  if (fn.kind != Kind::function) a.ctx.fail("'" + type_name(fn) + "' object is not callable");
  return fn.fn->impl(a);
}

namespace {

// ---- arguments -------------------------------------------------------------------------------

// The argument at position `at` (after the input, for filters) or keyword `name`, else `def`.
Value arg(Args& a, size_t at, const char* name, Value def = Value::undefined("")) {
  for (auto& [k, v] : a.kw)
    if (k == name) return v;
  return at < a.pos.size() ? a.pos[at] : def;
}
void arity(Args& a, const char* what, size_t max_pos, std::initializer_list<const char*> keywords) {
  if (a.pos.size() > max_pos)
    a.ctx.fail(std::string(what) + " takes at most " + std::to_string(max_pos) + " arguments, got " +
               std::to_string(a.pos.size()));
  for (auto& [k, v] : a.kw) {
    bool known = false;
    for (const char* kw : keywords) known |= k == kw;
    if (!known) a.ctx.fail(std::string(what) + " got an unexpected keyword argument '" + k + "'");
  }
}
std::string text_arg(Args& a, size_t at, const char* name, const char* what, const char* def = nullptr) {
  const Value v = arg(a, at, name);
  if (v.kind == Kind::undefined && def) return def;
  if (v.kind != Kind::string) a.ctx.fail(std::string(what) + ": '" + name + "' must be a string, not " + type_name(v));
  return v.s;
}
int64_t int_arg(Args& a, size_t at, const char* name, const char* what, int64_t def) {
  const Value v = arg(a, at, name);
  if (v.kind == Kind::undefined || v.kind == Kind::none) return def;
  if (!integral(v)) a.ctx.fail(std::string(what) + ": '" + name + "' must be an integer, not " + type_name(v));
  return as_int(v);
}
std::string input_text(Args& a) {
  const Value& v = a.pos[0];
  return v.kind == Kind::string ? v.s : to_str(v, a.ctx);
}

// ---- Python's format() and printf-style formatting -------------------------------------------

constexpr int64_t kMaxString = int64_t{1} << 26;  // 64 MiB: no string the template builds grows past it
constexpr int64_t kMaxDigits = 1 << 20;           // a format's precision: digits past it are refused

// s with `left` and `right` copies of `fill` around it, within the 64 MiB string limit.
std::string pad_around(const std::string& s, int64_t left, int64_t right, const std::string& fill, Ctx& c) {
  if (left <= 0 && right <= 0) return s;
  if ((static_cast<double>(left) + static_cast<double>(right)) * static_cast<double>(fill.size()) +
          static_cast<double>(s.size()) >
      static_cast<double>(kMaxString))
    c.fail("padding a string to " + std::to_string(left + right) + " more characters would pass 64 MiB");
  c.charge((left + right) / 16);
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = 0; k < right; ++k) out += fill;
  return out;
}
// s aligned in `width` code points: '<' left, '>' right, '^' centred (the odd one on the right).
std::string align_in(const std::string& s, int64_t width, const std::string& fill, char align, Ctx& c) {
  const int64_t gap = width - static_cast<int64_t>(utf8::length(s));
  if (gap <= 0) return s;
  const int64_t left = align == '<' ? 0 : align == '>' ? gap : gap / 2;
  return pad_around(s, left, gap - left, fill, c);
}

// The digits of a magnitude in base 2, 8, 10 or 16.
std::string digits_of(uint64_t m, int base, bool upper_case) {
  const char* d = upper_case ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  do {
    out += d[m % static_cast<uint64_t>(base)];
    m /= static_cast<uint64_t>(base);
  } while (m);
  std::reverse(out.begin(), out.end());
  return out;
}
uint64_t magnitude(int64_t v) { return v < 0 ? ~static_cast<uint64_t>(v) + 1 : static_cast<uint64_t>(v); }
// Digits with `sep` between each group of `every` from the right (format's ',' and '_').
std::string grouped(const std::string& digits, char sep, size_t every) {
  if (!sep) return digits;
  std::string out;
  for (size_t k = 0; k < digits.size(); ++k) {
    if (k && (digits.size() - k) % every == 0) out += sep;
    out += digits[k];
  }
  return out;
}
// C's printf of one float conversion (f, e, g, F, E, G) at a precision.
std::string c_float(double x, char type, int64_t precision, bool alt, Ctx& c) {
  if (precision > kMaxDigits)
    c.fail("a format's precision of " + std::to_string(precision) + " is past " + std::to_string(kMaxDigits) +
           " (the limit of a number's digits)");
  c.charge(precision / 16);
  const std::string f = std::string(alt ? "%#.*" : "%.*") + type;
  const int n = std::snprintf(nullptr, 0, f.c_str(), static_cast<int>(precision), x);
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), f.c_str(), static_cast<int>(precision), x);
  out.pop_back();
  return out;
}

// A format spec, Python's mini-language: [[fill]align][sign][#][0][width][,|_][.precision][type].
struct Spec {
  std::string fill;
  char align = 0;
  char sign = '-';
  bool alt = false, zero = false;
  int64_t width = -1, precision = -1;
  char grouping = 0, type = 0;
};
Spec parse_spec(const std::string& s, Ctx& c) {
  Spec sp;
  const U32 u = u32(s);
  size_t k = 0;
  auto is_align = [](char32_t x) { return x == '<' || x == '>' || x == '=' || x == '^'; };
  auto number = [&]() {
    int64_t n = 0;
    for (; k < u.size() && u[k] >= '0' && u[k] <= '9'; ++k)
      n = std::min<int64_t>(n * 10 + (u[k] - '0'), kMaxString + 1);
    return n;
  };
  if (u.size() >= 2 && is_align(u[1])) {
    sp.fill = utf8::encode(u[0]);
    sp.align = static_cast<char>(u[1]);
    k = 2;
  } else if (!u.empty() && is_align(u[0])) {
    sp.align = static_cast<char>(u[0]);
    k = 1;
  }
  if (k < u.size() && (u[k] == '+' || u[k] == '-' || u[k] == ' ')) sp.sign = static_cast<char>(u[k++]);
  if (k < u.size() && u[k] == '#') sp.alt = true, ++k;
  if (k < u.size() && u[k] == '0') sp.zero = true, ++k;
  if (k < u.size() && u[k] >= '0' && u[k] <= '9') sp.width = number();
  if (k < u.size() && (u[k] == ',' || u[k] == '_')) sp.grouping = static_cast<char>(u[k++]);
  if (k < u.size() && u[k] == '.') {
    ++k;
    if (k == u.size() || u[k] < '0' || u[k] > '9') c.fail("Format specifier missing precision");
    sp.precision = number();
  }
  if (k < u.size() && u[k] < 0x80) sp.type = static_cast<char>(u[k++]);
  if (k != u.size()) c.fail("Invalid format specifier '" + s + "'");
  return sp;
}
// A number's sign, prefix and digits padded: '=' puts the padding after the sign and prefix.
std::string pad_number(const std::string& sign, const std::string& body, Spec sp, Ctx& c) {
  if (sp.zero && !sp.align) {
    if (sp.fill.empty()) sp.fill = "0";
    sp.align = '=';
  }
  if (sp.fill.empty()) sp.fill = " ";
  if (!sp.align) sp.align = '>';
  if (sp.align == '=') {
    const int64_t gap = sp.width - static_cast<int64_t>(sign.size() + utf8::length(body));
    return sign + pad_around(body, std::max<int64_t>(gap, 0), 0, sp.fill, c);
  }
  return align_in(sign + body, sp.width, sp.fill, sp.align, c);
}
std::string sign_of(bool negative, char sign) { return negative ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : ""; }
// format(value, spec), as int's, float's and str's __format__ (an empty spec is str(value)).
std::string format_value(const Value& v, const std::string& spec, Ctx& c) {
  if (spec.empty()) return to_str(v, c);
  const Spec sp = parse_spec(spec, c);
  if (sp.zero && sp.grouping) c.fail("format: a '0' flag with grouping is not supported");
  const std::string kind = type_name(v);
  if (v.kind == Kind::string) {
    if ((sp.type && sp.type != 's') || sp.sign != '-' || sp.alt || sp.grouping || sp.align == '=')
      c.fail("Invalid format specifier '" + spec + "' for object of type 'str'");
    std::string s = v.s;
    if (sp.precision >= 0) s = u8(u32(s).substr(0, static_cast<size_t>(std::min<int64_t>(sp.precision, kMaxString))));
    const std::string fill = !sp.fill.empty() ? sp.fill : sp.zero ? "0" : " ";
    return align_in(s, sp.width, fill, sp.align ? sp.align : '<', c);
  }
  if (integral(v) && (!sp.type || std::strchr("bcdoxX", sp.type))) {
    if (sp.precision >= 0) c.fail("Precision not allowed in integer format specifier");
    const int64_t i = as_int(v);
    if (sp.type == 'c') {
      if (i < 0 || i > 0x10FFFF) c.fail("%c arg not in range(0x110000)");
      return align_in(utf8::encode(static_cast<char32_t>(i)), sp.width, sp.fill.empty() ? " " : sp.fill,
                      sp.align ? sp.align : '>', c);
    }
    const int base = sp.type == 'b' ? 2 : sp.type == 'o' ? 8 : (sp.type == 'x' || sp.type == 'X') ? 16 : 10;
    std::string prefix = sp.alt && base != 10 ? std::string("0") + (sp.type == 'X' ? 'X' : sp.type) : "";
    const std::string body = grouped(digits_of(magnitude(i), base, sp.type == 'X'), sp.grouping, base == 10 ? 3 : 4);
    return pad_number(sign_of(i < 0, sp.sign) + prefix, body, sp, c);
  }
  if (numeric(v) && (!sp.type || std::strchr("eEfFgG%", sp.type))) {
    double x = as_real(v);
    if (sp.alt) c.fail("format: the '#' flag with a float is not supported");
    const bool negative = std::signbit(x) && !std::isnan(x);
    x = std::fabs(x);
    std::string body;
    if (!sp.type) {
      if (sp.precision >= 0) c.fail("format: a precision without a type for a float is not supported");
      body = float_repr(x);
    } else if (sp.type == '%')
      body = c_float(x * 100, 'f', sp.precision < 0 ? 6 : sp.precision, false, c) + "%";
    else
      body = c_float(x, sp.type, sp.precision < 0 ? 6 : sp.precision, false, c);
    if (sp.grouping) {
      const size_t end = std::min(body.find_first_not_of("0123456789"), body.size());
      body = grouped(body.substr(0, end), sp.grouping, 3) + body.substr(end);
    }
    return pad_number(sign_of(negative, sp.sign), body, sp, c);
  }
  if (numeric(v)) c.fail("Unknown format code '" + std::string(1, sp.type) + "' for object of type '" + kind + "'");
  c.fail("unsupported format string passed to " + kind + ".__format__");
}

// The value a str.format field names: an index or a name, then .attr and [key] lookups (through
// the sandbox: an unsafe attribute is undefined).
Value format_field(const std::string& field, bool& automatic, size_t& next_auto, Args& a) {
  Ctx& c = a.ctx;
  size_t k = 0;
  while (k < field.size() && field[k] != '.' && field[k] != '[') ++k;
  const std::string first = field.substr(0, k);
  Value v;
  if (first.empty() || std::all_of(first.begin(), first.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    if (first.empty() && !automatic && next_auto == SIZE_MAX)
      c.fail("cannot switch from manual field specification to automatic field numbering");
    if (!first.empty() && automatic)
      c.fail("cannot switch from automatic field numbering to manual field specification");
    automatic = first.empty();
    if (first.size() > 9) c.fail("Too many decimal digits in format string");
    const size_t index = first.empty() ? next_auto++ : std::stoul(first);
    if (!first.empty()) next_auto = SIZE_MAX;
    if (index >= a.pos.size())
      c.fail("Replacement index " + std::to_string(index) + " out of range for positional args tuple");
    v = a.pos[index];
  } else {
    bool found = false;
    for (const auto& [name, x] : a.kw)
      if (name == first) v = x, found = true;
    if (!found) c.fail("str.format(): no argument named '" + first + "' (KeyError)");
  }
  while (k < field.size()) {
    const bool attr = field[k] == '.';
    const size_t end = attr ? std::min(field.find_first_of(".[", k + 1), field.size()) : field.find(']', k);
    if (end == std::string::npos) c.fail("Missing ']' in format string");
    const std::string part = field.substr(k + 1, end - k - 1);
    if (part.empty()) c.fail("Empty attribute in format string");
    if (attr)
      v = get_attr(v, part, c);
    else {
      const bool digits = std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      v = get_item(v, digits ? Value::integer(std::stoll(part.substr(0, 18))) : Value::string(part), c);
    }
    k = attr ? end : end + 1;
  }
  return v;
}
// str.format(*args, **kwargs): {} {0} {name} fields with .attr and [key], !s and !r, format specs
// (whose own {} fields are filled first).
std::string str_format(const std::string& fmt, Args& a, int depth = 0) {
  Ctx& c = a.ctx;
  c.charge(static_cast<int64_t>(fmt.size() / 16));
  std::string out;
  bool automatic = false;
  size_t next_auto = 0;
  for (size_t k = 0; k < fmt.size();) {
    const char ch = fmt[k];
    if (ch == '}') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '}') {
        out += '}', k += 2;
        continue;
      }
      c.fail("Single '}' encountered in format string");
    }
    if (ch != '{') {
      out += ch, ++k;
      continue;
    }
    if (k + 1 < fmt.size() && fmt[k + 1] == '{') {
      out += '{', k += 2;
      continue;
    }
    size_t end = k + 1;
    for (int open = 1; end < fmt.size(); ++end) {  // (a spec may hold fields of its own)
      if (fmt[end] == '{') ++open;
      if (fmt[end] == '}' && --open == 0) break;
    }
    if (end >= fmt.size()) c.fail("expected '}' before end of string");
    std::string field = fmt.substr(k + 1, end - k - 1), spec;
    const size_t colon = field.find(':');
    if (colon != std::string::npos) spec = field.substr(colon + 1), field.resize(colon);
    char conversion = 0;
    const size_t bang = field.find('!');
    if (bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 's' && field[bang + 1] != 'r'))
        c.fail("str.format(): the conversion '" + field.substr(bang) + "' is not supported (!s and !r are)");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (spec.find('{') != std::string::npos) {
      if (depth > 0) c.fail("Max string recursion exceeded");
      spec = str_format(spec, a, depth + 1);
    }
    Value v = format_field(field, automatic, next_auto, a);
    if (conversion) v = Value::string(conversion == 'r' ? repr(v, c) : to_str(v, c));
    out += format_value(v, spec, c);
    if (static_cast<int64_t>(out.size()) > kMaxString) c.fail("str.format(): the string would pass 64 MiB");
    k = end + 1;
  }
  return out;
}

// printf-style formatting, `fmt % values` (and the format filter): %[(name)][flags][width][.precision]
// with the conversions s r d i u o x X e E f F g G c and %; values a tuple, one value, or a dict
// for %(name)s.
std::string printf_format(const std::string& fmt, const Value& values, Ctx& c) {
  c.charge(static_cast<int64_t>(fmt.size() / 16));
  const bool mapping = values.kind == Kind::dict && !values.ns && !values.object;
  const std::vector<Value> args = values.kind == Kind::list && values.tuple ? *values.l : std::vector<Value>{values};
  size_t used = 0;
  bool named = false;
  auto next_arg = [&]() -> const Value& {
    if (used >= args.size()) c.fail("not enough arguments for format string");
    return args[used++];
  };
  std::string out;
  for (size_t k = 0; k < fmt.size();) {
    if (fmt[k] != '%') {
      out += fmt[k++];
      continue;
    }
    if (++k >= fmt.size()) c.fail("incomplete format");
    Value v;
    bool have = false;
    if (fmt[k] == '(') {
      const size_t close = fmt.find(')', k);
      if (close == std::string::npos) c.fail("incomplete format key");
      if (!mapping) c.fail("format requires a mapping");
      const std::string name = fmt.substr(k + 1, close - k - 1);
      const Value* x = values.dict->find(key(name));
      if (!x) c.fail("printf-style format: no key '" + name + "' (KeyError)");
      v = *x, have = named = true;
      k = close + 1;
    }
    std::string flags;
    while (k < fmt.size() && std::strchr("-+ #0", fmt[k])) flags += fmt[k++];
    auto number = [&]() -> int64_t {
      if (k < fmt.size() && fmt[k] == '*') {
        ++k;
        const Value& n = next_arg();
        if (!integral(n)) c.fail("* wants int");
        return as_int(n);
      }
      int64_t n = 0;
      for (; k < fmt.size() && fmt[k] >= '0' && fmt[k] <= '9'; ++k)
        n = std::min<int64_t>(n * 10 + (fmt[k] - '0'), kMaxString + 1);
      return n;
    };
    int64_t width = number(), precision = -1;
    if (k < fmt.size() && fmt[k] == '.') ++k, precision = number();
    while (k < fmt.size() && std::strchr("hlL", fmt[k])) ++k;
    if (k >= fmt.size()) c.fail("incomplete format");
    const char type = fmt[k++];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (!have) v = next_arg();
    Spec sp;
    if (width < 0) flags += '-', width = -width;
    sp.width = width;
    const bool left = flags.find('-') != std::string::npos;
    sp.sign = flags.find('+') != std::string::npos ? '+' : flags.find(' ') != std::string::npos ? ' ' : '-';
    sp.zero = !left && flags.find('0') != std::string::npos;
    if (left) sp.align = '<';
    std::string text;
    if (type == 's' || type == 'r') {
      text = type == 's' ? to_str(v, c) : repr(v, c);
      if (precision >= 0) text = u8(u32(text).substr(0, static_cast<size_t>(std::min(precision, kMaxString))));
      text = align_in(text, width, " ", left ? '<' : '>', c);
    } else if (std::strchr("diuoxX", type)) {
      if (!numeric(v)) c.fail(std::string("%") + type + " format: a real number is required, not " + type_name(v));
      if (v.kind == Kind::real && std::strchr("oxX", type))
        c.fail(std::string("%") + type + " format: an integer is required, not float");
      if (v.kind == Kind::real && (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18))
        c.fail("%d format: the float is past 64 bits");
      const int64_t i = v.kind == Kind::real ? static_cast<int64_t>(v.f) : as_int(v);
      const int base = type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
      std::string body = digits_of(magnitude(i), base, type == 'X');
      if (precision > kMaxDigits) c.fail("a format's precision is past " + std::to_string(kMaxDigits));
      if (precision > static_cast<int64_t>(body.size()))
        body.insert(0, static_cast<size_t>(precision) - body.size(), '0');
      const std::string prefix = flags.find('#') != std::string::npos && base != 10
                                     ? std::string("0") + (type == 'X'   ? 'X'
                                                           : type == 'o' ? 'o'
                                                                         : 'x')
                                     : "";
      text = pad_number(sign_of(i < 0, sp.sign) + prefix, body, sp, c);
    } else if (std::strchr("eEfFgG", type)) {
      if (!numeric(v)) c.fail(std::string("must be real number, not ") + type_name(v));
      const double x = as_real(v);
      const std::string body =
          c_float(std::fabs(x), type, precision < 0 ? 6 : precision, flags.find('#') != std::string::npos, c);
      text = pad_number(sign_of(std::signbit(x) && !std::isnan(x), sp.sign), body, sp, c);
    } else if (type == 'c') {
      std::string ch;
      if (integral(v)) {
        if (as_int(v) < 0 || as_int(v) > 0x10FFFF) c.fail("%c arg not in range(0x110000)");
        ch = utf8::encode(static_cast<char32_t>(as_int(v)));
      } else if (v.kind == Kind::string && utf8::length(v.s) == 1)
        ch = v.s;
      else
        c.fail("%c requires an int or a unicode character");
      text = align_in(ch, width, " ", left ? '<' : '>', c);
    } else
      c.fail(std::string("unsupported format character '") + type + "'");
    out += text;
    if (static_cast<int64_t>(out.size()) > kMaxString) c.fail("printf-style formatting: the string would pass 64 MiB");
  }
  if (!named && !mapping && used < args.size()) c.fail("not all arguments converted during string formatting");
  return out;
}

// ---- str's and dict's methods ----------------------------------------------------------------

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right, Ctx& c) {
  std::vector<std::string> out;
  if (sep.kind == Kind::none || sep.kind == Kind::undefined) {  // runs of whitespace; none at the ends
    const U32 u = u32(s);
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t k = 0; k < u.size();) {
      while (k < u.size() && py_space(u[k])) ++k;
      if (k == u.size()) break;
      size_t e = k;
      while (e < u.size() && !py_space(u[e])) ++e;
      words.emplace_back(k, e);
      k = e;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [a, b] : words) out.push_back(u8(u.substr(a, b - a)));
      return out;
    }
    if (!from_right) {
      for (size_t k = 0; k < static_cast<size_t>(maxsplit); ++k)
        out.push_back(u8(u.substr(words[k].first, words[k].second - words[k].first)));
      out.push_back(u8(u.substr(words[maxsplit].first)));
    } else {
      const size_t first_kept = words.size() - static_cast<size_t>(maxsplit);
      out.push_back(u8(u.substr(0, words[first_kept - 1].second)));
      for (size_t k = first_kept; k < words.size(); ++k)
        out.push_back(u8(u.substr(words[k].first, words[k].second - words[k].first)));
    }
    return out;
  }
  if (sep.kind != Kind::string) c.fail("split: the separator must be a string or none, not " + type_name(sep));
  if (sep.s.empty()) c.fail("split: empty separator");
  std::vector<size_t> cuts;
  if (!from_right) {
    for (size_t p = s.find(sep.s);
         p != std::string::npos && (maxsplit < 0 || static_cast<int64_t>(cuts.size()) < maxsplit);
         p = s.find(sep.s, p + sep.s.size()))
      cuts.push_back(p);
  } else {
    for (size_t p = s.rfind(sep.s);
         p != std::string::npos && (maxsplit < 0 || static_cast<int64_t>(cuts.size()) < maxsplit);
         p = p >= sep.s.size() ? s.rfind(sep.s, p - sep.s.size()) : std::string::npos)
      cuts.push_back(p);
    std::reverse(cuts.begin(), cuts.end());
  }
  size_t start = 0;
  for (size_t p : cuts) {
    out.push_back(s.substr(start, p - start));
    start = p + sep.s.size();
  }
  out.push_back(s.substr(start));
  return out;
}

Value strings(const std::vector<std::string>& parts) {
  List l;
  for (const auto& p : parts) l.push_back(Value::string(p));
  return Value::list(std::move(l));
}

bool affix(const std::string& s, Args& a, bool start, const char* what) {
  const Value x = arg(a, 0, "prefix");
  std::vector<std::string> options;
  if (x.kind == Kind::string)
    options.push_back(x.s);
  else if (x.kind == Kind::list && x.tuple)
    for (const auto& o : *x.l) {
      if (o.kind != Kind::string) a.ctx.fail(std::string(what) + ": a tuple of strings is needed");
      options.push_back(o.s);
    }
  else
    a.ctx.fail(std::string(what) + " first arg must be str or a tuple of str, not " + type_name(x));
  std::string t = s;
  if (a.pos.size() > 1) {  // start, end as slice indices
    t = slice(Value::string(s), a.pos[1], a.pos.size() > 2 ? a.pos[2] : Value::none(), Value::none(), a.ctx).s;
  }
  for (const auto& o : options)
    if (t.size() >= o.size() && (start ? t.compare(0, o.size(), o) : t.compare(t.size() - o.size(), o.size(), o)) == 0)
      return true;
  return false;
}

int64_t count_of(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8::length(s)) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}
int64_t cp_index(const std::string& s, size_t byte) {
  return static_cast<int64_t>(utf8::length(std::string_view(s).substr(0, byte)));
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count, Ctx& c) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {  // between every character, and at both ends
    for (size_t i = 0; i <= s.size();) {
      if (count < 0 || done < count) out += rep, ++done;
      if (i == s.size()) break;
      const size_t n = next_cp(s, i);
      out += s.substr(i, n - i);
      i = n;
      if (static_cast<int64_t>(out.size()) > (int64_t{1} << 26)) c.fail("replace: the string would pass 64 MiB");
    }
    return out;
  }
  size_t start = 0;
  for (size_t p = s.find(old); p != std::string::npos && (count < 0 || done < count); p = s.find(old, start)) {
    out += s.substr(start, p - start) + rep;
    start = p + old.size();
    ++done;
    if (static_cast<int64_t>(out.size()) > (int64_t{1} << 26)) c.fail("replace: the string would pass 64 MiB");
  }
  return out + s.substr(start);
}

bool all_chars(const std::string& s, bool (*f)(char32_t)) {
  const U32 u = u32(s);
  if (u.empty()) return false;
  for (char32_t c : u)
    if (!f(c)) return false;
  return true;
}
// str.islower()/isupper(): some cased character, and none of the other case.
bool py_case(const std::string& s, bool want_lower) {
  bool any = false;
  for (char32_t c : u32(s)) {
    if (!cased(c)) continue;
    const bool is_lower = lower(c) == c && upper(c) != c;
    const bool is_upper = upper(c) == c && lower(c) != c;
    if (want_lower ? is_upper : is_lower) return false;
    any |= want_lower ? is_lower : is_upper;
  }
  return any;
}

// str.casefold(): Unicode's full case folding.
std::string py_casefold(const std::string& s, Ctx& c) {
  utf8proc_uint8_t* folded = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &folded, UTF8PROC_CASEFOLD);
  if (n < 0) c.fail(std::string("str.casefold(): ") + utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(folded), static_cast<size_t>(n));
  std::free(folded);
  return out;
}
// str.center(width[, fillchar]), ljust, rjust, zfill(width): padded to width code points (center
// puts the odd one on the left when width is odd; zfill's zeros go after a sign).
std::string py_justify(const std::string& s, const std::string& name, Args& a) {
  const std::string what = "str." + name + "()";
  const int64_t width = int_arg(a, 0, "width", what.c_str(), 0);
  const std::string fill = name == "zfill" ? "0" : text_arg(a, 1, "fillchar", what.c_str(), " ");
  if (utf8::length(fill) != 1) a.ctx.fail(what + ": The fill character must be exactly one character long");
  const int64_t gap = width - static_cast<int64_t>(utf8::length(s));
  if (gap <= 0) return s;
  if (name == "ljust") return pad_around(s, 0, gap, fill, a.ctx);
  if (name == "rjust") return pad_around(s, gap, 0, fill, a.ctx);
  if (name == "center") {
    const int64_t left = gap / 2 + (gap & width & 1);
    return pad_around(s, left, gap - left, fill, a.ctx);
  }
  const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
  return s.substr(0, sign ? 1 : 0) + pad_around(s.substr(sign ? 1 : 0), gap, 0, fill, a.ctx);
}

Value str_method(const std::string& self, const std::string& name, Args& a) {
  Ctx& c = a.ctx;
  c.charge(static_cast<int64_t>(self.size() / 16));
  const std::string what = "str." + name + "()";
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    arity(a, what.c_str(), 1, {});
    const Value chars = arg(a, 0, "chars", Value::none());
    if (chars.kind != Kind::none && chars.kind != Kind::string) c.fail(what + ": arg must be None or str");
    return Value::string(py_strip(self, &chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    arity(a, what.c_str(), 2, {"sep", "maxsplit"});
    return strings(py_split(self, arg(a, 0, "sep", Value::none()), int_arg(a, 1, "maxsplit", what.c_str(), -1),
                            name == "rsplit", c));
  }
  if (name == "splitlines") {
    arity(a, what.c_str(), 1, {"keepends"});
    return strings(py_splitlines(self, truthy(arg(a, 0, "keepends", Value::boolean(false)))));
  }
  if (name == "startswith" || name == "endswith") {
    arity(a, what.c_str(), 3, {});
    if (a.pos.empty()) c.fail(what + " takes at least 1 argument");
    return Value::boolean(affix(self, a, name == "startswith", what.c_str()));
  }
  if (name == "upper") return arity(a, what.c_str(), 0, {}), Value::string(map_case(self, Case::upper));
  if (name == "lower") return arity(a, what.c_str(), 0, {}), Value::string(map_case(self, Case::lower));
  if (name == "title") return arity(a, what.c_str(), 0, {}), Value::string(py_title(self));
  if (name == "capitalize") return arity(a, what.c_str(), 0, {}), Value::string(py_capitalize(self));
  if (name == "replace") {
    arity(a, what.c_str(), 3, {"count"});
    return Value::string(py_replace(self, text_arg(a, 0, "old", what.c_str()), text_arg(a, 1, "new", what.c_str()),
                                    int_arg(a, 2, "count", what.c_str(), -1), c));
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index" || name == "rindex") {
    arity(a, what.c_str(), 1, {});
    const std::string sub = text_arg(a, 0, "sub", what.c_str());
    if (name == "count") return Value::integer(count_of(self, sub));
    const size_t p = name[0] == 'r' ? self.rfind(sub) : self.find(sub);
    if (p == std::string::npos && name.find("index") != std::string::npos) c.fail(what + ": substring not found");
    return Value::integer(p == std::string::npos ? -1 : cp_index(self, p));
  }
  if (name == "join") {
    arity(a, what.c_str(), 1, {});
    std::string out;
    bool first = true;
    for (const Value& v : iterate(arg(a, 0, "iterable"), c, "str.join()")) {
      if (v.kind != Kind::string) c.fail(what + ": expected str instance, " + type_name(v) + " found");
      out += (first ? "" : self) + v.s;
      first = false;
    }
    return Value::string(std::move(out));
  }
  if (name == "swapcase") return arity(a, what.c_str(), 0, {}), Value::string(py_swapcase(self));
  if (name == "casefold") return arity(a, what.c_str(), 0, {}), Value::string(py_casefold(self, c));
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    arity(a, what.c_str(), name == "zfill" ? 1 : 2, {});
    return Value::string(py_justify(self, name, a));
  }
  if (name == "partition" || name == "rpartition") {
    arity(a, what.c_str(), 1, {});
    const std::string sep = text_arg(a, 0, "sep", what.c_str());
    if (sep.empty()) c.fail(what + ": empty separator");
    const size_t p = name == "partition" ? self.find(sep) : self.rfind(sep);
    List parts;
    if (p == std::string::npos)
      parts = name == "partition" ? List{Value::string(self), Value::string(""), Value::string("")}
                                  : List{Value::string(""), Value::string(""), Value::string(self)};
    else
      parts = {Value::string(self.substr(0, p)), Value::string(sep), Value::string(self.substr(p + sep.size()))};
    Value t = Value::list(std::move(parts));
    t.tuple = true;
    return t;
  }
  if (name == "removeprefix" || name == "removesuffix") {
    arity(a, what.c_str(), 1, {});
    const std::string x = text_arg(a, 0, name == "removeprefix" ? "prefix" : "suffix", what.c_str());
    if (name == "removeprefix" && self.compare(0, x.size(), x) == 0) return Value::string(self.substr(x.size()));
    if (name == "removesuffix" && self.size() >= x.size() && self.compare(self.size() - x.size(), x.size(), x) == 0)
      return Value::string(self.substr(0, self.size() - x.size()));
    return Value::string(self);
  }
  if (name == "format") return Value::string(str_format(self, a));
  if (name == "isdigit") return Value::boolean(all_chars(self, is_digit));
  if (name == "isalpha") return Value::boolean(all_chars(self, is_alpha));
  if (name == "isalnum")
    return Value::boolean(all_chars(self, [](char32_t x) { return is_alpha(x) || is_numeric(x); }));
  if (name == "isspace") return Value::boolean(all_chars(self, py_space));
  if (name == "islower") return Value::boolean(py_case(self, true));
  if (name == "isupper") return Value::boolean(py_case(self, false));
  c.fail("'str' object has no method '" + name + "'");
}

// list.index(x[, start[, stop]]), list.count(x), list.copy() (a tuple has the first two).
Value list_method(const Value& self, const std::string& name, Args& a) {
  Ctx& c = a.ctx;
  const std::string what = type_name(self) + "." + name + "()";
  const List& l = *self.l;
  c.charge(static_cast<int64_t>(l.size()));
  if (name == "copy") {
    arity(a, what.c_str(), 0, {});
    if (self.tuple) c.fail("'tuple' object has no attribute 'copy'");
    return Value::list(l);
  }
  if (a.pos.empty()) c.fail(what + " takes at least 1 argument");
  if (name == "count") {
    arity(a, what.c_str(), 1, {});
    return Value::integer(std::count_if(l.begin(), l.end(), [&](const Value& v) { return equals(v, a.pos[0]); }));
  }
  arity(a, what.c_str(), 3, {});
  const int64_t n = static_cast<int64_t>(l.size());
  auto bound = [&](size_t at, int64_t def) {
    int64_t k = int_arg(a, at, "index", what.c_str(), def);
    if (k < 0) k = std::max<int64_t>(k + n, 0);
    return std::min(k, n);
  };
  for (int64_t k = bound(1, 0), end = bound(2, n); k < end; ++k)
    if (equals(l[static_cast<size_t>(k)], a.pos[0])) return Value::integer(k);
  c.fail(what + ": " + repr(a.pos[0], c) + " is not in " + type_name(self));
}

Value dict_method(const Value& self, const std::string& name, Args& a) {
  const std::string what = "dict." + name + "()";
  if (name == "copy") {
    arity(a, what.c_str(), 0, {});
    a.ctx.charge(static_cast<int64_t>(self.dict->items.size()));
    return Value::of_dict(std::make_shared<Dict>(*self.dict));
  }
  if (name == "get") {
    arity(a, what.c_str(), 2, {});
    const Value key = arg(a, 0, "key");
    const Value* v = dict_find(*self.dict, key);
    return v ? *v : arg(a, 1, "default", Value::none());
  }
  arity(a, what.c_str(), 0, {});
  List out;
  for (const auto& [k, v] : self.dict->items) {
    if (name == "keys")
      out.push_back(key_value(k));
    else if (name == "values")
      out.push_back(v);
    else {
      Value pair = Value::list({key_value(k), v});
      pair.tuple = true;
      out.push_back(std::move(pair));
    }
  }
  return Value::list(std::move(out));
}

Value method(const Value& self, const std::string& name, Ctx& c) {
  static const char* str_methods[] = {
      "strip",      "lstrip",       "rstrip",       "split",      "rsplit",  "splitlines", "startswith", "endswith",
      "upper",      "lower",        "title",        "capitalize", "replace", "find",       "rfind",      "index",
      "rindex",     "count",        "join",         "isdigit",    "isalpha", "isalnum",    "isspace",    "islower",
      "isupper",    "swapcase",     "casefold",     "center",     "ljust",   "rjust",      "zfill",      "partition",
      "rpartition", "removeprefix", "removesuffix", "format"};
  static const char* mutating[] = {"append", "extend",  "insert", "pop",        "remove", "clear",
                                   "sort",   "reverse", "update", "setdefault", "popitem"};
  if (self.kind == Kind::string) {
    for (const char* m : str_methods)
      if (name == m) {
        const std::string s = self.s;
        return Value::function("str." + name, [s, name](Args& a) { return str_method(s, name, a); });
      }
  } else if (self.kind == Kind::list && (name == "index" || name == "count" || name == "copy")) {
    return Value::function("list." + name, [self, name](Args& a) { return list_method(self, name, a); });
  } else if (self.kind == Kind::dict) {
    if (name == "get" || name == "items" || name == "keys" || name == "values" || name == "copy")
      return Value::function("dict." + name, [self, name](Args& a) { return dict_method(self, name, a); });
  }
  if (self.kind == Kind::list || self.kind == Kind::dict)
    for (const char* m : mutating)
      if (name == m)
        c.fail("access to attribute '" + name + "' of '" + type_name(self) +
               "' object is unsafe (a template cannot change its values)");
  return Value::undefined("");
}

// ---- filters ---------------------------------------------------------------------------------

// A dotted attribute ("a.b", or an index "0") of each item, as jinja2's make_attrgetter.
Value attribute_of(const Value& item, const Value& attribute, Ctx& c) {
  if (integral(attribute)) return get_item(item, attribute, c);
  if (attribute.kind != Kind::string)
    c.fail("an attribute must be a string or an integer, not " + type_name(attribute));
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = attribute.s.find('.', start);
    const std::string part = attribute.s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.size() <= 18 &&  // (an index that fits 64 bits; longer: a key)
                        std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    v = digits ? get_item(v, Value::integer(std::stoll(part)), c) : get_item(v, Value::string(part), c);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

int64_t length(const Value& v, Ctx& c) {
  switch (v.kind) {
    case Kind::undefined:
      return 0;
    case Kind::string:
      return static_cast<int64_t>(utf8::length(v.s));
    case Kind::list:
      if (v.generator) c.fail("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.l->size());
    case Kind::dict:
      if (!v.ns && !v.object) return static_cast<int64_t>(v.dict->items.size());
      [[fallthrough]];
    default:
      c.fail("object of type '" + type_name(v) + "' has no len()");
  }
}

// json.dumps(v, ensure_ascii, indent, separators, sort_keys), as transformers' tojson calls it.
struct JsonStyle {
  bool ensure_ascii = false;
  bool indented = false;
  std::string indent;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};
void dump_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto cp = utf8::decode_one(s, i);
    const char32_t c = cp.valid() ? cp.value : 0xFFFD;
    char b[16];
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\b')
      out += "\\b";
    else if (c == '\f')
      out += "\\f";
    else if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else
        std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      out += b;
    } else
      out += s.substr(i, cp.length);
    i += cp.length;
  }
  out += '"';
}
void dump(const Value& v, const JsonStyle& st, int level, std::string& out, Ctx& c) {
  if (level > kMaxJsonDepth) c.fail("tojson: a value nested more than " + std::to_string(kMaxJsonDepth) + " deep");
  auto newline = [&](int lv) {
    out += '\n';
    for (int k = 0; k < lv; ++k) out += st.indent;
  };
  switch (v.kind) {
    case Kind::none:
      out += "null";
      return;
    case Kind::boolean:
      out += v.b ? "true" : "false";
      return;
    case Kind::integer:
      out += std::to_string(v.i);
      return;
    case Kind::real:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity") : float_repr(v.f);
      return;
    case Kind::string:
      dump_string(v.s, st.ensure_ascii, out);
      return;
    case Kind::list: {
      if (v.generator || v.range) break;
      if (v.l->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.l->size(); ++k) {
        if (k) out += st.item_sep;
        if (st.indented) newline(level + 1);
        dump((*v.l)[k], st, level + 1, out, c);
      }
      if (st.indented) newline(level);
      out += ']';
      return;
    }
    case Kind::dict: {
      if (v.ns || v.object) break;
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        if (st.indented) newline(level + 1);
        const Value kv = key_value(items[k]->first);  // (json.dumps writes other keys as their JSON)
        std::string text;
        if (kv.kind != Kind::string) dump(kv, st, level + 1, text, c);
        dump_string(kv.kind == Kind::string ? kv.s : text, st.ensure_ascii, out);
        out += st.key_sep;
        dump(items[k]->second, st, level + 1, out, c);
      }
      if (st.indented) newline(level);
      out += '}';
      return;
    }
    default:
      break;
  }
  c.fail("tojson: Object of type " +
         (v.generator ? std::string("generator")
          : v.range   ? "range"
                      : type_name(v)) +
         " is not JSON serializable");
}

Value f_tojson(Args& a) {
  arity(a, "tojson", 5, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle st;
  st.ensure_ascii = truthy(arg(a, 1, "ensure_ascii", Value::boolean(false)));
  const Value indent = arg(a, 2, "indent", Value::none());
  if (integral(indent)) {
    st.indented = true;
    st.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(as_int(indent), 0, 1024)), ' ');
  } else if (indent.kind == Kind::string) {
    st.indented = true;
    st.indent = indent.s;
  } else if (indent.kind != Kind::none && indent.kind != Kind::undefined)
    a.ctx.fail("tojson: indent must be an integer, a string or none, not " + type_name(indent));
  if (st.indented) st.item_sep = ",";
  const Value sep = arg(a, 3, "separators", Value::none());
  if (sep.kind == Kind::list) {
    if (sep.l->size() != 2 || (*sep.l)[0].kind != Kind::string || (*sep.l)[1].kind != Kind::string)
      a.ctx.fail("tojson: separators must be two strings");
    st.item_sep = (*sep.l)[0].s;
    st.key_sep = (*sep.l)[1].s;
  } else if (sep.kind != Kind::none && sep.kind != Kind::undefined)
    a.ctx.fail("tojson: separators must be a pair of strings");
  st.sort_keys = truthy(arg(a, 4, "sort_keys", Value::boolean(false)));
  std::string out;
  dump(a.pos[0], st, 0, out, a.ctx);
  a.ctx.charge(static_cast<int64_t>(out.size() / 16));
  return Value::string(std::move(out));
}

Value f_trim(Args& a) {
  arity(a, "trim", 2, {"chars"});
  const Value chars = arg(a, 1, "chars", Value::none());
  return Value::string(py_strip(input_text(a), &chars, true, true));
}
Value f_length(Args& a) {
  arity(a, "length", 1, {});
  return Value::integer(length(a.pos[0], a.ctx));
}
Value f_upper(Args& a) { return Value::string(map_case(input_text(a), Case::upper)); }
Value f_lower(Args& a) { return Value::string(map_case(input_text(a), Case::lower)); }
Value f_capitalize(Args& a) { return Value::string(py_capitalize(input_text(a))); }
// jinja2's title: each piece between runs of [-\s({[<] starts upper-case, the rest lower-case.
Value f_title(Args& a) {
  const U32 u = u32(input_text(a));
  U32 out;
  bool start = true;
  for (char32_t c : u) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_space(c);
    out += sep ? c : start ? upper(c) : lower(c);
    start = sep;
  }
  return Value::string(u8(out));
}
Value f_safe(Args& a) {
  Value v = a.pos[0].kind == Kind::string ? a.pos[0] : Value::string(to_str(a.pos[0], a.ctx));
  v.safe = true;
  return v;
}
Value f_escape(Args& a) {
  if (a.pos[0].kind == Kind::string && a.pos[0].safe) return a.pos[0];
  Value v = Value::string(html_escape(to_str(a.pos[0], a.ctx)));
  v.safe = true;
  return v;
}
Value f_string(Args& a) { return a.pos[0].kind == Kind::string ? a.pos[0] : Value::string(to_str(a.pos[0], a.ctx)); }
Value f_default(Args& a) {
  arity(a, "default", 3, {"default_value", "boolean"});
  const Value def = arg(a, 1, "default_value", Value::string(""));
  const bool boolean = truthy(arg(a, 2, "boolean", Value::boolean(false)));
  const Value& v = a.pos[0];
  if (v.kind == Kind::undefined || (boolean && !truthy(v))) return def;
  return v;
}
Value f_list(Args& a) { return Value::list(iterate(a.pos[0], a.ctx, "the list filter")); }
Value f_items(Args& a) {
  const Value& v = a.pos[0];
  if (v.kind == Kind::undefined) return Value::list({});
  if (v.kind != Kind::dict || v.ns || v.object)
    a.ctx.fail("items: can only get item pairs from a mapping, not " + type_name(v));
  Args b{a.ctx, {}, {}};
  return dict_method(v, "items", b);
}
Value f_join(Args& a) {
  arity(a, "join", 3, {"d", "attribute"});
  const std::string sep = text_arg(a, 1, "d", "join", "");
  const Value attribute = arg(a, 2, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (Value v : iterate(a.pos[0], a.ctx, "the join filter")) {
    if (attribute.kind != Kind::none && attribute.kind != Kind::undefined) v = attribute_of(v, attribute, a.ctx);
    out += (first ? "" : sep) + to_str(v, a.ctx);
    first = false;
    if (static_cast<int64_t>(out.size()) > (int64_t{1} << 26)) a.ctx.fail("join: the string would pass 64 MiB");
  }
  return Value::string(std::move(out));
}
Value f_first(Args& a) {
  const auto items = iterate(a.pos[0], a.ctx, "the first filter");
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(Args& a) {
  if (a.pos[0].generator) a.ctx.fail("'generator' object is not reversible");
  const auto items = iterate(a.pos[0], a.ctx, "the last filter");
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}
Value f_reverse(Args& a) {
  const Value& v = a.pos[0];
  if (v.kind == Kind::string) {
    U32 u = u32(v.s);
    std::reverse(u.begin(), u.end());
    return Value::string(u8(u));
  }
  auto items = iterate(v, a.ctx, "the reverse filter");
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}
Value f_replace(Args& a) {
  arity(a, "replace", 4, {"count"});
  const Value cnt = arg(a, 3, "count", Value::none());
  return Value::string(py_replace(input_text(a), text_arg(a, 1, "old", "replace"), text_arg(a, 2, "new", "replace"),
                                  cnt.kind == Kind::none || cnt.kind == Kind::undefined ? -1 : as_int(cnt), a.ctx));
}
Value f_abs(Args& a) {
  const Value& v = a.pos[0];
  if (integral(v)) return Value::integer(checked(as_int(v) == INT64_MIN, std::llabs(as_int(v)), "abs", a.ctx));
  if (v.kind == Kind::real) return Value::real(std::fabs(v.f));
  a.ctx.fail("bad operand type for abs(): '" + type_name(v) + "'");
}
// Python's float(str): surrounding whitespace, "inf", "nan", underscores between digits.
std::optional<double> parse_float(const std::string& text) {
  std::string s = py_strip(text, nullptr, true, true);
  std::string t;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '_') {
      if (k == 0 || k + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[k - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[k + 1])))
        return std::nullopt;
      continue;
    }
    t += s[k];
  }
  if (t.empty()) return std::nullopt;
  std::string low = t;
  for (auto& ch : low) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const std::string body = low[0] == '+' || low[0] == '-' ? low.substr(1) : low;
  if (body == "inf" || body == "infinity") return low[0] == '-' ? -INFINITY : INFINITY;
  if (body == "nan") return NAN;
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos ||
      body.find_first_of("0123456789") == std::string::npos)
    return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}
Value f_float(Args& a) {
  arity(a, "float", 2, {"default"});
  const Value& v = a.pos[0];
  if (v.kind == Kind::undefined) undefined_error(v, a.ctx);
  if (numeric(v)) return Value::real(as_real(v));
  if (v.kind == Kind::string)
    if (auto d = parse_float(v.s)) return Value::real(*d);
  return arg(a, 1, "default", Value::real(0.0));
}
Value f_int(Args& a) {
  arity(a, "int", 3, {"default", "base"});
  const Value def = arg(a, 1, "default", Value::integer(0));
  const int64_t base = int_arg(a, 2, "base", "int", 10);
  const Value& v = a.pos[0];
  if (v.kind == Kind::undefined) undefined_error(v, a.ctx);
  if (integral(v)) return Value::integer(as_int(v));
  if (v.kind == Kind::real) {
    if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return def;
    return Value::integer(static_cast<int64_t>(v.f));
  }
  if (v.kind == Kind::string) {
    std::string s = py_strip(v.s, nullptr, true, true);
    std::string t;
    for (char ch : s)
      if (ch != '_') t += ch;
    if (!t.empty() && base >= 2 && base <= 36) {
      errno = 0;
      char* end = nullptr;
      const long long x = std::strtoll(t.c_str(), &end, static_cast<int>(base));
      if (end == t.c_str() + t.size() && errno == 0 && std::isalnum(static_cast<unsigned char>(t.back())))
        return Value::integer(x);
    }
    if (auto d = parse_float(v.s))
      if (std::isfinite(*d) && std::fabs(*d) < 9.2e18) return Value::integer(static_cast<int64_t>(*d));
  }
  return def;
}
Value f_round(Args& a) {
  arity(a, "round", 3, {"precision", "method"});
  const int64_t precision = int_arg(a, 1, "precision", "round", 0);
  const std::string method = text_arg(a, 2, "method", "round", "common");
  const Value& v = a.pos[0];
  if (!numeric(v)) a.ctx.fail("round: the value must be a number, not " + type_name(v));
  if (method == "common" && integral(v)) return Value::integer(as_int(v));  // round(int, n ≥ 0) is the int
  const double x = as_real(v);
  if (!std::isfinite(x)) return Value::real(x);
  if (method == "common" && precision < 0) {
    const double m = std::pow(10.0, static_cast<double>(-precision));
    return Value::real(std::nearbyint(x / m) * m);
  }
  if (method == "common") {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), x);
    return Value::real(std::strtod(buf, nullptr));
  }
  if (method != "floor" && method != "ceil") a.ctx.fail("round: method must be 'common', 'ceil' or 'floor'");
  const double m = std::pow(10.0, static_cast<double>(precision));
  return Value::real((method == "floor" ? std::floor(x * m) : std::ceil(x * m)) / m);
}
Value f_center(Args& a) {
  arity(a, "center", 2, {"width"});
  const std::string s = input_text(a);
  const int64_t width = std::min<int64_t>(int_arg(a, 1, "width", "center", 80), 1 << 20);
  const int64_t n = static_cast<int64_t>(utf8::length(s));
  if (width <= n) return Value::string(s);
  const int64_t pad = width - n, left = pad / 2 + (pad & width & 1);
  return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                       std::string(static_cast<size_t>(pad - left), ' '));
}
Value f_indent(Args& a) {
  arity(a, "indent", 4, {"width", "first", "blank"});
  const Value w = arg(a, 1, "width", Value::integer(4));
  const std::string ind =
      w.kind == Kind::string
          ? w.s
          : std::string(static_cast<size_t>(std::clamp<int64_t>(integral(w) ? as_int(w) : 4, 0, 1024)), ' ');
  const bool first = truthy(arg(a, 2, "first", Value::boolean(false)));
  const bool blank = truthy(arg(a, 3, "blank", Value::boolean(false)));
  const auto lines = py_splitlines(input_text(a) + "\n", false);
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k) out += "\n";
    out += (k > 0 && (blank || !lines[k].empty()) ? ind : "") + lines[k];
  }
  if (first) out = ind + out;
  return Value::string(std::move(out));
}
Value f_wordcount(Args& a) {
  int64_t n = 0;
  bool in = false;
  for (char32_t c : u32(input_text(a))) {
    const bool w = is_word(c);
    if (w && !in) ++n;
    in = w;
  }
  return Value::integer(n);
}

// The sort key of an item: its attribute, lower-cased when a string and not case-sensitive.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive, Ctx& c) {
  Value v = attribute.kind == Kind::none || attribute.kind == Kind::undefined ? item : attribute_of(item, attribute, c);
  if (!case_sensitive && v.kind == Kind::string) v.s = map_case(v.s, Case::lower);
  return v;
}
// The sort filter's key: with an attribute, the list of the comma-separated attributes' values (as
// jinja2's make_multi_attrgetter; equal items, an undefined's included, are never compared by <).
Value sort_keys(const Value& item, const Value& attribute, bool case_sensitive, Ctx& c) {
  if (attribute.kind == Kind::none || attribute.kind == Kind::undefined)
    return sort_key(item, attribute, case_sensitive, c);
  List keys;
  if (attribute.kind != Kind::string) return Value::list({sort_key(item, attribute, case_sensitive, c)});
  for (size_t start = 0;;) {
    const size_t comma = attribute.s.find(',', start);
    keys.push_back(sort_key(item, Value::string(attribute.s.substr(start, comma - start)), case_sensitive, c));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return Value::list(std::move(keys));
}
Value f_sort(Args& a) {
  arity(a, "sort", 4, {"reverse", "case_sensitive", "attribute"});
  const bool rev = truthy(arg(a, 1, "reverse", Value::boolean(false)));
  const bool cs = truthy(arg(a, 2, "case_sensitive", Value::boolean(false)));
  const Value attribute = arg(a, 3, "attribute", Value::none());
  auto items = iterate(a.pos[0], a.ctx, "the sort filter");
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t k = 0; k < items.size(); ++k) keyed.emplace_back(sort_keys(items[k], attribute, cs, a.ctx), k);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return rev ? less(y.first, x.first, a.ctx, "<") : less(x.first, y.first, a.ctx, "<");
  });
  List out;
  for (const auto& [key, k] : keyed) out.push_back(items[k]);
  return Value::list(std::move(out));
}
Value f_dictsort(Args& a) {
  arity(a, "dictsort", 4, {"case_sensitive", "by", "reverse"});
  const bool cs = truthy(arg(a, 1, "case_sensitive", Value::boolean(false)));
  const std::string by = text_arg(a, 2, "by", "dictsort", "key");
  const bool rev = truthy(arg(a, 3, "reverse", Value::boolean(false)));
  if (by != "key" && by != "value") a.ctx.fail("dictsort: you can only sort by either 'key' or 'value'");
  auto pairs = *f_items(a).l;
  const Value none = Value::none();
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key((*x.l)[by == "key" ? 0 : 1], none, cs, a.ctx),
                ky = sort_key((*y.l)[by == "key" ? 0 : 1], none, cs, a.ctx);
    return rev ? less(ky, kx, a.ctx, "<") : less(kx, ky, a.ctx, "<");
  });
  return Value::list(std::move(pairs));
}
Value f_unique(Args& a) {
  arity(a, "unique", 3, {"case_sensitive", "attribute"});
  const bool cs = truthy(arg(a, 1, "case_sensitive", Value::boolean(false)));
  const Value attribute = arg(a, 2, "attribute", Value::none());
  List out, seen;
  for (const Value& v : iterate(a.pos[0], a.ctx, "the unique filter")) {
    const Value key = sort_key(v, attribute, cs, a.ctx);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(key);
    out.push_back(v);
  }
  return Value::list(std::move(out));
}
Value min_max(Args& a, bool want_max) {
  arity(a, want_max ? "max" : "min", 3, {"case_sensitive", "attribute"});
  const bool cs = truthy(arg(a, 1, "case_sensitive", Value::boolean(false)));
  const Value attribute = arg(a, 2, "attribute", Value::none());
  const auto items = iterate(a.pos[0], a.ctx, want_max ? "the max filter" : "the min filter");
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  size_t best = 0;
  Value best_key = sort_key(items[0], attribute, cs, a.ctx);
  for (size_t k = 1; k < items.size(); ++k) {
    Value key = sort_key(items[k], attribute, cs, a.ctx);
    if (want_max ? less(best_key, key, a.ctx, "<") : less(key, best_key, a.ctx, "<"))
      best = k, best_key = std::move(key);
  }
  return items[best];
}
Value f_max(Args& a) { return min_max(a, true); }
Value f_min(Args& a) { return min_max(a, false); }
Value f_sum(Args& a) {
  arity(a, "sum", 3, {"attribute", "start"});
  const Value attribute = arg(a, 1, "attribute", Value::none());
  Value total = arg(a, 2, "start", Value::integer(0));
  for (Value v : iterate(a.pos[0], a.ctx, "the sum filter")) {
    if (attribute.kind != Kind::none && attribute.kind != Kind::undefined) v = attribute_of(v, attribute, a.ctx);
    total = binary("+", total, v, a.ctx);
  }
  return total;
}
Value f_attr(Args& a) {
  arity(a, "attr", 2, {});
  const std::string name = text_arg(a, 1, "name", "attr");  // (Python's getattr: methods, not a dict's items)
  const Value& v = a.pos[0];
  if (v.kind == Kind::dict && (v.ns || v.object)) return get_attr(v, name, a.ctx);
  if (v.kind == Kind::undefined) return v;
  Value m = method(v, name, a.ctx);
  if (m.kind == Kind::function) return m;
  return Value::undefined("'" + type_name(v) + " object' has no attribute '" + name + "'");
}

// truncate(length=255, killwords=False, end='...', leeway=5): past length + leeway code points, cut
// to length less the end's, at the last space unless killwords, and the end added.
Value f_truncate(Args& a) {
  arity(a, "truncate", 5, {"length", "killwords", "end", "leeway"});
  const U32 u = u32(input_text(a));
  const int64_t length = int_arg(a, 1, "length", "truncate", 255);
  const bool killwords = truthy(arg(a, 2, "killwords", Value::boolean(false)));
  const std::string end = text_arg(a, 3, "end", "truncate", "...");
  const int64_t leeway = int_arg(a, 4, "leeway", "truncate", 5);
  const int64_t end_len = static_cast<int64_t>(utf8::length(end));
  if (length < end_len)
    a.ctx.fail("truncate: expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) a.ctx.fail("truncate: expected leeway >= 0, got " + std::to_string(leeway));
  if (static_cast<int64_t>(u.size()) <= length + leeway) return Value::string(u8(u));
  U32 kept = u.substr(0, static_cast<size_t>(length - end_len));
  if (!killwords) {
    const size_t space = kept.rfind(U' ');
    if (space != U32::npos) kept.resize(space);
  }
  return Value::string(u8(kept) + end);
}

// batch(linecount, fill_with=None): lists of linecount items, the last filled up when fill_with is given.
Value f_batch(Args& a) {
  arity(a, "batch", 3, {"linecount", "fill_with"});
  const int64_t n = int_arg(a, 1, "linecount", "batch", 0);
  const Value fill = arg(a, 2, "fill_with", Value::none());
  List out, cur;
  for (const Value& v : iterate(a.pos[0], a.ctx, "the batch filter")) {
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
    cur.push_back(v);
  }
  if (!cur.empty()) {
    if (fill.kind != Kind::none && n > static_cast<int64_t>(cur.size())) {
      if (n > (1 << 22)) a.ctx.fail("batch: filling a batch of " + std::to_string(n) + " would pass 4M items");
      a.ctx.charge(n);
      cur.resize(static_cast<size_t>(n), fill);
    }
    out.push_back(Value::list(std::move(cur)));
  }
  Value g = Value::list(std::move(out));
  g.generator = true;
  return g;
}

// slice(slices, fill_with=None): the items in `slices` lists, the first ones one longer; the
// shorter ones filled up when fill_with is given.
Value f_slice(Args& a) {
  arity(a, "slice", 3, {"slices", "fill_with"});
  const int64_t slices = int_arg(a, 1, "slices", "slice", 0);
  const Value fill = arg(a, 2, "fill_with", Value::none());
  const auto items = iterate(a.pos[0], a.ctx, "the slice filter");
  const int64_t n = static_cast<int64_t>(items.size());
  if (slices == 0) a.ctx.fail("slice: integer division or modulo by zero");
  List out;
  if (slices > 0) a.ctx.charge(slices);
  const int64_t per = floordiv(n, slices), extra = pymod(n, slices);
  int64_t offset = 0;
  for (int64_t k = 0; k < slices; ++k) {
    const int64_t start = offset + k * per;
    if (k < extra) ++offset;
    const int64_t end = offset + (k + 1) * per;
    List part;
    for (int64_t i = std::clamp<int64_t>(start, 0, n); i < std::clamp<int64_t>(end, 0, n); ++i)
      part.push_back(items[i]);
    if (fill.kind != Kind::none && k >= extra) part.push_back(fill);
    out.push_back(Value::list(std::move(part)));
  }
  Value g = Value::list(std::move(out));
  g.generator = true;
  return g;
}

// groupby(attribute, default=None, case_sensitive=False): (grouper, list) tuples of the items
// sorted by the attribute, equal ones together; the grouper is the first item's attribute.
Value f_groupby(Args& a) {
  arity(a, "groupby", 4, {"attribute", "default", "case_sensitive"});
  const Value attribute = arg(a, 1, "attribute");
  const Value def = arg(a, 2, "default", Value::none());
  const bool cs = truthy(arg(a, 3, "case_sensitive", Value::boolean(false)));
  const auto items = iterate(a.pos[0], a.ctx, "the groupby filter");
  auto attr = [&](const Value& item) {
    Value v = attribute_of(item, attribute, a.ctx);
    return v.kind == Kind::undefined && def.kind != Kind::none ? def : v;
  };
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t k = 0; k < items.size(); ++k) {
    Value key = attr(items[k]);
    if (!cs && key.kind == Kind::string) key.s = map_case(key.s, Case::lower);
    keyed.emplace_back(std::move(key), k);
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [&](const auto& x, const auto& y) { return less(x.first, y.first, a.ctx, "<"); });
  List out;
  for (size_t k = 0; k < keyed.size();) {
    List group;
    size_t e = k;
    for (; e < keyed.size() && equals(keyed[e].first, keyed[k].first); ++e) group.push_back(items[keyed[e].second]);
    Value t = Value::list({cs ? keyed[k].first : attr(items[keyed[k].second]), Value::list(std::move(group))});
    t.tuple = t.group = true;
    out.push_back(std::move(t));
    k = e;
  }
  return Value::list(std::move(out));
}

// wordwrap(width=79, break_long_words=True, wrapstring='\n', break_on_hyphens=True): each line
// wrapped as Python's textwrap.TextWrapper (no tab expansion, whitespace kept, dropped at the
// wrapped lines' ends and starts but the first), the lines joined with wrapstring.
bool ascii_ws(char32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x0B || c == 0x0C; }
bool letter(char32_t c) { return is_alpha(c); }
// textwrap's chunks: whitespace runs and words, a word split after a hyphen between letters.
std::vector<U32> wrap_chunks(const U32& line, bool hyphens, Ctx& c) {
  std::vector<U32> chunks;
  for (size_t k = 0; k < line.size();) {
    size_t e = k;
    if (ascii_ws(line[k])) {
      while (e < line.size() && ascii_ws(line[e])) ++e;
    } else {
      while (e < line.size() && !ascii_ws(line[e])) {
        if (hyphens && line[e] == '-' && line.compare(e, 2, U"--") == 0)
          c.fail("wordwrap: a word with '--' is not supported");
        ++e;
        if (hyphens && line[e - 1] == '-' && e >= k + 3 && letter(line[e - 2]) && letter(line[e - 3]) &&
            e < line.size() && letter(line[e]) &&
            (e + 1 < line.size() &&
             (letter(line[e + 1]) || (line[e + 1] == '-' && e + 2 < line.size() && letter(line[e + 2])))))
          break;
      }
    }
    chunks.push_back(line.substr(k, e - k));
    k = e;
  }
  return chunks;
}
bool blank(const U32& s) {
  return std::all_of(s.begin(), s.end(), [](char32_t ch) { return py_space(ch); });
}
std::vector<U32> wrap_line(const U32& line, int64_t width, bool break_long, bool hyphens, Ctx& c) {
  std::vector<U32> chunks = wrap_chunks(line, hyphens, c), lines;
  std::reverse(chunks.begin(), chunks.end());
  while (!chunks.empty()) {
    c.charge(1);
    std::vector<U32> cur;
    int64_t len = 0;
    if (blank(chunks.back()) && !lines.empty()) chunks.pop_back();
    while (!chunks.empty() && len + static_cast<int64_t>(chunks.back().size()) <= width) {
      len += static_cast<int64_t>(chunks.back().size());
      cur.push_back(std::move(chunks.back()));
      chunks.pop_back();
    }
    if (!chunks.empty() && static_cast<int64_t>(chunks.back().size()) > width) {
      const int64_t room = width - len;
      U32& chunk = chunks.back();
      if (break_long) {
        int64_t end = room;
        if (hyphens && room > 0 && static_cast<int64_t>(chunk.size()) > room) {
          const size_t h = chunk.rfind(U'-', static_cast<size_t>(room - 1));
          if (h != U32::npos && h > 0 && chunk.find_first_not_of(U'-') < h) end = static_cast<int64_t>(h) + 1;
        }
        cur.push_back(chunk.substr(0, static_cast<size_t>(end)));
        chunk.erase(0, static_cast<size_t>(end));
      } else if (cur.empty()) {
        cur.push_back(std::move(chunk));
        chunks.pop_back();
      }
    }
    if (!cur.empty() && blank(cur.back())) cur.pop_back();
    if (!cur.empty()) {
      U32 joined;
      for (const auto& x : cur) joined += x;
      lines.push_back(std::move(joined));
    }
  }
  return lines;
}
Value f_wordwrap(Args& a) {
  arity(a, "wordwrap", 5, {"width", "break_long_words", "wrapstring", "break_on_hyphens"});
  const int64_t width = int_arg(a, 1, "width", "wordwrap", 79);
  const bool break_long = truthy(arg(a, 2, "break_long_words", Value::boolean(true)));
  const Value ws = arg(a, 3, "wrapstring", Value::none());
  const std::string wrapstring = ws.kind == Kind::string ? ws.s : "\n";
  const bool hyphens = truthy(arg(a, 4, "break_on_hyphens", Value::boolean(true)));
  if (width <= 0) a.ctx.fail("wordwrap: invalid width " + std::to_string(width) + " (must be > 0)");
  std::string out;
  bool first_line = true;
  for (const std::string& line : py_splitlines(input_text(a), false)) {
    if (!first_line) out += wrapstring;
    first_line = false;
    bool first = true;
    for (const U32& w : wrap_line(u32(line), width, break_long, hyphens, a.ctx)) {
      out += (first ? "" : wrapstring) + u8(w);
      first = false;
      if (static_cast<int64_t>(out.size()) > kMaxString) a.ctx.fail("wordwrap: the string would pass 64 MiB");
    }
  }
  return Value::string(std::move(out));
}

// striptags: comments and tags removed, whitespace runs made one space, entities unescaped
// (markupsafe's Markup.striptags; the named entities beyond the HTML ones below are refused).
std::string unescape_html(const std::string& s, Ctx& c) {
  static const std::pair<const char*, const char*> named[] = {{"amp", "&"},   {"lt", "<"},   {"gt", ">"},
                                                              {"quot", "\""}, {"apos", "'"}, {"nbsp", "\u00A0"}};
  std::string out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] != '&') {
      out += s[k];
      continue;
    }
    const size_t semi = s.find(';', k);
    const std::string name = semi == std::string::npos ? "" : s.substr(k + 1, semi - k - 1);
    if (name.size() > 1 && name[0] == '#') {
      const bool hex = name[1] == 'x' || name[1] == 'X';
      const std::string digits = name.substr(hex ? 2 : 1);
      if (!digits.empty() && digits.size() <= 6 &&
          digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") == std::string::npos) {
        const auto cp = static_cast<char32_t>(std::stoul(digits, nullptr, hex ? 16 : 10));
        if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x80 && cp <= 0x9F))
          c.fail("striptags: the character reference &" + name + "; is not supported");
        out += utf8::encode(cp);
        k = semi;
        continue;
      }
    }
    bool done = false;
    for (const auto& [n, text] : named)
      if (name == n) out += text, k = semi, done = true;
    if (done) continue;
    if (k + 1 < s.size() && (std::isalnum(static_cast<unsigned char>(s[k + 1])) || s[k + 1] == '#'))
      c.fail("striptags: the HTML entity at '" + s.substr(k, 12) + "' is not supported");
    out += '&';
  }
  return out;
}
Value f_striptags(Args& a) {
  std::string s = input_text(a);
  a.ctx.charge(static_cast<int64_t>(s.size() / 16));
  auto cut = [&](const char* open, const char* close) {
    std::string out;
    size_t k = 0;
    for (size_t start; (start = s.find(open, k)) != std::string::npos;) {
      const size_t end = s.find(close, start);
      if (end == std::string::npos) break;
      out += s.substr(k, start - k);
      k = end + std::strlen(close);
    }
    s = out + s.substr(k);
  };
  cut("<!--", "-->");
  cut("<", ">");
  std::string joined;
  for (const std::string& w : py_split(s, Value::none(), -1, false, a.ctx)) joined += (joined.empty() ? "" : " ") + w;
  Value v = Value::string(unescape_html(joined, a.ctx));
  v.safe = true;
  return v;
}

// format(*args, **kwargs): printf-style, `value % args` (or % kwargs).
Value f_format(Args& a) {
  if (!a.pos.empty() && a.pos.size() > 1 && !a.kw.empty())
    a.ctx.fail("format: can't handle positional and keyword arguments at the same time");
  Value values;
  if (!a.kw.empty()) {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, v] : a.kw) d->set(key(k), v);
    values = Value::of_dict(std::move(d));
  } else {
    values = Value::list(List(a.pos.begin() + 1, a.pos.end()));
    values.tuple = true;
  }
  return Value::string(printf_format(input_text(a), values, a.ctx));
}

// pprint: pprint.pformat's text, which is repr with dicts' keys sorted where it fits one line of
// 80 (its wrapping of longer ones is not done here: refused).
std::string sorted_repr(const Value& v, Ctx& c, int depth) {
  if (depth > kMaxJsonDepth) c.fail("a value nested more than " + std::to_string(kMaxJsonDepth) + " deep");
  if (v.kind == Kind::list && !v.range) {
    std::string out = v.tuple ? "(" : "[";
    for (size_t k = 0; k < v.l->size(); ++k) out += (k ? ", " : "") + sorted_repr((*v.l)[k], c, depth + 1);
    if (v.tuple && v.l->size() == 1) out += ",";
    return out + (v.tuple ? ")" : "]");
  }
  if (v.kind == Kind::dict && !v.ns && !v.object) {
    std::vector<std::pair<Value, const Value*>> items;
    for (const auto& [k, x] : v.dict->items) items.emplace_back(key_value(k), &x);
    std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
      if (x.first.kind != y.first.kind && !(numeric(x.first) && numeric(y.first)))
        c.fail("pprint: a dict with keys of mixed types is not supported");
      return less(x.first, y.first, c, "<");
    });
    std::string out = "{";
    for (size_t k = 0; k < items.size(); ++k)
      out += (k ? ", " : "") + repr(items[k].first, c) + ": " + sorted_repr(*items[k].second, c, depth + 1);
    return out + "}";
  }
  return repr(v, c);
}
Value f_pprint(Args& a) {
  std::string s = sorted_repr(a.pos[0], a.ctx, 0);
  a.ctx.charge(static_cast<int64_t>(s.size() / 16));
  if (utf8::length(s) > 80)
    a.ctx.fail("pprint: a value whose repr is longer than 80 characters (pprint's wrapping is not supported)");
  return Value::string(std::move(s));
}
Value f_forceescape(Args& a) {
  Value v = Value::string(html_escape(to_str(a.pos[0], a.ctx)));
  v.safe = true;
  return v;
}

// select/reject(test, args…) and selectattr/rejectattr(attribute, test, args…)
Value select(Args& a, bool attr, bool keep) {
  const char* what = attr ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
  if (!a.kw.empty()) a.ctx.fail(std::string(what) + " takes no keyword arguments");
  size_t k = 1;
  Value attribute;
  if (attr) {
    if (a.pos.size() < 2) a.ctx.fail(std::string(what) + " needs an attribute");
    attribute = a.pos[k++];
  }
  TestFn test = nullptr;
  if (k < a.pos.size()) {
    if (a.pos[k].kind != Kind::string) a.ctx.fail(std::string(what) + ": the test's name must be a string");
    test = find_test(a.pos[k].s);
    if (!test) a.ctx.fail(std::string(what) + ": no test named '" + a.pos[k].s + "'");
    ++k;
  }
  List out;
  for (const Value& v : truthy(a.pos[0]) ? iterate(a.pos[0], a.ctx, what) : std::vector<Value>{}) {
    const Value x = attr ? attribute_of(v, attribute, a.ctx) : v;
    bool ok;
    if (test) {
      Args t{a.ctx, {x}, {}};
      t.pos.insert(t.pos.end(), a.pos.begin() + static_cast<std::ptrdiff_t>(k), a.pos.end());
      ok = test(t);
    } else
      ok = truthy(x);
    if (ok == keep) out.push_back(v);
  }
  Value g = Value::list(std::move(out));
  g.generator = true;
  return g;
}
Value f_select(Args& a) { return select(a, false, true); }
Value f_reject(Args& a) { return select(a, false, false); }
Value f_selectattr(Args& a) { return select(a, true, true); }
Value f_rejectattr(Args& a) { return select(a, true, false); }
// map(attribute=…, default=…) or map('filter', args…)
Value f_map(Args& a) {
  List out;
  const auto items = truthy(a.pos[0]) ? iterate(a.pos[0], a.ctx, "the map filter") : std::vector<Value>{};
  for (const auto& [k, v] : a.kw)
    if (k == "attribute") {
      const Value def = arg(a, 99, "default");
      for (const Value& item : items) {
        Value x = attribute_of(item, v, a.ctx);
        out.push_back(x.kind == Kind::undefined && def.kind != Kind::undefined ? def : x);
      }
      Value g = Value::list(std::move(out));
      g.generator = true;
      return g;
    }
  if (a.pos.size() < 2 || a.pos[1].kind != Kind::string) a.ctx.fail("map: needs a filter's name or attribute=");
  const FilterFn f = find_filter(a.pos[1].s);
  if (!f) a.ctx.fail("map: no filter named '" + a.pos[1].s + "'");
  for (const Value& item : items) {
    Args b{a.ctx, {item}, a.kw};
    b.pos.insert(b.pos.end(), a.pos.begin() + 2, a.pos.end());
    out.push_back(f(b));
  }
  Value g = Value::list(std::move(out));
  g.generator = true;
  return g;
}

// ---- tests -----------------------------------------------------------------------------------

Value test_arg(Args& a, const char* what) {
  if (a.pos.size() < 2) a.ctx.fail(std::string("the test '") + what + "' needs an argument");
  return a.pos[1];
}
bool t_defined(Args& a) { return a.pos[0].kind != Kind::undefined; }
bool t_undefined(Args& a) { return a.pos[0].kind == Kind::undefined; }
bool t_none(Args& a) { return a.pos[0].kind == Kind::none; }
bool t_boolean(Args& a) { return a.pos[0].kind == Kind::boolean; }
bool t_true(Args& a) { return a.pos[0].kind == Kind::boolean && a.pos[0].b; }
bool t_false(Args& a) { return a.pos[0].kind == Kind::boolean && !a.pos[0].b; }
bool t_integer(Args& a) { return a.pos[0].kind == Kind::integer; }
bool t_float(Args& a) { return a.pos[0].kind == Kind::real; }
bool t_number(Args& a) { return numeric(a.pos[0]); }
bool t_string(Args& a) { return a.pos[0].kind == Kind::string; }
bool t_mapping(Args& a) { return a.pos[0].kind == Kind::dict && !a.pos[0].ns && !a.pos[0].object; }
bool t_iterable(Args& a) {
  const Value& v = a.pos[0];
  return v.kind == Kind::list || v.kind == Kind::string || v.kind == Kind::undefined || t_mapping(a);
}
bool t_sequence(Args& a) { return t_iterable(a); }
bool t_callable(Args& a) { return a.pos[0].kind == Kind::function; }
bool t_odd(Args& a) {
  if (!integral(a.pos[0])) a.ctx.fail("the test 'odd' needs an integer, not " + type_name(a.pos[0]));
  return pymod(as_int(a.pos[0]), int64_t{2}) == 1;
}
bool t_even(Args& a) { return !t_odd(a); }
bool t_divisibleby(Args& a) {
  const Value n = test_arg(a, "divisibleby");
  return truthy(compare("==", binary("%", a.pos[0], n, a.ctx), Value::integer(0), a.ctx) ? Value::boolean(true)
                                                                                         : Value::boolean(false));
}
bool t_eq(Args& a) { return compare("==", a.pos[0], test_arg(a, "eq"), a.ctx); }
bool t_ne(Args& a) { return compare("!=", a.pos[0], test_arg(a, "ne"), a.ctx); }
bool t_lt(Args& a) { return compare("<", a.pos[0], test_arg(a, "lt"), a.ctx); }
bool t_le(Args& a) { return compare("<=", a.pos[0], test_arg(a, "le"), a.ctx); }
bool t_gt(Args& a) { return compare(">", a.pos[0], test_arg(a, "gt"), a.ctx); }
bool t_ge(Args& a) { return compare(">=", a.pos[0], test_arg(a, "ge"), a.ctx); }
bool t_in(Args& a) { return compare("in", a.pos[0], test_arg(a, "in"), a.ctx); }
// `is sameas`: None, True and False are themselves; containers are the same object.
bool t_sameas(Args& a) {
  const Value& x = a.pos[0];
  const Value y = test_arg(a, "sameas");
  if (x.kind != y.kind) return false;
  switch (x.kind) {
    case Kind::none:
    case Kind::undefined:
      return true;
    case Kind::boolean:
      return x.b == y.b;
    case Kind::integer:
      return x.i == y.i && x.i >= -5 && x.i <= 256;  // (CPython's small ints)
    case Kind::list:
      return x.l == y.l;
    case Kind::dict:
      return x.dict == y.dict;
    case Kind::function:
      return x.fn == y.fn;
    default:
      return false;
  }
}
bool t_lower(Args& a) { return py_case(input_text(a), true); }
bool t_escaped(Args& a) { return a.pos[0].kind == Kind::string && a.pos[0].safe; }
// `is filter`, `is test`: whether jinja2 (with transformers' tojson) has one of that name — its
// answer, whichever of them this renderer has.
bool named_in(Args& a, std::initializer_list<const char*> names) {
  if (a.pos[0].kind != Kind::string) return false;
  for (const char* n : names)
    if (a.pos[0].s == n) return true;
  return false;
}
bool t_filter(Args& a) {
  return named_in(a, {"abs",    "attr",       "batch",       "capitalize", "center",   "count",
                      "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
                      "first",  "float",      "forceescape", "format",     "groupby",  "indent",
                      "int",    "items",      "join",        "last",       "length",   "list",
                      "lower",  "map",        "max",         "min",        "pprint",   "random",
                      "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
                      "select", "selectattr", "slice",       "sort",       "string",   "striptags",
                      "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
                      "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr"});
}
bool t_test(Args& a) {
  return named_in(a, {"odd",     "even",   "divisibleby", "defined",  "undefined", "filter", "test",    "none",
                      "boolean", "false",  "true",        "integer",  "float",     "lower",  "upper",   "string",
                      "mapping", "number", "sequence",    "iterable", "callable",  "sameas", "escaped", "in",
                      "==",      "eq",     "equalto",     "!=",       "ne",        ">",      "gt",      "greaterthan",
                      ">=",      "ge",     "<",           "lt",       "lessthan",  "<=",     "le"});
}
bool t_upper(Args& a) { return py_case(input_text(a), false); }

// ---- globals ---------------------------------------------------------------------------------

Value g_range(Args& a) {
  if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3) a.ctx.fail("range() takes 1 to 3 integer arguments");
  for (const auto& v : a.pos)
    if (!integral(v)) a.ctx.fail("range(): '" + type_name(v) + "' object cannot be interpreted as an integer");
  const int64_t start = a.pos.size() > 1 ? as_int(a.pos[0]) : 0;
  const int64_t stop = as_int(a.pos.size() > 1 ? a.pos[1] : a.pos[0]);
  const int64_t step = a.pos.size() > 2 ? as_int(a.pos[2]) : 1;
  if (step == 0) a.ctx.fail("range() arg 3 must not be zero");
  const double n =
      std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
  if (n > kMaxRange)
    a.ctx.fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
  return range_value(start, stop, step);
}
std::shared_ptr<Dict> dict_of(Args& a, const char* what) {
  auto d = std::make_shared<Dict>();
  if (a.pos.size() > 1) a.ctx.fail(std::string(what) + " takes at most one positional argument");
  if (!a.pos.empty()) {
    const Value& m = a.pos[0];
    if (m.kind == Kind::dict && !m.ns && !m.object) {
      a.ctx.charge(static_cast<int64_t>(m.dict->items.size()));
      for (const auto& [k, v] : m.dict->items) d->set(k, v);
    } else  // an iterable of pairs
      for (const Value& pair : iterate(m, a.ctx, what)) {
        const auto kv = iterate(pair, a.ctx, what);
        if (kv.size() != 2)
          a.ctx.fail(std::string(what) + ": a sequence element has length " + std::to_string(kv.size()) +
                     "; 2 is required");
        d->set(dict_key(kv[0], *d, a.ctx), kv[1]);
      }
  }
  for (auto& [k, v] : a.kw) d->set(key(k), v);
  return d;
}
Value g_dict(Args& a) { return Value::of_dict(dict_of(a, "dict()")); }
// dict.fromkeys(iterable, value=None)
Value g_dict_fromkeys(Args& a) {
  arity(a, "dict.fromkeys()", 2, {});
  if (a.pos.empty()) a.ctx.fail("dict.fromkeys() takes at least 1 argument");
  const Value v = arg(a, 1, "value", Value::none());
  auto d = std::make_shared<Dict>();
  for (const Value& k : iterate(a.pos[0], a.ctx, "dict.fromkeys()")) d->set(dict_key(k, *d, a.ctx), v);
  return Value::of_dict(std::move(d));
}
// joiner(sep=', '): a function that gives '' when first called, sep after.
Value g_joiner(Args& a) {
  arity(a, "joiner()", 1, {"sep"});
  const Value sep = arg(a, 0, "sep", Value::string(", "));
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](Args&) {
    if (*used) return sep;
    *used = true;
    return Value::string("");
  });
}
// cycler(*items): an object whose next() gives the items in turn, reset() starts again and
// .current is the item next() gives next.
Value g_cycler(Args& a) {
  arity(a, "cycler()", a.pos.size(), {});
  if (a.pos.empty()) a.ctx.fail("cycler(): at least one item has to be provided");
  auto items = std::make_shared<const List>(a.pos);
  auto at = std::make_shared<size_t>(0);
  auto d = std::make_shared<Dict>();
  const std::weak_ptr<Dict> self = d;  // (the functions are the dict's own: not a cycle of owners)
  d->set("current", (*items)[0]);
  d->set("next", Value::function("Cycler.next", [items, at, self](Args&) {
           const Value v = (*items)[*at];
           *at = (*at + 1) % items->size();
           if (auto s = self.lock()) s->set("current", (*items)[*at]);
           return v;
         }));
  d->set("reset", Value::function("Cycler.reset", [items, at, self](Args&) {
           *at = 0;
           if (auto s = self.lock()) s->set("current", (*items)[0]);
           return Value::none();
         }));
  Value v = Value::of_dict(std::move(d));
  v.object = "Cycler";
  return v;
}
Value g_namespace(Args& a) {
  auto d = dict_of(a, "namespace()");
  for (const auto& [k, v] : d->items)
    if (k.rfind('_', 0) == 0) a.ctx.fail("namespace(): the attribute '" + k + "' is unsafe (it starts with '_')");
  Value v = Value::of_dict(std::move(d));
  v.ns = true;
  return v;
}
Value g_raise(Args& a) {
  if (a.pos.size() != 1 || !a.kw.empty()) a.ctx.fail("raise_exception() takes one argument");
  throw RaisedError(a.ctx.what() + ": " + to_str(a.pos[0], a.ctx));
}
Value g_strftime_now(Args& a) {
  if (a.pos.size() != 1 || a.pos[0].kind != Kind::string) a.ctx.fail("strftime_now() takes one string");
  if (a.pos[0].s.size() > 256) a.ctx.fail("strftime_now(): the format is longer than 256 bytes");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[4096];
  const size_t n = std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  static const std::map<std::string, FilterFn> filters = {{"abs", f_abs},
                                                          {"attr", f_attr},
                                                          {"capitalize", f_capitalize},
                                                          {"center", f_center},
                                                          {"count", f_length},
                                                          {"d", f_default},
                                                          {"default", f_default},
                                                          {"dictsort", f_dictsort},
                                                          {"batch", f_batch},
                                                          {"e", f_escape},
                                                          {"escape", f_escape},
                                                          {"forceescape", f_forceescape},
                                                          {"format", f_format},
                                                          {"groupby", f_groupby},
                                                          {"pprint", f_pprint},
                                                          {"slice", f_slice},
                                                          {"striptags", f_striptags},
                                                          {"truncate", f_truncate},
                                                          {"wordwrap", f_wordwrap},
                                                          {"first", f_first},
                                                          {"float", f_float},
                                                          {"indent", f_indent},
                                                          {"int", f_int},
                                                          {"items", f_items},
                                                          {"join", f_join},
                                                          {"last", f_last},
                                                          {"length", f_length},
                                                          {"list", f_list},
                                                          {"lower", f_lower},
                                                          {"map", f_map},
                                                          {"max", f_max},
                                                          {"min", f_min},
                                                          {"reject", f_reject},
                                                          {"rejectattr", f_rejectattr},
                                                          {"replace", f_replace},
                                                          {"reverse", f_reverse},
                                                          {"round", f_round},
                                                          {"safe", f_safe},
                                                          {"select", f_select},
                                                          {"selectattr", f_selectattr},
                                                          {"sort", f_sort},
                                                          {"string", f_string},
                                                          {"sum", f_sum},
                                                          {"title", f_title},
                                                          {"tojson", f_tojson},
                                                          {"trim", f_trim},
                                                          {"unique", f_unique},
                                                          {"upper", f_upper},
                                                          {"wordcount", f_wordcount}};
  auto it = filters.find(name);
  return it == filters.end() ? nullptr : it->second;
}

TestFn find_test(const std::string& name) {
  static const std::map<std::string, TestFn> tests = {{"boolean", t_boolean},
                                                      {"callable", t_callable},
                                                      {"defined", t_defined},
                                                      {"divisibleby", t_divisibleby},
                                                      {"eq", t_eq},
                                                      {"equalto", t_eq},
                                                      {"==", t_eq},
                                                      {"even", t_even},
                                                      {"escaped", t_escaped},
                                                      {"filter", t_filter},
                                                      {"test", t_test},
                                                      {"false", t_false},
                                                      {"float", t_float},
                                                      {"ge", t_ge},
                                                      {">=", t_ge},
                                                      {"gt", t_gt},
                                                      {">", t_gt},
                                                      {"greaterthan", t_gt},
                                                      {"in", t_in},
                                                      {"integer", t_integer},
                                                      {"iterable", t_iterable},
                                                      {"le", t_le},
                                                      {"<=", t_le},
                                                      {"lower", t_lower},
                                                      {"lt", t_lt},
                                                      {"<", t_lt},
                                                      {"lessthan", t_lt},
                                                      {"mapping", t_mapping},
                                                      {"ne", t_ne},
                                                      {"!=", t_ne},
                                                      {"none", t_none},
                                                      {"number", t_number},
                                                      {"odd", t_odd},
                                                      {"sameas", t_sameas},
                                                      {"sequence", t_sequence},
                                                      {"string", t_string},
                                                      {"true", t_true},
                                                      {"undefined", t_undefined},
                                                      {"upper", t_upper}};
  auto it = tests.find(name);
  return it == tests.end() ? nullptr : it->second;
}

Value global(const std::string& name) {
  static const std::map<std::string, Value (*)(Args&)> globals = {{"range", g_range},
                                                                  {"dict", g_dict},
                                                                  {"joiner", g_joiner},
                                                                  {"cycler", g_cycler},
                                                                  {"namespace", g_namespace},
                                                                  {"raise_exception", g_raise},
                                                                  {"strftime_now", g_strftime_now}};
  auto it = globals.find(name);
  if (it == globals.end()) return Value::undefined("");
  if (name != "dict") return Value::function(name, it->second);
  auto attrs = std::make_shared<Dict>();
  attrs->set("fromkeys", Value::function("dict.fromkeys", g_dict_fromkeys));
  return Value::function(name, it->second, std::move(attrs));
}

Value from_json(const nlohmann::ordered_json& j, Ctx& c, int depth) {
  if (depth > kMaxJsonDepth) c.fail("the context nests more than " + std::to_string(kMaxJsonDepth) + " deep");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX))
        c.fail("the context's integer " + std::to_string(u) + " is past 64 bits");
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      c.charge(static_cast<int64_t>(j.size()));
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(from_json(x, c, depth + 1));
      return Value::list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      c.charge(static_cast<int64_t>(j.size()));
      auto d = std::make_shared<Dict>();
      d->items.reserve(j.size());
      for (const auto& [k, x] : j.items()) d->set(key(k), from_json(x, c, depth + 1));
      return Value::of_dict(std::move(d));
    }
    default:
      c.fail("the context holds a value JSON cannot (" + std::string(j.type_name()) + ")");
  }
}

}  // namespace qkv::text::jinja::detail
