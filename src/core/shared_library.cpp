#include "qkv/core/shared_library.h"

#include <dlfcn.h>

#include <utility>

#include "qkv/core/error.h"

namespace qkv {

SharedLibrary::SharedLibrary(std::string what, std::initializer_list<const char*> names, const std::string& hint,
                             bool global)
    : what_(std::move(what)) {
  std::string tried, why;
  for (const char* n : names) {
    handle_ = dlopen(n, RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
    if (handle_) {
      name_ = n;
      return;
    }
    const char* e = dlerror();
    tried += tried.empty() ? n : detail::concat(", ", n);
    why = e ? e : "no reason given";
  }
  throw Error(detail::concat("cannot open ", what_, " (", tried, "): ", why, " — ", hint));
}

void* SharedLibrary::symbol(const char* name) const {
  void* p = dlsym(handle_, name);
  QKV_CHECK(p, what_, " (", name_, ") has no ", name, ": another version than the one qkv was built against");
  return p;
}

}  // namespace qkv
