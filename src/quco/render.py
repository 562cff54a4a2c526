"""Readable rendering of a trace for the terminal (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from quco.trace import Step, Trace
from quco.trigger_record import TriggerRecord

_DECISION_STYLE = {"retrieve": "bold yellow", "keep": "green", "skip": "green", "stop": "red"}


def _fmt_count(rec: dict[str, Any]) -> str:
    if rec.get("status") != "ok":
        return f"unknown ({rec.get('error')})"
    text = str(rec.get("count"))
    if rec.get("per_billion") is not None:
        text += f" ({rec['per_billion']:g}/B)"
    if rec.get("exact") is False:
        text += " ~"
    return text


_RULE_TEXT = {"above": ">", "abs_above": "|>|", "below": "<", "at_least": ">="}


def _record_line(record: TriggerRecord) -> Text:
    """One trigger record: its scores against the threshold, and where it fired."""
    if record.rule == "always":
        text = f"{record.signal}: always" + (
            " (last unit: no retrieval)" if record.detail.get("final") else ""
        )
        return Text(text, style="cyan")
    scores = ", ".join("—" if v is None else f"{v:g}" for v in record.scores) or "(no candidate)"
    verdict = f"fires at {record.unit} {record.fired_at}" if record.fired else "does not fire"
    forced = f"; {len(record.forced)} unknown" if record.forced else ""
    rule = _RULE_TEXT.get(record.rule, record.rule)
    return Text(
        f"{record.signal} per {record.unit}: [{scores}] {rule} {record.param} {record.threshold:g}{forced} → {verdict}",
        style="cyan",
    )


def _detail_lines(step: Step) -> list[Text]:
    """Method-specific detail worth reading: QuCo-RAG's counts and claims; the rest compactly."""
    s = step.signals
    lines: list[Text] = []
    if "entity_counts" in s:
        ents = ", ".join(f"{r['entity']}={_fmt_count(r)}" for r in s["entity_counts"])
        lines.append(Text(f"entities: {ents}", style="dim"))
    elif "entities" in s:
        lines.append(Text(f"entities: {', '.join(s['entities']) or '(none)'}", style="dim"))
    for sent in s.get("sentences", []):
        if "sentence" not in sent:
            continue
        tag = " [answer]" if sent.get("answer") else " [negation: dropped]" if sent.get("negation") else ""
        lines.append(Text(f"• {sent['sentence']}{tag}", style="white"))
        for claim in sent.get("claims", []):
            mark = "✗" if claim.get("flagged") else "✓"
            style = "yellow" if claim.get("flagged") else "dim"
            lines.append(
                Text(
                    f"    {mark} {claim['triplet']} {claim['kind']}={_fmt_count(claim)} (< {claim['threshold']:g} flags)",
                    style=style,
                )
            )
        if not sent.get("claims") and not tag:
            lines.append(Text("    (no claim extracted)", style="dim"))
    other = {
        k: v for k, v in s.items() if k not in ("entity_counts", "entities", "sentences", "flagged_sentence")
    }
    if other:
        lines.append(Text(f"signals: {other}", style="dim"))
    return lines


def render_trace(trace: Trace, console: Console | None = None) -> None:
    console = console or Console()
    console.rule(f"[bold]{trace.method}[/bold]  {trace.question}")
    for step in trace.steps:
        body: list[Any] = []
        if step.draft:
            body.append(Text(f"draft: {step.draft}", style="italic"))
        body.extend(_record_line(r) for r in step.triggers)
        body.extend(_detail_lines(step))
        if step.reason:
            body.append(
                Text(f"→ {step.decision}: {step.reason}", style=_DECISION_STYLE.get(step.decision, ""))
            )
        for q in step.queries:
            body.append(Text(f"query: {q}", style="magenta"))
        if step.retrieved:
            titles = "; ".join(f"{r.title} ({r.score:.2f})" for r in step.retrieved)
            body.append(Text(f"retrieved: {titles}", style="magenta"))
        if step.regenerated:
            body.append(Text(f"regenerated: {step.regenerated}", style="italic"))
        if step.kept:
            body.append(Text(f"kept: {step.kept}", style="green"))
        title = f"step {step.index} · {step.stage} · {step.decision} · {step.seconds:.2f}s"
        console.print(Panel(Group(*body) if body else Text("(nothing)"), title=title, title_align="left"))
    for note in trace.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    c = trace.counters
    table = Table(show_header=True, header_style="bold", box=None)
    table.add_column("LLM calls")
    table.add_column("tokens in/out")
    table.add_column("retrievals")
    table.add_column("corpus queries")
    table.add_column("seconds by component")
    calls = ", ".join(f"{r}={n}" for r, n in c.llm_calls.items()) or "0"
    tokens = f"{sum(c.prompt_tokens.values())}/{sum(c.generated_tokens.values())}"
    secs = ", ".join(f"{k}={v:.2f}" for k, v in sorted(c.seconds.items()))
    corpus = f"{c.corpus_queries}" + (f" ({c.corpus_unknown} unknown)" if c.corpus_unknown else "")
    table.add_row(calls, tokens, str(c.retrievals), corpus, secs)
    console.print(table)
    console.print(Text(f"prediction: {trace.prediction}", style="bold"))
    console.print(
        Text(
            f"answer: {trace.answer or '(none stated)'}   [stop: {trace.stop_reason}, {trace.seconds:.1f}s]",
            style="bold green",
        )
    )
