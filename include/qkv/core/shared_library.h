// A C library opened (dlopen) the first time qkv needs it, instead of linked. A linked library is
// loaded, relocated and initialized by every process that loads qkv — resident memory and start-up
// time — whether or not the process ever calls it: cuBLAS cost ~210 MB (kernels/cuda/cublas_library.h),
// the PNG and picture stack (librsvg, cairo, gdk-pixbuf and their ~50 dependencies) ~8 MB of every
// `qkv translate` that never draws a picture (docs/BENCHMARKS.md, issue 47).
//
// The functions are taken by their own declarations (the library's headers are still compiled
// against), so a call through one is type-checked as a linked call would be:
//
//   static const SharedLibrary lib("librsvg (SVG to PNG)", {"librsvg-2.so.2"}, "apt-get install librsvg2-2");
//   auto render = lib.function<decltype(&::rsvg_handle_render_document)>("rsvg_handle_render_document");
#pragma once

#include <initializer_list>
#include <string>

namespace qkv {

class SharedLibrary {
 public:
  // Opens the first of `names` (sonames, or paths) that loads. None: a qkv::Error naming `what`,
  // every name tried, the loader's reason, and `hint` (how to install it).
  // global: its symbols serve the libraries it loads later (RTLD_GLOBAL; Open MPI's plugins need it).
  SharedLibrary(std::string what, std::initializer_list<const char*> names, const std::string& hint,
                bool global = false);
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  // (never closed: function pointers taken from it stay valid for the process's life)

  // The function `name`, as F (a function pointer type): a qkv::Error naming the library if it has
  // none (another version than the one qkv was built against).
  template <class F>
  F function(const char* name) const {
    return reinterpret_cast<F>(symbol(name));
  }
  template <class F>
  void bind(F& fn, const char* name) const {
    fn = function<F>(name);
  }
  const std::string& name() const { return name_; }  // the name it was opened by
  // The address of `name` (a function or a variable): a qkv::Error as above if it has none.
  void* symbol(const char* name) const;

 private:
  void* handle_ = nullptr;
  std::string what_, name_;
};

}  // namespace qkv
