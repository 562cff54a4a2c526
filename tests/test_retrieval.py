"""Corpus reading and BM25 retrieval, on the bundled Wikipedia summaries and the HotpotQA paragraph pool."""

from __future__ import annotations

import csv
import gzip
import json
import logging
from pathlib import Path

import bm25s
import pytest

from quco.config import RetrieverConfig
from quco.errors import CorpusFormatError, InputError
from quco.paths import data_dir
from quco.retrieval import (
    BM25Retriever,
    CorpusReport,
    CorpusSource,
    IndexIntegrityError,
    Passage,
    Retriever,
    build_retriever,
    corpus_docs,
    corpus_source,
    ensure_index,
    index_corpus,
)
from quco.retrieval.bm25 import MANIFEST_NAME, default_index_dir
from quco.retrieval.bm25_stream import StreamingBM25Builder

HOTPOT_CORPUS = "hotpotqa/corpus/hotpot_dev_first500_pooled_paragraphs.jsonl.gz"
HOTPOT_DEV = "hotpotqa/hotpot_dev_0_300_unified.jsonl"


@pytest.fixture(scope="module", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory):
    """Indexes and fingerprints of this module go to a fresh cache, never the user's."""
    with pytest.MonkeyPatch.context() as mp:
        cache = tmp_path_factory.mktemp("quco-cache")
        mp.setenv("QUCO_CACHE_DIR", str(cache))
        yield cache


@pytest.fixture(scope="module")
def hotpot_path() -> Path:
    path = data_dir() / HOTPOT_CORPUS
    assert path.is_file(), f"evaluation data missing: {path} (set QUCO_DATA_DIR)"
    return path


@pytest.fixture(scope="module")
def hotpot_lines(hotpot_path: Path) -> list[str]:
    with gzip.open(hotpot_path, "rt", encoding="utf-8") as fh:
        return [line.rstrip("\n") for line in fh]


@pytest.fixture(scope="module")
def hotpot_index(hotpot_path: Path, tmp_path_factory: pytest.TempPathFactory) -> BM25Retriever:
    return BM25Retriever.build(hotpot_path, tmp_path_factory.mktemp("idx") / "hotpot", progress=False)


def _write(path: Path, lines: list[str | bytes]) -> Path:
    data = b"".join((x if isinstance(x, bytes) else x.encode("utf-8")) + b"\n" for x in lines)
    path.write_bytes(data)
    return path


def _passages(path: Path | str, **kwargs) -> list[Passage]:
    return list(CorpusSource.resolve(path).iter_passages(**kwargs))


# -- corpus reading --------------------------------------------------------------------------------------------


def test_wiki_summaries_source_has_10033_titled_passages():
    source = CorpusSource.resolve("wiki-summaries")
    assert source.format == "wiki-summaries"
    assert source.path.name == "summaries_en-us.json"
    report = CorpusReport()
    passages = list(source.iter_passages(report=report))
    assert len(passages) == 10033
    assert report.passages == report.lines_read == 10033 and report.skipped == 0
    assert len({p.id for p in passages}) == 10033
    assert all(p.title and p.text.strip() for p in passages)
    einstein = next(p for p in passages if p.id == "Albert Einstein")
    assert einstein.title == "Albert Einstein" and "physicist" in einstein.text


def test_fingerprint_is_stable_format_dependent_and_cached(hotpot_path: Path, tmp_path: Path):
    source = CorpusSource.resolve(hotpot_path)
    fp = source.fingerprint()
    assert len(fp) == 64 and fp == CorpusSource.resolve(str(hotpot_path)).fingerprint()
    import quco.retrieval.corpus as corpus_mod

    class NoHashing:  # cached by path/size/mtime: asking again must not hash the file again
        @staticmethod
        def sha256(*_args, **_kwargs):
            raise AssertionError("the fingerprint was computed again instead of read from its cache")

    real_hashlib = corpus_mod.hashlib
    corpus_mod.hashlib = NoHashing  # type: ignore[assignment]
    try:
        assert all(source.fingerprint() == fp for _ in range(100))
    finally:
        corpus_mod.hashlib = real_hashlib
    # The same bytes read as another format are another corpus.
    copy = tmp_path / "same.json.gz"
    copy.write_bytes(hotpot_path.read_bytes())
    assert CorpusSource.resolve(copy).fingerprint() != fp
    # A changed file gets a new fingerprint.
    edited = tmp_path / "edited.jsonl"
    _write(edited, ['{"text": "a b c"}'])
    before = CorpusSource.resolve(edited).fingerprint()
    _write(edited, ['{"text": "a b c d"}'])
    assert CorpusSource.resolve(edited).fingerprint() != before


def test_jsonl_variants(tmp_path: Path):
    path = _write(
        tmp_path / "c.jsonl",
        [
            '\ufeff{"id": "p1", "title": "Alpha", "text": "first passage"}',
            '{"text": "no id and no title"}',
            "",
            '{"_id": 7, "contents": "beir/pyserini spelling"}',
            '{"id": "p4", "title": "Delta", "text": "fourth", "extra": [1, 2]}',
        ],
    )
    report = CorpusReport()
    assert _passages(path, report=report) == [
        Passage("p1", "Alpha", "first passage"),
        Passage("2", "", "no id and no title"),  # missing id -> line number
        Passage("7", "", "beir/pyserini spelling"),
        Passage("p4", "Delta", "fourth"),
    ]
    assert (report.lines_read, report.passages, report.ignored_lines, report.skipped) == (5, 4, 1, 0)
    assert report.accounted


def test_gz_json_list_and_tsv_give_the_same_passages(hotpot_lines: list[str], tmp_path: Path):
    records = [json.loads(line) for line in hotpot_lines[:60]]
    for i, rec in enumerate(records):
        rec["id"] = f"hp{i}"
    expected = [Passage(r["id"], r["title"], r["text"]) for r in records]

    jsonl_gz = tmp_path / "slice.jsonl.gz"
    with gzip.open(jsonl_gz, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    json_list = tmp_path / "slice.json"
    json_list.write_text(json.dumps(records, indent=2), encoding="utf-8")
    json_gz = tmp_path / "slice.json.gz"
    json_gz.write_bytes(gzip.compress(json_list.read_bytes()))
    tsv = tmp_path / "psgs_w100.tsv"  # DPR form: header, text quoted csv-style, title last
    with tsv.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        writer.writerows([r["id"], r["text"], r["title"]] for r in records)
    assert any('"' in r["text"] for r in records)  # the quoting path is exercised

    for path in (jsonl_gz, json_list, json_gz, tsv):
        assert _passages(path) == expected, path.name


def test_json_object_keyed_by_id(tmp_path: Path):
    """An object of id -> record: the key is the id unless the record names one; a PubMedQA record's CONTEXTS
    become one untitled passage (its conclusion and labels are left out)."""
    doc = {
        "k1": {"title": "Alpha", "text": "first"},
        "k2": {"id": "own", "text": "second"},
        "123": {
            "QUESTION": "Is it?",
            "CONTEXTS": ["Background  one.", " Results two. "],
            "LONG_ANSWER": "It is.",
            "final_decision": "yes",
        },
    }
    path = tmp_path / "keyed.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert _passages(path) == [
        Passage("k1", "Alpha", "first"),
        Passage("own", "", "second"),
        Passage("123", "", "Background  one. Results two."),
    ]
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"a": {"text": "ok"}, "b": {"CONTEXTS": ["x", 3]}, "c": "text"}), encoding="utf-8"
    )
    report = CorpusReport()
    assert _passages(bad, on_error="skip", report=report) == [Passage("a", "", "ok")]
    reasons = [s.reason for s in report.skipped_lines]
    assert "'b': 'CONTEXTS' must be a list of strings" in reasons[0]
    assert "'c': expected a JSON object" in reasons[1]
    with pytest.raises(CorpusFormatError, match="list of passage objects or an object of id -> record"):
        _passages(_write(tmp_path / "num.json", ["42"]))


def test_dpr_tsv_literal(tmp_path: Path):
    path = _write(
        tmp_path / "psgs.tsv",
        [
            "id\ttext\ttitle",
            '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet"\tAaron',
            "2\tplain text without quotes\tSecond",
        ],
    )
    report = CorpusReport()
    assert _passages(path, report=report) == [
        Passage("1", "Aaron", 'Aaron Aaron ( or ; "Ahärôn") is a prophet'),
        Passage("2", "Second", "plain text without quotes"),
    ]
    assert report.lines_read == 3 and report.ignored_lines == 1 and report.accounted  # the header


GOOD = '{"id": "g", "title": "T", "text": "good text"}'


@pytest.mark.parametrize(
    ("name", "lines", "where", "reason"),
    [
        ("c.jsonl", [GOOD, b'{"text": "caf\xe9"}', GOOD], "line 2", "not valid UTF-8"),
        ("c.jsonl", [GOOD, GOOD, '{"text": "unterminated}'], "line 3", "invalid JSON"),
        ("c.jsonl", [GOOD, '{"title": "no text"}'], "line 2", "no 'text' field"),
        ("c.jsonl", ['{"text": 42}'], "line 1", "'text' must be a string"),
        ("c.jsonl", [GOOD, '{"text": "   "}'], "line 2", "'text' is empty"),
        ("c.jsonl", [GOOD, '["a", "list"]'], "line 2", "expected a JSON object"),
        (
            "c.tsv",
            ["id\ttext\ttitle", "1\tok\tT", "2\tonly two fields"],
            "line 3",
            "expected 3 tab-separated fields",
        ),
        ("c.tsv", ["id\ttitle\ttext", "1\tT\t"], "line 2", "'text' is empty"),
        ("c.tsv", ["1\tno header\tT"], "line 1", "expected a header row"),
        ("c.json", ['[{"text": "a"},', '{"text": }]'], "line 2", "invalid JSON"),
        ("c.json", [b'[{"text": "a"},', b'{"text": "\xff"}]'], "line 2", "not valid UTF-8"),
        ("c.json", ['[{"text": "a"}, {"title": "b"}]'], "record 2", "no 'text' field"),
    ],
)
def test_bad_input_stops_with_file_and_line(tmp_path: Path, name, lines, where, reason):
    path = _write(tmp_path / name, lines)
    with pytest.raises(CorpusFormatError) as info:
        _passages(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert str(path) in msg
    assert f"{where}:" in msg, msg
    assert reason in msg


def test_skip_mode_reports_every_bad_line(hotpot_lines: list[str], tmp_path: Path, caplog):
    lines: list[str | bytes] = list(hotpot_lines[:10])
    lines.insert(3, b'{"title": "x", "text": "\xc3\x28"}')  # line 4: invalid UTF-8
    lines.insert(6, '{"title": "no text here"}')  # line 7
    lines.insert(8, "{not json")  # line 9
    path = _write(tmp_path / "mixed.jsonl", lines)
    report = CorpusReport()
    with caplog.at_level(logging.WARNING, logger="quco.retrieval.corpus"):
        passages = _passages(path, on_error="skip", report=report)
    assert len(passages) == report.passages == 10
    assert report.lines_read == 13 and report.skipped == 3 and report.accounted
    assert [s.line for s in report.skipped_lines] == [4, 7, 9]
    assert "UTF-8" in report.skipped_lines[0].reason
    assert "no 'text'" in report.skipped_lines[1].reason
    assert "invalid JSON" in report.skipped_lines[2].reason
    assert sum("skipped" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records) >= 3
    assert [p.title for p in passages] == [json.loads(x)["title"] for x in hotpot_lines[:10]]


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty_corpus_is_an_error(tmp_path: Path, content: bytes):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    with pytest.raises(CorpusFormatError, match="has no passages"):
        _passages(path)


def test_all_lines_bad_in_skip_mode_is_an_error(tmp_path: Path):
    path = _write(tmp_path / "bad.jsonl", ["{", '{"title": "t"}'])
    with pytest.raises(CorpusFormatError, match=r"has no passages \(2 bad lines skipped\)"):
        _passages(path, on_error="skip")


def test_unusable_corpus_specs(tmp_path: Path):
    with pytest.raises(CorpusFormatError, match="corpus file not found"):
        CorpusSource.resolve(tmp_path / "missing.jsonl")
    with pytest.raises(CorpusFormatError, match="unknown format"):
        CorpusSource.resolve(_write(tmp_path / "c.csv", ["a,b"]))
    with pytest.raises(CorpusFormatError, match="no corpus given"):
        CorpusSource.resolve("  ")
    with pytest.raises(InputError, match=r"on_error \(--on-error\) must be"):
        _passages(_write(tmp_path / "ok.jsonl", [GOOD]), on_error="ignore")


def test_truncated_gzip_is_a_corpus_error(hotpot_path: Path, tmp_path: Path):
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(hotpot_path.read_bytes()[:50_000])
    with pytest.raises(CorpusFormatError, match=r"broken\.jsonl\.gz: cannot read past line \d+"):
        _passages(broken)


def test_corpus_docs_for_statistics_builders(hotpot_path: Path):
    docs = corpus_docs(RetrieverConfig(corpus=str(hotpot_path)))
    assert docs.fingerprint == CorpusSource.resolve(hotpot_path).fingerprint()
    first = list(docs())
    assert len(first) == 4937 and list(docs) == first  # re-iterable
    doc_id, text = first[0]
    assert doc_id == "1" and text.startswith("Ed Wood (film)\nEd Wood is a 1994 American")
    source = corpus_source(str(hotpot_path))  # the form the pipeline uses: source.docs + source.fingerprint()
    assert list(source.docs()) == first and source.fingerprint() == docs.fingerprint


# -- BM25 ------------------------------------------------------------------------------------------------------


def test_hotpot_index_manifest_and_load(hotpot_index: BM25Retriever, hotpot_path: Path):
    assert isinstance(hotpot_index, Retriever) and hotpot_index.name == "bm25"
    m = hotpot_index.manifest
    assert len(hotpot_index) == m["passages"] == m["lines_read"] == 4937
    assert m["skipped"] == 0 and m["fingerprint"] == CorpusSource.resolve(hotpot_path).fingerprint()
    assert m["params"]["k1"] == 1.2 and m["params"]["b"] == 0.75

    def no_indexing(*_args, **_kwargs):
        raise AssertionError("loading an index must not index the corpus again")

    real_index = bm25s.BM25.index
    bm25s.BM25.index = no_indexing  # type: ignore[method-assign]
    try:
        loaded = BM25Retriever.load(hotpot_index.index_dir)
    finally:
        bm25s.BM25.index = real_index  # type: ignore[method-assign]
    assert loaded.search(["Scott Derrickson nationality"], 3) == hotpot_index.search(
        ["Scott Derrickson nationality"], 3
    )


def test_hotpot_gold_paragraphs_in_top10(hotpot_index: BM25Retriever):
    with (data_dir() / HOTPOT_DEV).open(encoding="utf-8") as fh:
        questions = [json.loads(line) for line, _ in zip(fh, range(20), strict=False)]
    results = hotpot_index.search([q["question"] for q in questions], 10)
    any_gold = both_gold = 0
    for q, passages in zip(questions, results, strict=True):
        gold = {title for title, _ in q["supporting_facts"]}
        got = {p.title for p in passages}
        any_gold += bool(gold & got)
        both_gold += gold <= got
        assert [p.score for p in passages] == sorted((p.score for p in passages), reverse=True)
    # Measured with k1=1.2, b=0.75, titles indexed: 20/20 with a gold paragraph, 17/20 with both.
    assert any_gold >= 18, any_gold
    assert both_gold >= 15, both_gold


def test_search_edge_cases(hotpot_index: BM25Retriever):
    question = "Were Scott Derrickson and Ed Wood of the same nationality?"
    single = hotpot_index.search([question], 3)[0]
    assert len(single) == 3 and "Scott Derrickson" in {p.title for p in single} and single[2].score > 0
    batch = hotpot_index.search(["", "   ", "the of and a", question, "zzqxjv"], 3)
    assert batch[:3] == [[], [], []] and batch[3] == single and batch[4] == []
    assert hotpot_index.search([], 3) == []
    assert hotpot_index.search([question], 0) == [[]]
    assert len(hotpot_index.search([question], 10_000)[0]) <= len(hotpot_index)
    with pytest.raises(TypeError):
        hotpot_index.search(question, 3)  # type: ignore[arg-type]


def test_queries_are_left_truncated(hotpot_index: BM25Retriever):
    question = "Were Scott Derrickson and Ed Wood of the same nationality?"
    junk = " ".join(["qqzzjunk"] * 20_000)
    assert hotpot_index.search([junk + " " + question], 3) == hotpot_index.search([question], 3)
    # The question falls outside the last 64 words: nothing of it is searched.
    assert hotpot_index.search([question + " " + junk], 3) == [[]]


@pytest.mark.parametrize("builder", ["streaming", "bm25s"])
def test_count_mismatch_fails_the_build_and_writes_nothing(
    hotpot_lines: list[str], tmp_path: Path, monkeypatch, builder: str
):
    corpus = _write(tmp_path / "slice.jsonl", hotpot_lines[:200])
    if builder == "bm25s":
        original_index = bm25s.BM25.index

        def lossy_index(
            self, corpus_tokens, *args, **kwargs
        ):  # an indexer that silently drops the last passage
            ids, vocab = corpus_tokens
            return original_index(self, (ids[:-1], vocab), *args, **kwargs)

        monkeypatch.setattr(bm25s.BM25, "index", lossy_index)
    else:
        original_add = StreamingBM25Builder.add

        def lossy_add(self, token_ids):  # drops the 200th passage
            self.seen = getattr(self, "seen", 0) + 1
            if self.seen < 200:
                original_add(self, token_ids)

        monkeypatch.setattr(StreamingBM25Builder, "add", lossy_add)
    target = tmp_path / "idx"
    with pytest.raises(IndexIntegrityError, match="lost passages: read 200, stored 200, indexed 199"):
        BM25Retriever.build(corpus, target, progress=False, builder=builder)
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["slice.jsonl"]  # no temporary build left behind


def test_load_refuses_incomplete_or_inconsistent_index(hotpot_lines: list[str], tmp_path: Path):
    corpus = _write(tmp_path / "slice.jsonl", hotpot_lines[:50])
    target = tmp_path / "idx"
    BM25Retriever.build(corpus, target, progress=False)
    manifest_path = target / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["passages"] = 51
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(IndexIntegrityError, match="manifest says 51 passages, the BM25 matrix has 50"):
        BM25Retriever.load(target)
    manifest_path.unlink()
    with pytest.raises(IndexIntegrityError, match="has no manifest.json, so it may be partial"):
        BM25Retriever.load(target)
    with pytest.raises(IndexIntegrityError, match="no BM25 index at"):
        BM25Retriever.load(tmp_path / "nowhere")


def test_build_retriever_reuses_and_separates_corpora(hotpot_lines: list[str], tmp_path: Path, monkeypatch):
    a = _write(tmp_path / "a.jsonl", hotpot_lines[:100])
    b = _write(tmp_path / "b.jsonl", hotpot_lines[100:250])
    first = build_retriever(RetrieverConfig(corpus=str(a)), progress=False)
    assert first.index_dir == default_index_dir(first.fingerprint)
    built_at = first.manifest["built_at"]

    def no_build(*args, **kwargs):
        raise AssertionError("the existing index should have been reused")

    monkeypatch.setattr("quco.retrieval.bm25._write_index", no_build)
    again = build_retriever(RetrieverConfig(corpus=str(a), max_query_words=5), progress=False)
    assert again.index_dir == first.index_dir and again.manifest["built_at"] == built_at
    assert again.max_query_words == 5
    monkeypatch.undo()

    other = build_retriever(RetrieverConfig(corpus=str(b)), progress=False)
    assert other.index_dir != first.index_dir and len(other) == 150 and len(first) == 100
    # An explicit index_dir that holds another corpus is refused, not overwritten.
    with pytest.raises(IndexIntegrityError, match="was built from another corpus"):
        build_retriever(RetrieverConfig(corpus=str(b), index_dir=str(first.index_dir)), progress=False)
    assert len(BM25Retriever.load(first.index_dir)) == 100


def test_index_corpus_report_skip_then_stop(hotpot_lines: list[str], tmp_path: Path):
    lines: list[str | bytes] = list(hotpot_lines[:30])
    lines.insert(10, b"\xff\xfe not utf-8")
    lines.append("")
    corpus = _write(tmp_path / "c.jsonl", lines)
    out = tmp_path / "index"
    report = index_corpus(corpus, out_dir=out, on_error="skip", progress=False)
    assert (report.lines_read, report.passages_indexed, report.skipped, report.ignored_lines) == (
        32,
        30,
        1,
        1,
    )
    assert report.skipped_lines[0].line == 11 and not report.reused
    assert report.index_dir == out and report.seconds > 0
    again = index_corpus(corpus, out_dir=out, on_error="skip", progress=False)
    assert again.reused and again.passages_indexed == 30
    # Asking for a strict index rebuilds, fails on the bad line, and leaves the existing index intact.
    with pytest.raises(CorpusFormatError, match=r"c\.jsonl line 11: not valid UTF-8"):
        index_corpus(corpus, out_dir=out, on_error="stop", progress=False)
    assert len(BM25Retriever.load(out)) == 30
    # The retriever used by the pipeline accepts the index the user built with skipping.
    retriever, reused = ensure_index(corpus, out, accept_skipped=True, progress=False)
    assert reused and len(retriever) == 30


def test_default_corpus_end_to_end():
    retriever = build_retriever(RetrieverConfig(), progress=False)
    assert len(retriever) == 10033
    hits = retriever.search(["Who was born first, Albert Einstein or Niels Bohr?"], 3)[0]
    assert {"Albert Einstein", "Niels Bohr"} <= {p.title for p in hits}
    assert "Niels Bohr" in hits[0].as_context()
