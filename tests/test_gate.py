"""The retrieval gate: its frontier arithmetic, its gate files, and the method on the real default model.

The method's promise is what makes the offline frontier exact: when it does not fire its answer is Wo-RAG's,
when it fires it is SR-RAG's, and a fitted gate applied live takes the decisions the frontier predicted from the
recorded features. The real-model tests check exactly that on real HotpotQA questions.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from quco.config import load_config
from quco.errors import ConfigError, QucoError
from quco.eval.gate.data import COSTS, GateData, load_gate_data
from quco.eval.gate.fit import logistic_gate, signal_gate
from quco.eval.gate.frontier import at_budget, fire_at, frontier, oracle, point, random_gate, threshold_for
from quco.eval.render.gate import build_report, figure, markdown
from quco.eval.run.runner import EvalOptions, Questions, run_eval
from quco.eval.runs.store import load_run
from quco.methods import method_class
from quco.methods.gate import FEATURES, question_features
from quco.signals.gate_model import GateModel


def synthetic(n: int = 40, seed: int = 1) -> GateData:
    """Questions with known outcomes: ``x`` ranks the questions where retrieval helps first, ``y`` is noise."""
    rng = np.random.default_rng(seed)
    closed = (rng.random(n) < 0.3).astype(float)
    opened = np.where(closed == 1, (rng.random(n) < 0.8).astype(float), (rng.random(n) < 0.5).astype(float))
    helps = opened > closed
    x = helps * 2.0 + rng.random(n)
    y = rng.random(n)
    ones = {k: np.ones(n) for k in COSTS}
    zero_retrieval = dict(ones, retrievals=np.zeros(n))
    return GateData(
        ids=[str(i) for i in range(n)],
        index=np.arange(n),
        closed_em=closed,
        closed_f1=closed,
        open_em=opened,
        open_f1=opened,
        closed_cost=zero_retrieval,
        open_cost=dict(ones, llm_calls=np.full(n, 2.0)),
        draft_cost=zero_retrieval,
        family_cost={"flare": {"llm_calls": np.zeros(n)}, "dtr": {"llm_calls": np.ones(n)}},
        features=[{"flare_max": float(a), "dtr_nll": float(b)} for a, b in zip(x, y, strict=True)],
    )


def test_frontier_points_are_exact_mixtures_of_the_two_runs() -> None:
    data = synthetic()
    scores = data.feature("flare_max")
    curve = frontier(data, scores, ["flare"])
    assert curve[0].fired == 0 and curve[0].em == pytest.approx(data.closed_em.mean())
    assert curve[-1].fired == len(data) and curve[-1].em == pytest.approx(data.open_em.mean())
    for p in curve[1:]:
        fire = scores >= p.threshold
        expect = np.where(fire, data.open_em, data.closed_em).mean()
        assert p.fired == int(fire.sum()) and p.em == pytest.approx(expect)
        # a firing question costs the draft plus the retrieval answer: 1 + 2 calls, a kept one 1 call
        assert p.costs["llm_calls"] == pytest.approx((fire * 3 + ~fire * 1).mean())
        assert p.costs["retrievals"] == pytest.approx(fire.mean())
    # the DTR family adds its own call to every question, fired or not
    with_dtr = point(data, scores >= curve[3].threshold, ["flare", "dtr"])
    assert with_dtr.costs["llm_calls"] == pytest.approx(curve[3].costs["llm_calls"] + 1)


def test_oracle_and_random_bounds() -> None:
    data = synthetic()
    orc = oracle(data)
    k = int(data.helps.sum())
    best = np.maximum(data.closed_em, data.open_em).mean()
    assert [p.fired for p in orc] == list(range(len(data) + 1))
    assert orc[k].em == pytest.approx(best) and max(p.em for p in orc) == pytest.approx(best)
    # it stays there until only the questions retrieval hurts are left, and ends at retrieving for all
    assert orc[len(data) - int(data.hurts.sum())].em == pytest.approx(best)
    assert orc[-1].em == pytest.approx(data.open_em.mean())
    # a perfect signal is on the oracle's curve up to the oracle's rate
    curve = frontier(data, data.feature("flare_max"))
    assert at_budget(curve, k / len(data)).em == pytest.approx(best)
    rnd = random_gate(data, 10, draws=4000)
    exact = data.closed_em.mean() + (data.open_em - data.closed_em).sum() / len(data) * 10 / len(data)
    assert rnd.em_mean == pytest.approx(exact)
    assert rnd.em_low <= exact <= rnd.em_high
    assert abs(rnd.draws.mean() - exact) < 0.01
    assert rnd.p_at_least(best) < 0.01 and rnd.p_at_least(0.0) == 1.0


def test_threshold_for_a_budget_never_exceeds_it() -> None:
    scores = np.array([0.9, 0.8, 0.8, 0.5, np.nan, 0.1])
    assert threshold_for(scores, 0.0) == math.inf
    assert fire_at(scores, threshold_for(scores, 1 / 6)).sum() == 1
    assert fire_at(scores, threshold_for(scores, 2 / 6)).sum() == 1  # a tie at the budget's edge stays out
    assert fire_at(scores, threshold_for(scores, 3 / 6)).sum() == 3
    assert fire_at(scores, threshold_for(scores, 1.0)).sum() == 5  # a missing score never fires


def test_fitted_gates_read_only_the_calibration_split() -> None:
    data = synthetic(80)
    cal = data.between(0, 40)
    sig = signal_gate(cal, "flare_max", budget=0.3)
    assert sig.direction == 1.0 and sig.kind == "signal"
    assert (sig.scores(cal.features) >= sig.threshold).mean() <= 0.3
    flipped = [dict(f, flare_max=-f["flare_max"]) for f in cal.features]  # the direction is learned
    neg = signal_gate(GateData(**{**cal.__dict__, "features": flipped}), "flare_max")
    assert neg.direction == -1.0
    fitted = logistic_gate(cal, ["flare_max", "dtr_nll"], budget=0.3)
    assert fitted.coef[0] > 0 and abs(fitted.coef[0]) > abs(fitted.coef[1])
    changed = data.subset(range(40, 80))
    changed.features = [dict(f, flare_max=0.0) for f in changed.features]  # the evaluated questions change...
    again = logistic_gate(GateData(**{**data.__dict__}).between(0, 40), ["flare_max", "dtr_nll"], budget=0.3)
    assert again.coef == fitted.coef  # ...and the fit does not


def test_gate_files_round_trip_and_refuse_nonsense(tmp_path: Path) -> None:
    data = synthetic()
    model = logistic_gate(data, ["flare_max", "dtr_nll"], budget=0.5)
    path = tmp_path / "g.json"
    model.save(path)
    again = GateModel.load(path)
    np.testing.assert_allclose(again.scores(data.features), model.scores(data.features))
    never = GateModel("signal", ["flare_max"])
    never.save(path)
    assert GateModel.load(path).threshold == math.inf
    # a missing feature value takes the fitting split's median
    assert model.score({"dtr_nll": 0.5}) == pytest.approx(
        model.score({"flare_max": model.medians[0], "dtr_nll": 0.5})
    )
    path.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ConfigError, match="not a gate file"):
        GateModel.load(path)
    with pytest.raises(ConfigError, match="not found"):
        GateModel.load(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="exactly one feature"):
        GateModel("signal", ["a", "b"])


def test_report_and_figure(tmp_path: Path) -> None:
    data = synthetic(80)
    fitted = logistic_gate(data.between(0, 40), ["flare_max", "dtr_nll"], budget=0.3)
    report = build_report(data, (0, 40), (40, 80), dataset="toy", gates=[("fitted", fitted)], n_boot=200)
    text = markdown(report)
    assert "| oracle |" in text and "| flare_max |" in text and "| fitted |" in text
    row = next(r for r in report.rows if r.name == "flare_max")
    assert row.auroc_helps.mean > 0.9 and row.direction == 1.0
    assert row.budgets[0.25].rate <= 0.25
    png = figure(report, tmp_path / "f.png")
    assert png.stat().st_size > 10_000


def test_question_features() -> None:
    assert question_features("Who was born first, Albert Einstein or Niels Bohr?") == {
        "question_words": 9.0,
        "question_choice": 1.0,
    }
    assert (
        question_features("Were Scott Derrickson and Ed Wood of the same nationality?")["question_choice"]
        == 1.0
    )
    assert question_features("What city is the capital of France?")["question_choice"] == 0.0


@pytest.mark.model
def test_the_consistency_family_samples_the_closed_book_answer(world: dict) -> None:
    from quco.pipeline import Pipeline

    cfg = load_config(
        overrides={**world, "params": {"families": ["consistency"], "samples": 3}}, method="gate"
    )
    pipe = Pipeline.from_config(cfg, progress=False)
    question = "Who was born first, Albert Einstein or Niels Bohr?"
    first, again = pipe.answer(question), pipe.answer(question)
    step = first.steps[0]
    assert first.counters.llm_calls == {"main": 1, "sampler": 3}
    assert len(step.signals["families"]["consistency"]["answers"]) == 3
    feats = step.signals["features"]
    assert 0.0 <= feats["consistency_agree"] <= 1.0 and 1 <= feats["consistency_distinct"] <= 4
    assert again.steps[0].signals["features"] == feats  # seeded per question


def test_the_method_refuses_a_model_gate_without_a_file(tmp_path: Path) -> None:
    gate = method_class("gate")
    with pytest.raises(ConfigError, match="params.model"):
        gate({"fire": "model"})
    with pytest.raises(ConfigError, match="gate file not found"):
        gate({"fire": "model", "model": str(tmp_path / "none.json")}).families  # noqa: B018
    path = tmp_path / "g.json"
    GateModel("signal", ["dtr_nll"]).save(path)
    with pytest.raises(ConfigError, match="families not computed"):
        gate({"fire": "model", "model": str(path), "families": ["flare"]}).families  # noqa: B018


# -- the method on the real default model -------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, small_hotpot_corpus: Path) -> dict:
    return {
        "retriever.corpus": str(small_hotpot_corpus),
        "retriever.index_dir": str(tmp_path_factory.mktemp("gate") / "bm25"),
        "prompt.fewshot": 2,
        "generation.max_new_tokens": 32,
    }


def _eval(method: str, out: Path, world: dict, **params: object) -> list[dict]:
    cfg = load_config(overrides={**world, "params": dict(params)}, method=method)
    run_eval(cfg, "hotpotqa", Questions(limit=4), EvalOptions(out_dir=out, progress=False))
    return load_run(out).records


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, world: dict) -> dict[str, Path]:
    """Wo-RAG, SR-RAG and the gate recording its features (fire: never) on the same 4 questions."""
    root = tmp_path_factory.mktemp("gate-runs")
    for method, params, name in (
        ("wo-rag", {}, "wo"),
        ("sr-rag", {}, "sr"),
        ("gate", {"fire": "never"}, "never"),
    ):
        _eval(method, root / name, world, **params)
    return {"wo": root / "wo", "sr": root / "sr", "never": root / "never", "root": root}


@pytest.mark.model
def test_gate_answers_as_wo_rag_when_kept_and_as_sr_rag_when_fired(
    runs: dict[str, Path], world: dict
) -> None:
    always = _eval("gate", runs["root"] / "always", world, fire="always", families=["question"])
    wo, sr, never = (load_run(runs[n]).records for n in ("wo", "sr", "never"))
    assert [r.prediction for r in never] == [r.prediction for r in wo]
    assert [r.prediction for r in always] == [r.prediction for r in sr]
    for a, s in zip(always, sr, strict=True):
        got = [x["id"] for step in a.trace["steps"] for x in step["retrieved"]]
        want = [x["id"] for step in s.trace["steps"] for x in step["retrieved"]]
        assert got == want and a.trace["counters"]["retrievals"] == 1
    for r in never:
        step = r.trace["steps"][0]
        assert step["decision"] == "keep" and r.trace["counters"]["retrievals"] == 0
        feats = step["signals"]["features"]
        assert set(feats) == {f for f, fam in FEATURES.items() if fam != "consistency"}
        for key in ("flare_max", "dragin_max", "etc_max", "etc_d1_max", "dtr_nll", "question_words"):
            assert feats[key] is not None
        # every family's cost is counted in the trace: the re-read of DRAGIN and DTR's direct answer
        counters = r.trace["counters"]
        fams = step["signals"]["families"]
        assert counters["llm_calls"]["probe"] == sum(f["cost"]["llm_calls"] for f in fams.values()) == 2
        assert counters["corpus_queries"] == fams["corpus"]["cost"]["corpus_queries"] > 0


@pytest.mark.model
def test_a_fitted_gate_run_live_takes_the_decisions_the_frontier_predicted(
    runs: dict[str, Path], world: dict
) -> None:
    data = load_gate_data([runs["never"]], [runs["sr"]])
    assert len(data) == 4
    model = signal_gate(data, "flare_max", budget=0.5)
    gate_file = runs["root"] / "gate.json"
    model.save(gate_file)
    predicted = model.scores(data.features) >= model.threshold
    assert predicted.sum() == 2
    live = _eval("gate", runs["root"] / "live", world, fire="model", model=str(gate_file))
    decided = [r.trace["steps"][0]["decision"] == "retrieve" for r in live]
    assert decided == predicted.tolist()
    # the live gate computed only the family its file reads
    assert set(live[0].trace["steps"][0]["signals"]["families"]) == {"flare"}
    # and its answers are those the two recorded runs give
    expect = np.where(predicted, data.open_em, data.closed_em)
    assert [float(r.em) for r in live] == expect.tolist()
    # the gate file is part of the run's identity: a run does not resume with another gate
    model.threshold = -1e9
    model.save(gate_file)
    with pytest.raises(QucoError, match="different configuration"):
        _eval("gate", runs["root"] / "live", world, fire="model", model=str(gate_file))


@pytest.mark.model
def test_the_results_table_draws_each_datasets_frontier(runs: dict[str, Path], tmp_path: Path) -> None:
    from quco.eval.campaign.plan import Plan
    from quco.eval.render.gate_section import gate_sections, html_parts, markdown_lines

    gate_file = tmp_path / "g.json"
    GateModel("signal", ["question_words"], threshold=10.0).save(gate_file)
    plan = Plan.model_validate(
        {
            "out": str(tmp_path),
            "datasets": [
                {
                    "name": "hotpotqa",
                    "offset": 0,
                    "limit": 2,
                    "calibration": {"offset": 2, "limit": 2},
                    "gate": {
                        "closed": [str(runs["never"])],
                        "open": [str(runs["sr"])],
                        "gates": {"words": str(gate_file), "later": str(tmp_path / "later.json")},
                        "figure": str(tmp_path / "fig.png"),
                    },
                },
                {
                    "name": "2wikimultihopqa",
                    "limit": 2,
                    "calibration": {"offset": 2, "limit": 2},
                    "gate": {"closed": [str(runs["never"])], "open": [str(tmp_path / "none")]},
                },
            ],
        }
    )
    # Two complete rows: one answers both evaluated questions (a point), one only the first (a note, no point).
    from quco.eval.campaign.plan import Row
    from quco.eval.campaign.results import RowResult
    from quco.eval.runs.store import load_run

    hp = plan.datasets[0]
    sr = load_run(runs["sr"])
    ids = [r.id for r in sr.records if 0 <= r.index < 2]
    rows = [
        RowResult(hp, Row(name="sr-rag", short="SR-RAG"), runs["sr"], 2, sr.restricted(ids), "complete"),
        RowResult(hp, Row(name="bb", short="Black-box"), runs["sr"], 1, sr.restricted(ids[:1]), "complete"),
    ]
    ready, missing = gate_sections(plan, rows, n_boot=100)
    assert set(ready.report.methods) == {"sr-rag"}  # not a row of the plan: its name
    assert ready.notes[-1].startswith("Not drawn here: Black-box (1 of 2 questions).")
    assert ready.report is not None and ready.report.n == 2 and ready.report.n_calibration == 2
    assert ready.figure == tmp_path / "fig.png" and ready.figure.stat().st_size > 10_000
    text = "\n".join(markdown_lines([ready, missing], tmp_path / "results.md"))
    assert "![EM against retrievals per question, hotpotqa](fig.png)" in text
    assert "| flare_max |" in text and "| words |" in text
    assert "The fitted gate 'later' is not there yet" in text
    assert missing.report is None and "Not yet:" in text and "not a quco run directory" in missing.problem
    page = "".join(html_parts([ready], lambda head, rows, cls: f"<table>{len(rows)}</table>"))
    assert "data:image/png;base64," in page and "<table>" in page
