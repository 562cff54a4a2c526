"""The run directory's typed reader and writer, and where an evaluation answers its questions.

Records and configs read back exactly as written (older records, without the machine's figures, too); a torn
last line is skipped by readers; the executor follows what the generator declares.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quco.answer import STRICT
from quco.datasets import load_dataset
from quco.eval.run.answering import Answerer
from quco.eval.run.executors import InlineExecutor, ProcessExecutor, ThreadExecutor, choose_executor
from quco.eval.run.runner import EvalOptions, Questions, run_eval
from quco.eval.run.target import resolve_target
from quco.eval.runs.records import SELECTION_KEYS, RunConfig, config_hash
from quco.eval.runs.store import CONFIG_FILE, RESULTS_FILE, keep_records, load_run, scan_results
from quco.llm.hf import HFGenerator
from quco.llm.llamacpp import LlamaCppGenerator
from quco.llm.openai_compat import OpenAICompatGenerator
from quco.llm.registry import generator_class
from quco.trace import Trace

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

# A record as an earlier version wrote it: no cpu_seconds, load or cpu.
OLD_RECORD = {
    "id": "5a8b57f25542995d1e6f1371",
    "index": 0,
    "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
    "gold": ["yes"],
    "kind": "yes_no",
    "prediction": "So the answer is yes.",
    "answer": "yes",
    "missing": False,
    "reprompted": False,
    "em": 1.0,
    "f1": 1.0,
    "error": None,
    "seconds": 2.5,
    "meta": {"type": "comparison"},
    "trace": {"version": 2, "steps": [], "counters": {"retrievals": 1, "llm_calls": {"main": 2}}},
}
ERRORED = {
    "id": "q2",
    "index": 1,
    "question": "?",
    "gold": ["x"],
    "kind": "span",
    "prediction": "",
    "answer": "",
    "missing": True,
    "reprompted": False,
    "em": 0.0,
    "f1": 0.0,
    "error": "ValueError: boom",
    "error_traceback": "Traceback ...",
    "seconds": 0.1,
    "cpu_seconds": None,
    "load": 1.5,
    "cpu": "some cpu",
    "meta": {},
    "trace": None,
}
CONFIG = {
    "config_hash": None,  # filled below
    "label": "a run",
    "created": "2026-01-01T00:00:00+00:00",
    "updated": "2026-01-02T00:00:00+00:00",
    "format": "quco-eval/1",
    "metrics_version": 1,
    "pipeline": {
        "method": "quco",
        "params": {"stage1": True},
        "generator": {"model": "qwen2.5-coder-1.5b-instruct"},
    },
    "prompt": {"template": "quco", "sha256": "abc"},
    "dataset": {"name": "hotpotqa", "sha256": "def", "sample_seed": None},
    "answer_protocol": {"name": "published", "max_new_tokens": 128},
    "selection": {
        "dataset_path": "${QUCO_DATA_DIR}/x.jsonl",
        "limit": 2,
        "offset": 0,
        "sample": None,
        "seed": 0,
    },
}
CONFIG["config_hash"] = config_hash({k: v for k, v in CONFIG.items() if k not in SELECTION_KEYS})


def _write_run(path: Path, records: list[dict[str, Any]], tail: str = "") -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG_FILE).write_text(yaml.safe_dump(CONFIG, sort_keys=False), encoding="utf-8")
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    (path / RESULTS_FILE).write_text(lines + tail, encoding="utf-8")


def test_records_and_configs_read_back_as_written_with_attributes(tmp_path: Path) -> None:
    _write_run(tmp_path, [OLD_RECORD, ERRORED])
    run = load_run(tmp_path)
    old, errored = run.records
    # attributes, typed
    assert (old.id, old.index, old.kind, old.em, old.answer) == (OLD_RECORD["id"], 0, "yes_no", 1.0, "yes")
    assert (old.cpu_seconds, old.load, old.cpu) == (None, None, None)  # not written then: read as None
    assert old.costs()["retrievals"] == 1.0 and old.costs()["main_llm_calls"] == 2.0
    assert errored.error == "ValueError: boom" and errored.trace is None and errored.load == 1.5
    # the same JSON back: every key a reader could ask for has the value written (absent keys: None)
    for rec, raw in ((old, OLD_RECORD), (errored, ERRORED)):
        assert all(rec.to_dict().get(k) == raw.get(k) for k in set(raw) | set(rec.to_dict()))
    assert errored.to_dict() == ERRORED and list(errored.to_dict()) == list(ERRORED)  # a new record: exact
    assert "error_traceback" not in old.to_dict()  # written only with an error
    # the config: typed views of the identity, and the identity hashes to the recorded hash
    cfg = run.config
    assert cfg.to_dict() == CONFIG and list(cfg.to_dict()) == list(CONFIG)
    assert (cfg.method, cfg.dataset.name, cfg.answer_protocol, cfg.label) == (
        "quco",
        "hotpotqa",
        "published",
        "a run",
    )
    assert cfg.selection is not None and cfg.selection.limit == 2 and cfg.params == {"stage1": True}
    assert cfg.hash() == cfg.config_hash == CONFIG["config_hash"]
    assert (run.name, run.method, run.by_id()["q2"]) == ("a run", "quco", errored)


def test_a_torn_last_line_is_skipped_and_a_corrupt_line_elsewhere_is_an_error(tmp_path: Path) -> None:
    from quco.eval.runs.store import RunError

    _write_run(tmp_path / "torn", [OLD_RECORD, ERRORED], tail='{"id": "q3", "ind')
    scan = scan_results(tmp_path / "torn" / RESULTS_FILE)
    assert scan.torn and [r.id for r in scan.records] == [OLD_RECORD["id"], "q2"]
    assert scan.good_bytes == len((tmp_path / "torn" / RESULTS_FILE).read_bytes()) - len('{"id": "q3", "ind')
    assert [r.id for r in load_run(tmp_path / "torn").records] == [OLD_RECORD["id"], "q2"]
    _write_run(tmp_path / "bad", [OLD_RECORD])
    path = tmp_path / "bad" / RESULTS_FILE
    path.write_text("{not json\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(RunError, match="line 1 is corrupt"):
        load_run(tmp_path / "bad")


def test_rewriting_keeps_each_kept_line_byte_for_byte(tmp_path: Path) -> None:
    """--retry-errors drops errored records; the others stay exactly as they were written (older ones too),
    and a question recorded twice keeps its first record."""
    _write_run(tmp_path, [OLD_RECORD, ERRORED, {**OLD_RECORD, "em": 0.0}])
    original = (tmp_path / RESULTS_FILE).read_bytes().splitlines(keepends=True)
    kept = keep_records(tmp_path, scan_results(tmp_path / RESULTS_FILE), lambda r: not r.error)
    assert [r.id for r in kept] == [OLD_RECORD["id"]] and kept[0].em == 1.0
    assert (tmp_path / RESULTS_FILE).read_bytes() == original[0]


def test_resuming_a_run_keeps_its_identity(tmp_path: Path) -> None:
    """A run written and resumed through the typed writer keeps its hash, its creation time and its label."""

    def answer(question: str) -> Trace:
        return Trace(question=question, method="toy", prediction="So the answer is yes.")

    first = run_eval(
        answer, "hotpotqa", Questions(limit=2), EvalOptions(out_dir=tmp_path, progress=False, label="L")
    )
    written = yaml.safe_load((tmp_path / CONFIG_FILE).read_text(encoding="utf-8"))
    again = run_eval(answer, "hotpotqa", Questions(limit=3), EvalOptions(out_dir=tmp_path, progress=False))
    resumed = yaml.safe_load((tmp_path / CONFIG_FILE).read_text(encoding="utf-8"))
    assert first.config_hash == again.config_hash == written["config_hash"] == resumed["config_hash"]
    assert (resumed["label"], resumed["created"]) == ("L", written["created"])
    assert RunConfig.from_dict(resumed).hash() == first.config_hash
    assert resumed["selection"]["limit"] == 3
    assert [r.id for r in load_run(tmp_path).records] == [e.id for e in load_dataset("hotpotqa", limit=3)]


def test_generators_declare_their_parallelism() -> None:
    assert (HFGenerator.parallelism, LlamaCppGenerator.parallelism, OpenAICompatGenerator.parallelism) == (
        "serial",
        "processes",
        "threads",
    )
    assert (
        generator_class("llamacpp") is LlamaCppGenerator
        and generator_class("openai") is OpenAICompatGenerator
    )


def test_the_executor_follows_the_generators_declaration(caplog: pytest.LogCaptureFixture) -> None:
    """Processes for a generator that decodes one request per process (built from its config in each worker),
    threads for one whose calls overlap, one question at a time for a serial one; a bare function on threads."""

    def cfg_target(backend: str):
        return resolve_target(
            CONFIGS / "hotpotqa/sr-rag.yaml", {"generator.backend": backend}, progress=False
        )

    procs = choose_executor(cfg_target("llamacpp"), 2, STRICT)
    assert isinstance(procs, ProcessExecutor) and procs.workers == 2  # nothing is built in this process

    built: list[str] = []

    def fake_build(target):  # the pipeline is not needed to see which executor runs it
        target.build = lambda: built.append("built") or (lambda q: Trace(question=q, method="x"), None)
        return target

    threads = choose_executor(fake_build(cfg_target("openai")), 3, STRICT)
    assert isinstance(threads, ThreadExecutor) and threads.workers == 3 and threads.answerer.shared_process
    with caplog.at_level("WARNING"):
        serial = choose_executor(fake_build(cfg_target("hf")), 4, STRICT)
    assert isinstance(serial, InlineExecutor) and not serial.answerer.shared_process
    assert "one question at a time" in caplog.text
    one = choose_executor(fake_build(cfg_target("llamacpp")), 1, STRICT)
    assert isinstance(one, InlineExecutor) and built == ["built"] * 3

    def fn(question: str) -> Trace:
        return Trace(question=question, method="fn")

    func = resolve_target(fn)
    assert func.parallelism == "threads" and not func.buildable
    assert isinstance(choose_executor(func, 2, STRICT), ThreadExecutor)


def test_inline_and_thread_executors_answer_every_question() -> None:
    examples = load_dataset("hotpotqa", limit=6)
    todo = list(enumerate(examples))

    def answer(question: str) -> Trace:
        return Trace(question=question, method="toy", prediction="So the answer is yes.")

    inline = InlineExecutor(Answerer.of(answer, None, STRICT))
    got = [o.example.id for o in inline.outcomes(todo)]
    assert got == [e.id for e in examples]  # in order
    threads = ThreadExecutor(Answerer.of(answer, None, STRICT, shared_process=True), 3)
    outcomes = list(threads.outcomes(todo))
    assert sorted(o.example.id for o in outcomes) == sorted(got)
    assert all(o.cpu_seconds is None and o.record().prediction == "So the answer is yes." for o in outcomes)
