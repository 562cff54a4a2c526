"""Dataset loaders on the real evaluation files (read from data_dir(), never copied)."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from quco.datasets import (
    DatasetError,
    load_2wikimultihopqa,
    load_dataset,
    load_generic,
    resolve_dataset,
    select,
)
from quco.paths import data_dir


@pytest.fixture(scope="module")
def data() -> Path:
    root = data_dir()
    assert root.is_dir(), f"evaluation data not found at {root}; set QUCO_DATA_DIR"
    return root


def test_2wikimultihopqa_form_in_data_dir(data: Path) -> None:
    ex = load_dataset("2wikimultihopqa")
    assert len(ex) == 300
    assert ex[0].id == "0"
    assert ex[0].question == "Who is the mother of the director of film Polish-Russian War (Film)?"
    assert ex[0].answers == ["Małgorzata Braunek"]
    assert ex[1].answers == ["Mask of Fu Manchu", "The Mask of Fu Manchu"]  # gold + aliases
    assert ex[2].answers == ["12 June 1516"]  # a bare string becomes a one-item list
    assert {e.kind for e in ex} == {"span"}
    assert all(e.dataset == "2wikimultihopqa" for e in ex)
    assert [e.meta["index"] for e in ex] == list(range(300))


def test_2wikimultihopqa_official_format_merges_id_aliases(data: Path, tmp_path: Path) -> None:
    # Rebuild the official layout (dev.json + id_aliases.json) from real records: gold first, rest aliases.
    src = json.loads((data / "2wikimultihopqa/dev_0_300_question_answer_aliases.json").read_text("utf-8"))
    rows = [r for r in src if isinstance(r["answer"], list) and len(r["answer"]) > 2][:5]
    dev = [
        {"_id": f"id{i}", "type": "compositional", "question": r["question"], "answer": r["answer"][0],
         "answer_id": f"Q{i}", "context": [], "supporting_facts": [], "evidences": []}
        for i, r in enumerate(rows)
    ]  # fmt: skip
    (tmp_path / "dev.json").write_text(json.dumps(dev), "utf-8")
    lines = [
        json.dumps({"Q_id": f"Q{i}", "aliases": r["answer"][1:], "demonyms": ["X-ian"]})
        for i, r in enumerate(rows)
    ]
    (tmp_path / "id_aliases.json").write_text("\n".join(lines) + "\n", "utf-8")
    ex = load_dataset(f"2wikimultihopqa:{tmp_path / 'dev.json'}")
    assert [e.id for e in ex] == [f"id{i}" for i in range(len(rows))]
    assert [e.answers for e in ex] == [r["answer"] for r in rows]  # demonyms are not gold answers
    assert ex[0].meta["type"] == "compositional"
    # Without the aliases file only the gold answer counts.
    (tmp_path / "id_aliases.json").unlink()
    assert load_2wikimultihopqa(tmp_path / "dev.json")[0].answers == [rows[0]["answer"][0]]


def test_hotpotqa_unified_jsonl(data: Path) -> None:
    ex = load_dataset("hotpotqa")
    assert len(ex) == 300
    assert ex[0].id == "5a8b57f25542995d1e6f1371"
    assert ex[0].answers == ["yes"]
    assert ex[0].meta["type"] == "comparison"
    assert ex[0].meta["supporting_titles"] == ["Scott Derrickson", "Ed Wood"]
    # Rows 100-299 carry no supporting facts: their titles are those of the context paragraphs flagged
    # is_supporting, which name the same two titles wherever a row has both.
    assert all(len(e.meta["supporting_titles"]) == 2 for e in ex)
    assert ex[100].meta["supporting_titles"] == ["Mascogos", "Black Seminoles"]
    with (data / "hotpotqa/hotpot_dev_0_300_unified.jsonl").open(encoding="utf-8") as fh:
        raw = [json.loads(line) for line in fh]
    both = [(r, e) for r, e in zip(raw, ex, strict=True) if r.get("supporting_facts")]
    assert len(both) >= 100
    for r, e in both:
        assert {p["title"] for p in r["context_paragraphs"] if p["is_supporting"]} == set(
            e.meta["supporting_titles"]
        )
    assert [e.meta["index"] for e in ex] == list(range(300))
    assert len({e.id for e in ex}) == 300


def test_hotpotqa_official_hf_and_ircot_layouts_agree_with_unified(data: Path) -> None:
    unified = load_dataset("hotpotqa")
    official = load_dataset(data / "hotpotqa/raw/rakin_hotpot_dev_distractor_v1_first53.json")
    assert (
        resolve_dataset(data / "hotpotqa/raw/rakin_hotpot_dev_distractor_v1_first53.json").name == "hotpotqa"
    )
    assert [(e.id, e.question, e.answers) for e in official] == [
        (e.id, e.question, e.answers) for e in unified[:53]
    ]
    hf = load_dataset(data / "hotpotqa/raw/meve_hotpot_dev_distractor_first100_hfformat.json")
    assert [(e.question, e.answers) for e in hf] == [(e.question, e.answers) for e in unified[:100]]
    ircot = load_dataset(data / "hotpotqa/raw/ircot_dev_subsampled_devidx_0_300.jsonl")
    assert [e.id for e in ircot] == [e.id for e in unified]
    assert [e.answers[0] for e in ircot] == [e.answers[0] for e in unified]
    # every layout names the same supporting titles (the IRCoT one by its paragraphs' is_supporting flags)
    for layout in (official, hf, ircot):
        assert [set(e.meta["supporting_titles"]) for e in layout] == [
            set(e.meta["supporting_titles"]) for e in unified[: len(layout)]
        ]


def test_pubmedqa_keeps_all_three_labels(data: Path) -> None:
    ex = load_dataset("pubmedqa")
    assert len(ex) == 300
    assert ex[0].id == "21645374"
    assert ex[0].question.startswith("Do mitochondria play a role in remodelling lace plant leaves")
    assert {e.kind for e in ex} == {"yesnomaybe"}
    counts = collections.Counter(e.answers[0] for e in ex)
    assert counts == {"yes": 164, "no": 85, "maybe": 51}


def test_builtin_pubmedqa_exemplars_are_our_own_and_end_in_a_label(data: Path) -> None:
    from quco.eval.score.metrics import normalize_answer, score_prediction
    from quco.prompts import load_exemplars

    exemplars = load_exemplars("builtin:pubmedqa")
    assert len(exemplars) == 8
    assert collections.Counter(e.answer for e in exemplars) == {"yes": 4, "no": 3, "maybe": 1}
    for e in exemplars:  # the rendered answer is read back as its own label by the PubMedQA scorer
        rendered = e.render().split("Answer:", 1)[1]
        score = score_prediction(rendered, [e.answer], "yesnomaybe", "pubmedqa")
        assert (score.answer, score.em, score.missing) == (e.answer, 1.0, False), e.question
    # none comes from the 300 PQA-L questions (0-199 evaluated, 200-299 calibration), nor is close to one
    questions = [normalize_answer(x.question) for x in load_dataset("pubmedqa")]
    for e in exemplars:
        mine = set(normalize_answer(e.question).split())
        closest = max(len(mine & set(q.split())) / len(mine | set(q.split())) for q in questions)
        assert closest < 0.3, e.question


def test_strategyqa_bool_answers(data: Path) -> None:
    ex = load_dataset("strategyqa")
    assert len(ex) == 300
    assert ex[0].question == "Are more people today related to Genghis Khan than Julius Caesar?"
    assert ex[0].answers == ["yes"]
    assert {e.kind for e in ex} == {"yesno"}
    assert collections.Counter(e.answers[0] for e in ex) == {"no": 168, "yes": 132}


def test_musique_answer_aliases(data: Path) -> None:
    ex = load_dataset("musique")
    assert len(ex) == 30
    assert ex[0].id == "2hop__82713_84616"
    assert ex[0].answers[0] == "for Best Performance by a Leading Actress in a Play in Ondine"
    assert "leading actress" in ex[0].answers
    assert ex[0].meta == {"index": 0, "answerable": True, "hops": 2}


def test_generic_jsonl_and_flashrag_fields(tmp_path: Path) -> None:
    p = tmp_path / "mine.jsonl"
    p.write_text(
        '{"id": "a", "question": "Q1?", "answers": ["x", "y"]}\n\n'
        '{"question": "Q2?", "golden_answers": "Yes", "kind": "yesno", "metadata": {"src": "z"}}\n',
        "utf-8",
    )
    ex = load_dataset(p)
    assert resolve_dataset(p).name == "jsonl"
    assert (ex[0].id, ex[0].answers, ex[0].kind) == ("a", ["x", "y"], "span")
    assert (ex[1].id, ex[1].answers, ex[1].kind, ex[1].meta) == (
        "1",
        ["yes"],
        "yesno",
        {"index": 1, "src": "z"},
    )


def test_selection_first_n_offset_and_seeded_sample(data: Path) -> None:
    full = load_dataset("hotpotqa")
    assert load_dataset("hotpotqa", limit=5) == full[:5]
    assert load_dataset("hotpotqa", limit=5, offset=10) == full[10:15]
    s20 = load_dataset("hotpotqa", sample=20, seed=3)
    s40 = load_dataset("hotpotqa", sample=40, seed=3)
    assert len(s20) == 20 and len({e.id for e in s20}) == 20
    assert [e.meta["index"] for e in s20] == sorted(e.meta["index"] for e in s20)  # kept in file order
    assert {e.id for e in s20} <= {e.id for e in s40}  # a larger sample contains the smaller one
    assert s20 == load_dataset("hotpotqa", sample=20, seed=3)
    assert s20 != load_dataset("hotpotqa", sample=20, seed=4)
    # --offset/--limit choose the questions a sample is drawn from
    span = select(full, sample=20, seed=3, offset=10, limit=50)
    assert len(span) == 20 and {e.id for e in span} <= {e.id for e in full[10:60]}
    assert span == [e for e in full[10:60] if e in span] and span != full[10:30]
    with pytest.raises(DatasetError, match="cannot sample 51 questions from 50"):
        select(full, sample=51, offset=10, limit=50)
    with pytest.raises(DatasetError, match="offset"):
        select(full, offset=-1)


def test_errors_name_file_and_record(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text('{"question": "Q?", "answer": "a"}\n{"question": "Q2?"}\n', "utf-8")
    with pytest.raises(DatasetError, match=r"bad\.jsonl: line 2 has no field 'answers' or 'answer'"):
        load_generic(p)
    p.write_text('{"question": "Q?", "answer": "a"}\n{not json\n', "utf-8")
    with pytest.raises(DatasetError, match=r"bad\.jsonl: line 2 is not valid JSON"):
        load_generic(p)
    p.write_text(
        '{"id": 1, "question": "Q?", "answer": "a"}\n{"id": 1, "question": "R?", "answer": "b"}\n', "utf-8"
    )
    with pytest.raises(DatasetError, match="id '1' occurs twice"):
        load_generic(p)
    h = tmp_path / "hotpot_dev.json"
    h.write_text(
        json.dumps([{"_id": "x", "question": "Q?", "answer": "a"}, {"_id": "y", "answer": "b"}]), "utf-8"
    )
    with pytest.raises(DatasetError, match=r"hotpot_dev\.json: record 1 has no field 'question'"):
        load_dataset(h)
    s = tmp_path / "strategyqa.json"
    s.write_text(json.dumps([{"qid": "q", "question": "Q?", "answer": "perhaps"}]), "utf-8")
    with pytest.raises(DatasetError, match=r"record 0 field 'answer' is 'perhaps'"):
        load_dataset(s)
    with pytest.raises(DatasetError, match="dataset file not found"):
        load_dataset(f"pubmedqa:{tmp_path / 'missing.json'}")
    with pytest.raises(DatasetError, match="unknown dataset 'nosuch'"):
        load_dataset("nosuch")
