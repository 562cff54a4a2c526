"""The run loop: durable lines, resume without repeats after kill -9 / Ctrl-C / torn writes, config guard,
recorded errors, threads. The answerer is a deterministic function over real HotpotQA questions, so these
tests need no model (the real pipeline is covered by tests/test_eval_integration.py).

Run as a script (``python tests/test_eval_runner.py OUT LIMIT SLEEP``) this file evaluates its answerer
into OUT; the kill tests start it as a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from quco.config import load_config
from quco.datasets import load_dataset
from quco.eval.run.runner import EvalOptions, Questions, run_eval
from quco.eval.runs.store import RESULTS_FILE, RunError, load_run, scan_results
from quco.eval.score.metrics import score_prediction
from quco.machine import cpu_name
from quco.paths import data_dir
from quco.trace import Step, Trace

EXAMPLES = load_dataset("hotpotqa", limit=40)
GOLD = {e.question: e.answers[0] for e in EXAMPLES}
FAILS = {EXAMPLES[3].question}  # this question raises, to check that errors are recorded and the run goes on
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SLEEP = float(os.environ.get("QUCO_TEST_SLEEP", "0"))
# In the child process of the interruption test: after this many answers, the next one waits until the test
# kills or interrupts the process, so that the signal always arrives mid-run, however slow the machine.
HOLD_AFTER = int(os.environ.get("QUCO_TEST_HOLD_AFTER", "0"))
_answered = 0


def toy_answer(question: str) -> Trace:
    """Right for about half the questions (by a hash of the question), with a step and counters like a method."""
    global _answered
    if HOLD_AFTER and _answered >= HOLD_AFTER:
        time.sleep(600)
    _answered += 1
    if question in FAILS:
        raise ValueError("simulated failure")
    if SLEEP:
        time.sleep(SLEEP)
    h = int(hashlib.sha256(question.encode()).hexdigest(), 16)
    trace = Trace(question=question, method="toy")
    answer = GOLD[question] if h % 2 else "Paris"
    trace.prediction = f"Reasoning about it. So the answer is {answer}." if h % 5 else "I do not know."
    trace.steps.append(
        Step(index=0, stage="before", signals={"mean_count": float(h % 1000)}, decision="keep")
    )
    trace.counters.add_llm("main", 100 + h % 50, 20 + h % 7)
    trace.counters.retrievals = h % 3
    return trace


def _stable(rec: dict[str, Any]) -> dict[str, Any]:
    """A record without its wall times, which differ between two runs of the same thing."""
    rec = json.loads(json.dumps(rec))
    for timing in ("seconds", "cpu_seconds", "load"):
        rec.pop(timing, None)
    if rec.get("trace"):
        rec["trace"].pop("seconds", None)
        rec["trace"]["counters"].pop("seconds", None)
    rec.pop("error_traceback", None)
    return rec


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (path / RESULTS_FILE).read_text("utf-8").splitlines()]


def test_every_question_recorded_in_order_with_scores_and_errors(tmp_path: Path) -> None:
    summary = run_eval(
        toy_answer, "hotpotqa", Questions(limit=12), EvalOptions(out_dir=tmp_path, progress=False)
    )
    recs = _lines(tmp_path)
    assert [r["id"] for r in recs] == [e.id for e in EXAMPLES[:12]]
    assert (summary.completed, summary.new, summary.resumed, summary.errors) == (12, 12, 0, 1)
    failed = recs[3]
    assert failed["error"] == "ValueError: simulated failure"
    assert (failed["em"], failed["trace"]) == (0.0, None)
    for rec, ex in zip(recs, EXAMPLES[:12], strict=True):
        if rec["error"]:
            continue
        s = score_prediction(rec["prediction"], ex.answers, ex.kind, ex.dataset)
        assert (rec["answer"], rec["em"], rec["missing"]) == (s.answer, s.em, s.missing)
        assert rec["gold"] == ex.answers
        assert rec["trace"]["counters"]["llm_calls"] == {"main": 1}
    assert summary.em == pytest.approx(sum(r["em"] for r in recs) / 12)
    assert summary.missing == sum(1 for r in recs if r["missing"] and not r["error"])
    assert summary.missing > 0  # "I do not know." has no answer: counted wrong, not scored as text


def test_run_directory_names_no_folder_of_this_machine(tmp_path: Path) -> None:
    """Run directories are committed (results/headline): the dataset path is recorded relative to the data
    directory, in the ``${QUCO_DATA_DIR}`` notation of the configs, so a run names no local folder."""
    import yaml

    run_eval(toy_answer, "hotpotqa", Questions(limit=2), EvalOptions(out_dir=tmp_path, progress=False))
    text = (tmp_path / "config.yaml").read_text(encoding="utf-8")
    selection = yaml.safe_load(text)["selection"]
    assert selection["dataset_path"] == "${QUCO_DATA_DIR}/hotpotqa/hotpot_dev_0_300_unified.jsonl"
    assert str(data_dir().resolve()) not in text and str(tmp_path) not in text
    outside = tmp_path / "mine.jsonl"  # a dataset file outside the data directory keeps its own path
    outside.write_text(
        (data_dir() / "hotpotqa/hotpot_dev_0_300_unified.jsonl").read_text().splitlines()[0] + "\n"
    )
    run_eval(toy_answer, outside, Questions(limit=1), EvalOptions(out_dir=tmp_path / "own", progress=False))
    own = yaml.safe_load((tmp_path / "own" / "config.yaml").read_text(encoding="utf-8"))["selection"]
    assert own["dataset_path"] == str(outside)


def test_resume_answers_only_what_is_missing(tmp_path: Path) -> None:
    asked: list[str] = []

    def counting(q: str) -> Trace:
        asked.append(q)
        return toy_answer(q)

    run_eval(counting, "hotpotqa", Questions(limit=5), EvalOptions(out_dir=tmp_path, progress=False))
    assert len(asked) == 5
    summary = run_eval(
        counting, "hotpotqa", Questions(limit=10), EvalOptions(out_dir=tmp_path, progress=False)
    )
    assert len(asked) == 10 and len(set(asked)) == 10
    assert (summary.resumed, summary.new, summary.completed) == (5, 5, 10)
    summary = run_eval(
        counting, "hotpotqa", Questions(limit=10), EvalOptions(out_dir=tmp_path, progress=False)
    )
    assert len(asked) == 10 and summary.new == 0
    assert [r["id"] for r in _lines(tmp_path)] == [e.id for e in EXAMPLES[:10]]
    # A recorded error is kept on resume, and re-run on request without duplicating the question.
    summary = run_eval(
        counting,
        "hotpotqa",
        Questions(limit=10),
        EvalOptions(out_dir=tmp_path, progress=False, retry_errors=True),
    )
    assert summary.new == 1 and asked[-1] == EXAMPLES[3].question
    ids = [r["id"] for r in _lines(tmp_path)]
    assert sorted(ids) == sorted(e.id for e in EXAMPLES[:10])


def test_torn_last_line_is_dropped_and_redone(tmp_path: Path) -> None:
    full = tmp_path / "full"
    run_eval(toy_answer, "hotpotqa", Questions(limit=8), EvalOptions(out_dir=full, progress=False))
    expected = [_stable(r) for r in _lines(full)]
    part = tmp_path / "part"
    run_eval(toy_answer, "hotpotqa", Questions(limit=6), EvalOptions(out_dir=part, progress=False))
    line = (full / RESULTS_FILE).read_text("utf-8").splitlines()[6]
    with (part / RESULTS_FILE).open("a", encoding="utf-8") as fh:
        fh.write(line[: len(line) // 2])  # the writer was killed half-way through question 7
    scan = scan_results(part / RESULTS_FILE)
    assert scan.torn and len(scan.records) == 6
    assert len(load_run(part).records) == 6  # readers skip the torn line too
    summary = run_eval(toy_answer, "hotpotqa", Questions(limit=8), EvalOptions(out_dir=part, progress=False))
    assert summary.new == 2
    assert [_stable(r) for r in _lines(part)] == expected


def test_corrupt_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    run_eval(toy_answer, "hotpotqa", Questions(limit=3), EvalOptions(out_dir=tmp_path, progress=False))
    lines = (tmp_path / RESULTS_FILE).read_text("utf-8").splitlines()
    lines[1] = lines[1][:20]
    (tmp_path / RESULTS_FILE).write_text("\n".join(lines) + "\n", "utf-8")
    with pytest.raises(RunError, match=r"line 2 is corrupt"):
        run_eval(toy_answer, "hotpotqa", Questions(limit=3), EvalOptions(out_dir=tmp_path, progress=False))


def test_changed_config_refuses_to_resume(tmp_path: Path) -> None:
    cfg = load_config(CONFIGS / "hotpotqa/sr-rag.yaml")
    # limit=0 writes the run's config without building the pipeline.
    assert (
        run_eval(cfg, "hotpotqa", Questions(limit=0), EvalOptions(out_dir=tmp_path, progress=False)).completed
        == 0
    )
    stored = (tmp_path / "config.yaml").read_text("utf-8")
    assert "config_hash:" in stored and "method: sr-rag" in stored and "sha256: b48bf547" in stored
    run_eval(
        cfg, "hotpotqa", Questions(limit=0), EvalOptions(out_dir=tmp_path, progress=False)
    )  # same config: fine
    changed = load_config(CONFIGS / "hotpotqa/sr-rag.yaml", overrides={"retriever.top_k": 5})
    with pytest.raises(RunError, match=r"different configuration \(pipeline\.retriever\.top_k \(3 -> 5\)\)"):
        run_eval(changed, "hotpotqa", Questions(limit=0), EvalOptions(out_dir=tmp_path, progress=False))
    with pytest.raises(RunError, match="different configuration"):
        run_eval(cfg, "2wikimultihopqa", Questions(limit=0), EvalOptions(out_dir=tmp_path, progress=False))
    # the answer protocol is part of the identity (HotpotQA's default is the published one)
    assert load_run(tmp_path).config.identity["answer_protocol"] == {
        "name": "published",
        "max_new_tokens": 128,
    }
    with pytest.raises(RunError, match=r"answer_protocol\.name \('published' -> 'strict'\)"):
        run_eval(
            cfg,
            "hotpotqa",
            Questions(limit=0),
            EvalOptions(out_dir=tmp_path, progress=False, protocol="strict"),
        )
    other = tmp_path / "fn"
    run_eval(
        toy_answer,
        "hotpotqa",
        Questions(limit=2),
        EvalOptions(out_dir=other, progress=False, fingerprint="v1"),
    )
    with pytest.raises(RunError, match=r"fingerprint \('v1' -> 'v2'\)"):
        run_eval(
            toy_answer,
            "hotpotqa",
            Questions(limit=2),
            EvalOptions(out_dir=other, progress=False, fingerprint="v2"),
        )
    with pytest.raises(RunError, match="already holds 2 results"):
        run_eval(
            toy_answer,
            "hotpotqa",
            Questions(limit=2),
            EvalOptions(out_dir=other, progress=False, fingerprint="v1", resume=False),
        )


def test_a_setting_added_since_and_left_unset_resumes(tmp_path: Path) -> None:
    """A run recorded before a setting existed resumes when the setting is unset (None, the old behaviour), and
    refuses when it is set."""
    import yaml

    cfg = load_config(CONFIGS / "hotpotqa/sr-rag.yaml")
    run_eval(cfg, "hotpotqa", Questions(limit=0), EvalOptions(out_dir=tmp_path, progress=False))
    path = tmp_path / "config.yaml"
    stored = yaml.safe_load(path.read_text("utf-8"))
    assert stored["pipeline"]["generator"]["analysis_backend"] is None
    del stored["pipeline"]["generator"]["analysis_backend"]  # as written before the setting existed
    stored["config_hash"] = "0123456789abcdef"
    path.write_text(yaml.safe_dump(stored, sort_keys=False), "utf-8")
    run_eval(cfg, "hotpotqa", Questions(limit=0), EvalOptions(out_dir=tmp_path, progress=False))
    resumed = yaml.safe_load(path.read_text("utf-8"))
    assert (
        resumed["config_hash"] != "0123456789abcdef"
        and "analysis_backend" in resumed["pipeline"]["generator"]
    )
    hybrid = load_config(CONFIGS / "hotpotqa/sr-rag.yaml", overrides={"generator.analysis_backend": "hf"})
    with pytest.raises(RunError, match=r"generator\.analysis_backend \(None -> 'hf'\)"):
        run_eval(hybrid, "hotpotqa", Questions(limit=0), EvalOptions(out_dir=tmp_path, progress=False))


def test_changed_prompt_files_and_older_runs_refuse_to_resume(tmp_path: Path) -> None:
    import yaml

    shots = tmp_path / "shots.jsonl"
    shots.write_text(json.dumps({"question": "Q1?", "cot": "Because.", "answer": "A1"}) + "\n", "utf-8")
    cfg = load_config(CONFIGS / "hotpotqa/sr-rag.yaml", overrides={"prompt.exemplars": str(shots)})
    run = tmp_path / "run"
    run_eval(cfg, "hotpotqa", Questions(limit=0), EvalOptions(out_dir=run, progress=False, protocol="strict"))
    stored = yaml.safe_load((run / "config.yaml").read_text("utf-8"))
    assert stored["prompt"]["template"] == "baseline" and stored["pipeline"]["prompt"]["template"] is None
    shots.write_text(json.dumps({"question": "Q1?", "cot": "Since.", "answer": "A1"}) + "\n", "utf-8")
    with pytest.raises(RunError, match=r"different configuration \(prompt\.sha256"):
        run_eval(
            cfg, "hotpotqa", Questions(limit=0), EvalOptions(out_dir=run, progress=False, protocol="strict")
        )

    # A run written before the answer protocol was recorded was made with other loop defaults: neither resumed
    # nor reused, with a message that says why.
    old = tmp_path / "old"
    old.mkdir()
    stored = yaml.safe_load((run / "config.yaml").read_text("utf-8"))
    stored.pop("answer_protocol")
    stored["reprompt"] = {"enabled": False, "max_new_tokens": None}
    (old / "config.yaml").write_text(yaml.safe_dump(stored, sort_keys=False), "utf-8")
    (old / "results.jsonl").write_text("", "utf-8")
    with pytest.raises(RunError, match="older version of quco"):
        run_eval(
            cfg, "hotpotqa", Questions(limit=0), EvalOptions(out_dir=old, progress=False, protocol="strict")
        )
    with pytest.raises(RunError, match="older version of quco"):
        run_eval(
            cfg,
            "hotpotqa",
            Questions(limit=1),
            EvalOptions(out_dir=tmp_path / "new", traces_from=old, progress=False),
        )


def test_threads_answer_concurrently_with_the_same_results(tmp_path: Path) -> None:
    names: set[str] = set()
    meet = threading.Barrier(2, timeout=60)  # the first two questions wait for each other: they overlap
    calls = iter(range(10**6))

    def threaded(q: str) -> Trace:
        names.add(threading.current_thread().name)
        if next(calls) < 2:
            meet.wait()
        time.sleep(0.02)
        return toy_answer(q)

    run_eval(
        toy_answer, "hotpotqa", Questions(limit=16), EvalOptions(out_dir=tmp_path / "one", progress=False)
    )
    summary = run_eval(
        threaded,
        "hotpotqa",
        Questions(limit=16),
        EvalOptions(out_dir=tmp_path / "four", workers=4, progress=False),
    )
    assert summary.completed == 16
    assert len(names) > 1
    one = {r["id"]: _stable(r) for r in _lines(tmp_path / "one")}
    four = {r["id"]: _stable(r) for r in _lines(tmp_path / "four")}
    assert one == four
    # Threads share the process's CPU clock: no question's CPU seconds can be told apart, none is recorded.
    assert {r["cpu_seconds"] for r in _lines(tmp_path / "four")} == {None}


def test_each_question_records_its_cpu_seconds_the_machine_load_and_the_processor(tmp_path: Path) -> None:
    """Beside wall seconds, a question records the CPU time its process spent on it and the 1-minute load
    average: a question that waited (a paused run, a busy machine) shows wall seconds well above CPU seconds."""

    def timed(q: str) -> Trace:
        if EXAMPLES[0].question == q:  # computes for at least 0.2 CPU seconds
            until = time.process_time() + 0.2
            while time.process_time() < until:
                pass
        else:  # waits 0.3 s, computing nothing
            time.sleep(0.3)
        return toy_answer(q)

    run_eval(timed, "hotpotqa", Questions(limit=2), EvalOptions(out_dir=tmp_path, progress=False))
    busy, idle = _lines(tmp_path)
    assert busy["cpu_seconds"] >= 0.2 and busy["seconds"] >= busy["cpu_seconds"] * 0.9
    assert idle["seconds"] >= 0.3 and idle["cpu_seconds"] < 0.2
    assert all(isinstance(r["load"], float) and r["load"] >= 0 for r in (busy, idle))
    # and the processor that answered: seconds from two machines are not comparable
    assert busy["cpu"] == idle["cpu"] == cpu_name() != ""


def _start(out: Path, limit: int, hold_after: int = 0) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "QUCO_DATA_DIR": str(data_dir()),
        "QUCO_TEST_SLEEP": "0.05",
        "QUCO_TEST_HOLD_AFTER": str(hold_after),
    }
    return subprocess.Popen(
        [sys.executable, __file__, str(out), str(limit)],
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for_lines(out: Path, n: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    path = out / RESULTS_FILE
    while time.monotonic() < deadline:
        if path.is_file() and path.read_bytes().count(b"\n") >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"runner exited early: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.01)
    raise AssertionError(f"fewer than {n} lines after {timeout}s")


def test_kill_9_and_ctrl_c_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    limit = 30
    whole = tmp_path / "whole"
    proc = _start(whole, limit)
    assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()[-2000:]

    cut = tmp_path / "cut"
    proc = _start(cut, limit, hold_after=4)  # held at the 5th question until killed
    _wait_for_lines(cut, 4, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    after_kill = len(scan_results(cut / RESULTS_FILE).records)
    assert after_kill == 4

    proc = _start(cut, limit, hold_after=4)  # resume, held after 4 more, then Ctrl-C
    _wait_for_lines(cut, after_kill + 4, proc)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=30)
    assert code != 0, f"the runner finished before Ctrl-C arrived ({len(_lines(cut))} lines)"
    after_int = len(scan_results(cut / RESULTS_FILE).records)
    assert after_int == after_kill + 4

    proc = _start(cut, limit)  # resume to the end
    assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()[-2000:]
    got = _lines(cut)
    assert len(got) == limit and len({r["id"] for r in got}) == limit
    assert [_stable(r) for r in got] == [_stable(r) for r in _lines(whole)]


def test_a_matched_control_records_its_rates_and_a_changed_matched_run_changes_its_identity(
    tmp_path: Path,
) -> None:
    """A random control takes its firing rates from a matched run when it starts. Those rates are part of its
    run's identity, so a control resumed after the matched run grew (other rates) is refused, not mixed."""
    from quco.eval.run.target import resolve_target
    from quco.trigger_record import TriggerRecord

    def matched_answer(question: str) -> Trace:  # stage 1 fires on every other question (by a hash)
        trace = toy_answer(question)
        low = int(hashlib.sha256(question.encode()).hexdigest(), 16) % 2
        record = TriggerRecord.decide("mean_entity_count", "below", 10.0, [5.0 if low else 50.0], "question")
        trace.steps[0].triggers = [record]
        trace.steps[0].signals = {"entities": ["X"]}  # as QuCo-RAG's stage 1 records them: rates count these
        return trace

    matched = tmp_path / "quco"
    run_eval(matched_answer, "hotpotqa", Questions(limit=6), EvalOptions(out_dir=matched, progress=False))
    overrides = {"params.match_run": str(matched)}

    def identity() -> dict[str, Any]:
        return resolve_target(CONFIGS / "hotpotqa/quco-random.yaml", overrides, None, False).identity

    first = identity()
    traces = [r.trace for r in load_run(matched).records if r.trace]
    fired = sum(1 for t in traces if t["steps"][0]["triggers"][0]["fired_at"] is not None)
    assert first["matched_rates"]["p_stage1"] == pytest.approx(fired / len(traces))
    assert identity() == first  # the same matched run: the same identity, so the control resumes
    run_eval(matched_answer, "hotpotqa", Questions(limit=20), EvalOptions(out_dir=matched, progress=False))
    assert identity()["matched_rates"] != first["matched_rates"]
    assert "matched_rates" not in resolve_target(CONFIGS / "hotpotqa/quco.yaml", None, None, False).identity


if __name__ == "__main__":
    # A child of a background job inherits SIGINT as ignored, and Python then never raises KeyboardInterrupt:
    # restore the default handler so that the test's Ctrl-C reaches the runner wherever the suite runs.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    out_dir, n = sys.argv[1], int(sys.argv[2])
    run_eval(toy_answer, "hotpotqa", Questions(limit=n), EvalOptions(out_dir=out_dir, progress=False))
