// The values a Jinja template computes with, and the render's state (internal to jinja.cpp and
// jinja_values.cpp). A Value is what a Python object is to jinja2: undefined, None, a bool, an int
// (64-bit here), a float, a str (UTF-8, measured in code points), a list or tuple, a dict (keys in
// insertion order; a namespace() or the loop object is a dict marked so), or a function (a macro, a
// global, a bound method).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/text/jinja.h"

namespace qkv::text::jinja::detail {

enum class Kind { undefined, none, boolean, integer, real, string, list, dict, function };

struct Value;
struct Dict;
struct Args;
using List = std::vector<Value>;

struct Function {
  std::string name;
  std::function<Value(Args&)> impl;
  std::shared_ptr<Dict> attrs;  // its attributes (a macro's name and arguments, dict.fromkeys), or none
};

struct Value {
  Kind kind = Kind::undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                  // a string; an undefined's UndefinedError message
  std::shared_ptr<const List> l;  // a list or tuple
  std::shared_ptr<Dict> dict;     // a dict (never changed once built), a namespace (changed by set)
  std::shared_ptr<const Function> fn;
  bool tuple = false;            // a list printed as a tuple
  bool ns = false;               // a namespace(): attributes only
  const char* object = nullptr;  // another of jinja2's objects, attributes only (the loop, a cycler): its
                                 // class's name; a hidden item "\x02" "call" is what calling it runs
  bool safe = false;             // a string marked safe (markupsafe's Markup: `|safe`, `|escape`): a plain string
                                 // added to it with + is HTML-escaped, as Python's + on a Markup does
  bool generator = false;        // what select, reject, selectattr, rejectattr and map give: no len(), not reversible
  bool range = false;            // what range() gives: a list that prints as range(a, b[, c]), its text in s
  bool group = false;            // a groupby's (grouper, list) tuple: .grouper and .list name its items

  static Value undefined(std::string message) {
    Value v;
    v.s = std::move(message);
    return v;
  }
  static Value none() { return make(Kind::none); }
  static Value boolean(bool b) {
    Value v = make(Kind::boolean);
    v.b = b;
    return v;
  }
  static Value integer(int64_t i) {
    Value v = make(Kind::integer);
    v.i = i;
    return v;
  }
  static Value real(double f) {
    Value v = make(Kind::real);
    v.f = f;
    return v;
  }
  static Value string(std::string s) {
    Value v = make(Kind::string);
    v.s = std::move(s);
    return v;
  }
  static Value list(List l) {
    Value v = make(Kind::list);
    v.l = std::make_shared<const List>(std::move(l));
    return v;
  }
  static Value of_dict(std::shared_ptr<Dict> d) {
    Value v = make(Kind::dict);
    v.dict = std::move(d);
    return v;
  }
  static Value function(std::string name, std::function<Value(Args&)> impl, std::shared_ptr<Dict> attrs = nullptr) {
    Value v = make(Kind::function);
    v.fn = std::make_shared<const Function>(Function{std::move(name), std::move(impl), std::move(attrs)});
    return v;
  }

 private:
  static Value make(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
};

// Keys in insertion order, found through an index (a context's dict may hold many). A key is a str
// or an int ({0: 'a'}): an int is stored as "\x01" and its digits, a str that starts with "\x01"
// with one more "\x01" before it (key() and key_value() convert); None as "\x01" and N, a bool as
// "\x01" and T or F, a float as "\x01" and R and its repr (dict_key() makes them: equal numbers one key).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  std::unordered_map<std::string, size_t> index;  // (built past 16 keys; a loop object has 12)
  const Value* find(const std::string& key) const {
    if (index.empty()) {
      for (const auto& [k, v] : items)
        if (k == key) return &v;
      return nullptr;
    }
    auto it = index.find(key);
    return it == index.end() ? nullptr : &items[it->second].second;
  }
  void set(const std::string& key, Value v) {
    if (Value* old = const_cast<Value*>(find(key))) {
      *old = std::move(v);
      return;
    }
    items.emplace_back(key, std::move(v));
    if (!index.empty())
      index.emplace(key, items.size() - 1);
    else if (items.size() > 16)
      for (size_t k = 0; k < items.size(); ++k) index.emplace(items[k].first, k);
  }
};

inline std::string key(const std::string& s) { return !s.empty() && s[0] == '\x01' ? "\x01" + s : s; }
inline std::string key(int64_t i) { return "\x01" + std::to_string(i); }
inline Value key_value(const std::string& k) {
  if (k.empty() || k[0] != '\x01') return Value::string(k);
  if (k.size() > 1 && k[1] == '\x01') return Value::string(k.substr(1));
  if (k == "\x01N") return Value::none();
  if (k == "\x01T" || k == "\x01"
                           "F")
    return Value::boolean(k[1] == 'T');
  if (k.size() > 1 && k[1] == 'R') return Value::real(std::strtod(k.c_str() + 2, nullptr));
  return Value::integer(std::stoll(k.substr(1)));
}

class Ctx;

// A call's arguments (a filter's and a test's input is pos[0]).
struct Args {
  Ctx& ctx;
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

using FilterFn = Value (*)(Args&);
using TestFn = bool (*)(Args&);

enum class Flow { normal, brk, cont };

struct Expr {
  int line = 0;
  virtual ~Expr() = default;
  virtual Value eval(Ctx& c) const = 0;
};

// The render: variables in frames (a for loop's own; a macro's, which sees its frames and the
// template's top level), the output being written, the line being run, and the limits.
class Ctx {
 public:
  Ctx(const std::string& what, const Limits& limits) : what_(what), limits_(limits), frames_(1), scopes_{{0, -1, 0}} {}

  int line = 0;
  Flow flow = Flow::normal;

  [[noreturn]] void fail(const std::string& msg) const;
  void step(int at) {
    line = at;
    if (++steps_ > limits_.max_steps)
      fail("the render ran past " + std::to_string(limits_.max_steps) + " steps (the limit of a template's work)");
  }
  // Work proportional to a value's size (a list scanned, a string decoded), counted as steps.
  void charge(int64_t work) {
    steps_ += work;
    if (steps_ > limits_.max_steps)
      fail("the render ran past " + std::to_string(limits_.max_steps) + " steps (the limit of a template's work)");
  }
  void write(std::string_view s) {
    if (static_cast<int64_t>(out_->size() + s.size()) > limits_.max_output_bytes)
      fail("the output would pass " + std::to_string(limits_.max_output_bytes) +
           " bytes (the limit of a template's output)");
    out_->append(s);
  }
  // What `f` writes, captured instead of written.
  template <class F>
  std::string capture(F&& f) {
    std::string buffer;
    std::string* saved = out_;
    out_ = &buffer;
    f();
    out_ = saved;
    return buffer;
  }
  Value lookup(const std::string& name) const;
  void set(const std::string& name, Value v);
  void push_frame() { frames_.emplace_back(); }
  void pop_frame() { frames_.pop_back(); }
  // Where a call block stands: its scope and frames, which its caller() sees (a closure).
  struct Closure {
    int scope;
    size_t top;
  };
  Closure here() const { return {static_cast<int>(scopes_.size()) - 1, frames_.size()}; }
  // A macro's body sees its own frames and the template's top level; a caller()'s, its own and its
  // call block's. Each counts toward the limit of nested calls.
  void enter_macro(const std::string& name) { enter(name, {0, 1}); }
  void enter_caller(const Closure& at) { enter("caller", at); }
  void leave_macro() {
    frames_.pop_back();
    scopes_.pop_back();
    --depth_;
  }
  // A recursive for loop's loop(…): counted with the nested calls.
  void enter_recursion();
  void leave_recursion() { --depth_; }
  const std::string& what() const { return what_; }

 private:
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
  };
  const std::string& what_;
  const Limits& limits_;
  struct Scope {
    size_t base;       // its first frame
    int outer;         // the scope whose frames it sees next (-1: none)
    size_t outer_top;  // (those below this one)
  };
  void enter(const std::string& name, const Closure& outer);
  std::vector<Frame> frames_;
  std::vector<Scope> scopes_;  // the template's, then one per macro or caller() being run
  int depth_ = 0;              // macros, callers and recursive loops being run
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
};

// ---- Python's semantics (jinja_values.cpp) ----
bool truthy(const Value& v);
std::string type_name(const Value& v);
std::string to_str(const Value& v, Ctx& c);  // str(v)
std::vector<Value> iterate(const Value& v, Ctx& c, const char* where);
Value get_attr(const Value& obj, const std::string& name, Ctx& c);
Value get_item(const Value& obj, const Value& key, Ctx& c);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step, Ctx& c);
Value call(const Value& fn, Args& a);
Value unary(char op, const Value& v, Ctx& c);
Value binary(const std::string& op, const Value& x, const Value& y, Ctx& c);
bool compare(const std::string& op, const Value& x, const Value& y, Ctx& c);
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
Value global(const std::string& name);
// The key of `k` in `d` as Python's dict hashes it (equal numbers — 1, 1.0, True — are one key: the
// one `d` holds, else k's own); an unhashable value is an error. dict_find: the value it keys, or null.
std::string dict_key(const Value& k, const Dict& d, Ctx& c);
const Value* dict_find(const Dict& d,
                       const Value& k);  // range, dict, namespace, raise_exception, strftime_now; else undefined
Value from_json(const nlohmann::ordered_json& j, Ctx& c, int depth);

// ---- UTF-8 text as Python's str sees it ----
bool py_space(char32_t cp);                            // str.isspace()
bool py_space_at(std::string_view s, size_t i);        // the code point at byte i
size_t next_cp(std::string_view s, size_t i);          // the byte after the code point at i
size_t py_rstrip_end(std::string_view s);              // len(s.rstrip()) in bytes
size_t py_lstrip_begin(std::string_view s, size_t i);  // past the whitespace from byte i

}  // namespace qkv::text::jinja::detail
