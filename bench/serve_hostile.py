#!/usr/bin/env python3
"""`qkv serve` under hostile clients (issue 44): while 300 slowloris sockets trickle headers and 64
clients translate N sentences on kept-alive connections, how fast /health answers (p50/p99; goal
p99 <= 100 ms), the translations' latency (p99/p50; goal <= 3), how evenly the 64 clients are served
(every client within 2x the mean), the throughput against the batched CLI on the same sentences
(goal >= 0.8x), and the server's RSS under each attack (slowloris + load, a chunked 100 MB body, a
Content-Length of 2^63-1 with no body).

    python3 bench/serve_hostile.py [--requests 1000] [--clients 64] [--slow 300] [--threads 2]

Loopback only; bounded: N requests, --slow sockets, each attack a few seconds, --timeout per request.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_load import QKV, ROOT, percentile, run_cli, sentences  # noqa: E402

HOST = "127.0.0.1"


def start_server(threads, extra):
    log = tempfile.NamedTemporaryFile(prefix="qkv-serve-", suffix=".log", delete=False)
    p = subprocess.Popen([QKV, "serve", "-m", "models/en-fr.safetensors", "--port", "0", "--threads", str(threads),
                          *extra], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log.name).read())
        if m:
            return p, int(m.group(1)), log.name
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("qkv serve did not start: " + open(log.name).read())


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Slowloris(threading.Thread):
    """n sockets, each sending its header a byte a second, reopened when the server closes one."""

    def __init__(self, port, n):
        super().__init__(daemon=True)
        self.port, self.n, self.stop, self.reopened = port, n, False, 0
        self.socks = [self.open() for _ in range(n)]

    def open(self):
        s = socket.create_connection((HOST, self.port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        return s

    def run(self):
        while not self.stop:
            for i, s in enumerate(self.socks):
                try:
                    s.send(b"X")
                except OSError:
                    s.close()
                    self.reopened += 1
                    try:
                        self.socks[i] = self.open()
                    except OSError:
                        pass
            time.sleep(1.0)
        for s in self.socks:
            s.close()


def load(port, lines, clients, beam, timeout):
    """Every sentence once, from `clients` kept-alive clients: (seconds, latencies, per-client counts, failures)."""
    latencies, counts, failures = [], [0] * clients, []
    it, lock = iter(range(len(lines))), threading.Lock()

    def client(k):
        conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
        while True:
            with lock:
                i = next(it, None)
            if i is None:
                return
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/translate", json.dumps({"sentences": [lines[i]], "beam_size": beam}),
                             {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                if r.status == 200:
                    counts[k] += 1
                    with lock:
                        latencies.append(time.perf_counter() - t0)
                else:
                    failures.append(r.status)
            except Exception as e:  # noqa: BLE001 — counted and shown
                failures.append(repr(e))
                conn = http.client.HTTPConnection(HOST, port, timeout=timeout)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0, latencies, counts, failures


def probe_health(port, stop, out):
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            c = http.client.HTTPConnection(HOST, port, timeout=10)
            c.request("GET", "/health")
            ok = c.getresponse().status == 200
            c.close()
        except OSError:
            ok = False
        out.append(time.perf_counter() - t0 if ok else float("inf"))
        time.sleep(0.05)


def chunked_attack(port, pid, mb=100):
    rss0, peak = rss_mb(pid), 0.0
    s = socket.create_connection((HOST, port), timeout=10)
    s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    sent = 0
    try:
        while sent < mb << 20:
            s.sendall(b"100000\r\n" + b"[" * 0x100000 + b"\r\n")
            sent += 1 << 20
            peak = max(peak, rss_mb(pid))
    except OSError:
        pass
    try:
        reply = s.recv(200)
    except OSError:
        reply = b""
    s.close()
    return {"sent_mb": sent >> 20, "status": reply[9:12].decode(errors="replace"), "rss_before_mb": rss0,
            "rss_peak_mb": max(peak, rss_mb(pid))}


def huge_length(port):
    t0 = time.perf_counter()
    s = socket.create_connection((HOST, port), timeout=20)
    s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775807\r\n\r\n")
    try:
        reply = s.recv(200)
    except OSError:
        reply = b""
    s.close()
    return {"status": reply[9:12].decode(errors="replace"), "seconds": time.perf_counter() - t0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--slow", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    lines = sentences(a.requests)
    cli_s, _ = run_cli(lines, a.threads, a.beam, 32)
    p, port, log = start_server(a.threads, [])
    res = {"requests": a.requests, "clients": a.clients, "slow_sockets": a.slow, "threads": a.threads, "beam": a.beam,
           "cli_sentences_per_s": a.requests / cli_s}
    try:
        load(port, lines[:64], a.clients, a.beam, a.timeout)  # warm-up
        res["rss_idle_mb"] = rss_mb(p.pid)
        slow = Slowloris(port, a.slow)
        slow.start()
        stop, health, rss = threading.Event(), [], []
        prober = threading.Thread(target=probe_health, args=(port, stop, health))
        prober.start()
        sampler = threading.Thread(target=lambda: [rss.append(rss_mb(p.pid)) or time.sleep(0.2)
                                                   for _ in iter(lambda: stop.is_set(), True)])
        sampler.start()
        seconds, lat, counts, failures = load(port, lines, a.clients, a.beam, a.timeout)
        stop.set()
        prober.join()
        sampler.join()
        slow.stop = True
        slow.join()
        mean = statistics.mean(counts)
        res.update({
            "server_sentences_per_s": a.requests / seconds, "ratio": (a.requests / seconds) / (a.requests / cli_s),
            "health_p50_ms": 1000 * percentile(health, 0.5), "health_p99_ms": 1000 * percentile(health, 0.99),
            "health_probes": len(health),
            "translate_p50_ms": 1000 * percentile(lat, 0.5), "translate_p99_ms": 1000 * percentile(lat, 0.99),
            "translate_p99_over_p50": percentile(lat, 0.99) / percentile(lat, 0.5),
            "served_min": min(counts), "served_max": max(counts), "served_mean": mean,
            "within_2x_mean": min(counts) >= mean / 2 and max(counts) <= 2 * mean, "failed": len(failures),
            "slow_sockets_reopened": slow.reopened, "rss_under_slowloris_and_load_peak_mb": max(rss),
        })
        res["chunked_100mb"] = chunked_attack(port, p.pid)
        res["content_length_2e63"] = huge_length(port)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
        os.unlink(log)
    print(json.dumps(res, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
