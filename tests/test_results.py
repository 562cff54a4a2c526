"""The results table of a plan: its rules (calibration questions apart from evaluated ones), the headline plan,
and the table written from recorded runs (statuses, intervals and paired tests equal to quco.eval.score.stats')."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
from pathlib import Path

import pytest
import yaml

from quco.datasets import load_dataset
from quco.eval.campaign.plan import PlanError, load_plan
from quco.eval.campaign.results import collect, machine_cell, planned_ids, run_plan
from quco.eval.render.results import BEGIN, END, SUMMARY_BEGIN, SUMMARY_END, table
from quco.eval.run.runner import EvalOptions, Questions, run_eval
from quco.eval.runs.records import Record
from quco.eval.runs.store import load_run
from quco.eval.score.detection import first_draft_checks
from quco.eval.score.stats import compare, summarize
from quco.machine import cpu_name
from quco.trace import RetrievedRef, Step, Trace

ROOT = Path(__file__).resolve().parents[1]
N = 6
GOLD = {e.question: e.answers[0] for e in load_dataset("hotpotqa", limit=10)}


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _plan(tmp_path: Path, rows: list[dict], **dataset: object) -> dict:
    ds = {"name": "hotpotqa", "offset": 0, "limit": N, "rows": rows} | dataset
    return {"title": "T", "out": str(tmp_path / "runs"), "datasets": [ds]}


SR = str(ROOT / "configs/hotpotqa/sr-rag.yaml")


@pytest.mark.parametrize(
    ("dataset", "rows", "message"),
    [
        ({"calibration": {"offset": 4, "limit": 10}}, [{"name": "a", "config": SR}], "overlap the evaluated"),
        ({}, [{"name": "a", "config": SR}, {"name": "a", "config": SR}], "listed twice"),
        ({"baseline": "b"}, [{"name": "a", "config": SR}], "baseline 'b' is not one of its rows"),
        ({}, [{"name": "r", "config": SR, "match": "a"}, {"name": "a", "config": SR}], "must come before"),
        ({}, [{"name": "a", "config": SR, "limit": N + 1}], "exceeds the dataset"),
        ({}, [{"name": "a", "config": SR, "sample": N + 1}], "sample 7 exceeds the dataset"),
        ({}, [{"name": "a", "config": SR, "limit": 3, "sample": 3}], "`limit` or `sample`, not both"),
        (
            {},
            [{"name": "a", "config": SR, "sample": 3}, {"name": "r", "config": SR, "match": "a"}],
            "same limit",
        ),
        ({}, [{"name": "a", "config": SR, "calibrate": [{"param": "entity_threshold"}]}], "no calibration"),
        ({}, [{"name": "a", "config": SR, "sett": ["x=1"]}], "rows.0.sett"),
        (
            {"calibration": {"offset": N, "limit": 2}},
            [{"name": "a", "config": SR, "calibrate": [{"target": "em", "from_pass": "p"}]}],
            "from_pass calibrates a black-box trigger's threshold for a rate",
        ),
        ({}, [{"name": "a", "config": str(ROOT / "configs/nope.yaml")}], "cannot read config"),
    ],
)
def test_plan_rules(tmp_path: Path, dataset: dict, rows: list[dict], message: str) -> None:
    path = _write(tmp_path / "plan.yaml", _plan(tmp_path, rows, **dataset))
    with pytest.raises(PlanError, match=message):
        load_plan(path)


def test_a_row_can_answer_a_seeded_sample_of_the_datasets_questions(tmp_path: Path) -> None:
    rows = [{"name": "a", "config": SR, "sample": 3, "seed": 1}, {"name": "r", "config": SR, "sample": 3, "seed": 1,
            "match": "a"}]  # fmt: skip
    plan = load_plan(_write(tmp_path / "plan.yaml", _plan(tmp_path, rows, offset=2)))
    ds = plan.datasets[0]
    span = load_dataset("hotpotqa", offset=2, limit=N)
    ids = planned_ids(ds, ds.row("a"))
    assert len(ids) == 3 and set(ids) <= {e.id for e in span}
    assert ids != [e.id for e in span[:3]] and ids == [
        e.id for e in span if e.id in ids
    ]  # drawn, in file order
    assert planned_ids(ds, ds.row("r")) == ids  # the control answers the same questions
    command = run_plan(plan, dry_run=True, echo=lambda s: None)[0].command
    assert "--offset 2 --limit 6 --sample 3 --seed 1 --out" in command


def test_a_config_calibrated_on_evaluated_questions_is_refused(tmp_path: Path) -> None:
    text = (ROOT / "configs/hotpotqa/flare.yaml").read_text(encoding="utf-8")
    note = "  threshold: 0.2  # calibrated: rate 0.5 on hotpotqa questions {} (2026-01-01)"
    inside, outside = tmp_path / "inside.yaml", tmp_path / "outside.yaml"
    inside.write_text(text.replace("  threshold: 0.08", note.format("3:50")), encoding="utf-8")
    outside.write_text(text.replace("  threshold: 0.08", note.format("200:300")), encoding="utf-8")
    plan = _plan(
        tmp_path, [{"name": "flare", "config": str(inside)}], calibration={"offset": 200, "limit": 100}
    )
    with pytest.raises(PlanError, match="calibrated on hotpotqa questions 3:50, which overlap"):
        load_plan(_write(tmp_path / "plan.yaml", plan))
    plan["datasets"][0]["rows"][0]["config"] = str(outside)
    assert load_plan(_write(tmp_path / "plan.yaml", plan)).datasets[0].rows[0].name == "flare"


def test_the_headline_plan_resolves_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    plan = load_plan("configs/results/headline.yaml")
    assert [ds.name for ds in plan.datasets] == ["hotpotqa", "2wikimultihopqa", "pubmedqa"]
    for ds in plan.datasets:
        assert (ds.offset, ds.limit) == (0, 200)
        assert ds.calibration is not None and (ds.calibration.offset, ds.calibration.end) == (200, 300)
    done = run_plan(plan, dry_run=True, echo=lambda s: None)
    assert not [d for d in done if d.action == "failed"]
    by = {(d.dataset, d.row): d for d in done}
    for ds in ("hotpotqa", "2wikimultihopqa", "pubmedqa"):
        cmds = {row: by[(ds, row)].command for _, row in by if _ == ds}
        published = (
            {"wo-rag-published", "sr-rag-published", "quco-published-random"} if ds != "pubmedqa" else set()
        )
        published |= {"gate-b90"} if ds == "hotpotqa" else set()  # the gate at a second budget
        # the earlier calibrated configs (HotpotQA: stage 1 always; 2WikiMultihopQA: never), kept as rows of their own
        earlier = {"hotpotqa": "always", "2wikimultihopqa": "never"}.get(ds)
        llm = {f"quco-{earlier}", f"quco-llm-{earlier}"} if earlier else {"quco-llm"}
        blackbox = {f"blackbox-{e}{c}" for e in ("eccentricity", "degmat") for c in ("", "-random")}
        published |= blackbox if ds != "pubmedqa" else set()
        assert set(cmds) == {"wo-rag", "sr-rag", "fs-rag", "flare", "dtr-ugt", "dtr", "dtr-cal", "dtr-random",
                             "quco", "quco-published", "quco-random", "dragin", "seakr",
                             "gate"} | published | llm  # fmt: skip
        for row, cmd in cmds.items():
            assert "--set generator.model=qwen2.5-coder-1.5b-instruct" in cmd
            limit = {"seakr": "50"}.get(row, "200")
            assert "--offset 0 --limit " + limit in cmd
            # attention and hidden states (DRAGIN, SeaKR) come from llama.cpp as well
            assert "--set generator.backend=llamacpp" in cmd and "=hf" not in cmd
            # a calibrated row runs its calibrated copy of a world config
            assert "haystack" in cmd or "configs/world/" in cmd or f"{ds}/{row}.calibrated.yaml" in cmd
        assert f"params.match_run=results/headline/{ds}/quco" in cmds["quco-random"]
        if published:
            assert f"params.match_run=results/headline/{ds}/quco-published" in cmds["quco-published-random"]
        assert "text.entity_extractor=llm" in cmds[f"quco-llm-{earlier}" if earlier else "quco-llm"]
        if earlier:  # the earlier calibrated config: stage 1 always or never, the rest as the `quco` row
            same = cmds["quco"].split(" --label ")[0].replace("/quco --", f"/quco-{earlier} --")
            threshold = {"always": ".inf", "never": "0"}[earlier]
            assert cmds[f"quco-{earlier}"].startswith(same) and cmds[f"quco-{earlier}"].endswith(
                f"--set params.entity_threshold={threshold}"
            )
        assert f"params.match_run=results/headline/{ds}/dtr-cal" in cmds["dtr-random"]
        if blackbox & published:  # a seeded 100; both triggers read their thresholds from one sampling pass
            pass_dir = f"results/calibration/{ds}/blackbox-pass"
            for est in ("eccentricity", "degmat"):
                assert "--sample 100 --seed 0" in cmds[f"blackbox-{est}"]
                assert f"{ds}/blackbox-{est}.calibrated.yaml" in cmds[f"blackbox-{est}"]
                if not Path(pass_dir, "results.jsonl").is_file():
                    assert f"recording the sampling pass in {pass_dir}" in cmds[f"blackbox-{est}"]
                control = cmds[f"blackbox-{est}-random"]
                assert (
                    f"configs/world/{ds}/random-sentence.yaml" in control
                    and "--sample 100 --seed 0" in control
                )
                assert f"params.match_run=results/headline/{ds}/blackbox-{est}" in control
        # the calibrated row runs its copy of dtr.yaml (made before its first run, then committed with it)
        assert (
            f"{ds}/dtr-cal.calibrated.yaml" in cmds["dtr-cal"]
            and f"configs/world/{ds}/dtr.yaml" in cmds["dtr"]
        )
        # each row is tested against the control matched to it, else the dataset's; a control against none
        plan_ds = next(d for d in plan.datasets if d.name == ds)
        controls = {row.name: plan_ds.control_for(row) for row in plan_ds.rows}
        assert controls["quco"] == "quco-random" and controls["dtr-cal"] == "dtr-random"
        assert controls["flare"] == controls["dtr"] == "quco-random"
        assert controls["quco-random"] is None and controls["dtr-random"] is None
        if published:
            assert controls["quco-published"] == "quco-published-random"
        assert all(("--reprompt" in cmd) == (ds == "pubmedqa") for cmd in cmds.values())
    assert all(f"configs/world/pubmedqa/{r}.yaml" in by[("pubmedqa", r)].command for r in ("sr-rag", "quco"))


def test_a_dataset_that_re_prompts_runs_every_row_with_the_re_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from quco.eval.campaign import results

    seen: list[dict] = []

    def fake_eval(
        config: object, dataset: object, questions: object, options: object, **kwargs: object
    ) -> object:
        seen.append({"options": options, **kwargs})
        raise results.QucoError("stop here")  # the arguments are what this test is about

    monkeypatch.setattr(results, "eval_command", fake_eval)
    for flag in (True, False):
        plan = load_plan(
            _write(tmp_path / "p.yaml", _plan(tmp_path, [{"name": "a", "config": SR}], reprompt=flag))
        )
        (planned,) = run_plan(plan, dry_run=True, echo=lambda s: None)
        assert ("--reprompt" in planned.command) == flag
        (failed,) = run_plan(plan, echo=lambda s: None)
        assert failed.action == "failed" and seen[-1]["options"].reprompt is flag


def test_the_cli_prints_the_headline_plan_and_refuses_a_broken_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from quco.cli import app

    monkeypatch.chdir(ROOT)
    # the shipped plan writing elsewhere: the repository's recorded rows grow, and here every row is still to run
    spec = yaml.safe_load((ROOT / "configs/results/headline.yaml").read_text(encoding="utf-8"))
    spec["out"] = str(tmp_path / "headline")
    fresh = _write(tmp_path / "headline.yaml", spec)
    shown = CliRunner().invoke(app, ["results", "run", str(fresh), "--dry-run", "--dataset", "hotpotqa"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("quco eval --config configs/world/hotpotqa/") == 21
    assert shown.output.count("calibrating threshold)") == 2  # the two black-box rows
    assert "(after 'quco' completes)" in shown.output
    assert "(after 'quco-published' completes)" in shown.output
    bad = _write(
        tmp_path / "plan.yaml", _plan(tmp_path, [{"name": "a", "config": SR}], calibration={"limit": 3})
    )
    refused = CliRunner().invoke(app, ["results", "table", str(bad)])
    assert refused.exit_code == 2 and "overlap the evaluated questions" in refused.output


def test_a_calibrated_copy_is_reused_only_for_the_same_source_overrides_and_targets(tmp_path: Path) -> None:
    from quco.eval.campaign.results import calibrated_config

    source = tmp_path / "quco.yaml"
    source.write_text((ROOT / "configs/hotpotqa/quco.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    row = {"name": "quco", "config": str(source), "calibrate": [{"param": "entity_threshold", "rate": 0.3}]}
    spec = _plan(tmp_path, [row], calibration={"offset": 10, "limit": 5})
    plan = load_plan(_write(tmp_path / "plan.yaml", spec))
    ds, row_ = plan.datasets[0], plan.datasets[0].rows[0]
    copy = plan.calibrated_config(ds, row_)
    copy.parent.mkdir(parents=True)
    note = "calibrated: rate 0.3 on hotpotqa questions 10:15 (2026-01-01)"
    made = source.read_text(encoding="utf-8").replace(
        "entity_threshold: 100000", f"entity_threshold: 7.0  # {note}"
    )
    from quco.eval.campaign.results import _calibration_header

    copy.write_text(_calibration_header(plan, ds, row_) + made, encoding="utf-8")
    assert calibrated_config(plan, ds, row_) == copy  # reused: no model is loaded
    for change in ("rate", "source"):
        if change == "rate":
            spec["datasets"][0]["rows"][0]["calibrate"][0]["rate"] = 0.4
        else:
            source.write_text(source.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
        plan = load_plan(_write(tmp_path / "plan.yaml", spec))
        with pytest.raises(PlanError, match="calibrated from another config"):
            calibrated_config(plan, plan.datasets[0], plan.datasets[0].rows[0])


def _answerer(method: str, p_right: float):
    """A deterministic answerer with a method's costs (its runs stand in for recorded runs)."""

    def answer(question: str) -> Trace:
        h = int(hashlib.sha256(f"{method}|{question}".encode()).hexdigest(), 16)
        trace = Trace(question=question, method=method)
        right = (h % 1000) / 1000 < p_right
        trace.prediction = f"So the answer is {GOLD[question] if right else 'Paris'}."
        if method != "wo-rag":
            trace.steps.append(
                Step(index=0, stage="generate", draft="A draft.", decision="retrieve", queries=["q"],
                     retrieved=[RetrievedRef("p1", "T", 1.0, "t")])
            )  # fmt: skip
            trace.counters.retrievals = 1 + h % 2
        trace.counters.add_llm("main", 300, 20 + h % 9)
        trace.counters.add_llm("extractor", 100, 5)
        trace.counters.add_seconds("llm", 1.0 + (h % 5) / 10)
        trace.seconds = sum(trace.counters.seconds.values())
        return trace

    answer.method = method  # type: ignore[attr-defined]
    return answer


def test_table_from_recorded_runs(tmp_path: Path) -> None:
    rows = [
        {"name": "wo-rag", "label": "Wo-RAG", "config": str(ROOT / "configs/hotpotqa/wo-rag.yaml")},
        {"name": "sr-rag", "label": "SR-RAG", "config": SR},
        {"name": "quco", "label": "QuCo-RAG", "config": str(ROOT / "configs/hotpotqa/quco.yaml")},
        {"name": "random", "label": "Random", "config": str(ROOT / "configs/hotpotqa/quco-random.yaml"),
         "match": "quco"},
        {"name": "dragin", "label": "DRAGIN", "config": str(ROOT / "configs/hotpotqa/dragin.yaml"), "limit": 3},
        {"name": "pubmed-like", "label": "Unconfigured", "note": "no config exists yet"},
    ]  # fmt: skip
    spec = _plan(tmp_path, rows, baseline="sr-rag", control="random", calibration={"offset": 10, "limit": 5})
    spec |= {"markdown": str(tmp_path / "results.md"), "html": str(tmp_path / "results.html")}
    plan = load_plan(_write(tmp_path / "plan.yaml", spec))
    runs = tmp_path / "runs" / "hotpotqa"
    # The matched control waits while the row it matches is incomplete (here: not run at all).
    (done,) = run_plan(plan, rows=["random"], echo=lambda s: None)
    assert (done.action, done.detail) == ("skipped", f"waits for 'quco' to complete (0/{N} questions)")
    for name, p, limit in (("sr-rag", 0.4, N + 2), ("quco", 0.6, N), ("random", 0.5, 4), ("dragin", 0.5, 3)):
        run_eval(
            _answerer(name, p),
            "hotpotqa",
            Questions(limit=limit),
            EvalOptions(out_dir=runs / name, progress=False),
        )
    # A row just started (its config written, nothing recorded yet) reads as not run, without "n/a" cells.
    (runs / "wo-rag").mkdir()
    (runs / "wo-rag" / "config.yaml").write_bytes((runs / "quco" / "config.yaml").read_bytes())
    (runs / "wo-rag" / "results.jsonl").write_text("", "utf-8")
    md = tmp_path / "results.md"
    md.write_text(
        f"# Results\n\nIntro kept.\n\n{BEGIN}\nold table\n{END}\n\n## Reading\n\nKept too.\n", "utf-8"
    )
    results, written = table(plan, "plan.yaml", n_boot=500)
    by = {r.row.name: r for r in results}
    assert {k: r.status for k, r in by.items()} == {
        "wo-rag": "not run", "sr-rag": "complete", "quco": "complete", "random": "partial", "dragin": "complete",
        "pubmed-like": "no config",
    }  # fmt: skip
    assert (by["sr-rag"].answered, by["sr-rag"].planned) == (N, N)  # questions beyond the plan are left out
    assert (by["random"].answered, by["dragin"].planned) == (4, 3)
    text = md.read_text(encoding="utf-8")
    assert text.startswith("# Results\n\nIntro kept.") and text.endswith("## Reading\n\nKept too.\n")
    assert "old table" not in text and "3 of 6 planned rows complete" in text
    sr = load_run(runs / "sr-rag")
    sr.records = sr.records[:N]
    quco = load_run(runs / "quco")
    em = summarize(quco, ["em"], n_boot=500)["em"]
    assert f"| QuCo-RAG | {N}/{N} | {em.format(1, 100.0)} |" in text
    paired = compare(sr, quco, ("em",), n_boot=500).results["em"]
    assert f"{paired.diff.mean * 100:+.1f} [{paired.diff.low * 100:+.1f}, " in text
    assert f"p={paired.p_value:.3f} (n={N})" in text
    assert by["quco"].vs_control is not None and by["quco"].vs_control.n_common == 4
    # each row against the control matched to it, else the dataset's; the control itself against none
    ds = plan.datasets[0]
    controls = tuple(ds.control_for(by[name].row) for name in ("quco", "dragin", "random"))
    assert controls == ("random", "random", None)
    assert by["random"].vs_control is None and by["dragin"].vs_control.n_common == 3
    assert "Δ vs control: QuCo-RAG against Random; every other row against Random" in text
    assert by["dragin"].vs_baseline is not None and by["dragin"].vs_baseline.n_common == 3
    assert "| Unconfigured | no config 0/6 |" in text and "Unconfigured: no config exists yet" in text
    assert "| Wo-RAG | not run 0/6 |" in text and "| Wo-RAG | 0/6 | — | — |" in text and "n/a" not in text
    # costs: main-only beside all roles (the extractor's calls count in the latter only)
    calls = summarize(quco, ["main_llm_calls", "llm_calls"], n_boot=500)
    assert calls["main_llm_calls"].mean == 1.0 and calls["llm_calls"].mean == 2.0
    assert "| QuCo-RAG | " in text and " | 1.00 [1.00, 1.00] | 2.00 [2.00, 2.00] | " in text
    # the machine each row ran on: every question recorded its load, its process's CPU seconds, the processor
    assert (
        f" | {machine_cell(quco.records)} |" in text and f"; {N} of {N} questions; on {cpu_name()} |" in text
    )
    page = (tmp_path / "results.html").read_text(encoding="utf-8")
    assert page.count("<table") == 3 and "report.html" in page
    assert (runs / "report.html") in written and (runs / "report.html").stat().st_size > 0
    again = collect(plan, n_boot=500)
    assert [r.status for r in again] == [r.status for r in results]
    assert not any(r.problem for r in again)


def test_the_machine_cell_reads_the_recorded_load_and_cpu_seconds() -> None:
    old = [
        Record("a", seconds=90.0),
        Record("b", seconds=110.0),
    ]  # recorded before loads and CPU seconds were kept
    assert machine_cell(old) == "—"
    recs = old + [
        Record("c", seconds=100.0, cpu_seconds=180.0, load=2.1),
        Record("d", seconds=300.0, cpu_seconds=120.0, load=4.6),  # waited: wall far above CPU
        Record("e", seconds=120.0, cpu_seconds=None, load=1.9),  # answered on a thread beside others
    ]
    assert machine_cell(recs) == (
        "load 2.1 (max 4.6); CPU 150.0 s/q, wall 200.0 s/q (medians); 3 of 5 questions"
    )
    # the processor each question recorded: one for the whole row, or each with its questions
    zen = "AMD EPYC (family 23, model 1; AVX2)"
    same = [dataclasses.replace(r, cpu=zen) for r in recs[2:]]
    assert machine_cell(same).endswith(f"; 3 of 3 questions; on {zen}")
    mixed = [*recs[2:], Record("f", seconds=40.0, cpu_seconds=70.0, load=1.8, cpu=zen)]
    mixed += [Record("g", seconds=600.0, cpu_seconds=400.0, load=2.0, cpu=zen)]
    assert machine_cell(mixed).endswith(
        f"; 5 of 5 questions; on {zen}: 2 q, CPU 235.0 s/q; not recorded: 3 q"
    )


def test_a_run_made_with_another_config_is_noted(tmp_path: Path) -> None:
    from quco.config import load_config

    spec = _plan(tmp_path, [{"name": "sr-rag", "label": "SR-RAG", "config": SR}])
    spec |= {"markdown": str(tmp_path / "r.md"), "html": str(tmp_path / "r.html")}
    plan = load_plan(_write(tmp_path / "plan.yaml", spec))
    run_dir = tmp_path / "runs" / "hotpotqa" / "sr-rag"
    run_eval(
        _answerer("sr-rag", 0.5), "hotpotqa", Questions(limit=N), EvalOptions(out_dir=run_dir, progress=False)
    )
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    for fewshot, noted in ((8, False), (3, True)):
        pipeline = load_config(SR, overrides={"prompt.fewshot": fewshot}).model_dump(mode="json")
        _write(run_dir / "config.yaml", config | {"pipeline": pipeline})
        (res,) = collect(plan, n_boot=100)
        assert res.status == "complete"
        assert ("another config" in res.problem and "prompt.fewshot (3 -> 8)" in res.problem) == noted
    table(plan, "plan.yaml", n_boot=100)
    assert "SR-RAG: its run was made with another config" in (tmp_path / "r.md").read_text(encoding="utf-8")


def test_a_markdown_file_without_markers_is_not_overwritten(tmp_path: Path) -> None:
    spec = _plan(tmp_path, [{"name": "sr-rag", "config": SR}])
    spec |= {"markdown": str(tmp_path / "r.md"), "html": str(tmp_path / "r.html")}
    plan = load_plan(_write(tmp_path / "plan.yaml", spec))
    (tmp_path / "r.md").write_text("# Hand-written\n", encoding="utf-8")
    from quco.errors import QucoError

    with pytest.raises(QucoError, match="no '<!-- results:begin"):
        table(plan, "plan.yaml", n_boot=100)
    assert (tmp_path / "r.md").read_text(encoding="utf-8") == "# Hand-written\n"


@pytest.mark.model
def test_status_counts_rows_and_estimates_the_hours_left(tmp_path: Path) -> None:
    """`quco results status`: complete, partial and waiting rows, each row's own pace or a namesake's."""
    from typer.testing import CliRunner

    from quco.cli import app
    from quco.eval.campaign.status import pace, plan_status

    def rows() -> list[dict]:
        return [
            {"name": "sr-rag", "config": SR},
            {"name": "quco", "config": str(ROOT / "configs/hotpotqa/quco.yaml")},
            {"name": "random", "config": str(ROOT / "configs/hotpotqa/quco-random.yaml"), "match": "quco"},
            {"name": "seakr", "note": "no config yet"},
        ]

    spec = _plan(tmp_path, rows())
    spec["datasets"].append({"name": "2wikimultihopqa", "offset": 0, "limit": N, "rows": rows()})
    plan = load_plan(_write(tmp_path / "plan.yaml", spec))
    runs = tmp_path / "runs"
    run_eval(
        _answerer("sr-rag", 0.4),
        "hotpotqa",
        Questions(limit=N),
        EvalOptions(out_dir=runs / "hotpotqa/sr-rag", progress=False),
    )
    run_eval(
        _answerer("quco", 0.5),
        "hotpotqa",
        Questions(limit=2),
        EvalOptions(out_dir=runs / "hotpotqa/quco", progress=False),
    )
    # An hour-long pause during sr-rag's first question: the mean shows it, the estimate's pace does not.
    lines = (runs / "hotpotqa/sr-rag/results.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["seconds"] += 3600.0
    lines[0] = json.dumps(first)
    (runs / "hotpotqa/sr-rag/results.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    by = {f"{st.dataset}/{st.row}": st for st in plan_status(plan)}
    sr, quco = load_run(runs / "hotpotqa/sr-rag"), load_run(runs / "hotpotqa/quco")
    sr_pace = pace([r.seconds for r in sr.records])
    quco_pace = statistics.median(r.seconds for r in quco.records)  # fewer than 4 recorded: the median
    assert (by["hotpotqa/sr-rag"].state, by["hotpotqa/sr-rag"].hours_left) == ("complete", 0.0)
    mean = statistics.fmean(r.seconds for r in sr.records)  # the s/q column: the mean
    assert sr_pace < 600.0 <= mean
    assert (by["hotpotqa/sr-rag"].seconds_per_question, by["hotpotqa/sr-rag"].pace) == pytest.approx(
        (mean, sr_pace)
    )
    q = by["hotpotqa/quco"]
    assert (q.state, q.recorded, q.planned, q.pace_from) == ("partial", 2, N, "")
    assert q.hours_left == pytest.approx((N - 2) * quco_pace / 3600)
    r = by["hotpotqa/random"]  # waits for quco; no namesake with a pace anywhere
    assert (r.state, r.waits_for, r.hours_left) == ("not started", "quco", None)
    w = by["2wikimultihopqa/sr-rag"]  # nothing recorded: the pace of the same row on the other dataset
    assert (w.state, w.pace_from) == ("not started", "hotpotqa/sr-rag")
    assert w.hours_left == pytest.approx(N * sr_pace / 3600)
    assert by["2wikimultihopqa/seakr"].state == "no config"
    shown = CliRunner().invoke(
        app, ["results", "status", str(tmp_path / "plan.yaml"), "--dataset", "hotpotqa"]
    )
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0].split() == ["row", "state", "recorded", "s/q", "left", "notes"]
    assert any(line.split()[:3] == ["hotpotqa/quco", "partial", f"2/{N}"] for line in lines)
    assert "waits for 'quco' to complete" in shown.output and "2wikimultihopqa" not in shown.output
    assert "1 of 4 rows complete, 2 rows open." in shown.output
    assert "for 1 row at their recorded pace; 1 row without a pace yet (left: ?)." in shown.output
    bad = CliRunner().invoke(app, ["results", "status", str(tmp_path / "plan.yaml"), "--row", "nope"])
    assert bad.exit_code != 0 and "the plan has no row 'nope'" in bad.output


def test_a_pace_keeps_a_gated_rows_costly_questions_and_drops_a_pause() -> None:
    """A row that retrieves for 40 of 100 questions (2 s without, 20 s with): its pace is the mean, 9.2 s, where
    the median (2 s) would put its remaining hours at a fifth. A question timed across an hour's pause is left
    out; a slow question within the outer fence is kept."""
    from quco.eval.campaign.status import pace

    gated = [2.0] * 60 + [20.0] * 40
    assert statistics.median(gated) == 2.0
    assert pace(gated) == pytest.approx(9.2)
    assert pace([*gated[:-1], 3620.0]) == pytest.approx((60 * 2.0 + 39 * 20.0) / 99)
    assert pace([*gated[:-1], 60.0]) == pytest.approx((60 * 2.0 + 39 * 20.0 + 60.0) / 100)
    assert pace([5.0, 900.0]) == pytest.approx(452.5)  # too few to tell an outlier: the median
    with pytest.raises(ValueError):
        pace([])


def test_status_paces_a_row_by_the_questions_this_processor_answered(tmp_path: Path) -> None:
    """Seconds from another processor mislead the estimate: once a row has HERE_MIN questions answered on the
    processor the estimate is for, their median alone is its pace, and a namesake paced there is preferred."""
    from quco.eval.campaign.status import HERE_MIN, plan_status, render_status

    spec = _plan(tmp_path, [{"name": "sr-rag", "config": SR}])
    spec["datasets"].append({"name": "2wikimultihopqa", "offset": 0, "limit": N,
                             "rows": [{"name": "sr-rag", "config": SR}]})  # fmt: skip
    plan = load_plan(_write(tmp_path / "plan.yaml", spec))
    path = tmp_path / "runs/hotpotqa/sr-rag"
    run_eval(
        _answerer("sr-rag", 0.4), "hotpotqa", Questions(limit=4), EvalOptions(out_dir=path, progress=False)
    )
    # The first question answered on a fast processor, the next three on a slow one.
    stamped = [("Fast CPU", 10.0), ("Slow CPU", 50.0), ("Slow CPU", 60.0), ("Slow CPU", 70.0)]
    assert len(stamped) - 1 == HERE_MIN
    lines = (path / "results.jsonl").read_text(encoding="utf-8").splitlines()
    records = [
        json.loads(line) | {"cpu": cpu, "seconds": sec}
        for line, (cpu, sec) in zip(lines, stamped, strict=True)
    ]
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    slow = {f"{st.dataset}/{st.row}": st for st in plan_status(plan, processor="Slow CPU")}
    own = slow["hotpotqa/sr-rag"]
    assert (own.on_here, own.pace_here, own.pace) == (3, True, 60.0)
    assert own.hours_left == pytest.approx((N - 4) * 60.0 / 3600)
    borrowed = slow["2wikimultihopqa/sr-rag"]
    assert (borrowed.pace_from, borrowed.pace_here, borrowed.pace) == ("hotpotqa/sr-rag", True, 60.0)
    shown = "\n".join(render_status(list(slow.values()), processor="Slow CPU"))
    assert "at the pace of its 3 questions on this processor" in shown
    assert "at the pace of hotpotqa/sr-rag on this processor" in shown
    assert "This machine: Slow CPU. Paced on this processor: 2 of the 2 rows with a pace" in shown

    # One question on the fast processor is too few: the pace is that of all four (none beyond the fence).
    fast = {f"{st.dataset}/{st.row}": st for st in plan_status(plan, processor="Fast CPU")}["hotpotqa/sr-rag"]
    assert (fast.on_here, fast.pace_here, fast.pace) == (1, False, 47.5)
    shown = "\n".join(render_status([fast], processor="Fast CPU"))
    assert "on this processor" not in shown.split("This machine")[0]
    assert "Paced on this processor: 0 of the 1 row with a pace" in shown


def test_run_then_tabulate_end_to_end_on_the_default_model(
    tmp_path_factory: pytest.TempPathFactory, hotpot_pool_path: Path
) -> None:
    """`quco results run` then `quco results table` on the real default pipeline (pool world, 2 questions):
    a calibrated row (threshold chosen on question 2 only), a control matched to it, resume, the table."""
    from typer.testing import CliRunner

    from quco.cli import app
    from quco.signals.chance import stage_rate

    tmp_path = tmp_path_factory.mktemp("plan")
    idx = tmp_path_factory.mktemp("idx")  # the statistics engine refuses paths with 'table' in them
    sets = [f"retriever.corpus={hotpot_pool_path}", f"retriever.index_dir={idx / 'bm25'}",
            f"corpus_stats.index_dir={idx / 'stats'}", "generation.max_new_tokens=32", "prompt.fewshot=2"]  # fmt: skip
    rows = [
        {"name": "sr-rag", "label": "SR-RAG", "config": SR},
        {"name": "quco", "label": "QuCo-RAG", "config": str(ROOT / "configs/hotpotqa/quco.yaml"),
         "calibrate": [{"param": "entity_threshold", "target": "rate", "rate": 0.5}]},
        {"name": "random", "label": "Random", "config": str(ROOT / "configs/hotpotqa/quco-random.yaml"),
         "match": "quco"},
    ]  # fmt: skip
    spec = _plan(
        tmp_path, rows, limit=2, baseline="sr-rag", control="random", calibration={"offset": 2, "limit": 1}
    )
    spec |= {"set": sets, "workers": 1, "markdown": str(tmp_path / "r.md"), "html": str(tmp_path / "r.html")}
    plan = _write(tmp_path / "plan.yaml", spec)
    runner = CliRunner()
    first = runner.invoke(app, ["results", "run", str(plan), "--no-progress"])
    assert first.exit_code == 0, first.output
    assert "3 rows run, 0 skipped, 0 failed" in first.output
    runs = tmp_path / "runs" / "hotpotqa"
    calibrated = (runs / "quco.calibrated.yaml").read_text(encoding="utf-8")
    assert "calibrated: rate 0.5 on hotpotqa questions 2:3" in calibrated
    assert calibrated.startswith(f"# calibrated copy of {ROOT / 'configs/hotpotqa/quco.yaml'} (sha256 ")
    quco, random = load_run(runs / "quco"), load_run(runs / "random")
    theta = yaml.safe_load(calibrated)["params"]["entity_threshold"]
    assert quco.config.pipeline["params"]["entity_threshold"] == theta
    assert random.config.pipeline["params"]["match_run"] == str(runs / "quco")
    traces = [r.trace for r in quco.records]
    p1 = stage_rate(traces, "before").per_step
    draws = [t for r in random.records for s in r.trace["steps"] for t in s.get("triggers", [])
             if t.get("param") == "p_stage1"]  # fmt: skip
    assert draws and all(t["threshold"] == pytest.approx(p1) for t in draws)
    for run in (quco, random, load_run(runs / "sr-rag")):
        assert len(run.records) == 2 and not any(r.error for r in run.records)
    # The first-draft test reads the real traces: one draft per question whose drafts a trigger judged.
    judged = [
        r for r in quco.records if any(s["stage"] == "generate" and s["triggers"] for s in r.trace["steps"])
    ]
    assert judged, "QuCo-RAG judged no draft of the two questions"
    assert len(first_draft_checks(quco)) == len(judged)
    assert first_draft_checks(load_run(runs / "sr-rag")) == []
    before = {name: (runs / name / "results.jsonl").read_bytes() for name in ("sr-rag", "quco", "random")}
    second = runner.invoke(app, ["results", "run", str(plan), "--no-progress"])
    assert second.exit_code == 0, second.output
    assert second.output.count("2/2 questions recorded (0 now") == 3
    assert {n: (runs / n / "results.jsonl").read_bytes() for n in before} == before
    shown = runner.invoke(app, ["results", "table", str(plan)])
    assert shown.exit_code == 0, shown.output
    text = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "3 of 3 planned rows complete" in text
    assert text.count("| complete 2/2 |") == 3 and text.count("| pool |") == 3
    assert "(calibrated: entity_threshold)" in text and "gemma3-270m" in text
    assert "another config" not in text  # each run is what its row resolves to
    assert "| first drafts judged |" in text
    assert (runs / "report.html").is_file() and (tmp_path / "r.html").is_file()
    status = runner.invoke(app, ["results", "status", str(plan)])
    assert status.exit_code == 0, status.output
    assert "3 of 3 rows complete, 0 rows open." in status.output


def test_black_box_rows_share_one_recorded_sampling_pass(
    tmp_path_factory: pytest.TempPathFactory, small_hotpot_corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two black-box rows whose estimators differ read their thresholds from one never-retrieving sampling pass
    (real default model, the paragraphs of 30 dev questions). The pass was begun by the Eccentricity config and
    interrupted; the DegMat row, first in the plan, resumes it as it was begun and the Eccentricity row reuses
    it. Each threshold is the one `quco calibrate --from-run` reads from that pass for its estimator."""
    import logging
    import math

    from quco.config import load_config, parse_override
    from quco.eval.calibrate.search import scores_from_run, threshold_for_rate
    from quco.eval.run.command import eval_command

    tmp_path = tmp_path_factory.mktemp("plan")
    idx = tmp_path_factory.mktemp("idx")
    sets = [f"retriever.corpus={small_hotpot_corpus}", f"retriever.index_dir={idx / 'bm25'}",
            "generation.max_new_tokens=16", "prompt.fewshot=1", "params.n_samples=2",
            "params.sentence_tokens=8"]  # fmt: skip
    pass_dir = tmp_path / "passes" / "blackbox-pass"
    ecc_config = ROOT / "configs/hotpotqa/blackbox-eccentricity.yaml"
    # the pass as an interrupted run leaves it: the first of the two calibration questions recorded
    eval_command(ecc_config, "hotpotqa", Questions(limit=1, offset=2), EvalOptions(out_dir=pass_dir, progress=False),
                 [*sets, "params.threshold=.inf"])  # fmt: skip
    cal = [{"param": "threshold", "target": "rate", "rate": 0.5, "from_pass": str(pass_dir)}]
    rows = [
        {"name": "deg", "config": str(ROOT / "configs/hotpotqa/blackbox-degmat.yaml"), "calibrate": cal},
        {"name": "ecc", "config": str(ecc_config), "calibrate": cal},
    ]
    spec = _plan(tmp_path, rows, limit=1, calibration={"offset": 2, "limit": 2}) | {"set": sets, "workers": 1}
    plan = load_plan(_write(tmp_path / "plan.yaml", spec))
    for planned in run_plan(plan, dry_run=True, echo=lambda s: None):
        assert planned.command.startswith(f"(after recording the sampling pass in {pass_dir} and calibrating")
    # `quco results status` charges the pass's missing question to the first row, at the pass's pace, and both
    # rows, with no pace of their own, take the pass's
    from quco.eval.campaign.status import pace, plan_status, render_status

    deg, ecc = plan_status(plan)
    pass_pace = pace([r.seconds for r in load_run(pass_dir).records])
    assert (deg.pass_left, deg.pass_dir, deg.pass_pace, deg.pace) == (1, str(pass_dir), pass_pace, pass_pace)
    assert (ecc.pass_left, ecc.pace, ecc.pace_from) == (0, pass_pace, f"its sampling pass {pass_dir}")
    assert deg.hours_left == pytest.approx(2 * pass_pace / 3600) and ecc.hours_left == pytest.approx(
        pass_pace / 3600
    )
    assert "records its sampling pass first (1 question left)" in "\n".join(render_status([deg, ecc], "cpu"))
    with caplog.at_level(logging.INFO, logger="quco.eval.campaign.results"):
        done = run_plan(plan, progress=False, echo=lambda s: None)
    assert [r.action for r in done] == ["ran", "ran"], done
    recording = [m for m in caplog.messages if "recording the sampling pass" in m]
    assert len(recording) == 1 and "(1 questions to answer)" in recording[0]  # resumed once, then reused
    recorded = load_run(pass_dir)
    assert [r.id for r in recorded.records] == [e.id for e in load_dataset("hotpotqa", offset=2, limit=2)]
    assert not any(r.error for r in recorded.records)
    assert recorded.config.pipeline["params"]["estimator"] == "eccentricity"
    assert math.isinf(float(recorded.config.pipeline["params"]["threshold"]))
    overrides = dict(parse_override(s) for s in sets)
    runs = tmp_path / "runs" / "hotpotqa"
    for name in ("deg", "ecc"):
        copy = runs / f"{name}.calibrated.yaml"
        text = copy.read_text(encoding="utf-8")
        assert f"threshold rate 0.5 from the pass {pass_dir} on hotpotqa questions 2:4" in text.split("\n")[0]
        assert "calibrated: rate 0.5 on hotpotqa questions 2:4" in text
        scores, answered, _ = scores_from_run(pass_dir, load_config(copy, overrides=overrides))
        assert answered == 2 and scores
        theta = yaml.safe_load(text)["params"]["threshold"]  # this estimator's scores of the shared samples
        assert theta == pytest.approx(threshold_for_rate(scores, 0.5))
        assert load_run(runs / name).config.pipeline["params"]["threshold"] == pytest.approx(theta)
        assert len(load_run(runs / name).records) == 1


def test_the_committed_headline_runs_are_what_the_plan_resolves_to() -> None:
    """The runs under results/headline are committed, so that the table grows across machines. Each one must be
    readable, in the realistic world (or reading no corpus at all), made with the config its row resolves to
    today (a config change makes the run stale: re-run it, or revert the change), and name no folder of the
    machine that recorded it."""
    plan = load_plan(ROOT / "configs/results/headline.yaml")
    recorded = [res for res in collect(plan, n_boot=200) if (res.run_dir / "config.yaml").is_file()]
    local = {str(Path.home()), str(ROOT), str(ROOT.parent / "shared")}
    for res in recorded:
        name = f"{res.dataset.name}/{res.row.name}"
        assert res.status in ("partial", "complete"), (name, res.status, res.problem)
        if "p_stage2" in (res.run.config.pipeline["params"] if res.run else {}):
            # a control recorded with the chance per judged sentence, which the per-claim chance replaced: the
            # table says it was made with another config, until it is run again
            assert "params.p_stage2 (0.1 -> None)" in res.problem, name
            continue
        assert res.problem == "", (name, res.problem)
        # in the realistic world, or closed book (Wo-RAG reads no corpus, so its run names no world)
        uses_corpus = any(res.world.get(part, {}).get("used") for part in ("retrieval", "corpus_stats"))
        assert res.world.get("world") == "realistic" or (
            res.world.get("world") == "none" and not uses_corpus
        ), name
        assert res.errors == 0, name
        for f in ("config.yaml", "world.json", "results.jsonl"):
            text = (res.run_dir / f).read_text(encoding="utf-8")
            assert not [p for p in local if p in text], (name, f)


def test_the_committed_headline_runs_keep_their_identity() -> None:
    """Each committed run's recorded identity (its resolved pipeline, its prompt's hash, a control's matched rates)
    is what its row resolves to now, so that `quco results run` resumes it: the evaluation model's new name and
    the prompt options added since change nothing for them. The exception is a random control recorded with the
    chance per judged sentence (p_stage2), which the per-claim chance replaced: it must be run again, and its
    identity says so."""
    from quco.config import load_config, parse_override
    from quco.eval.campaign.results import row_overrides
    from quco.eval.run.target import pipeline_identity
    from quco.eval.runs.records import differences
    from quco.eval.runs.store import read_config

    plan = load_plan(ROOT / "configs/results/headline.yaml")
    checked = 0
    for ds, row in plan.rows():
        run_dir = ROOT / plan.run_dir(ds, row)
        if not (run_dir / "config.yaml").is_file() or row.config is None:
            continue
        recorded = read_config(run_dir).identity
        overrides = dict(parse_override(s) for s in row_overrides(plan, ds, row))
        if "params.match_run" in overrides:
            overrides["params.match_run"] = str(ROOT / overrides["params.match_run"])
        config = ROOT / (plan.calibrated_config(ds, row) if row.calibrate else row.config)
        identity = pipeline_identity(load_config(config, overrides=overrides))
        identity["pipeline"]["params"].pop("match_run", None)
        recorded["pipeline"]["params"].pop("match_run", None)
        diffs = differences({k: recorded.get(k) for k in identity}, identity)
        if "p_stage2" in recorded["pipeline"]["params"]:
            assert any("p_stage2" in d for d in diffs), (ds.name, row.name)
            continue
        assert diffs == [], (ds.name, row.name, diffs)
        checked += 1
    assert checked >= 20


# -- the page in a browser --------------------------------------------------------------------------------------

_MEASURE = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.querySelectorAll('img')];
  const b = document.body.dataset;
  b.scrollWidth = document.documentElement.scrollWidth;
  b.innerWidth = window.innerWidth;
  b.images = imgs.length;
  b.imagesLoaded = imgs.filter((i) => i.complete && i.naturalWidth > 0).length;
  document.querySelectorAll('details').forEach((d) => { d.open = true; });
  b.openScrollWidth = document.documentElement.scrollWidth;
});
</script>"""


def _in_chromium(page: Path, tmp_path: Path, shot: Path | None = None) -> dict[str, int]:
    """Open ``page`` in headless Chromium at 1280x800 and read what the measuring script recorded: the page's
    width with its folded tables closed and open, the window's, and how many images decoded."""
    import re
    import shutil
    import subprocess

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "headless Chromium is needed: apt-get install -y chromium"
    measured = tmp_path / f"measured-{page.name}"
    text = page.read_text(encoding="utf-8")
    assert text.count("</body>") == 1
    measured.write_text(text.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            "--disable-background-networking", "--disable-component-update", f"--user-data-dir={tmp_path / 'cr'}",
            "--virtual-time-budget=5000", "--window-size=1280,800"]  # fmt: skip
    dom = subprocess.run(
        [*args, "--dump-dom", measured.as_uri()], capture_output=True, text=True, timeout=180, check=True
    ).stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[:500]
    found = dict(re.findall(r'data-([a-z-]+)="(\d+)"', body.group(0)))
    if shot is not None:
        subprocess.run(
            [*args, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=180, check=True
        )
    return {k: int(v) for k, v in found.items()}


def test_the_results_page_fits_the_window_and_shows_each_figure(tmp_path: Path) -> None:
    long = "QuCo-RAG (stage 1 always; question+head+relation queries; merged passages; rules extractor)"
    rows = [
        {"name": "wo-rag", "label": "Wo-RAG", "config": str(ROOT / "configs/hotpotqa/wo-rag.yaml")},
        {"name": "sr-rag", "label": "SR-RAG", "config": SR},
        {"name": "quco", "label": long, "config": str(ROOT / "configs/hotpotqa/quco.yaml")},
        {"name": "random", "label": f"Random control of the {long}", "short": "Random control",
         "config": str(ROOT / "configs/hotpotqa/quco-random.yaml"), "match": "quco"},
        {"name": "dragin", "label": "DRAGIN", "config": str(ROOT / "configs/hotpotqa/dragin.yaml"), "limit": 3},
    ]  # fmt: skip
    cal = {"offset": 10, "limit": 5}
    spec = _plan(tmp_path, rows, title="HotpotQA (dev)", baseline="sr-rag", control="random", calibration=cal)
    readme = tmp_path / "README.md"
    readme.write_text(f"# R\n\nIntro.\n\n{SUMMARY_BEGIN}\n{SUMMARY_END}\n\n## Next\n", encoding="utf-8")
    docs = tmp_path / "docs"
    spec |= {"markdown": str(docs / "results.md"), "html": str(docs / "results.html"), "readme": str(readme)}
    plan = load_plan(_write(tmp_path / "plan.yaml", spec))
    runs = tmp_path / "runs" / "hotpotqa"
    for name, p, limit in (
        ("wo-rag", 0.2, N), ("sr-rag", 0.4, N), ("quco", 0.6, N), ("random", 0.5, 4), ("dragin", 0.5, 3)
    ):  # fmt: skip
        run_eval(
            _answerer(name, p),
            "hotpotqa",
            Questions(limit=limit),
            EvalOptions(out_dir=runs / name, progress=False),
        )
    results, written = table(plan, "plan.yaml", reports=False, n_boot=200)

    figure = docs / "figures" / "results-hotpotqa.png"
    assert figure in written
    from PIL import Image

    with Image.open(figure) as img:
        assert img.width > 600 and img.height > 300
    # The README's summary: one row per method with records, EM and retrievals per question, and the figure.
    summary = readme.read_text(encoding="utf-8")
    assert summary.startswith("# R\n\nIntro.\n\n") and summary.endswith("\n\n## Next\n")
    by = {r.row.name: r for r in results}
    quco = by["quco"].stats
    assert f"| QuCo-RAG | {100 * quco['em'].mean:.1f} | {quco['retrievals'].mean:.2f} |" in summary
    random = by["random"].stats
    assert (
        f"| Random control | {100 * random['em'].mean:.1f} (n=4) | {random['retrievals'].mean:.2f} |"
        in summary
    )
    dragin = by["dragin"].stats  # complete on the 3 questions it plans: it says so
    assert f"| DRAGIN | {100 * dragin['em'].mean:.1f} (3 q) | {dragin['retrievals'].mean:.2f} |" in summary
    from quco.eval.render.results import _point_label  # and its point in the figure

    labels = [_point_label(by[name]) for name in ("dragin", "random", "quco")]
    assert labels == [f"DRAGIN (3 of {N} q)", "Random control (n=4)", "QuCo-RAG"]
    assert "| method | HotpotQA EM | r/q |" in summary and "](docs/figures/results-hotpotqa.png)" in summary
    assert "](figures/results-hotpotqa.png)" in (docs / "results.md").read_text(encoding="utf-8")

    shot = tmp_path / "page.png"
    seen = _in_chromium(docs / "results.html", tmp_path, shot)
    assert seen["images"] == 1 and seen["images-loaded"] == 1, seen
    assert seen["scroll-width"] <= seen["inner-width"] == 1280, seen
    assert seen["open-scroll-width"] <= seen["inner-width"], seen  # the folded tables fit too when opened
    assert shot.stat().st_size > 0


def test_the_committed_results_page_fits_the_window(tmp_path: Path) -> None:
    plan = yaml.safe_load((ROOT / "configs" / "results" / "headline.yaml").read_text(encoding="utf-8"))
    seen = _in_chromium(ROOT / plan["html"], tmp_path)
    # a figure per dataset (and the gate frontiers drawn so far), every one decoded
    assert seen["images"] >= len(plan["datasets"]) and seen["images-loaded"] == seen["images"], seen
    assert seen["scroll-width"] <= seen["inner-width"] == 1280, seen
    assert seen["open-scroll-width"] <= seen["inner-width"], seen
