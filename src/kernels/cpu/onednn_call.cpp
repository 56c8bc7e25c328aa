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

thread_local bool t_held_for_good = false;  // an OpenMP worker that holds them for good
thread_local int t_depth = 0;                // OneDnnCall scopes open on this thread

// The OpenMP threads of this thread's team, up to `n` of them, hold the signals from now on (libgomp
// keeps a calling thread's workers and reuses them; a larger team adds threads, held when it first
// appears here).
void hold_on_team(int n) {
  thread_local int held = 1;  // the team size whose workers hold them
  if (n <= held || omp_in_parallel()) return;
#pragma omp parallel num_threads(n)
  if (omp_get_thread_num() != 0) {
    pthread_sigmask(SIG_BLOCK, &g_held, nullptr);
    t_held_for_good = true;
  }
  held = n;
}

}  // namespace

// Inside another scope, or on a worker that holds them for good: nothing to do (a kernel that calls
// oneDNN per tile or per time step takes one scope around its loop: a thread-local test a call).
OneDnnCall::OneDnnCall() : active_(!t_held_for_good && t_depth == 0) {
  ++t_depth;
  if (!active_) return;
  // the count a primitive made earlier may run on (the count asked for), or the next region's
  hold_on_team(std::max(omp_get_max_threads(), requested_threads()));
  pthread_sigmask(SIG_BLOCK, &g_held, &before_);
}

OneDnnCall::~OneDnnCall() {
  --t_depth;
  if (active_) pthread_sigmask(SIG_SETMASK, &before_, nullptr);
}

}  // namespace qkv::kernels::cpu
