#!/usr/bin/env python3
"""/v1/attention's size on the wire and its time, for a BERT-base-size model (issue 50's measure:
256 tokens × 12 layers × 12 heads in ≤ 1 s on 2 cores and ≤ 4 MB on the wire).

Makes a random BertForMaskedLM of BERT-base's shape (12 layers, 12 heads, hidden 768, FFN 3072;
transformers' own initialisation, initializer_range 0.02: near-uniform attention, the hardest case
to compress) with tests/golden/make_hf_golden.py's WordPiece tokenizer (Shakespeare's words),
converts it with `qkv convert`, starts `qkv serve --threads 2` on it, and asks /v1/attention for a
256-token text with each encoding, the way a browser asks (Accept-Encoding: gzip): the bytes on the
wire, the JSON's bytes once decompressed, and the wall time of the request (best of --repeat).

With --browser (Debian's chromium + chromium-driver and python3-selenium, as
tests/browser/viewer_test.py), the viewer's "Show attention" on the same text in headless Chromium:
the request (the page asks for "u8" past 400 characters) and the whole view drawn, ms.

Usage: python3 bench/attention_wire.py --qkv build/qkv [--work /tmp/qkv-bert-base] [--repeat 3]
       /usr/bin/python3 bench/attention_wire.py --qkv build/qkv --browser   (after a first run)
(the first run needs torch and transformers; the model folder, the file and the text are kept in
--work for the next runs)
"""
import argparse
import gzip
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def make_model(work, qkv):
    out = os.path.join(work, "model.safetensors")
    if os.path.exists(out):
        return out
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "golden"))
    import torch
    import transformers
    import make_hf_golden
    torch.manual_seed(50)
    tok = make_hf_golden.wordpiece_tokenizer(True, 8000)
    c = transformers.BertConfig(vocab_size=len(tok), hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                intermediate_size=3072, max_position_embeddings=512, pad_token_id=tok.pad_token_id)
    m = transformers.BertForMaskedLM(c).eval()
    folder = os.path.join(work, "hf")
    m.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    subprocess.run([qkv, "convert", folder, "-o", out], check=True)
    return out


def text_of(tokens, work):
    """Shakespeare's first words, cut so the tokenizer makes `tokens` tokens with [CLS] and [SEP]."""
    cached = os.path.join(work, "text-%d.json" % tokens)
    if os.path.exists(cached):
        with open(cached) as f:
            return tuple(json.load(f))
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast.from_pretrained(os.path.join(work, "hf"))
    words = open(os.path.join(HERE, "..", "..", "shared", "data", "tinyshakespeare", "input.txt"),
                 encoding="utf-8").read().split()
    lo, hi = 1, len(words)
    while lo < hi:  # the most words that still fit
        mid = (lo + hi + 1) // 2
        if len(tok(" ".join(words[:mid]))["input_ids"]) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    text = " ".join(words[:lo])
    with open(cached, "w") as f:
        json.dump([text, len(tok(text)["input_ids"])], f)
    return text, len(tok(text)["input_ids"])


def browser(url, text, repeat):
    """The page's "Show attention" for `text` on the model: [(whole view ms, request ms)]."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1700"):
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    d.set_script_timeout(120)
    out = []
    try:
        for _ in range(repeat):
            d.get(url + "/")
            WebDriverWait(d, 60).until(lambda d: d.execute_script("return document.body.dataset.state") == "models")
            d.execute_script("document.getElementById('text').value = arguments[0]", text)
            out.append(d.execute_async_script("""
                const done = arguments[arguments.length - 1], t0 = performance.now();
                document.getElementById('go').click();
                const wait = () => document.body.dataset.state === 'busy' ? setTimeout(wait, 5)
                  : requestAnimationFrame(() => setTimeout(() => {
                      const r = performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/v1/attention')).pop();
                      done([performance.now() - t0, r ? r.responseEnd - r.startTime : -1, document.body.dataset.state,
                            window.qkvViewer.state().encoding, window.qkvViewer.state().unpack, window.qkvViewer.state().timings]);
                    }, 0));
                setTimeout(wait, 5);"""))
    finally:
        d.quit()
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", default="build/qkv")
    ap.add_argument("--work", default="/tmp/qkv-bert-base")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--browser", action="store_true", help="time the viewer in headless Chromium instead")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "model.safetensors") if a.browser else make_model(a.work, a.qkv)
    text, n = text_of(a.tokens, a.work)
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    server = subprocess.Popen([a.qkv, "serve", "-m", model, "--port", str(port), "--threads", str(a.threads),
                               "--max-sentence-bytes", "100000", "--max-request-bytes", "1000000"], env=env,
                              stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d" % port
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.2)
        print("model: BERT-base size (12 layers × 12 heads, 768 dims), %d tokens, %d threads" % (n, a.threads))
        if a.browser:
            for total, request, state, enc, unpack, parts in browser(url, text, a.repeat):
                print("viewer (%s, %s): whole view %.0f ms, of which the request %.0f ms, the rest %.0f ms "
                      "(unpacking %.0f; %s)" % (state, enc, total, request, total - request, unpack,
                                                 ", ".join("%s %.0f" % kv for kv in parts.items())))
            return
        print("| encoding | on the wire (gzip) | JSON | request (best of %d) |" % a.repeat)
        print("|---|---:|---:|---:|")
        for enc in [None, "u8"]:
            body = {"text": text}
            if enc:
                body["encoding"] = enc
            best, wire, raw = 1e9, 0, 0
            for _ in range(a.repeat):
                req = urllib.request.Request(url + "/v1/attention", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json", "Accept-Encoding": "gzip"})
                t = time.perf_counter()
                with urllib.request.urlopen(req, timeout=600) as r:
                    z = r.read()
                    zipped = r.headers.get("Content-Encoding") == "gzip"
                best = min(best, time.perf_counter() - t)
                wire = len(z)
                raw = len(gzip.decompress(z)) if zipped else len(z)
            print("| %s | %.2f MB | %.2f MB | %.3f s |" % (enc or "JSON floats (default)", wire / 1e6, raw / 1e6, best))
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
