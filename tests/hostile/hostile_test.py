#!/usr/bin/env python3
"""Hostile inputs against the real `qkv` command and Python module (issue 43; docs/FUZZING.md).

Generates a few hundred hostile inputs in a temp dir (tests/hostile/hostile_cases.py: broken model
files of every registered model type, training configs with out-of-range values, pictures that lie,
flags at their limits, special files as outputs, Python values) and runs each case in a pool of 2
processes, each under a timeout and an address-space limit. A case passes when the command
  - exits 1 (0 too where the value is legitimately valid; 2 for a flag CLI11 rejects as usage),
    never on a signal, never past the timeout, never out of the address-space limit;
  - ends its stderr with one line naming the input (the file, the config key or the flag);
  - leaves no output file behind on failure, and special files / planted links as they were.
A Python case must end in a Python exception (or a correct result where the value is valid).

    tests/hostile/hostile_test.py --qkv build/qkv [--python build/venv/bin/python] [--list] [--only PATTERN]
"""
import argparse
import concurrent.futures
import errno
import fnmatch
import os
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile_cases  # noqa: E402

REPO = hostile_cases.REPO
PY_EXC = {"TypeError", "ValueError", "RuntimeError", "OverflowError", "MemoryError", "Error", "IndexError",
          "UnicodeEncodeError", "UnicodeError", "FileNotFoundError", "OSError", "IsADirectoryError",
          "RecursionError", "KeyError", "NotImplementedError"}


def limits(mem_bytes, plant=()):
    def apply():
        for target, victim in plant:  # a link at the name qkv's atomic write picks (<target>.tmp-<pid>)
            os.symlink(victim, f"{target}.tmp-{os.getpid()}")
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.setsid()
    return apply


def file_kind(p):
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return "absent"
    if stat.S_ISLNK(st.st_mode):
        return "link:" + os.readlink(p)
    if stat.S_ISCHR(st.st_mode):
        return "chr"
    if stat.S_ISFIFO(st.st_mode):
        return "fifo"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "file"


def last_line(text):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def run_case(case, qkv, python, timeout, mem):
    try:
        return run_one(case, qkv, python, timeout, mem)
    except Exception as e:  # the harness's own trouble is a failing case, not a crash of the suite
        return dict(case=case, rc=None, line="", problems=[f"harness: {type(e).__name__}: {e}"], secs=0.0,
                    argv=[a for a in case["argv"]])


class Partner(threading.Thread):
    """A FIFO's other end, for a command that reads or writes one in place: {"write": path, "data": bytes}
    opens it for writing once the command has opened it for reading and writes data; {"read": path} opens it
    for reading and drains it until the command has exited. Non-blocking opens and polls throughout, so a
    command that never opens the FIFO leaves the partner waiting for nothing (`stop`)."""

    def __init__(self, spec):
        super().__init__(daemon=True)
        self.spec, self.got, self.wrote, self.error = spec, b"", False, None
        self.done = threading.Event()  # set once the command has exited
        self.fd = None
        if "read" in spec:  # a reader is there before the command starts: its open for writing goes through
            self.fd = os.open(spec["read"], os.O_RDONLY | os.O_NONBLOCK)

    def run(self):
        try:
            self.read() if "read" in self.spec else self.write()
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            if self.fd is not None:
                os.close(self.fd)

    def write(self):
        path, data = self.spec["write"], self.spec["data"]
        while self.fd is None:  # ENXIO until the command opens its end for reading
            try:
                self.fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                if self.done.wait(0.01):
                    return
        os.set_blocking(self.fd, True)
        try:
            os.write(self.fd, data)  # a few bytes: well within the pipe's buffer
            self.wrote = True
        except BrokenPipeError:
            pass

    def read(self):
        while True:
            exited = self.done.is_set()
            r, _, _ = select.select([self.fd], [], [], 0.02)
            chunk = b""
            if r:
                try:
                    chunk = os.read(self.fd, 1 << 16)
                except BlockingIOError:
                    pass
                self.got += chunk
            if exited and not chunk:
                return
            if r and not chunk:
                time.sleep(0.01)  # no writer (yet, or any more): EOF until the command opens it


def run_one(case, qkv, python, timeout, mem):
    argv = [qkv if a == "{qkv}" else python if a == "{python}" else a for a in case["argv"]]
    env = dict(os.environ, OMP_NUM_THREADS="1", GOMP_SPINCOUNT="30000", LC_ALL="C.UTF-8")
    env.update(case["env"])
    t0 = time.monotonic()
    partner = Partner(case["partner"]) if case["partner"] else None
    want_out = case["stdout_lines"] is not None
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if want_out else subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env, cwd=REPO, preexec_fn=limits(mem, case["plant"]))
    if partner:
        partner.start()
    timed_out = False
    out = b""
    try:
        out, err = p.communicate(timeout=case["timeout"] or timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
    if partner:
        partner.done.set()
        partner.join(10)
    secs = time.monotonic() - t0
    err = err.decode("utf-8", "replace")
    rc = p.returncode
    line = last_line(err)
    problems = []
    if timed_out:
        problems.append(f"hung: killed after {case['timeout'] or timeout:.0f} s")
    elif rc < 0:
        problems.append(f"signal {signal.Signals(-rc).name}")
    elif case["python"]:
        if line == "OK" and rc == 0:
            if case["expect"] != "any":
                problems.append("no exception raised")
        elif line.startswith("EXC ") and rc == 1:
            exc = line[4:].split(":", 1)[0]
            if exc not in PY_EXC:
                problems.append(f"exception {exc} (expected TypeError/ValueError/RuntimeError/...)")
            elif exc == "AssertionError":
                problems.append("wrong result")
        else:
            problems.append(f"exit {rc} without a Python exception")
    else:
        ok_codes = ({0} if case["expect"] == "pass" else
                    {1} | ({0} if case["expect"] == "any" else set()) | ({2} if case["usage"] else set()))
        if rc not in ok_codes:
            problems.append(f"exit {rc}" + (" (expected 0)" if case["expect"] == "pass" else
                                             " (expected 1)" if rc != 0 else " (the input was accepted)"))
        if rc != 0 and rc in ok_codes | {105, 106, 107, 108, 109} and case["names"]:
            if not any(n and n in line for n in case["names"]):
                problems.append("last stderr line names no input")
            elif not (line.startswith("qkv") or "error" in line.lower() or rc == 2):
                problems.append("last stderr line is not an error message")
        if rc != 0:
            for g in case["gone"]:
                if os.path.lexists(g):
                    problems.append(f"left {os.path.relpath(g, os.path.dirname(os.path.dirname(g)))} behind")
    if partner and not timed_out:
        if partner.is_alive():
            problems.append("the FIFO's partner did not finish")
        elif partner.error:
            problems.append(f"the FIFO's partner: {partner.error}")
        elif "read" in case["partner"] and rc == 0 and not partner.got:
            problems.append("nothing came out through the FIFO")
        elif "write" in case["partner"] and not partner.wrote:
            problems.append("the command never opened the FIFO for reading")
    if want_out and rc == 0 and not timed_out:
        n = len(out.decode("utf-8", "replace").splitlines())
        if n != case["stdout_lines"]:
            problems.append(f"{n} lines on stdout (expected {case['stdout_lines']})")
    for path, want in case["kinds"].items():
        if want.startswith("content:"):
            try:
                got = open(path, "rb").read().decode("utf-8", "replace")
            except OSError as e:
                got = str(e)
            if got != want[8:]:
                problems.append(f"{path} was rewritten")
        else:
            got = file_kind(path)
            if got != want:
                problems.append(f"{os.path.basename(path)} became {got} (was {want})")
    for base in case["no_temps"]:  # no temporary file left beside an output (planted links aside)
        d, stem = os.path.split(base)
        left = [n for n in os.listdir(d) if n.startswith(stem + ".tmp") and not os.path.islink(os.path.join(d, n))]
        if left:
            problems.append(f"left {left[0]} behind")
    return dict(case=case, rc=rc, line=line, problems=problems, secs=secs, argv=argv)


def describe(r, tmp, qkv, python):
    def short(a):
        a = a.replace(tmp, "$T").replace(qkv, "qkv").replace(python or "\0", "python")
        if "\n" in a:
            a = a.split("CODE = ", 1)[-1].split("\n", 1)[0]
        return a if len(a) <= 60 else a[:57] + "..."
    cmd = " ".join(short(a) for a in r["argv"])
    line = r["line"].replace(tmp, "$T")
    if len(line) > 200:
        line = line[:197] + "..."
    return f"FAIL {r['case']['name']} | {cmd} | {'; '.join(r['problems'])} | {line!r}"


def venv_python(args):
    if args.python == "none":
        return None, "--python none"
    py = args.python or os.path.join(REPO, "build", "venv", "bin", "python")
    if not os.path.exists(py):
        return None, f"{py} is missing (bash scripts/test_python.sh makes it)"
    r = subprocess.run([py, "-c", "import qkv, os; print(os.path.dirname(qkv._qkv.__file__))"], capture_output=True,
                       text=True, cwd="/")
    if r.returncode != 0:
        if args.build_venv:
            b = subprocess.run(["flock", "/tmp/qkv-pip.lock", py, "-m", "pip", "install", "-q",
                                "--disable-pip-version-check", "."], cwd=REPO)
            if b.returncode == 0:
                return py, ""
        return None, f"{py} cannot import qkv ({last_line(r.stderr)})"
    return py, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(REPO, "build", "qkv"))
    ap.add_argument("--python", help="the interpreter with the qkv module (default build/venv/bin/python; none: skip)")
    ap.add_argument("--build-venv", action="store_true", help="pip install . into it when it cannot import qkv")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--only", action="append", help="run the cases whose name matches (glob or substring; repeatable)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    ap.add_argument("--mem-gib", type=float, default=3.0, help="address-space limit per case")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case's result")
    args = ap.parse_args()
    qkv = os.path.abspath(args.qkv)
    if not os.access(qkv, os.X_OK):
        print(f"hostile: {qkv} is not an executable", file=sys.stderr)
        return 1
    python, why = (None, "") if args.list else venv_python(args)
    tmp = tempfile.mkdtemp(prefix="qkv-hostile-")
    try:
        cases, skipped = hostile_cases.make_cases(tmp, qkv, want_python=True)
        if python is None and not args.list:
            skipped.append(f"{sum(c['python'] for c in cases)} Python cases skipped: {why}")
            cases = [c for c in cases if not c["python"]]
        if args.only:
            cases = [c for c in cases if any(fnmatch.fnmatchcase(c["name"], p) or p in c["name"] for p in args.only)]
        if args.list:
            for c in cases:
                print(c["name"], "|", " ".join(a.replace(tmp, "$T") for a in c["argv"])[:200].replace("\n", "\\n"))
            print(f"{len(cases)} cases")
            return 0
        for s in skipped:
            print("skip:", s, flush=True)
        results = []
        lock = threading.Lock()
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futs = [pool.submit(run_case, c, qkv, python, args.timeout, int(args.mem_gib * (1 << 30))) for c in cases]
            for fut in concurrent.futures.as_completed(futs):
                r = fut.result()
                with lock:
                    results.append(r)
                    if args.verbose or r["problems"]:
                        print(describe(r, tmp, qkv, python) if r["problems"] else
                              f"ok   {r['case']['name']} ({r['secs']:.1f} s, exit {r['rc']})", flush=True)
        results.sort(key=lambda r: r["case"]["name"])
        failed = [r for r in results if r["problems"]]
        slow = sorted(results, key=lambda r: -r["secs"])[:5]
        per = {}
        for r in results:
            k = "/".join(r["case"]["name"].split("/")[:2])
            per[k] = per.get(k, 0.0) + r["secs"]
        print("\nseconds per group: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(per.items(), key=lambda x: -x[1])))
        print(f"slowest: " + ", ".join(f"{r['case']['name']} {r['secs']:.1f} s" for r in slow))
        cats = {}
        for r in results:
            c = cats.setdefault(r["case"]["name"].split("/")[0], [0, 0])
            c[bool(r["problems"])] += 1
        print(f"{time.monotonic() - t0:.0f} s; by category (passed/failed): "
              + ", ".join(f"{k} {p}/{f}" for k, (p, f) in sorted(cats.items())))
        print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
        for r in failed:
            print(describe(r, tmp, qkv, python))
        return 1 if failed else 0
    finally:
        if args.keep:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
