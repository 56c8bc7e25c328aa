"""Signals while qkv computes (kernels/cpu/onednn_call.h). oneDNN 2.6's f32 GEMM kernels point the
stack pointer at a heap workspace while they run, so a signal that Python's own C-level handler took
inside one had its frame written over the heap (the Ctrl-C that crashed `qkv train` now and then).
A child process multiplies matrices while this process sends it a handled signal every ~100 µs:
every product keeps its value, the child lives, and its handler ran."""
import os
import signal
import subprocess
import sys
import time

CHILD = r"""
import signal, time
import qkv
handled = 0
def on_signal(signum, frame):
    global handled
    handled += 1
signal.signal(signal.SIGUSR1, on_signal)
qkv.manual_seed(0)
a, b = qkv.randn([192, 192]), qkv.randn([192, 192])  # m, n < 1000: oneDNN's "no copy" kernel
want = (a @ b).numpy()
print("ready", flush=True)
wrong = calls = 0
end = time.monotonic() + 2.0
while time.monotonic() < end:
    wrong += int(((a @ b).numpy() != want).any())
    calls += 1
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
print(calls, wrong, handled, flush=True)
"""


def test_signals_during_products_leave_the_process_and_the_products_intact():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    end = time.monotonic() + 1.5  # stops before the child's loop does
    while time.monotonic() < end and child.poll() is None:
        os.kill(child.pid, signal.SIGUSR1)
        time.sleep(0.0001)
    out = child.stdout.read().split()
    child.wait()
    assert child.returncode == 0, f"the child died (status {child.returncode})"
    calls, wrong, handled = map(int, out)
    assert wrong == 0, f"{wrong} of {calls} products changed"
    assert calls > 10 and handled > 0
