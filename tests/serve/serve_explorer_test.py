#!/usr/bin/env python3
"""serve_explorer_test.py — the explorer's JSON endpoints of a real attn serve, and its page.

    serve_explorer_test.py ATTN_BINARY MODELS_DIR SOURCE_DIR

POST /v1/lab/attention against softmax(Q K^T / tau) V computed here in numpy (float64) with
the masks applied by hand: random and typed Q, K, V, tau, the causal mask, PAD keys, a fully
masked row (zeros), and every malformed field (400 naming it). Controls: the weights at another
tau, or without the mask, differ from the answer. POST /v1/attention on the three families:
shapes, rows summing to 1, the causal zeros of decoder self-attention and of a decoder-only
model, the enc-dec greedy output equal to /v1/completions' (temperature 0), a teacher-forced
output that is used, the same weights while streams run (the engine waits for the capture),
and its errors. GET / and the page's files: served, from the binary.
"""
import json
import math
import os
import re
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checks, Served  # noqa: E402

attn, models, source = sys.argv[1], sys.argv[2], sys.argv[3]
check = Checks("serve_explorer")


def reference(q, k, v, tau, causal=False, pad=()):
    q, k, v = np.array(q, float), np.array(k, float), np.array(v, float)
    T, S = len(q), len(k)
    scores = q @ k.T / tau
    masked = np.zeros((T, S), bool)
    for i in range(T):
        for j in range(S):
            masked[i, j] = (j in pad) or (causal and j > i + S - T)
    w = np.zeros((T, S))
    for i in range(T):
        keep = ~masked[i]
        if keep.any():
            e = np.exp(scores[i, keep] - scores[i, keep].max())
            w[i, keep] = e / e.sum()
    return q @ k.T, w, w @ v, masked


def steps_cells(svg):
    """The cell values of a steps figure, panel after panel, from the cells' tooltips
    ("row / column: value", about three significant digits)."""
    return [float(v) for v in re.findall(r"<title>[^<]* / [^<]*: ([^<]+)</title>", svg)]


def steps_weights(svg, n, dk, masked):
    """The softmax panel of a steps figure over n tokens: after Q, K, V (n x dk each), Q K^T and
    the scaled scores (n x n each), and the mask (n x n) when there is one."""
    cells = steps_cells(svg)
    start = 3 * n * dk + (3 if masked else 2) * n * n
    if len(cells) != 3 * n * dk + (4 if masked else 3) * n * n + n * dk:
        return None
    return np.array(cells[start:start + n * n]).reshape(n, n)


def close(a, b, tol):
    a, b = np.array(a, float), np.array(b, float)
    return a.shape == b.shape and float(np.max(np.abs(a - b))) <= tol


with Served(attn, os.path.join(models, "rev")) as s:
    # ---- the lab ----------------------------------------------------------------------------
    r = s.post("/v1/lab/attention", {"queries": 5, "keys": 6, "dim": 8, "seed": 3})
    check.eq(r.status_code, 200, "random lab: 200 " + r.text[:200])
    j = r.json()
    check.eq((len(j["q"]), len(j["q"][0]), len(j["k"]), len(j["v"][0])), (5, 8, 6, 8), "random lab: shapes")
    check.true(abs(j["tau"] - math.sqrt(8)) < 1e-15, "tau defaults to sqrt(d_k)")
    check.true(all(abs(x * 10 - round(x * 10)) < 1e-9 for row in j["q"] for x in row), "draws have one decimal")
    scores, w, out, masked = reference(j["q"], j["k"], j["v"], j["tau"])
    check.true(close(j["scores"], scores, 1e-12), "Q K^T")
    check.true(close(j["weights"], w, 1e-12), "weights = numpy softmax")
    check.true(close(j["output"], out, 1e-12), "output = weights V")
    check.true(all(abs(sum(row) - 1) < 1e-12 for row in j["weights"]), "rows sum to 1")
    again = s.post("/v1/lab/attention", {"queries": 5, "keys": 6, "dim": 8, "seed": 3}).json()
    check.eq(again["q"], j["q"], "the same seed draws the same Q")
    other = s.post("/v1/lab/attention", {"queries": 5, "keys": 6, "dim": 8, "seed": 4}).json()
    check.true(other["q"] != j["q"], "control: another seed draws another Q")

    q, k, v = j["q"], j["k"], j["v"]
    for tau in (0.25, 1.0, 7.5):
        t = s.post("/v1/lab/attention", {"q": q, "k": k, "v": v, "tau": tau}).json()
        _, wt, ot, _ = reference(q, k, v, tau)
        check.true(close(t["weights"], wt, 1e-12) and close(t["output"], ot, 1e-12), "tau %g: weights and output" % tau)
        _, wc, _, _ = reference(q, k, v, tau * 2)
        check.true(not close(t["weights"], wc, 1e-6), "control: tau %g's weights differ from tau %g's" % (tau, 2 * tau))
        check.true(all(x is not None and abs(x - y) < 1e-12 for rx, ry in zip(t["scaled"], (np.array(t["scores"]) / tau).tolist())
                       for x, y in zip(rx, ry)), "tau %g: scaled = scores / tau" % tau)

    # Square, causal and PAD: masked cells exactly 0, rows of the rest sum to 1.
    sq = s.post("/v1/lab/attention", {"queries": 6, "keys": 6, "dim": 4, "seed": 1}).json()
    q, k, v = sq["q"], sq["k"], sq["v"]
    c = s.post("/v1/lab/attention", {"q": q, "k": k, "v": v, "causal": True, "tau": 1.5}).json()
    _, wc, oc, mc = reference(q, k, v, 1.5, causal=True)
    check.true(close(c["weights"], wc, 1e-12) and close(c["output"], oc, 1e-12), "causal: weights and output")
    check.true(all(c["weights"][i][jj] == 0.0 for i in range(6) for jj in range(i + 1, 6)), "causal: above the diagonal exactly 0")
    check.eq(c["masked"], mc.tolist(), "causal: the masked cells")
    check.true(all(c["scaled"][i][jj] is None for i in range(6) for jj in range(i + 1, 6)), "causal: masked scores are null")
    _, wn, _, _ = reference(q, k, v, 1.5)
    check.true(not close(c["weights"], wn, 1e-6), "control: the causal weights differ from the unmasked ones")
    p = s.post("/v1/lab/attention", {"q": q, "k": k, "v": v, "pad": [1, 4]}).json()
    _, wp, op, _ = reference(q, k, v, 2.0, pad=(1, 4))
    check.true(close(p["weights"], wp, 1e-12) and close(p["output"], op, 1e-12), "pad: weights and output")
    check.true(all(row[1] == 0.0 and row[4] == 0.0 for row in p["weights"]), "pad: columns 1 and 4 exactly 0")
    check.eq(p["pad"], [1, 4], "pad: echoed")
    z = s.post("/v1/lab/attention", {"q": q, "k": k, "v": v, "pad": [0], "causal": True}).json()
    check.true(z["weights"][0] == [0.0] * 6 and z["output"][0] == [0.0] * 4, "a fully masked row: zero weights, zero output")
    check.true(all(abs(sum(row) - 1) < 1e-12 for row in z["weights"][1:]), "the other rows sum to 1")
    # Causal with fewer queries than keys: bottom-right aligned, as the op defines it.
    br = s.post("/v1/lab/attention", {"q": q[:2], "k": k, "v": v, "causal": True}).json()
    _, wb, _, _ = reference(q[:2], k, v, 2.0, causal=True)
    check.true(close(br["weights"], wb, 1e-12), "causal T < S: bottom-right aligned")

    def bad(body, param, code=None, what=""):
        check.error(s.post("/v1/lab/attention", body), 400, param, code, "lab " + (what or json.dumps(body)[:80]))

    bad({"queries": 17}, "queries")
    bad({"keys": 0}, "keys")
    bad({"dim": 65}, "dim")
    bad({"dim": "4"}, "dim", "invalid_type")
    bad({"seed": -1}, "seed", "invalid_type")
    bad({"tau": 0}, "tau")
    bad({"tau": -1}, "tau")
    bad({"tau": "x"}, "tau", "invalid_type")
    bad({"causal": 1}, "causal", "invalid_type")
    bad({"pad": [9]}, "pad")
    bad({"pad": 1}, "pad", "invalid_type")
    bad({"q": q}, "k", "missing_required_parameter")
    bad({"q": q, "k": [[1, 2]], "v": v}, "k", what="d_k mismatch")
    bad({"q": q, "k": k, "v": v[:2]}, "v", what="v rows")
    bad({"q": [[1, 2], [3]], "k": k, "v": v}, "q", what="ragged q")
    bad({"q": [[1] * 65], "k": k, "v": v}, "q", what="D > 64")
    bad({"q": [[1.0]] * 17, "k": [[1.0]], "v": [[1.0]]}, "q", what="T > 16")
    bad({"q": [["a"]], "k": [[1.0]], "v": [[1.0]]}, "q", "invalid_type")
    bad({"q": [], "k": [[1.0]], "v": [[1.0]]}, "q", "invalid_type")
    bad({"q": q, "k": k, "v": v, "seed": 2}, "seed", what="seed with typed matrices")
    check.error(s.post("/v1/lab/attention", "[1]"), 400, what="lab: not an object")
    check.error(s.get("/v1/lab/attention"), 405, what="lab: GET")

    # ---- /v1/attention on an encoder-decoder model --------------------------------------------
    model = s.get("/v1/models").json()["data"][0]["id"]
    greedy = s.complete({"model": model, "prompt": "31524", "max_tokens": 10, "temperature": 0})["choices"][0]["text"]
    a = s.post("/v1/attention", {"input": "31524"})
    check.eq(a.status_code, 200, "attention: 200 " + a.text[:200])
    a = a.json()
    check.eq(a["output"], greedy, "attention without output translates greedily, as /v1/completions does")
    check.eq(sorted(a["attention"].keys()), ["cross", "decoder_self", "encoder_self"], "enc-dec: three stacks")
    S, T = len(a["source_tokens"]), len(a["target_tokens"])
    check.eq(a["source_tokens"], list("31524"), "source tokens")
    check.eq(a["target_tokens"][1:], a["output_tokens"], "the decoder reads <bos> + output")
    check.eq(T, len(a["output_tokens"]) + 1, "one query per output token and one for EOS")
    shapes = {"encoder_self": (S, S), "decoder_self": (T, T), "cross": (T, S)}
    for kind, (nq, nk) in shapes.items():
        st = np.array(a["attention"][kind], float)
        check.eq(st.shape[2:], (nq, nk), kind + ": [layer][head][query][key]")
        check.true(np.allclose(st.sum(-1), 1, atol=1e-9), kind + ": rows sum to 1")
        check.true((st >= 0).all(), kind + ": weights >= 0")
    ds = np.array(a["attention"]["decoder_self"], float)
    check.true(all((ds[..., i, i + 1:] == 0).all() for i in range(T)), "decoder self-attention is causal (exact zeros)")
    forced = s.post("/v1/attention", {"input": "31524", "output": "1111"}).json()
    check.eq(forced["output_tokens"], list("1111"), "a given output is teacher-forced")
    check.eq(np.array(forced["attention"]["cross"]).shape[2:], (5, 5), "forced: 5 queries")
    check.true(np.allclose(np.array(forced["attention"]["encoder_self"]), np.array(a["attention"]["encoder_self"]),
                           atol=1e-12), "forced: the encoder's weights do not depend on the output")
    check.true(a["output_tokens"][0] != "1" and not np.allclose(np.array(forced["attention"]["cross"])[..., 1, :],
                                                                np.array(a["attention"]["cross"])[..., 1, :]),
               "control: another output changes the cross-attention of the positions after it")

    # The engine waits while a capture runs: the same weights with streams running.
    results, errors = [], []

    def stream_some():
        try:
            for _ in range(4):
                ev, done = s.stream({"model": model, "prompt": "52341", "max_tokens": 8, "temperature": 0})
                results.append("".join(c["text"] for e in ev for c in e["choices"]))
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            errors.append(repr(e))

    threads = [threading.Thread(target=stream_some) for _ in range(3)]
    for t in threads:
        t.start()
    same = all(s.post("/v1/attention", {"input": "31524"}).json()["attention"] == a["attention"] for _ in range(6))
    for t in threads:
        t.join()
    check.true(same, "weights captured while streams run equal those captured alone")
    alone = s.complete({"model": model, "prompt": "52341", "max_tokens": 8, "temperature": 0})["choices"][0]["text"]
    check.true(not errors and len(results) == 12 and set(results) == {alone},
               "streams beside captures give the output they give alone %s %s" % (errors, set(results)))

    def bad_att(body, status, param, code=None):
        check.error(s.post("/v1/attention", body), status, param, code, "attention " + json.dumps(body)[:80])

    bad_att({}, 400, "input", "missing_required_parameter")
    bad_att({"input": 3}, 400, "input", "invalid_type")
    bad_att({"input": ""}, 400, "input")
    bad_att({"input": "31x"}, 400, "input")
    bad_att({"input": "315", "output": 5}, 400, "output", "invalid_type")
    bad_att({"input": "315", "output": "9z"}, 400, "output")
    bad_att({"input": "315", "temperature": 1}, 400, "temperature", "unknown_parameter")
    bad_att({"input": "315", "model": "gpt-4"}, 404, "model", "model_not_found")
    bad_att({"input": "1" * 500}, 400, "input", "context_length_exceeded")
    check.error(s.get("/v1/attention"), 405, what="attention: GET")

    # ---- the model's figures (seed 001's figs 1 and 4, from its config) -----------------------
    config = json.load(open(os.path.join(models, "rev", "config.json")))
    cfg = config.get("model", config)
    arch = s.get("/v1/figures/architecture.svg")
    check.eq((arch.status_code, arch.headers.get("Content-Type")), (200, "image/svg+xml"), "architecture figure")
    D, H, F = cfg["d_model"], cfg["n_heads"], cfg["d_ff"]
    for want in ("Encoder-decoder Transformer: D = %d, %d heads, d_ff = %d" % (D, H, F),
                 "%d encoder + %d decoder layers" % (cfg["n_encoder_layers"], cfg["n_decoder_layers"]),
                 "%d → %d → %d" % (D, F, D), "d_k = %d" % (D // H), "cross-attention", "masked self-attention"):
        check.true(want in arch.text, "the architecture figure says " + want)
    mh = s.get("/v1/figures/multihead.svg?tokens=5")
    check.eq(mh.status_code, 200, "multi-head figure")
    for want in ("T = 5, D = %d, H = %d" % (D, H), "[5, %d]" % (D // H), "[5, 5] per head", "[%d, %d] → [5, %d]" % (D, D, D)):
        check.true(want in mh.text, "the multi-head figure says " + want)
    check.true("[6, %d]" % (D // H) in s.get("/v1/figures/multihead.svg?tokens=6").text, "control: T follows ?tokens")
    # Fig 3 on the model's own numbers: its softmax panel holds the weights /v1/attention reports
    # for the encoder's first layer, head 1 (to the tooltips' three significant digits).
    st = s.get("/v1/figures/steps.svg?input=31524")
    check.eq((st.status_code, st.headers.get("Content-Type")), (200, "image/svg+xml"), "steps figure")
    for want in ("1. Q", "2. Q K^T", "4. softmax", "5. x V", "d_k = %d" % (D // H), "Encoder self-attention"):
        check.true(want in st.text, "the steps figure shows " + want)
    fig_w = steps_weights(st.text, 5, D // H, False)
    enc0 = np.array(a["attention"]["encoder_self"][0][0], float)
    check.true(fig_w is not None and close(fig_w, enc0, 6e-3),
               "the steps figure's softmax is the model's encoder layer 1 head 1 (%s)" % fig_w)
    other = steps_weights(s.get("/v1/figures/steps.svg?input=52341").text, 5, D // H, False)
    check.true(other is not None and not close(other, enc0, 6e-3), "control: another input's figure differs")
    check.error(s.get("/v1/figures/steps.svg"), 400, "input", what="steps without input")
    check.error(s.get("/v1/figures/steps.svg?input=31x"), 400, "input", what="steps with a bad input")
    check.error(s.get("/v1/figures/steps_of_nothing.svg"), 404, what="an unknown figure")
    check.error(s.get("/v1/figures/multihead.svg?tokens=0"), 400, "tokens", what="tokens 0")
    check.error(s.get("/v1/figures/multihead.svg?tokens=x"), 400, "tokens", what="tokens x")

    # ---- the page's files ---------------------------------------------------------------------
    page = s.get("/")
    check.eq((page.status_code, page.headers.get("Content-Type", "").split(";")[0]), (200, "text/html"), "GET / is the page")
    check.true("/explorer.js" in page.text and "http" not in page.text.replace("http-equiv", ""),
               "the page loads its script from the server, nothing from elsewhere")
    for path, mime in (("/explorer.js", "text/javascript"), ("/explorer.css", "text/css"), ("/index.html", "text/html")):
        f = s.get(path)
        want = open(os.path.join(source, "src", "serve", "www", path[1:]), "rb").read()
        check.eq((f.status_code, f.headers.get("Content-Type", "").split(";")[0], f.content == want), (200, mime, True),
                 path + " is the shipped file")
    check.error(s.get("/nothing.js"), 404, what="an unknown file")

# Keyed server: the page is open, its data is not.
with Served(attn, os.path.join(models, "rev"), "--api-key", "k3y") as s:
    check.eq(s.get("/").status_code, 200, "the page needs no key")
    check.error(s.post("/v1/lab/attention", {}), 401, what="the lab needs the key")
    check.error(s.post("/v1/attention", {"input": "315"}), 401, what="attention needs the key")
    s.headers = {"Authorization": "Bearer k3y"}
    check.eq(s.post("/v1/attention", {"input": "315"}).status_code, 200, "attention with the key")

# ---- decoder-only and encoder-only ------------------------------------------------------------
with Served(attn, os.path.join(models, "lm")) as s:
    a = s.post("/v1/attention", {"input": "abcd", "output": "efg"})
    check.eq(a.status_code, 200, "lm attention: 200 " + a.text[:200])
    a = a.json()
    st = np.array(a["attention"]["self"], float)
    n = len(a["tokens"])
    check.eq(n, 1 + 4 + 3, "lm: <bos> + input + output")
    check.eq(a["tokens"][1:], list("abcdefg"), "lm: tokens")
    check.eq(st.shape[2:], (n, n), "lm: [layer][head][T][T]")
    check.true(np.allclose(st.sum(-1), 1, atol=1e-9), "lm: rows sum to 1")
    check.true(all((st[..., i, i + 1:] == 0).all() for i in range(n)), "lm: causal, exact zeros")
    lm_cfg = json.load(open(os.path.join(models, "lm", "config.json")))
    lm_cfg = lm_cfg.get("model", lm_cfg)
    fig = s.get("/v1/figures/architecture.svg").text
    check.true("Decoder-only Transformer" in fig and "%d layers" % lm_cfg["n_decoder_layers"] in fig and
               "cross-attention" not in fig, "lm: a decoder-only architecture figure")
    st = s.get("/v1/figures/steps.svg?input=abcd")
    check.eq(st.status_code, 200, "lm: steps figure")
    lm_dk = lm_cfg["d_model"] // lm_cfg["n_heads"]
    fig_w = steps_weights(st.text, 5, lm_dk, True)
    lm_a = s.post("/v1/attention", {"input": "abcd"}).json()
    check.true("+ mask" in st.text and fig_w is not None and
               close(fig_w, np.array(lm_a["attention"]["self"][0][0], float), 6e-3),
               "lm: the steps figure masks the future and holds the model's layer 1 head 1 weights")
    bad = s.post("/v1/attention", {"input": "abcdefgh", "output": "abcdefghij"})
    check.error(bad, 400, "input", "context_length_exceeded", "lm: past the context")

with Served(attn, os.path.join(models, "mlm")) as s:
    a = s.post("/v1/attention", {"input": "aaaa"})
    check.eq(a.status_code, 200, "mlm attention: 200 " + a.text[:200])
    st = np.array(a.json()["attention"]["self"], float)
    check.true(np.allclose(st.sum(-1), 1, atol=1e-9) and st.shape[2:] == (4, 4), "mlm: rows sum to 1, [4][4]")
    check.error(s.post("/v1/attention", {"input": "aaaa", "output": "b"}), 400, "output", what="mlm: no output")
    st = s.get("/v1/figures/steps.svg?input=abca")
    mlm_cfg = json.load(open(os.path.join(models, "mlm", "config.json")))
    mlm_cfg = mlm_cfg.get("model", mlm_cfg)
    fig_w = steps_weights(st.text, 4, mlm_cfg["d_model"] // mlm_cfg["n_heads"], False)
    mlm_a = s.post("/v1/attention", {"input": "abca"}).json()
    check.true(st.status_code == 200 and "+ mask" not in st.text and fig_w is not None and
               close(fig_w, np.array(mlm_a["attention"]["self"][0][0], float), 6e-3),
               "mlm: the steps figure, unmasked, holds the model's layer 1 head 1 weights")

check.done()
