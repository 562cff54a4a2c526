"""Bad input gets one clear line and exit code 2, never a traceback, and corrupts nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

QUCO = [sys.executable, "-m", "quco.cli"]


def run(
    *args: str, cwd: Path | None = None, env_cache: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = None
    if env_cache is not None:
        import os

        env = dict(os.environ, QUCO_CACHE_DIR=str(env_cache))
    return subprocess.run([*QUCO, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    # Progress bars may precede it; the error itself is one line (rich may wrap it at the terminal width).
    text = " ".join(line.strip() for line in proc.stderr.splitlines() if line.strip())
    assert text.count("error:") == 1, proc.stderr
    text = text[text.index("error:") :]
    for fragment in fragments:
        assert fragment in text, proc.stderr


def test_empty_question() -> None:
    assert_one_line_error(run("ask", "   "), "question is empty")


def test_unknown_method_lists_the_known_ones() -> None:
    assert_one_line_error(
        run("ask", "Who wrote Hamlet?", "--method", "nope"),
        "unknown method 'nope'",
        "quco",
        "sr-rag",
        "wo-rag",
    )


def test_missing_config(tmp_path: Path) -> None:
    assert_one_line_error(
        run("ask", "Who wrote Hamlet?", "--config", str(tmp_path / "none.yaml")), "config file not found"
    )


def test_unreadable_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"method: quco\nparams: {entity_threshold: \xff\xfe}\n")
    assert_one_line_error(run("ask", "Who wrote Hamlet?", "--config", str(bad)), "cannot read config file")
    broken = tmp_path / "broken.yaml"
    broken.write_text("method: [quco\n")
    assert_one_line_error(run("ask", "Who wrote Hamlet?", "--config", str(broken)), "not valid YAML")


def test_invalid_config_value_names_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("retriever:\n  top_k: many\n")
    assert_one_line_error(run("ask", "Who wrote Hamlet?", "--config", str(cfg)), "retriever.top_k")
    cfg.write_text("method: quco\nparams:\n  entity_treshold: 5\n")
    assert_one_line_error(run("ask", "Who wrote Hamlet?", "--config", str(cfg)), "params.entity_treshold")


@pytest.mark.parametrize("on_error", ["stop", "skip"])
def test_corpus_with_bad_lines(tmp_path: Path, on_error: str) -> None:
    corpus = tmp_path / "c.jsonl"
    good = [
        json.dumps({"id": str(i), "title": f"T{i}", "text": f"Passage number {i} about rivers."})
        for i in range(5)
    ]
    corpus.write_bytes(
        ("\n".join(good[:2]) + "\n").encode()
        + b'{"id": "x", "title": "bad", "text": "caf\xe9"}\n'
        + (json.dumps({"id": "y", "title": "no text"}) + "\n").encode()
        + ("\n".join(good[2:]) + "\n").encode()
    )
    out = tmp_path / "idx"
    proc = run(
        "index",
        "bm25",
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--on-error",
        on_error,
        env_cache=tmp_path / "cache",
    )
    if on_error == "stop":
        assert_one_line_error(proc, str(corpus), "line 3", "UTF-8")
        assert not out.exists()  # nothing half-built is left behind
    else:
        assert proc.returncode == 0, proc.stderr
        assert "5 passages indexed from 7 lines (2 skipped)" in proc.stdout


def test_methods_lists_the_reference_methods() -> None:
    proc = run("methods")
    assert proc.returncode == 0
    for name in ("quco", "sr-rag", "wo-rag"):
        assert name in proc.stdout


def test_index_progress_bars_can_be_switched_off(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    lines = [
        json.dumps({"id": str(i), "title": f"T{i}", "text": f"Passage {i} about rivers."}) for i in range(5)
    ]
    corpus.write_text("\n".join(lines) + "\n", "utf-8")
    for flag, bars in (("--progress", True), ("--no-progress", False)):
        proc = run("index", "--corpus", str(corpus), flag, env_cache=tmp_path / flag.strip("-"))
        assert proc.returncode == 0, proc.stderr
        assert (
            "5 passages indexed from 5 lines" in proc.stdout
            and "corpus statistics: 5 documents" in proc.stdout
        )
        assert ("%|" in proc.stderr) is bars, proc.stderr
