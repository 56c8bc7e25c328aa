#!/usr/bin/env python3
"""The attention viewer in a real browser (Debian's chromium + chromium-driver, driven by
python3-selenium): starts `qkv serve` on a free loopback port, loads the page, shows a sentence's
attention, and checks what the page drew against what the API says:

  - the translation on the page is the API's;
  - the heat map (a canvas) shows the chosen head's weights: the page's weights are the API's, a
    cell per (query, key), and the darkest cell drawn is the largest weight; the head grid has one
    thumbnail per layer and head;
  - switching to cross-attention redraws the heat map with the cross axes;
  - hovering a query token in the line view leaves only that token's lines;
  - the head search ("it" → "cat") jumps to the same best kind, layer and head as the API's
    search, and the page shows that head; Enter in either search box runs it;
  - a ranking belongs to its view: switching model clears it, and nothing throws after a new
    model's view is shown;
  - words mode groups sub-word tokens into words as bertviz does (a word's keys summed, its
    queries averaged; rows still sum to 1), for the translator and the char-level GPT;
  - a kind of attention has one name on the page: the switch's label begins the legend
    ("Self (causal)" for a language model);
  - a 234-token input (the translator's encoder): switching kind, head and unit each draws in at
    most 2 s (the times are printed: docs/BENCHMARKS.md, "Attention viewer");
  - a language model's page shows its causal self-attention (the upper triangle white);
  - attention rollout ("detail": "rollout") equals NumPy's from the same per-layer weights, and the
    layer list's "rollout" entry draws it (tokens and words, the head list disabled);
  - the neuron view ("detail": "neuron"), for the char-level GPT, a BERT converted from
    transformers (tests/golden/hf/bert-uncased) and the translator's encoder: the page's q·k/√d
    and softmax, redone from the API's vectors, are the API's scores and weights and the chosen
    head's row of the map; a click on a heat-map cell shows its row's; the same for a Llama
    converted from transformers (tests/golden/hf/llama-gqa: rotary positions, 4 heads on 2
    key/value heads) and the translator's decoder self-attention and cross-attention (the kind
    chosen above the heat map: queries the translation, keys <s> + translation or the source);
  - the head search across every loaded model ("in every loaded model"): one list, best first, that
    is the API's per-model rankings merged; a click on another model's head shows that model's view
    at that head;
  - a 256-token input (the translator's encoder: 255 source tokens and EOS, its longest; beam 1):
    the ms from the answer's arrival to the view drawn (issue 50's goal: 1 s) is printed, the
    median of three held to 2 s;
  - attention flow: the layer list's "flow" entry asks for "detail": "flow" and draws the API's
    (the GPT's and the translator's encoder), and a kind over 128 tokens has no such entry;
  - "encoding": "u8": each byte is round(255·w) of the JSON's weight, rollout included; the page
    asks for it for a long input and draws the same weights within 1/510.
  - every kind (a server of its own with the GRU translator and the captioner): the recurrent
    translator's alignment is its one "cross" head, the API's weights, with no rollout entry and the
    neuron view off; the captioner, given a picture file (`qkv scenes`), shows the API's caption,
    its word × grid-cell map, and the picture once per word with that word's attention over it.

A screenshot of the page goes to --screenshot (and of the word-grouped view beside it, -words.png),
and test_pictures saves the README's pictures beside it: the neuron view (-neuron.png), the
rollout (-rollout.png) and every head (-heads.png) of the BERT's "it" → "cat" best head — or, with
--picture-model FILE, of that model (a real checkpoint converted with `qkv convert`).
Run by ctest (tests/CMakeLists.txt); fails, never skips, when the browser is missing: the README's
test command installs it.

Usage: viewer_test.py --qkv build/qkv [--screenshot build/viewer.png] [Viewer.test_…]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
import urllib.error

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait as _SeleniumWait


def WebDriverWait(driver, timeout):  # noqa: N802 — selenium's, polling every 20 ms, not its default 500 ms
    """A wait that sees the page's state within 20 ms: at selenium's 0.5-s default the ~40 waits of this
    suite idled ~15 s (34 s wall against 14 CPU-s)."""
    return _SeleniumWait(driver, timeout, poll_frequency=0.02)

ARGS = None
SENTENCE = "The cat didn't cross the street because it was too tired."
# 234 source tokens for the en-fr translator (1003 bytes, under --max-sentence-bytes' 2000)
_S = ["The cat didn't cross the street because it was too tired.",
      "The old man walked slowly to the market, where he bought bread, cheese and a bottle of wine for his daughter.",
      "She said that the weather would be better tomorrow, so we decided to wait.",
      "My brother works in a small office near the station."]
LONG = " ".join(_S * 3) + " " + _S[0] + " The old man walked slowly to the market, where he bought."
# 256 encoder tokens for the en-fr translator (255 pieces, its longest source, and EOS)
LONG256 = LONG + " She said that the weather would be better tomorrow, so we decided to wait for him. My brother works"
SWITCH_LIMIT_MS = 2000

# The page's errors, kept by the page itself (an error thrown in an event handler included).
CATCH_ERRORS = ("window.__errors = []; window.addEventListener('error', (e) => window.__errors.push(e.message));")
# Runs a click (or change) and waits for the frame after it to be drawn: the ms from before the
# event to after that frame, layout and paint included.
TIMED = """
const done = arguments[arguments.length - 1], t0 = performance.now();
(%s)();
requestAnimationFrame(() => setTimeout(() => done(performance.now() - t0), 0));
"""
# The colour drawn at each heat-map cell's centre, as r + g + b (the canvas's own pixels).
CELL_SUMS = """
const c = document.getElementById('heatmap'), r = c.width / parseFloat(c.style.width);
const left = +c.dataset.left, top = +c.dataset.top, cell = +c.dataset.cell, nq = +c.dataset.rows, nk = +c.dataset.cols;
const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, out = [];
for (let i = 0; i < nq; ++i) for (let j = 0; j < nk; ++j) {
  const x = Math.floor((left + j * cell + cell / 2) * r), y = Math.floor((top + i * cell + cell / 2) * r), o = 4 * (y * c.width + x);
  out.push(px[o] + px[o + 1] + px[o + 2]);
}
return out;
"""


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def word_units(axis):
    """Words mode's units of an axis (the page's units()): each word, and each run of whitespace
    tokens (word −1) as one unit. → (token → unit, unit count)."""
    of, by_word = [], {}
    n = 0
    for i, w in enumerate(axis["word"]):
        if w >= 0:
            if w not in by_word:
                by_word[w] = n
                n += 1
            of.append(by_word[w])
        elif i > 0 and axis["word"][i - 1] < 0:
            of.append(of[-1])
        else:
            of.append(n)
            n += 1
    return of, n


def words_matrix(kind, layer, head):
    """bertviz's word attention: mean over a word's query tokens of the sum over a word's key tokens."""
    qo, nq = word_units(kind["queries"])
    ko, nk = word_units(kind["keys"])
    out = [[0.0] * nk for _ in range(nq)]
    count = [qo.count(a) for a in range(nq)]
    for i, row in enumerate(kind["layers"][layer][head]):
        for j, v in enumerate(row):
            out[qo[i]][ko[j]] += v / count[qo[i]]
    return out


class Viewer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        cls.log = tempfile.NamedTemporaryFile(prefix="qkv-serve-", suffix=".log", delete=False)
        # the shipped translator and character GPT, and a random BERT converted from transformers
        cls.tmp = tempfile.TemporaryDirectory(prefix="qkv-viewer-")
        converted = []
        for name in ("bert-uncased", "llama-gqa"):  # (and a Llama: rotary positions, grouped-query heads)
            converted.append(os.path.join(cls.tmp.name, name + ".safetensors"))
            subprocess.run([ARGS.qkv, "convert", os.path.join(root, "tests", "golden", "hf", name), "-o", converted[-1]],
                           check=True, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        extra = ["-m", os.path.abspath(ARGS.picture_model)] if ARGS.picture_model else []
        cls.server = subprocess.Popen([ARGS.qkv, "serve", "--port", "0", "--threads", "2", "-m",
                                       "models/en-fr.safetensors", "-m", "models/shakespeare-char.safetensors",
                                       "-m", converted[0], "-m", converted[1]] + extra,
                                      cwd=root, stdout=cls.log, stderr=subprocess.STDOUT)
        cls.port = 0
        deadline = time.time() + 60
        while not cls.port and time.time() < deadline:
            with open(cls.log.name) as f:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
            if m:
                cls.port = int(m.group(1))
            else:
                time.sleep(0.05)
        if not cls.port:
            cls.server.kill()
            with open(cls.log.name) as f:
                raise RuntimeError("qkv serve did not start: " + f.read())
        options = webdriver.ChromeOptions()
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1700", "--force-device-scale-factor=1"):
            options.add_argument(flag)
        options.binary_location = "/usr/bin/chromium"
        cls.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        cls.driver.set_page_load_timeout(60)
        cls.driver.set_script_timeout(120)

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.server.send_signal(signal.SIGTERM)
        cls.server.wait(timeout=30)
        cls.log.close()
        os.unlink(cls.log.name)
        cls.tmp.cleanup()

    def wait_state(self, state, timeout=120):
        WebDriverWait(self.driver, timeout).until(
            lambda d: d.execute_script("return document.body.dataset.state") in (state, "error"))
        self.assertEqual(self.driver.execute_script("return document.body.dataset.state"), state,
                         self.driver.find_element(By.ID, "status").text)

    def load(self):
        self.driver.get(f"http://127.0.0.1:{self.port}/")
        self.driver.execute_script(CATCH_ERRORS)
        self.wait_state("models")

    def show(self, model, text, load=True):
        d = self.driver
        if load:
            self.load()
        Select(d.find_element(By.ID, "model")).select_by_value(model)
        d.execute_script("document.getElementById('text').value = arguments[0]", text)
        d.find_element(By.ID, "go").click()
        self.wait_state("ready")

    def state(self, weights=False):
        return self.driver.execute_script("return window.qkvViewer.state(arguments[0])", weights)

    def errors(self):
        return self.driver.execute_script("return window.__errors")

    def assertWeights(self, got, want):
        flat = [v for row in want for v in row]
        self.assertEqual(len(got), len(flat))
        self.assertLess(max(abs(a - b) for a, b in zip(got, flat)), 1e-4)

    def search(self, query, key, submit):
        d = self.driver
        d.find_element(By.ID, "search-query").clear()
        d.find_element(By.ID, "search-query").send_keys(query)
        d.find_element(By.ID, "search-key").clear()
        d.find_element(By.ID, "search-key").send_keys(key)
        if submit == "enter":
            d.find_element(By.ID, "search-key").send_keys(Keys.ENTER)
        else:
            d.find_element(By.ID, "search-go").click()

    def test_translation_heat_maps_lines_grid_and_head_search(self):
        api = post(self.port, "/v1/attention", {"model": "en-fr", "text": SENTENCE,
                                                "search": {"query": "it", "key": "cat"}})
        self.show("en-fr", SENTENCE)
        d = self.driver
        self.assertEqual(d.find_element(By.ID, "output").text, "→ " + api["output"])
        kinds = {k["name"]: k for k in api["kinds"]}
        enc = kinds["encoder_self"]
        layers, heads = len(enc["layers"]), len(enc["layers"][0])
        # the encoder's self-attention first: the API's weights, a cell per (query, key), a
        # thumbnail per layer and head
        s = self.state(True)
        self.assertEqual((s["kind"], s["layer"], s["head"], s["unit"]), ("encoder_self", 0, 0, "tokens"))
        self.assertEqual(s["queries"], [t.replace(" ", "␣") for t in enc["queries"]["tokens"]])
        self.assertWeights(s["weights"], enc["layers"][0][0])
        self.assertEqual(len(d.find_elements(By.CSS_SELECTOR, "#grid canvas.thumb")), layers * heads)
        # the cell colours follow the weights: the darkest cell drawn is the largest weight of the head
        sums = d.execute_script(CELL_SUMS)
        flat = [v for row in enc["layers"][0][0] for v in row]
        self.assertEqual(len(sums), len(flat))
        self.assertEqual(sums[flat.index(max(flat))], min(sums))

        # cross-attention: queries are the output tokens, keys the source
        d.find_element(By.ID, "kind-cross").click()
        cross = kinds["cross"]
        s = self.state(True)
        self.assertEqual(s["queries"], [t.replace(" ", "␣") for t in cross["queries"]["tokens"]])
        self.assertEqual(s["keys"], [t.replace(" ", "␣") for t in cross["keys"]["tokens"]])
        self.assertWeights(s["weights"], cross["layers"][0][0])
        self.assertEqual(len(d.execute_script(CELL_SUMS)), len(s["queries"]) * len(s["keys"]))

        # the line view: hovering the second query token leaves only its lines
        token = d.find_elements(By.CSS_SELECTOR, "#lines .tok.q")[1]
        ActionChains(d).move_to_element(token).perform()
        shown = self.state()["lines"]
        self.assertTrue(shown)
        self.assertEqual({q for q, _ in shown}, {1})

        # the head search answers as the API does, and the page shows that head
        self.search("it", "cat", "click")
        best = d.find_element(By.ID, "search-best")
        want = api["search"][0]
        self.assertEqual((best.get_attribute("data-kind"), int(best.get_attribute("data-layer")),
                          int(best.get_attribute("data-head"))), (want["kind"], want["layer"], want["head"]))
        self.assertEqual(Select(d.find_element(By.ID, "layer")).first_selected_option.get_attribute("value"),
                         str(want["layer"]))
        self.assertEqual(Select(d.find_element(By.ID, "head")).first_selected_option.get_attribute("value"),
                         str(want["head"]))
        self.assertEqual(len(d.find_elements(By.CSS_SELECTOR, "#search-results li")), 10)
        self.assertEqual(len(d.find_elements(By.CSS_SELECTOR, "#grid canvas.thumb.sel")), 1)
        self.assertEqual(self.errors(), [])
        if ARGS.screenshot:
            d.save_screenshot(ARGS.screenshot)
            print("screenshot:", ARGS.screenshot, file=sys.stderr)

    def test_enter_in_a_search_box_runs_the_search(self):
        api = post(self.port, "/v1/attention", {"model": "en-fr", "text": SENTENCE,
                                                "search": {"query": "it", "key": "cat"}})
        self.show("en-fr", SENTENCE)
        self.search("it", "cat", "enter")
        best = self.driver.find_element(By.ID, "search-best")
        want = api["search"][0]
        self.assertEqual((best.get_attribute("data-kind"), best.get_attribute("data-layer"),
                          best.get_attribute("data-head")), (want["kind"], str(want["layer"]), str(want["head"])))
        # and in the query box
        self.driver.find_element(By.ID, "search-query").send_keys(Keys.ENTER)
        self.assertEqual(len(self.driver.find_elements(By.CSS_SELECTOR, "#search-results li")), 10)

    def test_switching_model_clears_the_head_search(self):
        self.show("en-fr", SENTENCE)
        d = self.driver
        self.search("it", "cat", "click")
        self.assertEqual(len(d.find_elements(By.CSS_SELECTOR, "#search-results li")), 10)
        Select(d.find_element(By.ID, "model")).select_by_value("shakespeare-char")
        self.show("shakespeare-char", "ROMEO: what light", load=False)
        # a ranking left from the translator would name its kinds: clicking one must not throw
        for li in d.find_elements(By.CSS_SELECTOR, "#search-results li")[:1]:
            li.click()
        self.assertEqual(self.errors(), [])
        self.assertEqual(d.find_elements(By.CSS_SELECTOR, "#search-results li"), [])
        self.assertEqual(d.find_element(By.ID, "search-best").text, "")
        self.assertEqual(self.state()["kind"], "decoder_self")

    def test_words_group_sub_word_tokens(self):
        api = post(self.port, "/v1/attention", {"model": "en-fr", "text": SENTENCE})
        kinds = {k["name"]: k for k in api["kinds"]}
        self.show("en-fr", SENTENCE)
        d = self.driver
        d.find_element(By.ID, "unit-words").click()
        for name in ("encoder_self", "cross"):
            d.find_element(By.ID, "kind-" + name).click()
            Select(d.find_element(By.ID, "layer")).select_by_value("1")
            Select(d.find_element(By.ID, "head")).select_by_value("2")
            k, s = kinds[name], self.state(True)
            self.assertEqual((s["kind"], s["layer"], s["head"], s["unit"]), (name, 1, 2, "words"))
            self.assertEqual(s["queries"], k["queries"]["words"])  # "didn't", "tired." …: no whitespace tokens
            self.assertEqual(s["keys"], k["keys"]["words"])
            self.assertWeights(s["weights"], words_matrix(k, 1, 2))
            nk = len(s["keys"])
            for i in range(len(s["queries"])):
                self.assertAlmostEqual(sum(s["weights"][i * nk:(i + 1) * nk]), 1.0, places=4)
            self.assertEqual(len(d.execute_script(CELL_SUMS)), len(s["queries"]) * nk)
        self.assertIn("words", d.find_element(By.ID, "legend").text)
        if ARGS.screenshot:
            path = re.sub(r"(\.png)?$", "-words.png", ARGS.screenshot, count=1)
            d.find_element(By.ID, "kind-encoder_self").click()
            d.save_screenshot(path)
            print("screenshot:", path, file=sys.stderr)
        # back to tokens: the token view again
        d.find_element(By.ID, "unit-tokens").click()
        s = self.state()  # (the kind shown last: cross, or the encoder after the screenshot)
        self.assertEqual(len(s["queries"]), len(kinds[s["kind"]]["queries"]["tokens"]))

        # the char-level GPT: spaces belong to no word, and stay a unit of their own (rows sum to 1)
        text = "ROMEO: what light"
        api = post(self.port, "/v1/attention", {"model": "shakespeare-char", "text": text})
        self.show("shakespeare-char", text)
        d.find_element(By.ID, "unit-words").click()
        s = self.state(True)
        self.assertEqual(s["queries"], ["ROMEO:", "␣", "what", "␣", "light"])
        self.assertWeights(s["weights"], words_matrix(api["kinds"][0], 0, 0))
        for i in range(5):
            self.assertAlmostEqual(sum(s["weights"][i * 5:(i + 1) * 5]), 1.0, places=4)
        self.assertEqual(self.errors(), [])

    def test_one_name_per_kind(self):
        for model, text, want in (("shakespeare-char", "ROMEO: what light", {"decoder_self": "Self (causal)"}),
                                  ("en-fr", SENTENCE, {"encoder_self": "Encoder self", "cross": "Cross",
                                                       "decoder_self": "Decoder self (causal)"})):
            self.show(model, text)
            d = self.driver
            for name, label in want.items():
                radio = d.find_element(By.ID, "kind-" + name)
                self.assertEqual(radio.find_element(By.XPATH, "..").text, label)
                radio.click()
                self.assertTrue(d.find_element(By.ID, "legend").text.startswith(label + ", layer 1, head 1"),
                                d.find_element(By.ID, "legend").text)
                self.assertEqual(d.find_element(By.CSS_SELECTOR, "#grid canvas.thumb").get_attribute("title"),
                                 label + " layer 1, head 1")

    def test_234_tokens_draw_in_under_2_s(self):
        d = self.driver
        self.load()
        Select(d.find_element(By.ID, "model")).select_by_value("en-fr")
        d.execute_script("document.getElementById('text').value = arguments[0]", LONG)
        # the whole view: the request (the server's translation and attention, 12 MB of JSON) and the drawing
        shown_ms = d.execute_async_script("""
            const done = arguments[arguments.length - 1], t0 = performance.now();
            document.getElementById('go').click();
            const wait = () => document.body.dataset.state === 'busy' ? setTimeout(wait, 5)
              : requestAnimationFrame(() => setTimeout(() => {
                  const r = performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/v1/attention')).pop();
                  done([performance.now() - t0, r ? r.responseEnd - r.startTime : -1]);
                }, 0));
            setTimeout(wait, 5);""")
        self.wait_state("ready")
        n = d.execute_script("return document.getElementById('status').textContent")
        sizes = d.execute_script("return document.querySelector('input[name=kind]:checked').value")
        self.assertEqual(sizes, "encoder_self")
        times = {"show (request + draw)": shown_ms[0], "  of which the request": shown_ms[1]}
        parts = {}
        click = "() => document.getElementById('%s').click()"
        change = "() => { const s = document.getElementById('%s'); s.value = '%s'; s.dispatchEvent(new Event('change')); }"
        steps = [("kind → cross", click % "kind-cross"), ("kind → encoder self", click % "kind-encoder_self"),
                 ("head → 4", change % ("head", "3")), ("layer → 3", change % ("layer", "2")),
                 ("unit → words", click % "unit-words"), ("head → 5 (words)", change % ("head", "4")),
                 ("unit → tokens", click % "unit-tokens")]
        for name, js in steps:
            if not d.execute_script("return !!document.getElementById(arguments[0])", re.search(r"'([\w-]+)'", js).group(1)):
                times[name] = None  # (the page before issue 44 had no unit switch)
                continue
            times[name] = d.execute_async_script(TIMED % js)
            parts[name] = d.execute_script("return window.qkvViewer ? window.qkvViewer.state().timings : null")
        print("\n234-token input (%s): ms from the event to the next frame drawn" % n, file=sys.stderr)
        for name, ms in times.items():
            print("  %-24s %6s  %s" % (name, "—" if ms is None else "%.0f" % ms,
                                       ", ".join("%s %.0f" % kv for kv in (parts.get(name) or {}).items())),
                  file=sys.stderr)
        for name, ms in times.items():
            if ms is not None and not name.startswith("show") and not name.startswith(" "):
                self.assertLessEqual(ms, SWITCH_LIMIT_MS, name)
        # the view's own drawing (what is not the request) within the limit too: the request itself is
        # the server's (its answer's compression: docs/BENCHMARKS.md, "Attention viewer")
        self.assertLessEqual(shown_ms[0] - shown_ms[1], SWITCH_LIMIT_MS)
        s = self.state()
        self.assertEqual(len(s["keys"]), 234)  # the unit is tokens again
        self.assertEqual(self.errors(), [])

    def test_language_model_shows_causal_self_attention(self):
        self.show("shakespeare-char", "ROMEO: what light")
        d = self.driver
        radios = d.find_elements(By.CSS_SELECTOR, "input[name=kind]")
        self.assertEqual([r.get_attribute("value") for r in radios], ["decoder_self"])
        s = self.state(True)
        self.assertEqual(len(s["weights"]), 17 * 17)
        # nothing on later positions: the upper triangle is white, in the weights and on the canvas
        sums = d.execute_script(CELL_SUMS)
        self.assertEqual(len(sums), 17 * 17)
        later = [(i, j) for i in range(17) for j in range(17) if j > i]
        self.assertEqual({s["weights"][i * 17 + j] for i, j in later}, {0.0})
        self.assertEqual({sums[i * 17 + j] for i, j in later}, {247 + 251 + 255})

    def test_rollout_matches_numpy_and_is_drawn(self):
        # /v1/attention's rollout against NumPy's, computed here from the same per-layer weights:
        #   Â_l = 0.5 · mean_h A_l[h] + 0.5 · I, rows renormalised; rollout = Â_L ··· Â_1
        import numpy as np
        for model, text, name in (("en-fr", SENTENCE, "encoder_self"), ("shakespeare-char", "ROMEO: what light", "decoder_self")):
            api = post(self.port, "/v1/attention", {"model": model, "text": text, "detail": "rollout"})
            k = next(k for k in api["kinds"] if k["name"] == name)
            self.assertNotIn("rollout", next((c for c in api["kinds"] if c["name"] == "cross"), {}))
            want = None
            for layer in k["layers"]:
                a = 0.5 * np.asarray(layer, dtype=np.float64).mean(axis=0) + 0.5 * np.eye(len(layer[0]))
                a /= a.sum(axis=1, keepdims=True)
                want = a if want is None else a @ want
            got = np.asarray(k["rollout"])
            self.assertEqual(got.shape, want.shape)
            self.assertLess(np.abs(got - want).max(), 2e-4, model)
            if name == "decoder_self":
                self.assertEqual(np.abs(np.triu(got, 1)).max(), 0.0)  # causal stays causal
            # the page: the layer list's "rollout" entry draws the same matrix, head list disabled
            self.show(model, text)
            if model == "en-fr":
                self.driver.find_element(By.ID, "kind-" + name).click()
            Select(self.driver.find_element(By.ID, "layer")).select_by_value("rollout")
            s = self.state(True)
            self.assertTrue(s["rollout"])
            self.assertWeights(s["weights"], k["rollout"])
            self.assertFalse(self.driver.find_element(By.ID, "head").is_enabled())
            self.assertIn("attention rollout across %d layers" % len(k["layers"]), self.driver.find_element(By.ID, "legend").text)
            self.driver.find_element(By.ID, "unit-words").click()  # words: rows still sum to 1
            w = self.state(True)
            self.assertTrue(w["rollout"])
            n = len(w["keys"])
            for i in range(len(w["queries"])):
                self.assertAlmostEqual(sum(w["weights"][i * n:(i + 1) * n]), 1.0, places=3)
            Select(self.driver.find_element(By.ID, "layer")).select_by_value("0")  # back to a head
            self.assertFalse(self.state()["rollout"])
            self.assertTrue(self.driver.find_element(By.ID, "head").is_enabled())
            self.assertEqual(self.errors(), [])
        bad = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/attention", method="POST",
                                     data=json.dumps({"text": SENTENCE, "detail": "everything"}).encode(),
                                     headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad)
        self.assertEqual(e.exception.code, 400)

    def test_flow_is_asked_for_and_drawn(self):
        # the layer list's "flow" entry asks /v1/attention for "detail": "flow" once and draws each
        # kind's attention flow (u8: within 1/510 of the JSON's), the head list disabled; a kind of
        # more than 128 tokens has no such entry
        d = self.driver
        for model, text, name in (("shakespeare-char", "ROMEO: what light", "decoder_self"), ("en-fr", SENTENCE, "encoder_self")):
            api = post(self.port, "/v1/attention", {"model": model, "text": text, "detail": "flow"})
            k = next(k for k in api["kinds"] if k["name"] == name)
            self.show(model, text)
            if model == "en-fr":
                d.find_element(By.ID, "kind-" + name).click()
            Select(d.find_element(By.ID, "layer")).select_by_value("flow")
            WebDriverWait(d, 120).until(lambda d: d.execute_script("return document.body.dataset.flow") in ("ready", "error"))
            self.assertEqual(d.execute_script("return document.body.dataset.flow"), "ready", d.find_element(By.ID, "status").text)
            s = self.state(True)
            self.assertEqual(s["rollout"], "flow")
            flat = [v for row in k["flow"] for v in row]
            self.assertEqual(len(s["weights"]), len(flat))
            self.assertLessEqual(max(abs(a - b) for a, b in zip(s["weights"], flat)), 1 / 510 + 1e-4)
            self.assertFalse(d.find_element(By.ID, "head").is_enabled())
            self.assertIn("attention flow through %d layers" % len(k["layers"]), d.find_element(By.ID, "legend").text)
            Select(d.find_element(By.ID, "layer")).select_by_value("rollout")  # and back to the rollout
            self.assertEqual(self.state()["rollout"], "rollout")
            self.assertEqual(self.errors(), [])
        self.show("en-fr", LONG)  # 234 encoder tokens: rollout, no flow
        values = [o.get_attribute("value") for o in Select(d.find_element(By.ID, "layer")).options]
        self.assertIn("rollout", values)
        self.assertNotIn("flow", values)

    def test_neuron_view_is_the_heads_row_step_by_step(self):
        import numpy as np
        for model, text, (layer, head, query), name in (
                ("shakespeare-char", "ROMEO: what light", (1, 2, 9), "decoder_self"),
                ("bert-uncased", "The cat sat on the mat because it was tired.", (1, 3, 4), "encoder_self"),
                ("en-fr", SENTENCE, (2, 5, 8), "encoder_self")):
            maps = post(self.port, "/v1/attention", {"model": model, "text": text})
            api = post(self.port, "/v1/attention", {"model": model, "text": text, "detail": "neuron",
                                                    "neuron": {"layer": layer, "head": head, "query": query}})
            self.assertNotIn("kinds", api)
            n = api["neuron"]
            self.assertEqual((n["kind"], n["layer"], n["head"], n["query"]), (name, layer, head, query))
            q, keys = np.asarray(n["queries"][query], dtype=np.float64), n["keys"]
            T = len(n["tokens"])
            causal = name == "decoder_self"
            seen = [j for j in range(T) if not causal or j <= query]
            # by hand: q·k/√d, then the softmax, is the returned weights and the map's row
            s = np.array([q @ np.asarray(keys[j], dtype=np.float64) / np.sqrt(n["head_dim"]) for j in seen])
            w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            self.assertLess(np.abs(np.array([n["scores"][j] for j in seen]) - s).max(), 1e-5)
            self.assertLess(np.abs(np.array([n["weights"][j] for j in seen]) - w).max(), 1e-6)
            row = next(k for k in maps["kinds"] if k["name"] == name)["layers"][layer][head][query]
            self.assertLess(max(abs(a - b) for a, b in zip(n["weights"], row)), 1e-4)
            if causal:
                self.assertEqual([n["scores"][j] for j in range(query + 1, T)], [None] * (T - query - 1))
                self.assertEqual([n["products"][j] for j in range(query + 1, T)], [[]] * (T - query - 1))
            self.assertLess(np.abs(np.asarray(n["products"][seen[-1]]) - q * np.asarray(keys[seen[-1]])).max(), 1e-5)
            # the page: the same choice, its own arithmetic from the vectors, the API's answer
            self.show(model, text)
            d = self.driver
            Select(d.find_element(By.ID, "neuron-layer")).select_by_value(str(layer))
            Select(d.find_element(By.ID, "neuron-head")).select_by_value(str(head))
            Select(d.find_element(By.ID, "neuron-query")).select_by_value(str(query))
            d.find_element(By.ID, "neuron-go").click()
            WebDriverWait(d, 60).until(lambda d: d.execute_script("return document.body.dataset.neuron") in ("ready", "error"))
            self.assertEqual(d.execute_script("return document.body.dataset.neuron"), "ready",
                             d.find_element(By.ID, "neuron-status").text)
            page = d.execute_script("return window.qkvViewer.neuron()")
            self.assertEqual(page["tokens"], n["tokens"])
            for j in range(T):
                if j in seen:
                    # the API's scores are f32 sums (as the numpy check above, within 1e-5), the page's f64
                    self.assertAlmostEqual(page["page"]["scores"][j], n["scores"][j], delta=1e-5)
                else:
                    self.assertIsNone(page["page"]["scores"][j])
                self.assertAlmostEqual(page["page"]["weights"][j], n["weights"][j], places=6)
            canvas = d.find_element(By.ID, "neuron")
            self.assertGreater(canvas.size["height"], T * 18)  # a row per key
            # a click on a heat-map cell of the head shown (layer 1, head 1) shows its row's neuron view
            heat = d.find_element(By.ID, "heatmap")
            left, top, cell = (float(heat.get_attribute("data-" + a)) for a in ("left", "top", "cell"))
            row = 2
            d.execute_script("""
                const c = arguments[0], b = c.getBoundingClientRect();
                c.dispatchEvent(new MouseEvent('click', {clientX: b.left + arguments[1], clientY: b.top + arguments[2], bubbles: true}));""",
                heat, left + 0.5 * cell, top + (row + 0.5) * cell)
            WebDriverWait(d, 60).until(lambda d: (d.execute_script("return window.qkvViewer.neuron()") or {}).get("query") == row)
            clicked = d.execute_script("return window.qkvViewer.neuron()")
            self.assertEqual((clicked["layer"], clicked["head"], clicked["query"]), (0, 0, row))
            shown = self.state(True)["weights"][row * T:(row + 1) * T]
            self.assertLess(max(abs(a - b) for a, b in zip(clicked["weights"], shown)), 1e-4)
            self.assertEqual(self.errors(), [])
        # refusals: a query out of range, a head out of range, a missing field, "neuron" without its detail
        for body in ({"model": "en-fr", "text": SENTENCE, "detail": "neuron", "neuron": {"layer": 0, "head": 0, "query": 99}},
                     {"model": "bert-uncased", "text": "a cat", "detail": "neuron", "neuron": {"layer": 0, "head": 99, "query": 0}},
                     {"model": "bert-uncased", "text": "a cat", "detail": "neuron", "neuron": {"layer": 0, "head": 0}},
                     {"model": "bert-uncased", "text": "a cat", "neuron": {"layer": 0, "head": 0, "query": 0}}):
            bad = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/attention", method="POST",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            with self.assertRaises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(bad)
            self.assertEqual(e.exception.code, 400, body)

    def neuron_on_page(self, layer, head, query):
        """Chooses layer, head and query in the page's neuron view, shows it: the page's answer."""
        d = self.driver
        Select(d.find_element(By.ID, "neuron-layer")).select_by_value(str(layer))
        Select(d.find_element(By.ID, "neuron-head")).select_by_value(str(head))
        Select(d.find_element(By.ID, "neuron-query")).select_by_value(str(query))
        d.find_element(By.ID, "neuron-go").click()
        WebDriverWait(d, 60).until(lambda d: d.execute_script("return document.body.dataset.neuron") in ("ready", "error"))
        self.assertEqual(d.execute_script("return document.body.dataset.neuron"), "ready",
                         d.find_element(By.ID, "neuron-status").text)
        return d.execute_script("return window.qkvViewer.neuron()")

    def test_neuron_view_of_a_llama_and_a_translators_decoder(self):
        import numpy as np
        for model, text, name, (layer, head, query) in (
                ("llama-gqa", "The cat didn't cross the street because it was", "decoder_self", (1, 3, 11)),
                ("en-fr", SENTENCE, "decoder_self", (2, 5, 6)),
                ("en-fr", SENTENCE, "cross", (2, 5, 6))):
            with self.subTest(model=model, kind=name):
                body = {"model": model, "text": text}
                maps = post(self.port, "/v1/attention", body)
                nb = {"layer": layer, "head": head, "query": query}
                if model == "en-fr":
                    nb["kind"] = name
                n = post(self.port, "/v1/attention", dict(body, detail="neuron", neuron=nb))["neuron"]
                k = next(k for k in maps["kinds"] if k["name"] == name)
                self.assertEqual((n["kind"], n["layer"], n["head"], n["query"]), (name, layer, head, query))
                self.assertEqual(n["tokens"], k["queries"]["tokens"])
                self.assertEqual(n["key_tokens"], k["keys"]["tokens"])
                if model == "llama-gqa":
                    self.assertEqual(n["kv_head"], head // 2)  # 4 heads on 2 key/value heads
                causal = name == "decoder_self"
                Tk = len(n["key_tokens"])
                seen = [j for j in range(Tk) if not causal or j <= query]
                q = np.asarray(n["queries"][query], dtype=np.float64)
                s = np.array([q @ np.asarray(n["keys"][j], dtype=np.float64) / np.sqrt(n["head_dim"]) for j in seen])
                w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
                self.assertLess(np.abs(np.array([n["weights"][j] for j in seen]) - w).max(), 1e-6)
                self.assertLess(max(abs(a - b) for a, b in zip(n["weights"], k["layers"][layer][head][query])), 1e-4)
                # the page: the kind chosen above the heat map is the neuron view's
                self.show(model, text)
                if model == "en-fr":
                    self.driver.find_element(By.ID, "kind-" + name).click()
                page = self.neuron_on_page(layer, head, query)
                self.assertEqual((page["kind"], page["key_tokens"]), (name, n["key_tokens"]))
                for j in range(Tk):
                    self.assertAlmostEqual(page["page"]["weights"][j], n["weights"][j], places=6)
                self.assertGreater(self.driver.find_element(By.ID, "neuron").size["height"], Tk * 18)
                self.assertEqual(self.errors(), [])
        bad = {"model": "llama-gqa", "text": "a cat", "detail": "neuron", "neuron": {"layer": 0, "head": 0, "query": 0, "kind": "cross"}}
        with self.assertRaises(urllib.error.HTTPError) as e:
            post(self.port, "/v1/attention", bad)
        self.assertEqual(e.exception.code, 400)

    def test_head_search_across_every_loaded_model(self):
        ids = [m["id"] for m in json.load(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models"))["models"]]
        want = []
        for m in ids:
            body = {"model": m, "text": SENTENCE, "search": {"query": "it", "key": "cat"}}
            if m == "en-fr":
                body["beam_size"] = 4
            for r in post(self.port, "/v1/attention", body)["search"]:
                want.append((m, r["kind"], r["layer"], r["head"], r["weight"]))
        want.sort(key=lambda r: -r[4])
        self.show("en-fr", SENTENCE)
        d = self.driver
        d.find_element(By.ID, "search-all").click()
        self.search("it", "cat", "click")
        WebDriverWait(d, 120).until(lambda d: d.execute_script("return document.body.dataset.search") == "ready")
        got = d.execute_script("return searchAll.ranked.map((r) => [r.model, r.kind, r.layer, r.head, r.weight])")
        self.assertEqual(len(got), len(want))
        self.assertEqual({g[0] for g in got}, set(ids))  # every model's heads
        for g, w in zip(got, want):
            self.assertAlmostEqual(g[4], w[4], places=5)
        self.assertEqual([tuple(g[:4]) for g in got[:3]], [w[:4] for w in want[:3]])
        items = d.find_elements(By.CSS_SELECTOR, "#search-results li")
        self.assertEqual(len(items), 10)
        self.assertIn("best of %d heads in %d models" % (len(want), len(ids)), d.find_element(By.ID, "search-best").text)
        # a click on the first head of another model shows that model's view there
        other = next(i for i, g in enumerate(got[:10]) if g[0] != "en-fr") if any(g[0] != "en-fr" for g in got[:10]) else None
        if other is not None:
            items[other].click()
            WebDriverWait(d, 120).until(lambda d: d.execute_script(
                "return document.getElementById('model').value === arguments[0] && document.body.dataset.state === 'ready'", got[other][0]))
            s = self.state()
            self.assertEqual((s["kind"], s["layer"], s["head"]), tuple(got[other][1:4]))
            self.assertEqual(len(d.find_elements(By.CSS_SELECTOR, "#search-results li")), 10)  # the list stays
        self.assertEqual(self.errors(), [])

    def test_256_tokens_view_latency_after_the_answer(self):
        # Issue 50's measure: the view of a 256-token input drawn within 1 s of the answer's arrival
        # (from the resource timing's responseEnd to the frame after the view is drawn), three times;
        # the median is printed against the goal and held to SWITCH_LIMIT_MS (2 s): the test machine
        # is 2 shared cores, and the goal is reported rather than made a flaky failure.
        d = self.driver
        self.load()
        Select(d.find_element(By.ID, "model")).select_by_value("en-fr")
        d.execute_script("document.getElementById('text').value = arguments[0]; document.getElementById('beam').value = '1'", LONG256)
        runs = []
        for _ in range(3):
            ms = d.execute_async_script("""
                const done = arguments[arguments.length - 1], t0 = performance.now();
                performance.clearResourceTimings();
                document.getElementById('go').click();
                const wait = () => document.body.dataset.state === 'busy' ? setTimeout(wait, 1)
                  : requestAnimationFrame(() => setTimeout(() => {
                      const t = performance.now(), r = performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/v1/attention')).pop();
                      done([t - t0, r ? r.responseEnd - r.startTime : -1, r ? t - r.responseEnd : -1, r ? r.encodedBodySize : -1]);
                    }, 0));
                setTimeout(wait, 1);""")
            self.wait_state("ready")
            s = self.state()
            self.assertEqual(len(s["keys"]), 256)
            self.assertGreater(ms[2], 0)
            runs.append(ms[2])
            print("\n256-token input (en-fr, encoder self-attention %d×256, %s): request %.0f ms (%d bytes), view drawn "
                  "%.0f ms after the answer arrived (%s); total %.0f ms"
                  % (len(s["queries"]), s["encoding"], ms[1], ms[3], ms[2],
                     ", ".join("%s %.0f" % kv for kv in list((s.get("show") or {}).items()) + list(s["timings"].items())), ms[0]),
                  file=sys.stderr)
        median = sorted(runs)[1]
        print("256-token view latency after the answer: median %.0f ms of %s (issue 50's goal: 1000 ms: %s)"
              % (median, ", ".join("%.0f" % r for r in runs), "met" if median <= 1000 else "NOT met"), file=sys.stderr)
        self.assertLessEqual(median, SWITCH_LIMIT_MS)
        self.assertEqual(self.errors(), [])

    def test_pictures(self):
        """The README's pictures of the newer views, from --picture-model or the random BERT: the head
        grid (bertviz's model view), the rollout and the neuron view of "it"'s row in the head where
        "it" looks at "cat" most. Saved only with --screenshot; what is drawn is checked either way."""
        d = self.driver
        model = os.path.splitext(os.path.basename(ARGS.picture_model))[0] if ARGS.picture_model else "bert-uncased"
        api = post(self.port, "/v1/attention", {"model": model, "text": SENTENCE, "search": {"query": "it", "key": "cat"}})
        self.show(model, SENTENCE)
        self.search("it", "cat", "click")
        best = api["search"][0]
        s = self.state()
        self.assertEqual((s["kind"], s["layer"], s["head"]), (best["kind"], best["layer"], best["head"]))
        k = next(k for k in api["kinds"] if k["name"] == best["kind"])
        it = k["queries"]["word"].index(best["query_word"])  # "it"'s first token
        saved = []

        def save(element_id, suffix):
            if ARGS.screenshot:
                path = re.sub(r"(\.png)?$", suffix, ARGS.screenshot, count=1)
                el = d.find_element(By.ID, element_id)
                # the whole heat map, not the part its scroll box shows
                d.execute_script("arguments[0].parentElement.style.maxHeight = 'none'; arguments[0].scrollIntoView()", el)
                el.screenshot(path)
                saved.append(path)
        # every head (the model view), the chosen one outlined
        self.assertEqual(len(d.find_elements(By.CSS_SELECTOR, "#grid canvas.thumb")), len(k["layers"]) * len(k["layers"][0]))
        save("grid", "-heads.png")
        # the rollout across the layers
        Select(d.find_element(By.ID, "layer")).select_by_value("rollout")
        self.assertTrue(self.state()["rollout"])
        save("heatmap", "-rollout.png")
        Select(d.find_element(By.ID, "layer")).select_by_value(str(best["layer"]))
        # the neuron view of "it" in that head
        page = self.neuron_on_page(best["layer"], best["head"], it)
        self.assertEqual(page["query"], it)
        self.assertAlmostEqual(sum(page["weights"]), 1.0, places=6)
        save("neuron-section", "-neuron.png")
        self.assertEqual(self.errors(), [])
        for p in saved:
            print("screenshot:", p, "(%d bytes)" % os.path.getsize(p), file=sys.stderr)

    def test_u8_encoding_is_the_weights_as_bytes(self):
        import base64
        import numpy as np
        exact = post(self.port, "/v1/attention", {"model": "en-fr", "text": SENTENCE, "detail": "rollout"})
        u8 = post(self.port, "/v1/attention", {"model": "en-fr", "text": SENTENCE, "detail": "rollout", "encoding": "u8"})
        self.assertEqual(u8["output"], exact["output"])
        for e, c in zip(exact["kinds"], u8["kinds"]):
            want = np.asarray(e["layers"], dtype=np.float64)
            self.assertEqual(c["layers"]["encoding"], "u8")
            self.assertEqual(c["layers"]["shape"], list(want.shape))
            got = np.frombuffer(base64.b64decode(c["layers"]["data"]), dtype=np.uint8).reshape(want.shape)
            self.assertLessEqual(np.abs(got - np.round(want * 255)).max(), 1)  # (JSON's 5 decimals)
            self.assertLessEqual(np.abs(got / 255 - want).max(), 1 / 510 + 1e-5)
            if "rollout" in e:
                r = np.asarray(e["rollout"])
                gr = np.frombuffer(base64.b64decode(c["rollout"]["data"]), dtype=np.uint8).reshape(r.shape)
                self.assertLessEqual(np.abs(gr / 255 - r).max(), 1 / 510 + 1e-5)
        # the page asks for it for a long input, and draws the API's weights within 1/510
        api = post(self.port, "/v1/attention", {"model": "en-fr", "text": LONG, "beam_size": 4})
        self.show("en-fr", LONG)
        s = self.state(True)
        self.assertEqual(s["encoding"], "u8")
        enc = next(k for k in api["kinds"] if k["name"] == "encoder_self")
        flat = [v for row in enc["layers"][0][0] for v in row]
        self.assertEqual(len(s["weights"]), len(flat))
        self.assertLessEqual(max(abs(a - b) for a, b in zip(s["weights"], flat)), 1 / 510 + 1e-5)
        self.search("it", "cat", "click")  # the head search runs on the unpacked maps
        self.assertTrue(self.driver.find_element(By.ID, "search-best").text.startswith("best:"))
        self.assertEqual(self.errors(), [])
        bad = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/attention", method="POST",
                                     data=json.dumps({"text": SENTENCE, "encoding": "f64"}).encode(),
                                     headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad)
        self.assertEqual(e.exception.code, 400)

    def test_recurrent_translator_and_captioner(self):
        import base64
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        subprocess.run([ARGS.qkv, "scenes", "--split", "test", "-n", "1", "-o", self.tmp.name], check=True, cwd=root,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        picture = os.path.join(self.tmp.name, "test-0.png")
        log = open(os.path.join(self.tmp.name, "serve-every-kind.log"), "w")
        server = subprocess.Popen([ARGS.qkv, "serve", "--port", "0", "--threads", "2", "-m", "models/en-fr-gru.safetensors",
                                   "-m", "models/captioner.safetensors", "--keep-alive-timeout", "5"], cwd=root,
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            port, deadline = 0, time.time() + 60
            while not port and time.time() < deadline:
                with open(log.name) as f:
                    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
                port = int(m.group(1)) if m else time.sleep(0.05) or 0
            self.assertTrue(port, "qkv serve did not start (its log: %s)" % log.name)
            d = self.driver
            d.get(f"http://127.0.0.1:{port}/")
            d.execute_script(CATCH_ERRORS)
            self.wait_state("models")
            # the GRU translator: one cross-attention head, no rollout, no neuron view
            api = post(port, "/v1/attention", {"model": "en-fr-gru", "text": SENTENCE, "beam_size": 4})
            self.show("en-fr-gru", SENTENCE, load=False)
            s = self.state(True)
            self.assertEqual((s["kind"], s["layer"], s["head"], s["rollout"]), ("cross", 0, 0, False))
            self.assertWeights(s["weights"], api["kinds"][0]["layers"][0][0])
            self.assertEqual([o.get_attribute("value") for o in Select(d.find_element(By.ID, "layer")).options], ["0"])
            self.assertFalse(d.find_element(By.ID, "neuron-go").is_enabled())
            # the captioner: a picture file, the API's caption and map, the picture once per step
            with open(picture, "rb") as f:
                api = post(port, "/v1/attention", {"model": "captioner", "image": base64.b64encode(f.read()).decode(),
                                                   "beam_size": 4})
            Select(d.find_element(By.ID, "model")).select_by_value("captioner")
            self.assertFalse(d.find_element(By.ID, "text").is_displayed())
            d.find_element(By.ID, "image").send_keys(picture)
            d.find_element(By.ID, "go").click()
            self.wait_state("ready")
            self.assertEqual(d.find_element(By.ID, "output").text, "→ " + api["output"])
            s = self.state(True)
            k = api["kinds"][0]
            self.assertEqual(s["kind"], "image")
            self.assertEqual(len(s["keys"]), k["grid"][0] * k["grid"][1])
            self.assertWeights(s["weights"], k["layers"][0][0])
            WebDriverWait(d, 30).until(lambda d: d.execute_script("return document.body.dataset.picture") == "ready")
            steps = d.find_elements(By.CSS_SELECTOR, "#picture canvas.picture-step")
            self.assertEqual(len(steps), len(k["queries"]["tokens"]))
            self.assertEqual([c.text for c in d.find_elements(By.CSS_SELECTOR, "#picture figcaption")], k["queries"]["tokens"])
            if ARGS.screenshot:
                path = re.sub(r"(\.png)?$", "-captioner.png", ARGS.screenshot, count=1)
                d.find_element(By.ID, "picture").screenshot(path)
                print("screenshot:", path, file=sys.stderr)
            self.assertEqual(self.errors(), [])
        finally:
            self.driver.get("about:blank")  # (the page's keep-alive connections closed before the server stops)
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                raise
            finally:
                log.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qkv", required=True, help="the qkv binary")
    parser.add_argument("--screenshot", help="where to save a screenshot of the page")
    parser.add_argument("--picture-model", help="a model file test_pictures draws (default: the random BERT)")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
