// The attention explorer (docs/explorer.md). Plain JavaScript, no libraries. It computes nothing
// about attention itself: the lab's numbers come from POST /v1/lab/attention (the library's
// attention op), the model's output from the /v1/completions stream and its weights from
// POST /v1/attention. The page only draws them (and averages heads for the head-average view).
"use strict";

const $ = (id) => document.getElementById(id);

// ---- talking to the server ------------------------------------------------------------------

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

async function post(path, body) {
  const res = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body) });
  const json = await res.json();
  if (!res.ok) throw new Error(json.error ? json.error.message : "HTTP " + res.status);
  return json;
}

// ---- drawing ----------------------------------------------------------------------------------

// Sequential (0 white .. 1 dark blue) and diverging (blue, white, red) colour scales.
function seqColour(t) {
  t = Math.min(1, Math.max(0, t));
  const a = [247, 251, 255], b = [8, 48, 107];
  return "rgb(" + a.map((x, i) => Math.round(x + (b[i] - x) * Math.sqrt(t))).join(",") + ")";
}
function divColour(t) {  // t in [-1, 1]
  t = Math.min(1, Math.max(-1, t));
  const w = [247, 247, 247], end = t < 0 ? [33, 102, 172] : [178, 24, 43], s = Math.abs(t);
  return "rgb(" + w.map((x, i) => Math.round(x + (end[i] - x) * s)).join(",") + ")";
}
function textColour(rgb) {
  const [r, g, b] = rgb.match(/\d+/g).map(Number);
  return 0.299 * r + 0.587 * g + 0.114 * b < 140 ? "#fff" : "#1b1f24";
}
function fmt(x, decimals) {
  const s = x.toFixed(decimals);
  return s === "-" + (0).toFixed(decimals) ? (0).toFixed(decimals) : s;
}

// A matrix as a table of coloured cells. Every cell carries its exact value in data-value (and
// its row and column), which the tooltip shows and the browser tests read back.
// opts: rowLabels, colLabels, diverging (else 0..1 weights), vmax, decimals, chosenRow, small,
// masked (booleans, drawn hatched), caption words for the tooltip (rowName, colName).
function heatTable(m, opts) {
  const table = document.createElement("table");
  table.className = "heat" + (opts.small ? " small" : "") + (opts.chosenRow != null ? " dim" : "");
  const cols = m.length ? m[0].length : 0;
  let vmax = opts.vmax;
  if (opts.diverging && vmax == null) {
    vmax = 1e-12;
    m.forEach((row) => row.forEach((x) => { if (x != null) vmax = Math.max(vmax, Math.abs(x)); }));
  }
  table.dataset.vmax = vmax == null ? 1 : vmax;
  if (opts.colLabels && !opts.small) {
    const head = table.createTHead().insertRow();
    head.appendChild(document.createElement("th"));
    opts.colLabels.forEach((l) => {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = l;
      head.appendChild(th);
    });
  }
  const body = table.createTBody();
  m.forEach((row, i) => {
    const tr = body.insertRow();
    if (i === opts.chosenRow) tr.className = "chosen";
    if (opts.rowLabels && !opts.small) {
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = opts.rowLabels[i];
      tr.appendChild(th);
    }
    for (let j = 0; j < cols; ++j) {
      const td = tr.insertCell();
      const x = row[j];
      td.dataset.row = i;
      td.dataset.col = j;
      const masked = opts.masked && opts.masked[i][j];
      if (masked) td.classList.add("masked");
      if (x == null) {
        td.dataset.value = "masked";
        td.textContent = "×";
      } else {
        td.dataset.value = String(x);
        const bg = opts.diverging ? divColour(x / vmax) : seqColour(x / (vmax || 1));
        if (!masked) {
          td.style.background = bg;
          td.style.color = textColour(bg);
        }
        td.textContent = fmt(x, opts.decimals == null ? 2 : opts.decimals);
      }
      td.dataset.tip = (opts.rowName || "row") + " " + (opts.rowLabels ? opts.rowLabels[i] : i) + " · " +
        (opts.colName || "col") + " " + (opts.colLabels ? opts.colLabels[j] : j) + ": " +
        (x == null ? "masked" : String(x));
    }
  });
  return table;
}

function legend(el, vmin, vmax, diverging, label) {
  el.innerHTML = "";
  const lo = document.createElement("span");
  lo.textContent = fmt(vmin, 2);
  const bar = document.createElement("span");
  bar.className = "bar";
  const stops = [];
  for (let i = 0; i <= 10; ++i) {
    const t = i / 10;
    stops.push(diverging ? divColour(2 * t - 1) : seqColour(t));
  }
  bar.style.background = "linear-gradient(to right," + stops.join(",") + ")";
  bar.setAttribute("role", "img");
  bar.setAttribute("aria-label", "colour scale from " + fmt(vmin, 2) + " to " + fmt(vmax, 2));
  const hi = document.createElement("span");
  hi.textContent = fmt(vmax, 2);
  const what = document.createElement("span");
  what.textContent = label;
  el.append(what, lo, bar, hi);
}

// The tooltip: the exact value under the pointer (or the focused cell).
document.addEventListener("mouseover", (e) => {
  const tip = $("tooltip");
  const td = e.target.closest ? e.target.closest("td[data-tip]") : null;
  if (!td) { tip.hidden = true; return; }
  tip.textContent = td.dataset.tip;
  tip.hidden = false;
});
document.addEventListener("mousemove", (e) => {
  const tip = $("tooltip");
  tip.style.left = e.clientX + 14 + "px";
  tip.style.top = e.clientY + 14 + "px";
});

// ---- tabs ---------------------------------------------------------------------------------------

function showPanel(name) {
  for (const p of ["lab", "model"]) {
    $(p).hidden = p !== name;
    $("tab-" + p).setAttribute("aria-selected", String(p === name));
  }
  if (location.hash !== "#" + name) history.replaceState(null, "", "#" + name);
}
$("tab-lab").addEventListener("click", () => showPanel("lab"));
$("tab-model").addEventListener("click", () => showPanel("model"));

// ---- the lab: seed 000's widget -------------------------------------------------------------------

const lab = { q: null, k: null, v: null, tau: 2, seq: 0, last: null };

function matrixText(m) { return m.map((r) => r.join(" ")).join("\n"); }
function parseMatrix(text, name) {
  const rows = text.trim().split("\n").map((l) => l.trim()).filter((l) => l.length)
    .map((l) => l.split(/[\s,]+/).map(Number));
  if (!rows.length || rows.some((r) => r.some((x) => !Number.isFinite(x))))
    throw new Error(name + ": one row per line, numbers separated by spaces");
  return rows;
}

function setTau(tau, moveSlider) {
  lab.tau = tau;
  if (moveSlider) $("lab-tau").value = String(tau);
  $("lab-tau-value").textContent = fmt(tau, 3);
}

// New Q, K, V (random from the server, or typed): the PAD boxes and the query list follow.
function adoptMatrices(q, k, v) {
  lab.q = q; lab.k = k; lab.v = v;
  $("lab-q").value = matrixText(q);
  $("lab-k").value = matrixText(k);
  $("lab-v").value = matrixText(v);
  const pad = $("lab-pad");
  pad.innerHTML = "PAD keys: ";
  k.forEach((_, j) => {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.id = "lab-pad-" + j;
    box.dataset.key = j;
    box.addEventListener("change", computeLab);
    label.append(box, " k" + j);
    pad.appendChild(label);
  });
  const sel = $("lab-query"), keep = Number(sel.value) || 0;
  sel.innerHTML = "";
  q.forEach((_, i) => sel.add(new Option("q" + i, String(i))));
  sel.value = String(Math.min(keep, q.length - 1));
}

async function randomLab() {
  $("lab-error").textContent = "";
  try {
    const r = await post("/v1/lab/attention", {
      queries: Number($("lab-queries").value), keys: Number($("lab-keys").value),
      dim: Number($("lab-dim").value), seed: Number($("lab-seed").value),
    });
    adoptMatrices(r.q, r.k, r.v);
    setTau(r.tau, true);
    await computeLab();
  } catch (e) {
    $("lab-error").textContent = e.message;
  }
}

async function computeLab() {
  if (!lab.q) return;
  const seq = ++lab.seq;
  const pad = [...document.querySelectorAll("#lab-pad input:checked")].map((b) => Number(b.dataset.key));
  try {
    const r = await post("/v1/lab/attention", {
      q: lab.q, k: lab.k, v: lab.v, tau: lab.tau, causal: $("lab-causal").checked, pad,
    });
    if (seq !== lab.seq) return;  // a later request is on its way
    $("lab-error").textContent = "";
    lab.last = r;
    drawLab();
  } catch (e) {
    if (seq === lab.seq) $("lab-error").textContent = e.message;
  }
}

function drawLab() {
  const r = lab.last;
  if (!r) return;
  const chosen = Math.min(Number($("lab-query").value) || 0, r.q.length - 1);
  const rows = r.q.map((_, i) => "q" + i), cols = r.k.map((_, j) => "k" + j);
  const scores = heatTable(r.scaled, { rowLabels: rows, colLabels: cols, diverging: true, masked: r.masked,
    chosenRow: chosen, rowName: "query", colName: "key" });
  const weights = heatTable(r.weights, { rowLabels: rows, colLabels: cols, vmax: 1, masked: r.masked,
    chosenRow: chosen, rowName: "query", colName: "key" });
  weights.id = "lab-weights-table";
  weights.dataset.tau = String(r.tau);
  weights.dataset.causal = String(r.causal);
  weights.dataset.pad = r.pad.join(",");
  const out = heatTable([r.output[chosen]], { rowLabels: ["q" + chosen], colLabels: r.v[0].map((_, d) => "d" + d),
    diverging: true, decimals: 2, rowName: "output of", colName: "feature" });
  out.id = "lab-output-table";
  $("lab-scores").replaceChildren(scores);
  $("lab-weights").replaceChildren(weights);
  $("lab-output").replaceChildren(out);
  legend($("lab-scores-legend"), -Number(scores.dataset.vmax), Number(scores.dataset.vmax), true, "score");
  legend($("lab-weights-legend"), 0, 1, false, "weight");
  document.body.dataset.labUpdates = String((Number(document.body.dataset.labUpdates) || 0) + 1);
}

$("lab-random").addEventListener("click", randomLab);
$("lab-apply").addEventListener("click", () => {
  try {
    adoptMatrices(parseMatrix($("lab-q").value, "Q"), parseMatrix($("lab-k").value, "K"), parseMatrix($("lab-v").value, "V"));
    computeLab();
  } catch (e) {
    $("lab-error").textContent = e.message;
  }
});
$("lab-tau").addEventListener("input", () => { setTau(Number($("lab-tau").value), false); computeLab(); });
$("lab-tau-reset").addEventListener("click", () => { setTau(Math.sqrt(lab.q ? lab.q[0].length : 4), true); computeLab(); });
$("lab-causal").addEventListener("change", computeLab);
$("lab-query").addEventListener("change", drawLab);

// ---- the model: stream, then the weights that produced each token --------------------------------

// drawn: the number of output tokens on the page after each streamed event (the tests read it).
const model = { id: null, family: null, att: null, outTokens: [], chosen: null, runs: 0, drawn: [] };
window.explorer = { lab, model };

async function loadModel() {
  try {
    const res = await fetch("/v1/models", { headers: headers() });
    const j = await res.json();
    if (!res.ok) throw new Error(j.error ? j.error.message : "HTTP " + res.status);
    model.id = j.data[0].id;
    model.family = j.data[0].family;
    $("model-name").textContent = model.id + " (" + model.family.replace(/_/g, "-") + ")";
    $("model-input-label").textContent =
      model.family === "encoder_decoder" ? "source" : model.family === "decoder_only" ? "prompt" : "text with [MASK]";
    if (model.family === "encoder_decoder") {
      // The demo's reversal model reads digits; other models start from an empty box.
    } else {
      $("model-input").value = "";
    }
  } catch (e) {
    $("model-error").textContent = e.message;
  }
}

function drawOutputTokens() {
  const out = $("model-output");
  out.replaceChildren(...model.outTokens.map((t, i) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "token";
    b.dataset.index = i;
    b.textContent = t;
    b.setAttribute("aria-pressed", String(i === model.chosen));
    b.addEventListener("click", () => chooseToken(i));
    return b;
  }));
}

// Streams a greedy completion (SSE), one token at a time; returns the whole text.
async function streamCompletion(prompt, retried) {
  const body = { model: model.id, prompt, max_tokens: Number($("model-max").value), temperature: 0, stream: true };
  if (model.family !== "encoder_only") body.logprobs = 0;  // each chunk names its tokens
  const res = await fetch("/v1/completions", { method: "POST", headers: headers(), body: JSON.stringify(body) });
  if (!res.ok) {
    const j = await res.json();
    // max_tokens beyond what this prompt leaves of the context: the server names the bound; once.
    const bound = j.error && j.error.param === "max_tokens" && /\[1, (\d+)\]/.exec(j.error.message);
    if (bound && !retried) {
      $("model-max").value = bound[1];
      return streamCompletion(prompt, true);
    }
    throw new Error(j.error ? j.error.message : "HTTP " + res.status);
  }
  const reader = res.body.getReader(), decoder = new TextDecoder();
  let buf = "", text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        for (const c of j.choices) {
          text += c.text;
          if (c.logprobs) model.outTokens.push(...c.logprobs.tokens);
          else if (c.text) model.outTokens.push(c.text);
        }
        drawOutputTokens();
        model.drawn.push(model.outTokens.length);
      }
    }
  }
  return text;
}

async function runModel(e) {
  if (e) e.preventDefault();
  const input = $("model-input").value;
  $("model-error").textContent = "";
  model.outTokens = [];
  model.drawn = [];
  model.chosen = null;
  model.att = null;
  $("model-output").dataset.state = "streaming";
  $("model-run").disabled = true;
  try {
    const text = await streamCompletion(input);
    drawOutputTokens();
    const body = { input };
    if (model.family !== "encoder_only" && text.length) body.output = text;
    model.att = await post("/v1/attention", body);
    model.input = input;
    setupKinds();
    chooseToken(model.outTokens.length ? 0 : null);
    if ($("model-figures").open) loadFigures();
    $("model-output").dataset.state = "done";
  } catch (err) {
    $("model-error").textContent = err.message;
    $("model-output").dataset.state = "error";
  } finally {
    $("model-run").disabled = false;
    model.runs += 1;
    document.body.dataset.modelRuns = String(model.runs);
  }
}

const KIND_NAMES = { cross: "cross-attention (decoder → source)", decoder_self: "decoder self-attention",
  encoder_self: "encoder self-attention", self: "self-attention" };

function setupKinds() {
  const kinds = Object.keys(model.att.attention);
  const sel = $("model-kind"), keep = sel.value;
  sel.innerHTML = "";
  kinds.forEach((k) => sel.add(new Option(KIND_NAMES[k] || k, k)));
  sel.value = kinds.includes(keep) ? keep : kinds[0];
  const layers = model.att.attention[kinds[0]].length;
  const lsel = $("model-layer"), keepL = lsel.value;
  lsel.innerHTML = "";
  for (let l = 0; l < layers; ++l) lsel.add(new Option(String(l + 1), String(l)));
  lsel.value = keepL !== "" && Number(keepL) < layers ? keepL : String(layers - 1);
}

// Row and column labels of one stack, and the row that produced output token i.
function axes(kind) {
  const a = model.att;
  if (a.family === "encoder_decoder") {
    const produced = a.output_tokens.concat(["<eos>"]);
    if (kind === "encoder_self") return { rows: a.source_tokens, cols: a.source_tokens, rowOf: () => null,
      rowName: "source", colName: "source" };
    return { rows: produced, cols: kind === "cross" ? a.source_tokens : a.target_tokens, rowOf: (i) => i,
      rowName: "producing", colName: kind === "cross" ? "source" : "decoder input" };
  }
  const first = a.tokens.length - a.output_tokens.length - 1;  // the position that predicted output 0
  return { rows: a.tokens, cols: a.tokens, rowOf: (i) => (a.output_tokens.length ? first + i : null),
    rowName: "position", colName: "position" };
}

function headAverage(heads) {
  return heads[0].map((row, q) => row.map((_, k) => heads.reduce((s, h) => s + h[q][k], 0) / heads.length));
}

function chooseToken(i) {
  model.chosen = i;
  drawOutputTokens();
  drawAttention();
}

function drawAttention() {
  const a = model.att;
  if (!a) return;
  const kind = $("model-kind").value, layer = Number($("model-layer").value);
  const stack = a.attention[kind], ax = axes(kind);
  const row = model.chosen == null ? null : ax.rowOf(model.chosen);
  const common = { rowLabels: ax.rows, colLabels: ax.cols, vmax: 1, chosenRow: row, rowName: ax.rowName,
    colName: ax.colName, decimals: 2 };
  const avg = heatTable(headAverage(stack[layer]), common);
  avg.id = "model-avg-table";
  avg.dataset.kind = kind;
  avg.dataset.layer = layer;
  $("model-avg").replaceChildren(avg);
  $("model-avg-caption").textContent = KIND_NAMES[kind] + ", layer " + (layer + 1) + ", average of " +
    stack[layer].length + " heads (rows: " + ax.rowName + ", columns: " + ax.colName + ")";
  legend($("model-legend"), 0, 1, false, "weight");

  const grid = $("model-grid");
  grid.style.gridTemplateColumns = "repeat(" + stack[0].length + ", max-content)";
  const figs = [];
  stack.forEach((heads, l) => heads.forEach((w, h) => {
    const fig = document.createElement("figure");
    const cap = document.createElement("figcaption");
    cap.textContent = "layer " + (l + 1) + ", head " + (h + 1);
    const t = heatTable(w, Object.assign({}, common, { small: w[0].length > 12 }));
    t.dataset.kind = kind;
    t.dataset.layer = l;
    t.dataset.head = h;
    fig.append(cap, t);
    figs.push(fig);
  }));
  grid.replaceChildren(...figs);

  // The chosen token: its row in every layer and head, for each stack that produced it.
  const detail = $("model-detail");
  detail.replaceChildren();
  if (model.chosen == null) { $("model-detail-caption").textContent = "Click an output token"; return; }
  $("model-detail-caption").textContent = "What produced “" + model.outTokens[model.chosen] + "”, every layer and head";
  const kinds = a.family === "encoder_decoder" ? ["cross", "decoder_self"] : ["self"];
  for (const k of kinds) {
    const axk = axes(k), r = axk.rowOf(model.chosen), rows = [], labels = [];
    if (r == null || r >= a.attention[k][0][0].length) continue;
    a.attention[k].forEach((heads, l) => heads.forEach((w, h) => { rows.push(w[r]); labels.push("L" + (l + 1) + " H" + (h + 1)); }));
    const cap = document.createElement("div");
    cap.className = "note";
    cap.textContent = KIND_NAMES[k];
    const t = heatTable(rows, { rowLabels: labels, colLabels: axk.cols, vmax: 1, rowName: "", colName: axk.colName });
    t.dataset.kind = k;
    detail.append(cap, t);
  }
}

$("model-form").addEventListener("submit", runModel);
$("model-kind").addEventListener("change", drawAttention);
$("model-layer").addEventListener("change", drawAttention);

// ---- this model's figures (SVG drawn by the server) -------------------------------------------------

async function loadFigures() {
  const body = $("model-figures-body");
  const a = model.att;
  const tokens = a ? (a.source_tokens || a.tokens).length : 8;
  // The steps figure (seed 001's fig 3) needs the model's input: drawn once the model has run.
  const input = a && model.input !== undefined ? model.input : null;
  const key = tokens + "\u0000" + input;
  if (body.dataset.key === key) return;
  body.dataset.key = key;
  const ALT = {
    architecture: "this model's architecture",
    multihead: "multi-head attention with this model's sizes",
    steps: "scaled dot-product attention step by step on this model's own queries, keys and values",
  };
  const names = input !== null ? ["architecture", "multihead", "steps"] : ["architecture", "multihead"];
  const imgs = [];
  for (const name of names) {
    try {
      let url = "/v1/figures/" + name + ".svg?tokens=" + tokens;
      if (name === "steps") url += "&input=" + encodeURIComponent(input);
      const res = await fetch(url, { headers: headers() });
      if (!res.ok) throw new Error("figure " + name + ": HTTP " + res.status);
      const img = document.createElement("img");
      img.alt = ALT[name];
      img.dataset.figure = name;
      img.src = URL.createObjectURL(await res.blob());
      imgs.push(img);
    } catch (e) {
      $("model-error").textContent = e.message;
    }
  }
  body.replaceChildren(...imgs);
}
$("model-figures").addEventListener("toggle", () => { if ($("model-figures").open) loadFigures(); });

// ---- start ------------------------------------------------------------------------------------------

showPanel(location.hash === "#model" ? "model" : "lab");
loadModel();
randomLab();
