#!/usr/bin/env python3
"""The attention viewer in a real browser (Debian's chromium + chromium-driver, driven by
python3-selenium): starts `qkv serve` on a free loopback port, loads the page, shows a sentence's
attention, and checks what the page drew against what the API says:

  - the translation on the page is the API's;
  - the heat map has one cell per weight (queries × keys of the chosen layer and head), and the
    head grid one thumbnail per layer and head;
  - switching to cross-attention redraws the heat map with the cross axes;
  - hovering a query token in the line view leaves only that token's lines;
  - the head search ("it" → "cat") jumps to the same best kind, layer and head as the API's
    search, and the page shows that head;
  - a language model's page shows its causal self-attention.

A screenshot of the page goes to --screenshot. Run by ctest (tests/CMakeLists.txt); fails, never
skips, when the browser is missing: the README's test command installs it.

Usage: viewer_test.py --qkv build/qkv [--screenshot build/viewer.png]
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

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

ARGS = None
SENTENCE = "The cat didn't cross the street because it was too tired."


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


class Viewer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        cls.log = tempfile.NamedTemporaryFile(prefix="qkv-serve-", suffix=".log", delete=False)
        cls.server = subprocess.Popen([ARGS.qkv, "serve", "--port", "0", "--threads", "2"], cwd=root,
                                      stdout=cls.log, stderr=subprocess.STDOUT)
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

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.server.send_signal(signal.SIGTERM)
        cls.server.wait(timeout=30)
        cls.log.close()
        os.unlink(cls.log.name)

    def wait_state(self, state, timeout=120):
        WebDriverWait(self.driver, timeout).until(
            lambda d: d.execute_script("return document.body.dataset.state") in (state, "error"))
        self.assertEqual(self.driver.execute_script("return document.body.dataset.state"), state,
                         self.driver.find_element(By.ID, "status").text)

    def show(self, model, text):
        d = self.driver
        d.get(f"http://127.0.0.1:{self.port}/")
        self.wait_state("models")
        Select(d.find_element(By.ID, "model")).select_by_value(model)
        box = d.find_element(By.ID, "text")
        box.clear()
        box.send_keys(text.replace("\n", ""))  # (Enter would submit)
        d.find_element(By.ID, "go").click()
        self.wait_state("ready")

    def cells(self):
        return len(self.driver.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell"))

    def test_translation_heat_maps_lines_grid_and_head_search(self):
        api = post(self.port, "/v1/attention", {"model": "en-fr", "text": SENTENCE,
                                                "search": {"query": "it", "key": "cat"}})
        self.show("en-fr", SENTENCE)
        d = self.driver
        self.assertEqual(d.find_element(By.ID, "output").text, "→ " + api["output"])
        kinds = {k["name"]: k for k in api["kinds"]}
        enc = kinds["encoder_self"]
        layers, heads = len(enc["layers"]), len(enc["layers"][0])
        # the encoder's self-attention first: a cell per (query, key), a thumbnail per layer and head
        self.assertEqual(self.cells(), len(enc["queries"]["tokens"]) * len(enc["keys"]["tokens"]))
        self.assertEqual(len(d.find_elements(By.CSS_SELECTOR, "#grid canvas.thumb")), layers * heads)
        # the cell colours follow the weights: the darkest cell is the largest weight of the head
        fills = d.execute_script("return [...document.querySelectorAll('#heatmap rect.cell')].map("
                                 "r => r.getAttribute('fill').match(/\\d+/g).map(Number).reduce((a, b) => a + b))")
        flat = [v for row in enc["layers"][0][0] for v in row]
        self.assertAlmostEqual(flat[fills.index(min(fills))], max(flat), places=4)

        # cross-attention: queries are the output tokens, keys the source
        d.find_element(By.ID, "kind-cross").click()
        cross = kinds["cross"]
        self.assertEqual(self.cells(), len(cross["queries"]["tokens"]) * len(cross["keys"]["tokens"]))
        labels = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#heatmap text.qlabel")]
        self.assertEqual(labels, [t.replace(" ", "␣") for t in cross["queries"]["tokens"]])

        # the line view: hovering the second query token leaves only its lines
        token = d.find_elements(By.CSS_SELECTOR, "#lines text.tok")[1]
        ActionChains(d).move_to_element(token).perform()
        shown = d.execute_script("return [...document.querySelectorAll('#lines line.link')]"
                                 ".filter(l => l.style.display !== 'none').map(l => l.dataset.q)")
        self.assertTrue(shown)
        self.assertEqual(set(shown), {"1"})

        # the head search answers as the API does, and the page shows that head
        d.find_element(By.ID, "search-query").clear()
        d.find_element(By.ID, "search-query").send_keys("it")
        d.find_element(By.ID, "search-key").clear()
        d.find_element(By.ID, "search-key").send_keys("cat")
        d.find_element(By.ID, "search-go").click()
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
        if ARGS.screenshot:
            d.save_screenshot(ARGS.screenshot)
            print("screenshot:", ARGS.screenshot, file=sys.stderr)

    def test_language_model_shows_causal_self_attention(self):
        self.show("shakespeare-char", "ROMEO: what light")
        d = self.driver
        radios = d.find_elements(By.CSS_SELECTOR, "input[name=kind]")
        self.assertEqual([r.get_attribute("value") for r in radios], ["decoder_self"])
        self.assertEqual(self.cells(), 17 * 17)
        # nothing on later positions: the upper triangle is white
        later = d.execute_script("return [...document.querySelectorAll('#heatmap rect.cell')]"
                                 ".filter(r => +r.dataset.k > +r.dataset.q).map(r => r.getAttribute('fill'))")
        self.assertEqual(set(later), {"rgb(247,251,255)"})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qkv", required=True, help="the qkv binary")
    parser.add_argument("--screenshot", help="where to save a screenshot of the page")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
