// A oneDNN call that no signal handler can interrupt. oneDNN 2.x's f32 GEMM kernels
// (jit_avx512_common_gemm_f32, jit_avx_gemm_f32: dnnl_sgemm, and the GEMM-based matmul, inner product
// and convolution) point the stack pointer at a workspace on the heap while they run; a signal
// handled on that thread meanwhile has its frame written there, over whatever the heap holds next
// (oneDNN issue 4845, fixed in 3.11.2 and 3.12; Debian 12 ships 2.6). A Ctrl-C under `qkv train` —
// whose handler only sets a flag — then crashed it a few steps later in malloc or free (1 run in
// 15–25 beside a busy core, where the signal more often lands inside a GEMM). Any process that installs
// a handler is exposed: Python's Ctrl-C, a profiler's timer.
//
// So for the call, this thread holds every signal a handler could take (pthread_sigmask; a Ctrl-C
// that arrives meanwhile is pending, and handled as the call returns), and the OpenMP threads of its
// team — which run the GEMM's other pieces — hold them for good, set once per calling thread the
// first time its team reaches a size: a signal sent to the process goes to a thread that does not
// hold it (the caller, between calls). Faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS)
// are never held. Cost: two system calls (0.4 µs here) for the outermost scope on a thread, none
// inside one or on a worker: a kernel that calls oneDNN per tile or per time step (flash attention,
// the recurrent scans, batched GEMMs) opens one scope around its loop.
#pragma once

#include <signal.h>

namespace qkv::kernels::cpu {

class OneDnnCall {
 public:
  OneDnnCall();
  ~OneDnnCall();
  OneDnnCall(const OneDnnCall&) = delete;
  OneDnnCall& operator=(const OneDnnCall&) = delete;

 private:
  bool active_;
  sigset_t before_;
};

}  // namespace qkv::kernels::cpu
