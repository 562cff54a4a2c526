"""The eval/compare/report commands as the ``quco`` CLI mounts them (no model: limit 0 or recorded runs)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from quco.cli import app
from quco.config import load_config
from quco.eval.run.command import infer_dataset

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
runner = CliRunner()


def test_dataset_is_inferred_from_the_config() -> None:
    assert infer_dataset(
        load_config(CONFIGS / "2wikimultihopqa/quco.yaml"), CONFIGS / "2wikimultihopqa/quco.yaml"
    ) == ("2wikimultihopqa")
    assert (
        infer_dataset(load_config(CONFIGS / "quco.yaml"), CONFIGS / "quco.yaml") == "hotpotqa"
    )  # its exemplars


def test_eval_writes_the_resolved_config_and_guards_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["eval", "--config", str(CONFIGS / "hotpotqa/sr-rag.yaml"), "--limit", "0", "--out", str(out)]
    res = runner.invoke(app, [*args, "--no-progress"])
    assert res.exit_code == 0, res.output
    stored = yaml.safe_load((out / "config.yaml").read_text("utf-8"))
    assert stored["pipeline"]["method"] == "sr-rag"
    assert stored["dataset"]["name"] == "hotpotqa"
    assert stored["selection"]["limit"] == 0
    res = runner.invoke(app, [*args, "--set", "retriever.top_k=4", "--no-progress"])
    assert res.exit_code == 2
    assert "different configuration" in res.output and "retriever.top_k" in res.output
    assert "Traceback" not in res.output
    res = runner.invoke(
        app, ["eval", "--config", str(CONFIGS / "hotpotqa/sr-rag.yaml"), "--dataset", "nosuch"]
    )
    assert res.exit_code == 2 and "unknown dataset 'nosuch'" in res.output


def test_compare_and_report_commands(tmp_path: Path) -> None:
    from quco.eval.run.runner import EvalOptions, Questions, run_eval
    from test_eval_report import _answerer

    for method, p in (("wo-rag", 0.1), ("sr-rag", 0.6)):
        run_eval(
            _answerer(method, p, method != "wo-rag"),
            "hotpotqa",
            Questions(limit=12),
            EvalOptions(out_dir=tmp_path / method, progress=False),
        )
    res = runner.invoke(
        app, ["compare", str(tmp_path / "wo-rag"), str(tmp_path / "sr-rag")], terminal_width=160
    )
    assert res.exit_code == 0, res.output
    assert "on 12 common questions" in res.output and "p (permutation)" in res.output
    res = runner.invoke(app, ["compare", str(tmp_path / "wo-rag"), str(tmp_path / "missing")])
    assert res.exit_code == 2 and "not a quco run directory" in res.output
    html = tmp_path / "r.html"
    res = runner.invoke(
        app, ["report", str(tmp_path / "wo-rag"), str(tmp_path / "sr-rag"), "--out", str(html)]
    )
    assert res.exit_code == 0, res.output
    assert html.is_file() and 'id="summary"' in html.read_text("utf-8")


def test_summary_command_tabulates_runs_on_the_same_questions(tmp_path: Path) -> None:
    from quco.eval.run.runner import EvalOptions, Questions, run_eval
    from quco.eval.score.summary import summary_rows
    from test_eval_report import _answerer

    for method, p, limit in (("wo-rag", 0.1, 12), ("sr-rag", 0.6, 8)):
        run_eval(_answerer(method, p, method != "wo-rag"), "hotpotqa", Questions(limit=limit), EvalOptions(out_dir=tmp_path / method, progress=False))  # fmt: skip
    runs = [tmp_path / "wo-rag", tmp_path / "sr-rag"]
    assert [r["questions"] for r in summary_rows(runs, n_boot=200)] == [12, 8]
    assert [r["questions"] for r in summary_rows(runs, first=5, n_boot=200)] == [5, 5]
    rows = summary_rows(runs, common=True, n_boot=200)
    assert [r["questions"] for r in rows] == [8, 8]
    wo = [json.loads(line) for line in (tmp_path / "wo-rag/results.jsonl").read_text().splitlines()][:8]
    assert rows[0]["stats"]["em"].mean == sum(r["em"] for r in wo) / 8
    res = runner.invoke(app, ["summary", *map(str, runs), "--markdown", "--first", "5"], terminal_width=200)
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[0].startswith("| run | method | n | EM | F1 | retrievals/q")
    assert lines[2].startswith("| wo-rag | wo-rag | 5 |") and lines[3].startswith("| sr-rag | sr-rag | 5 |")
    res = runner.invoke(app, ["summary", str(runs[0]), "--first", "0"])
    assert res.exit_code == 2 and "--first must be at least 1" in res.output


def test_summary_shows_main_only_costs_and_quco_firing_rates(tmp_path: Path) -> None:
    """Main-only calls and tokens (the papers' #Call/#Tok) stand beside all-role totals; a QuCo-RAG run shows how
    often each stage fired, counted from its trigger records."""
    from quco.eval.run.runner import EvalOptions, Questions, run_eval
    from quco.eval.score.summary import summary_rows
    from quco.signals.corpus import Claim, claim_records
    from quco.trace import Step
    from test_eval_report import _answerer

    inner = _answerer("quco", 0.5, retrieves=False)

    def quco(question: str):  # noqa: ANN202 - a Trace
        trace = inner(question)
        trace.counters.add_llm("extractor", 50, 7, calls=2)  # extractor calls count in "all roles" only
        cooc, head = claim_records(
            [[Claim("cooccurrence", 3.0)], [Claim("cooccurrence", 0.0)]], 1, 20, "count", True
        )
        trace.steps.append(
            Step(
                index=1,
                stage="generate",
                draft="d",
                decision="retrieve",
                triggers=[cooc, head],
                queries=["head a relation", "head b relation"],  # one per flagged claim
            )
        )
        return trace

    quco.method = "quco"  # type: ignore[attr-defined]
    run_eval(quco, "hotpotqa", Questions(limit=6), EvalOptions(out_dir=tmp_path / "quco", progress=False))
    row = summary_rows([tmp_path / "quco"], n_boot=200)[0]
    stats = row["stats"]
    assert stats["llm_calls"].mean == stats["main_llm_calls"].mean + 2
    assert stats["tokens"].mean == stats["main_tokens"].mean + 7
    stage1, stage2 = row["firing"]["before"], row["firing"]["generate"]
    assert stage1.steps == 6 and 0 <= stage1.fired <= 6
    assert (stage2.steps, stage2.fired, stage2.candidates) == (
        6,
        6,
        12,
    )  # fired at the second sentence each time
    assert stage2.queries == 12 and stage2.per_firing == 2.0
    res = runner.invoke(app, ["summary", str(tmp_path / "quco"), "--markdown"], terminal_width=300)
    assert res.exit_code == 0, res.output
    header = res.output.strip().splitlines()[0]
    assert "LLM calls/q (main)" in header and "LLM calls/q (all roles)" in header
    assert "gen. tokens/q (main)" in header and "stage 1 fired" in header and "stage 2 fired" in header
    assert "50.0% (6/12 cand.; 2.00 queries/firing)" in res.output
    res = runner.invoke(app, ["compare", str(tmp_path / "quco"), str(tmp_path / "quco")], terminal_width=200)
    assert res.exit_code == 0 and "(main)" in res.output and "(all roles)" in res.output
