"""Readable rendering of a trace for the terminal (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from quco.trace import Step, Trace

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


def _signal_lines(step: Step) -> list[Text]:
    s = step.signals
    lines: list[Text] = []
    if "entity_counts" in s:
        ents = ", ".join(f"{r['entity']}={_fmt_count(r)}" for r in s["entity_counts"])
        lines.append(Text(f"entities: {ents}", style="cyan"))
        if "mean_count" in s:
            lines.append(
                Text(f"mean count {s['mean_count']:g} vs threshold {s['threshold']:g}", style="cyan")
            )
    elif "entities" in s:
        lines.append(Text(f"entities: {', '.join(s['entities']) or '(none)'}", style="cyan"))
    for sent in s.get("sentences", []):
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
        k: v
        for k, v in s.items()
        if k
        not in (
            "entity_counts",
            "entities",
            "mean_count",
            "threshold",
            "unit",
            "sentences",
            "flagged_sentence",
        )
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
        body.extend(_signal_lines(step))
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
