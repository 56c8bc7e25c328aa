#!/usr/bin/env python3
"""`qkv serve` under load (issue 28): N requests from C concurrent clients over loopback, against
`qkv translate` (the CLI, batched) on the same sentences, in one run.

    python3 bench/serve_load.py [--requests 1000] [--clients 64] [--repeats 3] [--threads 2]
        [--device cuda] [--qkv "bash .gpu/run.sh qkv"]   (on a lent GPU: docs/CUDA.md)

The sentences: --requests English sentences of data/tatoeba-en-fr drawn with a fixed seed. Each
round runs the CLI on all of them (`qkv translate --batch-size 32 --stats`, beam 4: its batched
throughput as it reports it, model loading excluded, and its translations), then a fresh `qkv serve` with C client threads, each sending
one sentence per request on a kept-alive connection until every sentence is sent; rounds
alternate CLI and server. Checked: no request lost or failed, every response equal to the CLI's
line. Reported: sentences/s of both (median of the rounds), the ratio server/CLI (goal >= 0.8),
the server's request latency p50/p90/p99 (all rounds pooled), and the mean batch it formed
(/metrics: qkv_sentences_total / qkv_batches_total).

Loopback only; bounded in count (--requests) and time (--timeout per request).
"""
import argparse
import gzip
import http.client
import json
import os
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QKV = [os.path.join(ROOT, "build", "qkv")]  # the command (--qkv)
DEVICE = []                                  # --device DEV for both, where asked


def sentences(n, seed=2026):
    with gzip.open(os.path.join(ROOT, "data", "tatoeba-en-fr", "fra.txt.gz"), "rt", encoding="utf-8") as f:
        english = sorted({line.split("\t")[0].strip() for line in f if "\t" in line})
    return random.Random(seed).sample(english, n)


def run_cli(lines, threads, beam, batch):
    with tempfile.NamedTemporaryFile("w", suffix=".en", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(QKV + ["translate", "--input", path, "--beam", str(beam), "--batch-size", str(batch),
                                "--threads", str(threads), "--stats"] + DEVICE, cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True)
    os.unlink(path)
    # the translating time as the CLI reports it (without starting the process and loading the model,
    # which the server does before its clock starts too)
    dt = float(re.search(r"in ([\d.]+) s:", out.stderr).group(1))
    got = out.stdout.split("\n")[:-1]
    assert len(got) == len(lines), (len(got), len(lines), out.stderr[-500:])
    return dt, got


def start_server(threads, clients, max_batch, max_wait_ms):
    log = tempfile.NamedTemporaryFile(prefix="qkv-serve-", suffix=".log", delete=False)
    p = subprocess.Popen(QKV + ["serve", "-m", "models/en-fr.safetensors", "--port", "0", "--threads", str(threads),
                                "--http-threads", str(clients + 4), "--max-batch", str(max_batch),
                                "--max-wait-ms", str(max_wait_ms)] + DEVICE, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        with open(log.name) as f:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
        if m:
            return p, int(m.group(1)), log.name
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("qkv serve did not start")


def run_server(lines, threads, clients, beam, max_batch, max_wait_ms, timeout):
    p, port, log = start_server(threads, clients, max_batch, max_wait_ms)
    try:
        # one warm-up request (loads pages, starts the worker's threads)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/translate", json.dumps({"sentences": ["Hello."]}), {"Content-Type": "application/json"})
        c.getresponse().read()
        results, latencies, failures = [None] * len(lines), [], []
        next_index = iter(range(len(lines)))
        lock = threading.Lock()

        def client():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                body = json.dumps({"sentences": [lines[i]], "beam_size": beam})
                t0 = time.perf_counter()
                try:
                    conn.request("POST", "/v1/translate", body, {"Content-Type": "application/json"})
                    r = conn.getresponse()
                    data = r.read()
                    dt = time.perf_counter() - t0
                    if r.status != 200:
                        failures.append((i, r.status, data[:200]))
                        continue
                    results[i] = json.loads(data)["translations"][0]["text"]
                    with lock:
                        latencies.append(dt)
                except Exception as e:  # a lost request is a failure, counted and shown
                    failures.append((i, "transport", repr(e)))
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

        t0 = time.perf_counter()
        workers = [threading.Thread(target=client) for _ in range(clients)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        dt = time.perf_counter() - t0
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)  # (the first one idled out)
        c.request("GET", "/metrics")
        metrics = c.getresponse().read().decode()
        return dt, results, latencies, failures, metrics
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        os.unlink(log)


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32, help="the CLI's --batch-size")
    ap.add_argument("--max-batch", type=int, default=64, help="the server's --max-batch")
    ap.add_argument("--max-wait-ms", type=float, default=5)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--qkv", help="how to run the qkv command (default: build/qkv)")
    ap.add_argument("--device", help="--device for both the CLI and the server (cpu, cuda)")
    a = ap.parse_args()
    global QKV, DEVICE
    if a.qkv:
        QKV = shlex.split(a.qkv)
    if a.device:
        DEVICE = ["--device", a.device]
    lines = sentences(a.requests)
    cli_times, server_times, latencies = [], [], []
    reference, mismatches, failures_all, mean_batches = None, 0, [], []
    for r in range(a.repeats):
        dt, got = run_cli(lines, a.threads, a.beam, a.batch_size)
        cli_times.append(dt)
        reference = reference or got
        if got != reference:
            print(f"round {r}: the CLI's own output changed between runs", file=sys.stderr)
        dt, results, lat, failures, metrics = run_server(lines, a.threads, a.clients, a.beam, a.max_batch,
                                                         a.max_wait_ms, a.timeout)
        server_times.append(dt)
        latencies += lat
        failures_all += failures
        bad = [i for i in range(len(lines)) if results[i] is not None and results[i] != reference[i]]
        mismatches += len(bad)
        sent = float(re.search(r"^qkv_sentences_total (\d+)", metrics, re.M).group(1))
        batches = float(re.search(r"^qkv_batches_total\{[^}]*\} (\d+)", metrics, re.M).group(1))
        mean_batches.append(sent / batches)
        lost = sum(x is None for x in results)
        for i in bad[:3]:
            print(f"  differs: {lines[i]!r}\n    cli:    {reference[i]!r}\n    server: {results[i]!r}", file=sys.stderr)
        print(f"round {r + 1}: CLI {len(lines) / cli_times[-1]:.1f} sentences/s, server {len(lines) / dt:.1f} "
              f"sentences/s (mean batch {mean_batches[-1]:.1f}); {lost} lost, {len(failures)} failed, {len(bad)} differ "
              f"from the CLI", file=sys.stderr)
    cli = len(lines) / statistics.median(cli_times)
    srv = len(lines) / statistics.median(server_times)
    res = {
        "requests": len(lines), "clients": a.clients, "threads": a.threads, "beam": a.beam, "repeats": a.repeats,
        "cli_sentences_per_s": cli, "server_sentences_per_s": srv, "ratio": srv / cli,
        "latency_p50_ms": 1000 * percentile(latencies, 0.50), "latency_p90_ms": 1000 * percentile(latencies, 0.90),
        "latency_p99_ms": 1000 * percentile(latencies, 0.99), "failed": len(failures_all),
        "differ_from_cli": mismatches, "responses": len(latencies), "mean_batch": statistics.median(mean_batches),
    }
    print(f"\n{len(lines)} requests x {a.repeats} rounds, {a.clients} clients, beam {a.beam}, {a.threads} threads"
          + (f", --device {a.device}" if a.device else ""))
    print(f"CLI (qkv translate --batch-size {a.batch_size}): {cli:.1f} sentences/s (median)")
    print(f"server (qkv serve --max-batch {a.max_batch}):   {srv:.1f} sentences/s (median) = {srv / cli:.2f}x the CLI "
          f"(goal >= 0.80)")
    print(f"mean batch formed by the server: {res['mean_batch']:.1f} sentences")
    print(f"latency p50 {res['latency_p50_ms']:.0f} ms, p90 {res['latency_p90_ms']:.0f} ms, p99 {res['latency_p99_ms']:.0f} ms")
    print(f"{res['responses']} responses, {res['failed']} failed, {mismatches} differ from the CLI's translation")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
