#include "kernels/cpu/onednn_call.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>

#include "qkv/core/thread_budget.h"

namespace qkv::kernels::cpu {

namespace {

// Every signal but the faults a thread's own instructions raise (held, they would kill the process
// without a word).
sigset_t held_signals() {
  sigset_t s;
  sigfillset(&s);
  for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&s, fault);
  return s;
}
const sigset_t g_held = held_signals();

// The OpenMP threads of this thread's team, up to `n` of them, hold the signals from now on (libgomp
// keeps a calling thread's workers and reuses them; a larger team adds threads, held when it first
// appears here).
void hold_on_team(int n) {
  thread_local int held = 1;  // the team size whose workers hold them
  if (n <= held || omp_in_parallel()) return;
#pragma omp parallel num_threads(n)
  if (omp_get_thread_num() != 0) pthread_sigmask(SIG_BLOCK, &g_held, nullptr);
  held = n;
}

}  // namespace

OneDnnCall::OneDnnCall() {
  // the count a primitive made earlier may run on (the count asked for), or the next region's
  hold_on_team(std::max(omp_get_max_threads(), requested_threads()));
  pthread_sigmask(SIG_BLOCK, &g_held, &before_);
}

OneDnnCall::~OneDnnCall() { pthread_sigmask(SIG_SETMASK, &before_, nullptr); }

}  // namespace qkv::kernels::cpu
