"""The bench scripts' progress bar: each measurement (a fresh process of qkv or of a peer) is one
step of a tqdm bar on stderr — rate and ETA over the measurements, the one running named after the
bar — so a run of minutes is never silent; the tables stay on stdout.

    bench_progress.start(total, "attention")  # the measurements the run will make
    with bench_progress.measuring("qkv L=512"):
        ...                                     # one measurement
    bench_progress.write(row)                   # a table line (stdout) as it is ready
    bench_progress.close()

tqdm comes with transformers (pip) and as Debian's python3-tqdm (scripts/setup.sh --with-torch).
Without it, a plain line per measurement says the same."""
import contextlib
import sys
import time

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - the line form below
    tqdm = None


class _Lines:
    """tqdm's calls this file uses, as one stderr line per step: "attention 3/12 [00:41<01:30] qkv L=512"."""

    def __init__(self, total, desc):
        self.total, self.desc, self.n, self.start, self.what = total, desc, 0, time.monotonic(), ""

    @staticmethod
    def _clock(s):
        s = int(s)
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"

    def _line(self):
        t = time.monotonic() - self.start
        eta = self._clock(t / self.n * (self.total - self.n)) if self.n and self.total else "?"
        print(f"{self.desc} {self.n}/{self.total or '?'} [{self._clock(t)}<{eta}] {self.what}",
              file=sys.stderr, flush=True)

    def set_postfix_str(self, what):
        self.what = what
        self._line()

    def update(self, n=1):
        self.n += n

    def close(self):
        self.what = "done"
        self._line()


class Bar:
    def __init__(self, total, desc):
        # (a log, not a terminal: a line every 10 s rather than a redraw each step)
        self._bar = (tqdm(total=total, desc=desc, unit="run", file=sys.stderr, dynamic_ncols=True,
                          mininterval=0.1 if sys.stderr.isatty() else 10)
                     if tqdm else _Lines(total, desc))

    def running(self, what):
        """Names the measurement that starts now."""
        self._bar.set_postfix_str(what)

    def update(self, n=1):
        self._bar.update(n)

    def write(self, line):
        """Prints a line of the table (stdout) without breaking the bar."""
        if tqdm:
            tqdm.write(line, file=sys.stdout)
            sys.stdout.flush()
        else:
            print(line, flush=True)

    def close(self):
        self._bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_bar = None  # the run's bar (start); without one, measuring() and write() are plain


def start(total, desc):
    global _bar
    _bar = Bar(total, desc)
    return _bar


@contextlib.contextmanager
def measuring(what):
    if _bar:
        _bar.running(what)
    yield
    if _bar:
        _bar.update()


def write(line):
    if _bar:
        _bar.write(line)
    else:
        print(line, flush=True)


def close():
    global _bar
    if _bar:
        _bar.close()
    _bar = None
