"""The trace viewer: one self-contained HTML page (no external assets) that shows why an answer retrieved.

``viewer_html()`` is the page ``quco serve`` serves at ``/viewer`` (it loads ``?id=`` from ``/v1/traces``);
``viewer_html(trace)`` embeds one trace, so a report can write a standalone page per question.
"""

from __future__ import annotations

import json
from typing import Any

_PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>quco trace viewer</title>
<style>
  :root { --fg:#1d232a; --muted:#5f6b7a; --line:#dde3ea; --bg:#f6f8fa; --fire:#c62828; --firebg:#fdecea;
          --keep:#2e7d32; --keepbg:#e8f5e9; --ret:#1565c0; --retbg:#e3f2fd; }
  * { box-sizing: border-box; }
  body { margin:0; font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; color:var(--fg); background:var(--bg); }
  header { padding:14px 24px; background:#fff; border-bottom:1px solid var(--line); display:flex; gap:16px; align-items:center; flex-wrap:wrap; }
  header h1 { font-size:17px; margin:0 12px 0 0; }
  header input[type=text], header input[type=password] { padding:5px 8px; border:1px solid var(--line); border-radius:5px; }
  main { max-width:1100px; margin:0 auto; padding:18px 24px 60px; }
  .card { background:#fff; border:1px solid var(--line); border-radius:8px; padding:14px 18px; margin:0 0 14px; }
  .question { font-size:18px; font-weight:600; }
  .meta { color:var(--muted); font-size:13px; }
  .answer { font-size:16px; margin-top:6px; }
  .answer b { background:#fff8c4; padding:1px 4px; border-radius:3px; }
  .badge { display:inline-block; font-size:12px; font-weight:600; padding:1px 8px; border-radius:10px; margin-left:6px; }
  .badge.keep { color:var(--keep); background:var(--keepbg); } .badge.retrieve { color:var(--ret); background:var(--retbg); }
  .badge.stop, .badge.skip { color:var(--muted); background:#eef1f4; } .badge.fired { color:var(--fire); background:var(--firebg); }
  .step h3 { margin:0 0 6px; font-size:15px; }
  .reason { color:var(--muted); margin:2px 0 8px; }
  .sentence { padding:6px 10px; border-left:4px solid var(--keep); background:#fbfdfb; margin:6px 0; border-radius:0 5px 5px 0; }
  .sentence.fired { border-left-color:var(--fire); background:var(--firebg); }
  .sentence.answer-sentence { border-left-color:#f9a825; }
  .sentence.unchecked { border-left-color:var(--line); background:#fafbfc; }
  .tokens { margin:4px 0 2px; font-family:ui-monospace,monospace; font-size:12.5px; }
  .tok { padding:1px 0; border-radius:2px; white-space:pre; }
  .tok.hot { outline:1px solid var(--fire); }
  .marker { font-size:12px; font-weight:700; color:var(--fire); margin-right:6px; }
  table { border-collapse:collapse; margin:6px 0 2px; font-size:13px; width:100%; }
  th, td { text-align:left; padding:3px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
  th { color:var(--muted); font-weight:600; }
  tr.flagged td { color:var(--fire); font-weight:600; }
  .queries li, .passages li { margin:2px 0; }
  .label { font-weight:600; font-size:13px; margin-top:10px; }
  .text { white-space:pre-wrap; background:var(--bg); padding:6px 10px; border-radius:5px; }
  code { font-size:12.5px; }
  #status { color:var(--muted); }
  .notes li { color:#8a5300; }
</style>
</head>
<body>
<header>
  <h1>quco trace viewer</h1>
  <form id="load" onsubmit="loadById(event)">
    <input id="trace-id" type="text" placeholder="trace id" size="18">
    <input id="token" type="password" placeholder="API key (if any)" size="16">
    <button>Load</button>
  </form>
  <label>or a trace file <input id="file" type="file" accept=".json,application/json"></label>
  <span id="status"></span>
</header>
<main id="view"><div class="card meta">Ask through <code>POST /v1/answer</code>, then open the
<code>viewer</code> link it returns, or load a trace JSON file.</div></main>
<script id="trace-data" type="application/json">__TRACE__</script>
<script>
"use strict";
const $ = (tag, attrs = {}, ...kids) => {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v; else el.setAttribute(k, v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) el.append(kid instanceof Node ? kid : String(kid));
  return el;
};
const fmt = (v) => {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return Number.isInteger(v) ? v.toLocaleString("en") : v.toPrecision(4);
  if (typeof v === "string") return v;
  return JSON.stringify(v);
};
const splitSentences = (text) => (text || "").split(/(?<=[.!?])\s+(?=[A-Z0-9"'(])/).filter((s) => s.trim());

function signalTable(signals, skip) {
  const rows = Object.entries(signals || {}).filter(([k]) => !skip.includes(k));
  if (!rows.length) return null;
  return $("table", { class: "signals" },
    $("tr", {}, $("th", {}, "signal"), $("th", {}, "value")),
    rows.map(([k, v]) => {
      if (Array.isArray(v) && v.length && typeof v[0] === "object" && v[0] !== null) {
        return $("tr", { class: "signal" }, $("td", {}, k), $("td", {}, recordTable(v)));
      }
      return $("tr", { class: "signal" }, $("td", {}, k), $("td", {}, fmt(v)));
    }));
}

function recordTable(records) {
  const keys = [...new Set(records.flatMap((r) => Object.keys(r)))];
  return $("table", { class: "records" },
    $("tr", {}, keys.map((k) => $("th", {}, k))),
    records.map((r) => $("tr", { class: r.flagged ? "flagged" : "" }, keys.map((k) => $("td", {}, fmt(r[k]))))));
}

function claimTable(claims) {
  return $("table", { class: "claims" },
    $("tr", {}, $("th", {}, "claim (head, relation, tail)"), $("th", {}, "signal"), $("th", {}, "count"),
      $("th", {}, "threshold"), $("th", {}, "fired")),
    claims.map((c) => $("tr", { class: c.flagged ? "flagged signal-row" : "signal-row" },
      $("td", {}, (c.triplet || []).filter((x) => x !== null).join(" · ")),
      $("td", {}, c.kind || ""), $("td", {}, c.status && c.status !== "ok" ? c.status : fmt(c.count)),
      $("td", {}, fmt(c.threshold)), $("td", {}, c.flagged ? "yes" : "no"))));
}

const sentenceText = (rec) => (typeof rec.sentence === "string" ? rec.sentence : rec.text || "");

function tokenLine(rec, threshold) {
  return $("div", { class: "tokens" }, rec.tokens.map((t, i) => {
    const u = rec.uncertainty[i];
    const hot = threshold !== undefined && threshold !== null && u > threshold;
    const alpha = Math.max(0, Math.min(1, Number(u) || 0)) * 0.6;
    const el = $("span", { class: "tok" + (hot ? " hot" : ""), title: `uncertainty ${fmt(u)}` }, t);
    el.style.background = `rgba(198, 40, 40, ${alpha})`;
    return el;
  }));
}

function sentenceBlock(rec, index, signals, trigger) {
  const text = sentenceText(rec);
  const claims = rec.claims || [];
  const fired = claims.some((c) => c.flagged) || (signals.flagged_sentence && text === signals.flagged_sentence)
    || (trigger.fired_at !== undefined && trigger.fired_at !== null && trigger.fired_at === index);
  const cls = "sentence" + (fired ? " fired" : "") + (rec.answer ? " answer-sentence" : "");
  const scalars = Object.entries(rec).filter(([k, v]) => !["sentence", "text", "claims", "tokens", "uncertainty",
    "answer", "negation"].includes(k) && (typeof v !== "object" || v === null));
  const head = $("div", {},
    fired ? $("span", { class: "marker" }, "▲ trigger fired") : null,
    rec.negation ? $("span", { class: "marker" }, "negation: generation ends") : null,
    rec.answer ? $("span", { class: "badge keep" }, "states the answer") : null,
    $("span", { class: "sentence-text" }, text),
    scalars.length ? $("span", { class: "meta" }, "  " + scalars.map(([k, v]) => `${k} ${fmt(v)}`).join(" · ")) : null);
  return $("div", { class: cls }, head,
    Array.isArray(rec.tokens) && Array.isArray(rec.uncertainty) ? tokenLine(rec, trigger.threshold) : null,
    claims.length ? claimTable(claims) : null);
}

function stepCard(step) {
  const s = step.signals || {};
  const trigger = (step.triggers || [])[0] || s.trigger || {};  // the step's first trigger record
  const card = $("section", { class: "card step", "data-decision": step.decision });
  const fired = step.decision === "retrieve";
  card.append($("h3", {}, `Step ${step.index} · ${step.stage === "before" ? "before generation" : "generation"}`,
    $("span", { class: `badge ${step.decision}` }, step.decision),
    fired ? $("span", { class: "badge fired" }, "trigger fired") : null,
    $("span", { class: "meta" }, `  ${Number(step.seconds || 0).toFixed(2)} s`)));
  if (step.reason) card.append($("div", { class: "reason" }, step.reason));
  if (Array.isArray(s.sentences)) {
    card.append($("div", { class: "label" }, "Draft, sentence by sentence"));
    s.sentences.forEach((rec, i) => card.append(sentenceBlock(rec, i, s, trigger)));
    const checked = new Set(s.sentences.map(sentenceText));
    splitSentences(step.draft).filter((x) => !checked.has(x) && ![...checked].some((c) => c.includes(x) || x.includes(c)))
      .forEach((x) => card.append($("div", { class: "sentence unchecked" }, $("span", { class: "meta" }, "not checked: "), x)));
  } else if (step.draft) {
    card.append($("div", { class: "label" }, "Draft, sentence by sentence"));
    splitSentences(step.draft).forEach((x, i, all) => card.append(
      $("div", { class: "sentence" + (fired && i === all.length - 1 ? " fired" : "") },
        fired && i === all.length - 1 ? $("span", { class: "marker" }, "▲ trigger fired") : null, x)));
  }
  (step.triggers || []).forEach((r) => card.append($("div", { class: "meta" },
    `${r.signal} per ${r.unit}: [${(r.scores || []).map((v) => v === null ? "–" : fmt(v)).join(", ")}] ${r.rule} `
    + `${r.param} ${fmt(r.threshold)} → ${r.fired_at === null ? "no fire" : "fires at " + r.fired_at}`)));
  const table = signalTable(s, ["sentences", "flagged_sentence"]);
  if (table) card.append($("div", { class: "label" }, "Signals"), table);
  if ((step.queries || []).length) {
    card.append($("div", { class: "label" }, "Queries"),
      $("ol", { class: "queries" }, step.queries.map((q) => $("li", { class: "query" }, q))));
  }
  if ((step.retrieved || []).length) {
    card.append($("div", { class: "label" }, "Retrieved passages"),
      $("ol", { class: "passages" }, step.retrieved.map((p) => $("li", { class: "passage" },
        $("b", {}, p.title || p.id), $("span", { class: "meta" }, `  id ${p.id} · score ${fmt(p.score)} · for “${p.query}”`)))));
  }
  if (step.regenerated) card.append($("div", { class: "label" }, "Regenerated with the passages"), $("div", { class: "text" }, step.regenerated));
  if (step.kept) card.append($("div", { class: "label" }, "Kept"), $("div", { class: "text kept" }, step.kept));
  return card;
}

function render(trace) {
  const view = document.getElementById("view");
  view.replaceChildren();
  const c = trace.counters || {};
  const sum = (o) => Object.values(o || {}).reduce((a, b) => a + b, 0);
  view.append($("section", { class: "card summary" },
    $("div", { class: "question" }, trace.question),
    $("div", { class: "answer", id: "answer" }, "Answer: ", $("b", {}, trace.answer || "(none stated)")),
    $("div", { class: "meta" }, `method ${trace.method} · stopped: ${trace.stop_reason} · ${Number(trace.seconds || 0).toFixed(2)} s · `
      + `${sum(c.llm_calls)} LLM calls · ${sum(c.generated_tokens)} generated tokens · ${c.retrievals || 0} retrievals · `
      + `${c.corpus_queries || 0} corpus lookups`),
    $("div", { class: "label" }, "Prediction"), $("div", { class: "text", id: "prediction" }, trace.prediction || "")));
  if ((trace.notes || []).length) {
    view.append($("section", { class: "card" }, $("div", { class: "label" }, "Notes"),
      $("ul", { class: "notes" }, trace.notes.map((n) => $("li", {}, n)))));
  }
  (trace.steps || []).forEach((step) => view.append(stepCard(step)));
  document.title = `quco · ${trace.question}`;
  document.body.dataset.rendered = "yes";
}

function setStatus(text) { document.getElementById("status").textContent = text; }

async function fetchTrace(id, token) {
  setStatus("loading…");
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  try {
    const r = await fetch(`/v1/traces/${encodeURIComponent(id)}`, { headers });
    const body = await r.json();
    if (!r.ok) { setStatus((body.error && body.error.message) || `HTTP ${r.status}`); return; }
    render(body); setStatus(`trace ${id}`);
  } catch (e) { setStatus(`cannot load trace ${id}: ${e}`); }
}

function loadById(event) {
  event.preventDefault();
  const id = document.getElementById("trace-id").value.trim();
  if (id) fetchTrace(id, document.getElementById("token").value.trim());
}

document.getElementById("file").addEventListener("change", async (e) => {
  const f = e.target.files[0];
  if (!f) return;
  try { render(JSON.parse(await f.text())); setStatus(f.name); } catch (err) { setStatus(`not a trace: ${err}`); }
});

(function start() {
  const embedded = document.getElementById("trace-data").textContent.trim();
  if (embedded && embedded !== "null") { render(JSON.parse(embedded)); return; }
  const id = new URLSearchParams(location.search).get("id");
  const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";  // never sent to the server
  if (token) document.getElementById("token").value = token;
  if (id) { document.getElementById("trace-id").value = id; fetchTrace(id, token); }
})();
</script>
</body>
</html>
"""


def viewer_html(trace: dict[str, Any] | None = None) -> str:
    """The viewer page, with ``trace`` (a ``Trace.to_dict()``) embedded when given."""
    data = json.dumps(trace, ensure_ascii=False) if trace is not None else "null"
    # Inside <script>, "</script>" or "<!--" in a passage title would end the block: escape every "<".
    data = data.replace("<", "\\u003c")
    return _PAGE.replace("__TRACE__", data)


__all__ = ["viewer_html"]
