#!/usr/bin/env python3
"""serve_browser_test.py — the attention explorer in a real browser (headless Chromium driven by
Selenium) against a real `attn serve` on a model that reverses 8 digits.

    serve_browser_test.py ATTN_BINARY MODEL_DIR SHOT_DIR [LM_DIR]

The lab panel: after a keyboard move of the tau slider, the weights the page draws (read back
from the DOM) equal POST /v1/lab/attention's for that tau (1e-6), and differ from those of the
tau before (a control); the causal box makes every cell above the diagonal 0 (and changes
cells: a control); PAD keys make their columns 0. The model panel: typing `3 7 1 4 9 2 8 5`
streams `5 8 2 9 4 1 7 3` token by token, the cross-attention cells drawn equal
/v1/attention's, the head average holds each row's maximum on the anti-diagonal (a control: not
on the diagonal), clicking a token shows its row of every layer and head, and the model's
three figures load. With LM_DIR, a decoder-only model too: the page streams the greedy
continuation of a prompt, clicking a token shows the self-attention row that produced it in
every layer and head (equal to /v1/attention's), the head average is causal (zeros above the
diagonal; a control: the weights below it are not all zero), and its figures load. A screenshot
of each panel goes to SHOT_DIR; the browser's log must hold no error.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import requests
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checks, Served  # noqa: E402

attn, model_dir, shots = sys.argv[1], sys.argv[2], sys.argv[3]
lm_dir = sys.argv[4] if len(sys.argv) > 4 else None
source_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
os.makedirs(shots, exist_ok=True)
check = Checks("serve_browser")
SOURCE, REVERSED = "3 7 1 4 9 2 8 5", "5 8 2 9 4 1 7 3"


def browser(profile):
    opts = Options()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000",
              "--no-first-run", "--disable-extensions", "--user-data-dir=" + profile):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=opts)


def wait(what, cond, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            v = cond()
            if v:
                return v
        except Exception:  # noqa: BLE001 - the page is still changing
            pass
        time.sleep(0.05)
    check.true(False, "timed out waiting for " + what)
    return None


def table(driver, css):
    """The data-value of every cell of the table at css, as a matrix (None for masked scores)."""
    rows = driver.execute_script(
        "const t = document.querySelector(arguments[0]); if (!t) return null;"
        "return [...t.tBodies[0].rows].map(r => [...r.cells].filter(c => c.tagName === 'TD').map(c => c.dataset.value));",
        css)
    if rows is None:
        return None
    return [[None if v == "masked" else float(v) for v in r] for r in rows]


def close(a, b, tol=1e-6):
    return (a is not None and len(a) == len(b) and all(len(x) == len(y) for x, y in zip(a, b)) and
            all(abs(u - v) <= tol for x, y in zip(a, b) for u, v in zip(x, y)))


def docs_examples(s):
    """docs/explorer.md's marked curl blocks, run against the server (every curl failing on an
    HTTP error); each answer must be JSON without an error."""
    doc = open(os.path.join(source_dir, "docs", "explorer.md"), encoding="utf-8").read()
    blocks = re.findall(r"<!-- explorer docs example:[^>]*-->\s*```sh\n(.*?)```", doc, re.S)
    check.eq(len(blocks), 2, "docs/explorer.md has two marked example blocks")
    answers = 0
    for block in blocks:
        script = block.replace("127.0.0.1:8080", "127.0.0.1:%d" % s.port).replace("curl ", "curl --fail-with-body ")
        r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], capture_output=True, text=True, timeout=120)
        check.eq(r.returncode, 0, "the docs example runs: " + r.stderr[-1000:] + r.stdout[-1000:])
        text, at = r.stdout, 0
        while text[at:].strip():  # the answers follow one another (curl adds no newline)
            at += len(text[at:]) - len(text[at:].lstrip())
            obj, at = json.JSONDecoder().raw_decode(text, at)
            answers += 1
            check.true("error" not in obj, "a docs example answers without error")
    check.eq(answers, 4, "four answers from the docs examples")


def figures_load(d, what):
    d.find_element(By.CSS_SELECTOR, "#model-figures summary").send_keys(Keys.ENTER)
    loaded = wait(what + " figures", lambda: d.execute_script(
        "const i = [...document.querySelectorAll('#model-figures-body img')];"
        "return i.length === 3 && i.every(x => x.complete && x.naturalWidth > 0) ? i.map(x => x.dataset.figure) : null;"))
    check.eq(loaded, ["architecture", "multihead", "steps"], what + ": the architecture, multi-head and steps figures")


with Served(attn, model_dir) as s, tempfile.TemporaryDirectory() as profile:
    docs_examples(s)
    d = browser(profile)
    try:
        api = lambda path, body: requests.post(s.url(path), json=body, timeout=60).json()  # noqa: E731
        d.get(s.url("/"))
        updates = lambda: int(d.find_element(By.TAG_NAME, "body").get_attribute("data-lab-updates") or 0)  # noqa: E731
        wait("the lab's first drawing", lambda: updates() >= 1)
        check.eq(d.title, "attn: attention explorer", "the page's title")

        # ---- the lab -------------------------------------------------------------------------
        for field, value in (("lab-queries", "6"), ("lab-keys", "6"), ("lab-dim", "8"), ("lab-seed", "5")):
            el = d.find_element(By.ID, field)
            el.send_keys(Keys.CONTROL, "a")
            el.send_keys(value)
        before = updates()
        d.find_element(By.ID, "lab-random").send_keys(Keys.ENTER)  # a keyboard press on the button
        wait("the new random Q, K, V", lambda: updates() > before and len(table(d, "#lab-weights-table")) == 6 and
             float(d.find_element(By.ID, "lab-weights-table").get_attribute("data-tau")) == math.sqrt(8))
        shape = {"queries": 6, "keys": 6, "dim": 8, "seed": 5}
        first = table(d, "#lab-weights-table")
        at_default = api("/v1/lab/attention", shape)
        check.true(close(first, at_default["weights"]), "the drawn weights are the endpoint's at tau = sqrt(d_k)")

        slider = d.find_element(By.ID, "lab-tau")
        for _ in range(8):
            slider.send_keys(Keys.ARROW_RIGHT)
        tau = float(slider.get_attribute("value"))
        check.true(abs(tau - math.sqrt(8)) > 0.1, "the slider moved (tau %g)" % tau)
        wait("the weights for the moved slider",
             lambda: abs(float(d.find_element(By.ID, "lab-weights-table").get_attribute("data-tau")) - tau) < 1e-12)
        drawn = table(d, "#lab-weights-table")
        want = api("/v1/lab/attention", dict(shape, tau=tau))
        check.true(close(drawn, want["weights"]), "after the slider: the drawn weights are the endpoint's for tau %g" % tau)
        check.true(not close(drawn, at_default["weights"]), "control: they differ from the weights at the old tau")
        scores = table(d, "#lab-scores table")
        check.true(close(scores, want["scaled"]), "the drawn scores are Q K^T / tau")
        out_row = table(d, "#lab-output-table")
        check.true(close(out_row, [want["output"][0]]), "the chosen query's output vector (q0)")
        sel = d.find_element(By.ID, "lab-query")
        sel.send_keys(Keys.ARROW_DOWN)  # keyboard: q1
        wait("query q1's output", lambda: close(table(d, "#lab-output-table"), [want["output"][1]]))

        d.find_element(By.ID, "lab-causal").send_keys(Keys.SPACE)
        wait("the causal mask", lambda: d.find_element(By.ID, "lab-weights-table").get_attribute("data-causal") == "true")
        causal = table(d, "#lab-weights-table")
        check.true(all(causal[i][j] == 0.0 for i in range(6) for j in range(i + 1, 6)), "causal: every cell above the diagonal is 0")
        check.true(any(drawn[i][j] > 1e-6 for i in range(6) for j in range(i + 1, 6)), "control: they were not 0 before")
        check.true(close(causal, api("/v1/lab/attention", dict(shape, tau=tau, causal=True))["weights"]), "causal: the endpoint's")
        d.find_element(By.ID, "lab-causal").send_keys(Keys.SPACE)  # off again
        wait("no causal mask", lambda: d.find_element(By.ID, "lab-weights-table").get_attribute("data-causal") == "false")

        for key in (2, 4):
            d.find_element(By.ID, "lab-pad-%d" % key).send_keys(Keys.SPACE)
        wait("the PAD keys", lambda: d.find_element(By.ID, "lab-weights-table").get_attribute("data-pad") == "2,4")
        padded = table(d, "#lab-weights-table")
        check.true(all(row[2] == 0.0 and row[4] == 0.0 for row in padded), "PAD keys 2 and 4: their columns are 0")
        check.true(all(abs(sum(row) - 1) < 1e-9 for row in padded), "PAD: each row still sums to 1")
        check.true(any(row[2] > 1e-6 for row in drawn), "control: column 2 was not 0 before")
        check.true(close(padded, api("/v1/lab/attention", dict(shape, tau=tau, pad=[2, 4]))["weights"]), "PAD: the endpoint's")
        check.true(d.find_element(By.ID, "lab-weights-legend").text.startswith("weight"), "a colour legend")
        d.save_screenshot(os.path.join(shots, "explorer_lab.png"))

        # ---- the model -----------------------------------------------------------------------
        d.find_element(By.ID, "tab-model").send_keys(Keys.ENTER)
        wait("the model panel", lambda: d.find_element(By.ID, "model").is_displayed())
        box = d.find_element(By.ID, "model-input")
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(SOURCE + Keys.ENTER)
        wait("the streamed output and its attention",
             lambda: d.find_element(By.ID, "model-output").get_attribute("data-state") in ("done", "error"), 120)
        check.eq(d.find_element(By.ID, "model-error").text, "", "no error on the model panel")
        tokens = [b.text for b in d.find_elements(By.CSS_SELECTOR, "#model-output .token")]
        check.eq(" ".join(tokens), REVERSED, "the page shows the reversal")
        seen = d.execute_script("return window.explorer.model.drawn")
        check.true(seen[:len(tokens)] == list(range(1, len(tokens) + 1)),
                   "the tokens were drawn one at a time, one per streamed event (counts %s)" % seen)

        text = requests.post(s.url("/v1/completions"), json={"model": s.get("/v1/models").json()["data"][0]["id"],
                                                              "prompt": SOURCE, "max_tokens": 32, "temperature": 0},
                             timeout=60).json()["choices"][0]["text"]
        att = api("/v1/attention", {"input": SOURCE, "output": text})
        cross = att["attention"]["cross"]
        drawn_ok, cells = True, 0
        for layer, heads in enumerate(cross):
            for head, w in enumerate(heads):
                got = table(d, "#model-grid table[data-kind=cross][data-layer='%d'][data-head='%d']" % (layer, head))
                drawn_ok = drawn_ok and close(got, w)
                cells += sum(len(r) for r in w)
        check.true(drawn_ok and cells > 0, "the cross-attention cells drawn (%d) equal /v1/attention's" % cells)
        wrong = [[row[::-1] for row in cross[0][0]]]
        check.true(not close(table(d, "#model-grid table[data-kind=cross][data-layer='0'][data-head='0']"), wrong[0]),
                   "control: the comparison fails on mirrored weights")

        src = att["source_tokens"]
        n_out = len(att["output_tokens"])
        avg = table(d, "#model-avg-table")
        S = len(src)
        check.eq(S, 8, "eight source tokens")
        argmax = [max(range(S), key=lambda k: avg[i][k]) for i in range(min(n_out, S))]
        check.eq(argmax, [S - 1 - i for i in range(S)], "the head average's row maxima lie on the anti-diagonal")
        check.true(argmax != list(range(S)), "control: not on the diagonal")

        chosen = 2
        d.find_elements(By.CSS_SELECTOR, "#model-output .token")[chosen].click()
        wait("the chosen token's detail",
             lambda: d.find_element(By.CSS_SELECTOR, "#model-output .token[data-index='2']").get_attribute("aria-pressed") == "true")
        detail = table(d, "#model-detail table[data-kind=cross]")
        want_rows = [w[chosen] for heads in cross for w in heads]
        check.true(close(detail, want_rows), "clicking token 3 shows its cross-attention row of every layer and head")
        dself = table(d, "#model-detail table[data-kind=decoder_self]")
        check.true(close(dself, [w[chosen] for heads in att["attention"]["decoder_self"] for w in heads]),
                   "and its decoder self-attention rows")
        chosen_row = d.find_elements(By.CSS_SELECTOR, "#model-avg-table tbody tr")[chosen].get_attribute("class")
        check.eq(chosen_row, "chosen", "the head average marks the chosen token's row")
        figures_load(d, "the model panel")
        d.set_window_size(1280, 1500)
        d.execute_script("window.scrollTo(0, 0)")
        d.save_screenshot(os.path.join(shots, "explorer_model.png"))

        logs = d.get_log("browser")
        errors = [e for e in logs if e.get("level") == "SEVERE"]
        check.eq(errors, [], "no errors in the browser's console")
    finally:
        d.quit()


# ---- a decoder-only model -------------------------------------------------------------------
if lm_dir:
    with Served(attn, lm_dir) as s, tempfile.TemporaryDirectory() as profile:
        d = browser(profile)
        try:
            model_id = requests.get(s.url("/v1/models"), timeout=60).json()["data"][0]["id"]
            d.get(s.url("/"))
            wait("the model's name", lambda: "decoder-only" in d.find_element(By.ID, "model-name").text)
            d.find_element(By.ID, "tab-model").send_keys(Keys.ENTER)
            wait("the model panel", lambda: d.find_element(By.ID, "model-input").is_displayed())
            check.eq(d.find_element(By.ID, "model-input-label").text, "prompt", "lm: the box asks for a prompt")
            prompt, n_out = "abcd", 4
            box = d.find_element(By.ID, "model-input")
            box.send_keys(Keys.CONTROL, "a")
            box.send_keys(prompt)
            most = d.find_element(By.ID, "model-max")
            most.send_keys(Keys.CONTROL, "a")
            most.send_keys(str(n_out))
            runs = lambda: int(d.find_element(By.TAG_NAME, "body").get_attribute("data-model-runs") or 0)  # noqa: E731
            before = runs()
            d.find_element(By.ID, "model-run").send_keys(Keys.ENTER)
            wait("the decoder-only run", lambda: runs() > before)
            check.eq(d.find_element(By.ID, "model-output").get_attribute("data-state"), "done", "lm: the run ends")
            greedy = requests.post(s.url("/v1/completions"), json={"model": model_id, "prompt": prompt,
                                                                     "max_tokens": n_out, "temperature": 0},
                                   timeout=60).json()["choices"][0]["text"]
            shown = [t.text for t in d.find_elements(By.CSS_SELECTOR, "#model-output .token")]
            check.eq("".join(shown), greedy, "lm: the page shows the greedy continuation, token by token")
            check.eq(len(shown), n_out, "lm: %d output tokens" % n_out)
            att = requests.post(s.url("/v1/attention"), json={"input": prompt, "output": greedy}, timeout=60).json()
            first = len(att["tokens"]) - len(att["output_tokens"]) - 1  # the position that predicted output 0
            chosen = 2
            d.find_elements(By.CSS_SELECTOR, "#model-output .token")[chosen].click()
            wait("lm: the chosen token's detail", lambda: d.find_element(
                By.CSS_SELECTOR, "#model-output .token[data-index='2']").get_attribute("aria-pressed") == "true")
            detail = table(d, "#model-detail table[data-kind=self]")
            want = [w[first + chosen] for heads in att["attention"]["self"] for w in heads]
            check.true(close(detail, want), "lm: clicking token 3 shows the self-attention row that produced it, "
                                            "every layer and head")
            check.true(not close(detail, [w[first + chosen - 1] for heads in att["attention"]["self"] for w in heads]),
                       "control: not the row of the position before")
            avg = table(d, "#model-avg-table")
            n = len(att["tokens"])
            check.true(avg is not None and len(avg) == n and
                       all((v or 0.0) == 0.0 for i, row in enumerate(avg) for j, v in enumerate(row) if j > i),
                       "lm: the head average is causal (nothing above the diagonal)")
            check.true(any(v for i, row in enumerate(avg) for j, v in enumerate(row) if 0 < i and j < i),
                       "control: weights below the diagonal are drawn")
            figures_load(d, "lm")
            d.execute_script("window.scrollTo(0, document.getElementById('model-output').getBoundingClientRect().top)")
            d.save_screenshot(os.path.join(shots, "explorer_model_lm.png"))
            errors = [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]
            check.eq(errors, [], "lm: no errors in the browser's console")
        finally:
            d.quit()

check.done()
