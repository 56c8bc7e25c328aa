// qkv::Error — the one exception type of the library. Its message names the op and the shapes:
//   matmul: [2,3,4] x [5,6]: inner dimensions 4 and 5 differ
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace qkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// "[2,3,4]"
std::string shape_str(const std::vector<int64_t>& shape);

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// QKV_CHECK(cond, "op: ", details...) throws qkv::Error with the concatenated message.
#define QKV_CHECK(cond, ...)                                        \
  do {                                                              \
    if (!(cond)) throw ::qkv::Error(::qkv::detail::concat(__VA_ARGS__)); \
  } while (0)

}  // namespace qkv
