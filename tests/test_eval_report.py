"""The HTML report: self-contained, with the comparison table, paired tests, plots and per-question traces;
opened in headless Chromium (Debian package ``chromium``) to check that the tables and plots render."""

from __future__ import annotations

import base64
import hashlib
import io
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from quco.datasets import load_dataset
from quco.eval.render.report import write_report
from quco.eval.run.runner import EvalOptions, Questions, run_eval
from quco.signals.corpus import entity_rarity
from quco.trace import RetrievedRef, Step, Trace
from quco.trigger_record import TriggerRecord

N = 24
GOLD = {e.question: e.answers[0] for e in load_dataset("hotpotqa", limit=N)}


def _answerer(method: str, p_right: float, retrieves: bool):
    """A deterministic answerer whose traces look like the method's (QuCo: stage-1 entity counts)."""

    def answer(question: str) -> Trace:
        h = int(hashlib.sha256(f"{method}|{question}".encode()).hexdigest(), 16)
        right = (h % 1000) / 1000 < p_right
        trace = Trace(question=question, method=method)
        trace.prediction = f"Reasoning. So the answer is {GOLD[question] if right else 'Paris'}."
        if method == "quco":
            count = [0, 7, 450, 90_000, 2_000_000][h % 5]
            stage1 = entity_rarity([float(count)], 1000, "count", True).record
            trace.steps.append(
                Step(index=0, stage="before", decision="retrieve" if stage1.fired else "skip",
                     signals={"entity_counts": [{"entity": "E", "count": count, "status": "ok"}]},
                     triggers=[stage1])
            )  # fmt: skip
        if retrieves:
            # QuCo-RAG's stage 2 judges its draft (a trigger record), which the "first drafts" table reads.
            judged = (
                [TriggerRecord("cooccurrence", "below", 1.0, [0.0], "sentence", 0)]
                if method == "quco"
                else []
            )
            answer = f" So the answer is {GOLD[question] if h % 3 else 'Paris'}." if judged else ""
            trace.steps.append(
                Step(index=1, stage="generate", draft=f"A draft <b>sentence</b>.{answer}", decision="retrieve",
                     queries=["E born"], retrieved=[RetrievedRef("p1", "Some Title", 3.2, "E born")],
                     triggers=judged)
            )  # fmt: skip
            trace.counters.retrievals = 1 + h % 3
        trace.counters.add_llm("main", 400, 30 + h % 20)
        trace.counters.add_seconds("llm", 1.0 + (h % 7) / 10)
        trace.counters.add_seconds("retrieval", 0.05 * trace.counters.retrievals)
        trace.seconds = sum(trace.counters.seconds.values())
        return trace

    answer.method = method  # type: ignore[attr-defined]
    return answer


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report")
    dirs = []
    for method, p, retrieves in (("wo-rag", 0.2, False), ("sr-rag", 0.4, True), ("quco", 0.5, True)):
        run_eval(
            _answerer(method, p, retrieves),
            "hotpotqa",
            Questions(limit=N),
            EvalOptions(out_dir=root / method, progress=False),
        )
        dirs.append(root / method)
    return write_report(dirs, root / "report.html", n_boot=2000)


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, int] = {}
        self.current: list[str] = []
        self.in_body = False
        self.imgs: list[dict[str, str | None]] = []
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self.current.append(a.get("id") or "?")
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body and self.current and self.current[-1] != "?":
            self.tables[self.current[-1]] = self.tables.get(self.current[-1], 0) + 1
        elif tag == "img":
            self.imgs.append(a)
        for key in ("src", "href"):
            if a.get(key):
                self.refs.append(str(a[key]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self.current:
            self.current.pop()
        elif tag == "tbody":
            self.in_body = False


def test_report_is_self_contained_with_tables_plots_and_traces(report: Path) -> None:
    text = report.read_text("utf-8")
    page = _Collect()
    page.feed(text)
    assert page.tables == {"summary": 3, "paired": 2, "detection": 1, "questions": N}
    assert all(r.startswith("data:image/png;base64,") for r in page.refs)  # nothing fetched from elsewhere
    alts = [i["alt"] for i in page.imgs]
    assert alts == [
        "EM versus cost per question",
        "Runtime breakdown",
        "EM by retrievals per question",
        "EM by entity frequency",
        "Stage-1 threshold sweep",
        "Trigger threshold sweep",
    ]
    for img in page.imgs:
        data = base64.b64decode(str(img["src"]).split(",", 1)[1])
        with Image.open(io.BytesIO(data)) as im:
            assert im.format == "PNG" and im.width > 300 and im.height > 150
    # Drill-down: every run's trace for a question, with escaped generated text.
    assert text.count("<summary>traces</summary>") == N
    assert "A draft &lt;b&gt;sentence&lt;/b&gt;." in text and "<b>sentence</b>" not in text
    assert "retrieved: Some Title" in text
    assert "Does the trigger catch wrong drafts?" in text and f"<td class='num'>{N}</td>" in text
    # Interval cells: "mean [low, high]".
    assert re.search(r'<td class="num">\d+\.\d<br><span class="ci">\[\d+\.\d, \d+\.\d\]</span></td>', text)


def _chromium() -> str:
    exe = shutil.which("chromium")
    assert exe, "headless Chromium is needed: apt-get install -y chromium"
    return exe


def _chrome_args(profile: Path) -> list[str]:
    return [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
    ]


def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    dom = subprocess.run(
        [*_chrome_args(tmp_path / "profile"), "--dump-dom", report.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    # Set by the page's onload script: every plot decoded to an image with a width.
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[:500]
    assert 'data-images-total="6"' in body.group(0) and 'data-images-ok="6"' in body.group(0)
    page = _Collect()
    page.feed(dom)
    assert page.tables == {"summary": 3, "paired": 2, "detection": 1, "questions": N}

    shot = tmp_path / "shot.png"
    subprocess.run(
        [*_chrome_args(tmp_path / "profile"), "--window-size=1280,1600", f"--screenshot={shot}",
         report.resolve().as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    with Image.open(shot) as im:
        assert im.size == (1280, 1600)
        colours = im.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 50  # the plots are drawn: far from a blank page
