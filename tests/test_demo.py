"""`quco demo`: every trace ends with a stated answer and the decisions that led to it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from quco import cli
from quco.config import load_config
from quco.trace import Step, Trace


def test_demo_says_the_model_is_tiny_and_where_to_plug_in_a_real_one() -> None:
    assert "tiny base model" in cli.DEMO_NOTE
    assert "Plugging in real parts" in cli.DEMO_NOTE
    assert "quco models pull qwen2.5-coder-1.5b-instruct" in cli.DEMO_NOTE


def test_decision_path_lists_every_step_and_its_reason() -> None:
    trace = Trace(question="q", method="quco")
    trace.steps = [
        Step(index=0, stage="before", decision="retrieve", reason="mean entity count 8.5 < 100000"),
        Step(index=1, stage="generate", decision="keep"),
    ]
    assert cli._decision_path(trace) == "before → retrieve (mean entity count 8.5 < 100000) · generate → keep"


def test_demo_refuses_bad_settings_before_loading_anything() -> None:
    result = CliRunner().invoke(cli.app, ["demo", "--set", "retriever.top_k=0"])
    assert result.exit_code == 2 and "retriever.top_k" in result.output


@pytest.mark.model
def test_a_trace_without_an_answer_gets_one_counted_reprompt() -> None:
    """Eight tokens are too few for "So the answer is": the demo asks once more, and the trace counts it."""
    from quco.pipeline import Pipeline

    cfg = load_config(method="wo-rag", overrides={"generation.max_new_tokens": 8})
    pipe = Pipeline.from_config(cfg, progress=False)
    trace = pipe.answer("Who was born first, Albert Einstein or Niels Bohr?")
    assert trace.answer == ""  # stopped by the budget before "So the answer is"
    how = cli._state_answer(trace, pipe)
    assert trace.answer and "one counted re-prompt" in how
    assert trace.counters.llm_calls["answer_reprompt"] == 1
    assert "So the answer is" in trace.prediction
    assert any("re-prompted" in note for note in trace.notes)
    assert cli._state_answer(trace, pipe).startswith("the model stated the answer itself")
