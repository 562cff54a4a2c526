"""The realistic world on a small slice of the Wikipedia articles: haystack, corpus sets, fast tokenization,
window co-occurrence against a plain scan, the leak guard, and the index-build probes (lock files, errors)."""

from __future__ import annotations

import csv
import gzip
import json
import random
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from quco.config import load_config
from quco.corpus_stats.build import build_local_index
from quco.corpus_stats.encoding import CorpusEncoder, chunk_safe
from quco.corpus_stats.local import LocalInfiniGram
from quco.corpus_stats.tokenizer import load_tokenizer
from quco.corpus_stats.verify import IndexScan, positions, window_rule, window_same_document
from quco.errors import CorpusFormatError
from quco.eval.runs import world_file
from quco.retrieval import BM25Retriever, CorpusReport, CorpusSource, corpus_docs
from quco.retrieval.bm25 import ensure_index
from quco.retrieval.corpus import CorpusSet
from quco.storage import file_sha256
from quco.world import guard
from quco.world.corpora import resolve_corpus, resolve_source
from quco.world.haystack import HaystackManifest, ensure_haystack, plan
from quco.world.sources import ARTICLE_FILES, ARTICLE_SHA256, POOLS

N_ARTICLES = (25, 15)  # articles taken from shards 00 and 01
N_POOL = 120


@pytest.fixture(scope="module", autouse=True)
def isolated(tmp_path_factory: pytest.TempPathFactory):
    """Caches, locks and world artefacts of this module go to fresh directories."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QUCO_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("QUCO_WORLD_DIR", str(tmp_path_factory.mktemp("world")))
        yield


@pytest.fixture(scope="module")
def article_slices(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("articles")
    paths = []
    for shard, n in zip(ARTICLE_FILES, N_ARTICLES, strict=False):
        with gzip.open(data_root / shard, "rb") as fh:
            lines = list(islice(fh, n))
        path = out / Path(shard).name
        path.write_bytes(gzip.compress(b"".join(lines)))
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def pool_slice(hotpot_pool_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    with gzip.open(hotpot_pool_path, "rb") as fh:
        lines = list(islice(fh, N_POOL))
    path = tmp_path_factory.mktemp("pool") / "pool.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(lines)))
    return path


@pytest.fixture(scope="module")
def haystack(article_slices, pool_slice, tmp_path_factory) -> tuple[Path, HaystackManifest]:
    target, manifest, reused = ensure_haystack(
        plan("hotpotqa", articles=article_slices, pool=pool_slice),
        tmp_path_factory.mktemp("hs") / "haystack",
        progress=False,
    )
    assert not reused
    return target, manifest


def _rows(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.reader(fh, delimiter="\t"))


def _flat(text: str) -> str:
    """CLI output with the console's line wrapping undone."""
    return " ".join(text.split())


def _jsonl(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


# -- the haystack ----------------------------------------------------------------------------------------------


def test_haystack_is_dpr_form_with_deterministic_ids_and_the_pool_as_needles(
    haystack, article_slices, pool_slice
):
    target, manifest = haystack
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json", "psgs_w100.tsv"]  # nothing copied
    rows = _rows(target / manifest.file)
    assert rows[0] == ["id", "text", "title"]
    body = rows[1:]
    assert len(body) == manifest.passages == manifest.article_passages + manifest.pool_passages
    assert len({r[0] for r in body}) == len(body)  # ids unique

    by_article: dict[str, list[list[str]]] = {}
    for r in body[: manifest.article_passages]:
        article, k = r[0].rsplit(":", 1)
        by_article.setdefault(article, []).append(r)
        assert int(k) == len(by_article[article]) - 1  # consecutive passage numbers
    articles = [a for p in article_slices for a in _jsonl(p)]
    assert list(by_article) == [a["id"] for a in articles]  # file order
    for a in articles:
        parts = by_article[a["id"]]
        words = [len(r[1].split()) for r in parts]
        assert all(n == 100 for n in words[:-1]) and 1 <= words[-1] <= 100
        assert " ".join(r[1] for r in parts).split() == a["text"].split()  # nothing lost or reordered
        assert {r[2] for r in parts} == {a["title"]}

    pool = _jsonl(pool_slice)
    needles = body[manifest.article_passages :]
    assert [r[0] for r in needles] == [f"hotpotqa-pool:{i}" for i in range(1, len(pool) + 1)]
    assert [(r[2], r[1]) for r in needles] == [(p["title"], " ".join(p["text"].split())) for p in pool]

    assert [s.role for s in manifest.sources] == ["articles", "articles", "pool"]
    assert manifest.sources[2].dataset == "hotpotqa" and manifest.sources[2].records == len(pool)
    assert all(len(s.sha256) == 64 for s in manifest.sources) and len(manifest.file_sha256) == 64
    assert manifest.words == sum(len(r[1].split()) for r in body)


def test_haystack_rebuild_is_byte_identical_reused_or_refused(haystack, article_slices, pool_slice, tmp_path):
    target, manifest = haystack
    again, second, reused = ensure_haystack(
        plan("hotpotqa", articles=article_slices, pool=pool_slice), tmp_path / "again", progress=False
    )
    assert not reused and second.file_sha256 == manifest.file_sha256
    assert (again / second.file).read_bytes() == (target / manifest.file).read_bytes()
    same, _, reused = ensure_haystack(
        plan("hotpotqa", articles=article_slices, pool=pool_slice), again, progress=False
    )
    assert reused and same == again
    with pytest.raises(CorpusFormatError, match="other sources or parameters"):
        ensure_haystack(plan("hotpotqa", articles=article_slices[:1], pool=pool_slice), again, progress=False)
    other, third, reused = ensure_haystack(
        plan("hotpotqa", articles=article_slices, pool=pool_slice, words=50),
        again,
        progress=False,
        force=True,
    )
    assert not reused and third.words_per_passage == 50 and third.passages > manifest.passages
    with pytest.raises(CorpusFormatError, match="at least 1"):
        plan("hotpotqa", articles=article_slices, words=0)


def test_haystack_is_a_retrieval_corpus_with_its_indexes_inside(haystack, hotpot_dev):
    target, manifest = haystack
    source = resolve_corpus(str(target))
    assert resolve_corpus(f"haystack:{target}").path == source.path
    with pytest.raises(CorpusFormatError, match="not found"):
        CorpusSource.resolve(str(target))  # the file reader knows no haystack: the world resolves it
    assert source.path == target / manifest.file and source.index_home == target
    report = CorpusReport()
    passages = list(source.iter_passages(report=report))
    assert len(passages) == manifest.passages and report.accounted and report.duplicate_ids == 0
    retriever, reused = ensure_index(source, progress=False)
    assert not reused and retriever.index_dir.parent == target  # next to the haystack, not in the cache
    # a gold paragraph of dev question 0 is a needle among the article passages
    gold = [p for p in hotpot_dev[0]["context_paragraphs"] if p["is_supporting"]]
    hits = retriever.search([hotpot_dev[0]["question"]], 10)[0]
    assert any(h.id.startswith("hotpotqa-pool:") and h.title in {g["title"] for g in gold} for h in hits)


# -- PubMedQA: abstracts as needles ---------------------------------------------------------------------------

N_PUBMED = 6


@pytest.fixture(scope="module")
def pubmed_slice(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The first PQA-L records, in the file's own shape (an object keyed by PMID)."""
    records = json.loads((data_root / POOLS["pubmedqa"].file).read_text(encoding="utf-8"))
    head = dict(islice(records.items(), N_PUBMED))
    path = tmp_path_factory.mktemp("pubmed") / "pqal.json"
    path.write_text(json.dumps(head, indent=4), encoding="utf-8")
    return path, head


def test_pubmedqa_pool_is_the_pqal_file_with_every_record(data_root):
    pool = POOLS["pubmedqa"]
    path = data_root / pool.file
    assert file_sha256(path) == pool.sha256 and pool.holds_evaluated_gold
    report = CorpusReport()
    passages = list(CorpusSource.resolve(path).iter_passages(report=report))
    records = json.loads(path.read_text(encoding="utf-8"))
    assert len(passages) == pool.records == len(records) == report.passages and report.skipped == 0
    assert [p.id for p in passages] == list(records)  # PMIDs, file order


def test_pubmedqa_haystack_holds_the_abstracts_without_conclusions_or_labels(
    article_slices, pubmed_slice, tmp_path
):
    path, records = pubmed_slice
    target, manifest, reused = ensure_haystack(
        plan("pubmed", articles=article_slices, pool=path), tmp_path / "hs", progress=False
    )
    assert not reused and manifest.name == "wiki-articles+pubmedqa-pool"
    assert manifest.sources[-1].dataset == "pubmedqa" and manifest.sources[-1].records == N_PUBMED
    body = _rows(target / manifest.file)[1:]
    needles = body[manifest.article_passages :]
    assert len(needles) == manifest.pool_passages == N_PUBMED
    assert [r[0] for r in needles] == [f"pubmedqa-pool:{i}" for i in range(1, N_PUBMED + 1)]
    for (_, text, title), rec in zip(needles, records.values(), strict=True):
        assert title == ""  # PQA-L records carry no title (their question is made from it)
        assert text == " ".join(" ".join(rec["CONTEXTS"]).split())  # every context paragraph, in order
        assert " ".join(rec["LONG_ANSWER"].split()) not in text  # the conclusion would give the answer away
        assert rec["QUESTION"] not in text
    # BM25 over the slice, top 3 for each question: five questions find their own abstract among the article
    # passages. The sixth ("Double balloon enteroscopy: ...?") does not: its abstract only says "DBE".
    retriever, _ = ensure_index(resolve_corpus(str(target)), progress=False)
    found = [
        i
        for i, rec in enumerate(records.values(), start=1)
        if f"pubmedqa-pool:{i}" in {h.id for h in retriever.search([rec["QUESTION"]], 3)[0]}
    ]
    assert found == [1, 2, 3, 4, 5]


def test_pubmedqa_statistics_documents_leave_the_conclusions_out(pubmed_slice):
    path, records = pubmed_slice
    docs = list(corpus_docs(str(path)))
    assert [d for d, _ in docs] == list(records)
    for (_, text), rec in zip(docs, records.values(), strict=True):
        assert text.split() == " ".join(rec["CONTEXTS"]).split()  # the contexts alone, no title line


# -- corpora of several files ------------------------------------------------------------------------------------


def test_corpus_set_reads_files_in_order_with_one_report(article_slices, pool_slice, tmp_path):
    corpus = resolve_corpus([str(p) for p in article_slices] + [str(pool_slice)])
    assert isinstance(corpus, CorpusSet) and len(corpus.parts) == 3
    report = CorpusReport()
    got = list(corpus.iter_passages(report=report))
    expected = [a["id"] for p in article_slices for a in _jsonl(p)] + [str(i) for i in range(1, N_POOL + 1)]
    assert [p.id for p in got] == expected
    assert report.passages == report.lines_read == len(expected) and report.accounted
    reversed_set = resolve_corpus([str(pool_slice)] + [str(p) for p in article_slices])
    assert reversed_set.fingerprint() != corpus.fingerprint()  # order is part of the identity
    assert resolve_corpus([str(pool_slice)]).fingerprint() == CorpusSource.resolve(pool_slice).fingerprint()
    # a bad line in one file is reported with that file's name
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"title": "no text"}\n', encoding="utf-8")
    report = CorpusReport()
    docs = list(corpus_docs([str(pool_slice), str(bad)], on_error="skip")(report))
    assert len(docs) == N_POOL + 1 and report.skipped == 1
    assert report.skipped_lines[0].reason.startswith("bad.jsonl: ")
    with pytest.raises(CorpusFormatError, match="several files"):
        resolve_source("wiki-articles")
    with pytest.raises(CorpusFormatError, match="not found"):
        CorpusSource.resolve("wiki-articles")  # the file reader knows no world names


def test_world_corpus_names_resolve_to_the_data_files(data_root):
    articles = resolve_corpus("wiki-articles")
    assert [p.path for p in articles.parts] == [(data_root / f).resolve() for f in ARTICLE_FILES]
    both = resolve_corpus("wiki-articles+pool:2wiki")
    assert both.parts[-1].path == (data_root / POOLS["2wikimultihopqa"].file).resolve()
    assert both.expected_docs == 30539 + 6119 and both.index_home.name == "2wikimultihopqa"
    pubmed = resolve_corpus("wiki-articles+pool:pubmed")
    assert pubmed.parts[-1].path == (data_root / POOLS["pubmedqa"].file).resolve()
    assert pubmed.expected_docs == 30539 + 300 and pubmed.index_home.name == "pubmedqa"
    with pytest.raises(Exception, match="no paragraph pool"):
        resolve_corpus("wiki-articles+pool:musique")


# -- fast, exact corpus tokenization ------------------------------------------------------------------------------

TRICKY = [
    "ΟΔΟΣ ΟΔΟΣ. οδός Σ",  # final sigma: per-character lower-casing, not Python's str.lower
    "a\x0bb c\x0cd e\x1cf g\x1fh i\x85j",  # split by str.split, deleted by BERT's normaliser
    "zero\u200bwidth nbsp\u00a0here ideo\u3000space line\u2028sep",
    "中文字符test 日本語とテキスト",
    "[CLS] x[SEP]y [MASK] [UNK]",
    "café naïve Ångström Ǆemal e\u0301 \u0301x",
    "tab\tsep\r\nline\n\n  end ",
    "\x00null\ufffdrepl \ud7ff\ue000private \U0001f600emoji",
    "",
    "   ",
    "x" * 150 + " " + "y" * 99,
    "İstanbul straße ﬁne",
]


def test_corpus_encoder_matches_the_tokenizer_exactly(article_slices):
    tok = load_tokenizer("wordpiece")
    assert chunk_safe(tok)
    texts = TRICKY + [f"{a['title']}\n{a['text']}" for p in article_slices for a in _jsonl(p)]
    encoder = CorpusEncoder(tok, max_chunks=5000)  # small: the table restarts mid-way
    got = [a for i in range(0, len(texts), 7) for a in encoder.encode_batch(texts[i : i + 7])]
    assert [list(g) for g in got] == tok.encode_batch(texts)
    assert all(g.dtype == np.uint16 for g in got)
    # repeated chunks were looked up, not tokenized again
    assert 0 < encoder.chunks_tokenized < encoder.chunks_seen
    assert encoder.encode_batch([]) == []
    by = CorpusEncoder(load_tokenizer("bytes"))
    assert [list(g) for g in by.encode_batch(TRICKY)] == [load_tokenizer("bytes").encode(t) for t in TRICKY]


# -- window co-occurrence against a plain scan -----------------------------------------------------------------


@pytest.fixture(scope="module")
def article_index(article_slices, pool_slice, tmp_path_factory) -> Path:
    docs = corpus_docs([str(p) for p in article_slices] + [str(pool_slice)])
    return build_local_index(docs(), tmp_path_factory.mktemp("ig") / "idx", progress=False)


def _sample_pairs(article_slices, n: int) -> list[tuple[list[str], list[str]]]:
    """Word n-grams of the same article at random distances, plus title pairs of real question entities."""
    rng = random.Random(5)
    articles = [a for p in article_slices for a in _jsonl(p)]
    pairs = []
    while len(pairs) < n:
        words = rng.choice(articles)["text"].split()
        i = rng.randrange(len(words) - 3)
        j = min(len(words) - 3, i + rng.choice([3, 40, 400, 900, 1500, 4000]))
        pairs.append(
            ([" ".join(words[i : i + rng.randint(1, 3)])], [" ".join(words[j : j + rng.randint(1, 2)])])
        )
    return pairs + [
        (["Anarchism"], ["Proudhon"]),
        (["Ed Wood"], ["Tim Burton"]),
        (["Albedo"], ["snow", "ice"]),
    ]


def test_window_counts_are_the_engines_rule_exactly_and_never_exceed_the_same_document_count(
    article_index, article_slices
):
    win = LocalInfiniGram(article_index, cooccurrence="window", max_diff_tokens=1000)
    exact = LocalInfiniGram(article_index, cooccurrence="window_exact", max_diff_tokens=1000)
    doc = LocalInfiniGram(article_index, cooccurrence="document")
    scan = IndexScan(win)
    checked = differ = 0
    for a, b in _sample_pairs(article_slices, 120):
        got = win.cooccur(a, b)
        assert got.status == "ok" and got.exact
        ref = scan.window(a, b, 1000)
        same = [s for rule, s in ref if rule == got.count]
        assert same, (a, b, got.count, ref)  # the engine's count is its rule, re-done on the raw tokens
        assert got.count <= min(same), (a, b)  # it only ever drops spans, never adds one
        assert exact.cooccur(a, b).count in [s for _, s in ref], (a, b)  # window_exact is the plain rule
        differ += got.count < min(same)
        if got.count:
            assert doc.cooccur(a, b).count > 0  # a window pair always lies within one document
        checked += 1
    assert checked >= 120
    assert 0 < differ < checked  # the engine's artefact shows even among long documents, but rarely
    assert scan.count(["Anarchism"]) == win.count("Anarchism").count  # positions agree with the suffix array


def test_window_scans_on_hand_made_positions():
    starts = np.array([0, 10, 20])  # separators at 0, 10, 20: documents [1, 9], [11, 19], [21, ...]
    # rare at 12; other at 8 (previous document, within 5) and 15 (same document): the engine keeps the
    # merged span [8, 15], which crosses the separator at 10, so it drops the pair; the same-document count has it
    rare, other = np.array([12]), np.array([8, 15])
    assert window_rule(rare, other, starts, 5) == 0
    assert window_same_document(rare, other, starts, 5) == 1
    assert window_rule(rare, other, starts, 3) == 1  # 8 is out of reach: the span [12, 15] stays inside
    assert (
        window_rule(np.array([12]), np.array([3]), starts, 100) == 0
    )  # only a neighbour in another document
    tokens = np.array([9, 1, 2, 3, 1, 2, 9, 1, 2, 1], dtype=np.uint16)
    assert list(positions(tokens, [(1, 2)])) == [1, 4, 7]
    assert list(positions(tokens, [(1, 2), (1,)])) == [1, 4, 7, 9]


# -- the leak guard --------------------------------------------------------------------------------------------


def test_classification_rule():
    arts = [{"role": "articles", "sha256": s} for s in ARTICLE_SHA256.values()]
    pool = {"role": "pool", "sha256": POOLS["hotpotqa"].sha256, "dataset": "hotpotqa"}
    assert guard.classify([pool]) == "pool"
    assert guard.classify(arts) == "realistic"
    assert guard.classify([*arts, pool]) == "realistic"
    assert guard.classify([*arts[:3], pool]) == "other"  # part of the articles only
    assert guard.classify([*arts, {"role": "other", "sha256": "x"}]) == "other"
    pubmed = {"role": "pool", "sha256": POOLS["pubmedqa"].sha256, "dataset": "pubmedqa"}
    assert guard.classify([pubmed]) == "pool" and guard.classify([*arts, pubmed]) == "realistic"


def test_run_records_its_world_and_refuses_a_changed_corpus(hotpot_pool_path, pool_slice, tmp_path):
    cfg = load_config(None, overrides={"method": "quco", "retriever.corpus": str(hotpot_pool_path)})
    rec = world_file.record_world(tmp_path, cfg)
    assert rec["world"] == "pool"
    assert rec["retrieval"]["kind"] == rec["corpus_stats"]["kind"] == "pool"
    assert rec["retrieval"]["pools"] == [{"dataset": "hotpotqa", "holds_evaluated_gold": True}]
    saved = json.loads((tmp_path / world_file.WORLD_FILE).read_text())
    assert saved["retrieval"]["fingerprint"] == CorpusSource.resolve(hotpot_pool_path).fingerprint()
    other = load_config(None, overrides={"method": "quco", "retriever.corpus": str(pool_slice)})
    with pytest.raises(world_file.WorldChangedError, match="corpus changed"):
        world_file.record_world(tmp_path, other)
    closed = world_file.describe(load_config(None, overrides={"method": "wo-rag"}))
    assert closed["world"] == "none" and not closed["retrieval"]["used"]
    # DTR searches the retriever's corpus through its own index: that corpus is used though its shape builds no
    # pipeline retriever
    dtr = world_file.describe(load_config(None, overrides={"method": "dtr"}), build=False)
    assert dtr["retrieval"]["used"] and not dtr["corpus_stats"]["used"]


def test_summary_and_report_show_the_world(hotpot_pool_path, tmp_path):
    from quco.eval.runs.records import Record, RunConfig
    from quco.eval.runs.store import Run

    cfg = load_config(None, overrides={"method": "sr-rag", "retriever.corpus": str(hotpot_pool_path)})
    world_file.record_world(tmp_path, cfg)
    trace = {
        "steps": [{"stage": "before", "decision": "retrieve"}, {"stage": "generate", "decision": "keep"}]
    }
    records = [Record.from_dict({"id": "1", "trace": trace}), Record.from_dict({"id": "2", "trace": trace})]
    run = Run(tmp_path, RunConfig.from_dict({"label": "pool-run"}), records)
    (line,) = world_file.world_lines([run])
    assert line.startswith("pool-run: world POOL") and "before generating on 2/2" in line
    assert "hotpotqa pool" in line and "holds the gold" in line
    html = world_file.world_html([run])
    assert "<h2>World</h2>" in html and "POOL" in html
    # a run without a record: inferred from its config, and marked as such
    legacy = Run(tmp_path / "nothing", RunConfig.from_dict({"pipeline": cfg.model_dump(mode="json")}), [])
    assert "(inferred)" in world_file.world_lines([legacy])[0]


# -- probes: lock files and the on-error hint ----------------------------------------------------------------------


def test_index_builds_leave_nothing_beside_out(pool_slice, tmp_path):
    from quco.cli import app

    runner = CliRunner()
    out = tmp_path / "out"
    for args in (
        ["index", "bm25", "--corpus", str(pool_slice), "--out", str(out / "bm25")],
        ["index", "stats", "--corpus", str(pool_slice), "--out", str(out / "stats")],
        ["index", "bm25", "--corpus", str(pool_slice), "--out", str(out / "bm25")],  # reuse path too
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["bm25", "stats"]


def test_corpus_error_names_the_cli_flag(tmp_path):
    from quco.cli import app

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": \n', encoding="utf-8")
    result = CliRunner().invoke(app, ["index", "bm25", "--corpus", str(bad), "--out", str(tmp_path / "i")])
    assert result.exit_code == 2
    assert "--on-error skip" in _flat(result.output) and "line 2" in _flat(result.output)
    result = CliRunner().invoke(
        app, ["index", "bm25", "--corpus", str(bad), "--out", str(tmp_path / "j"), "--on-error", "skip"]
    )
    assert result.exit_code == 0 and "1 skipped" in _flat(result.output)
    result = CliRunner().invoke(app, ["index", "bm25", "--corpus", str(bad), "--on-error", "ignore"])
    assert result.exit_code == 2 and "--on-error" in _flat(result.output)


def test_bm25_vocabulary_matches_the_query_analyzer(pool_slice, tmp_path):
    """Index-time stems (C-level word mapping) are the stems a query gets."""
    from quco.retrieval.bm25 import _Analyzer, _VocabBuilder

    texts = [f"{p['title']}\n{p['text']}" for p in _jsonl(pool_slice)]
    analyzer = _Analyzer("english")
    vocab = _VocabBuilder(analyzer)
    ids = [vocab.ids(t) for t in texts]
    inverse = {i: s for s, i in vocab.stem_to_id.items()}
    assert [[inverse[i] for i in doc] for doc in ids] == [analyzer.stems(t) for t in texts]
    BM25Retriever.build(str(pool_slice), tmp_path / "idx", progress=False)


# -- the world's configs -------------------------------------------------------------------------------------


REF_BILLIONS = 4_610_629_088_477 / 1e9  # the OLMo-2 index the published counts were set on


def assert_published_thresholds(params: dict, entity_count: float) -> None:
    """The faithful preset: the published counts as rates per billion tokens."""
    assert params["threshold_unit"] == "per_billion"
    assert params["entity_threshold"] == pytest.approx(entity_count / REF_BILLIONS, rel=1e-4)
    assert_published_stage2(params)


def assert_published_stage2(params: dict) -> None:
    assert params["threshold_unit"] == "per_billion"
    assert params["head_threshold"] == pytest.approx(20 / REF_BILLIONS, rel=1e-4)
    assert params["cooccurrence_threshold"] == pytest.approx(1 / REF_BILLIONS, rel=1e-4)


def assert_calibrated_outside_evaluation(path: Path) -> None:
    """A calibrated stage-1 threshold names its split, and the split is outside every evaluated range (0-199)."""
    line = next(x for x in path.read_text(encoding="utf-8").splitlines() if "entity_threshold:" in x)
    from quco.eval.campaign.plan import CALIBRATED_NOTE

    note = CALIBRATED_NOTE.search(line)
    assert note, line
    assert int(note.group("start")) >= 200


@pytest.mark.parametrize("dataset", ["hotpotqa", "2wikimultihopqa"])
def test_every_pool_config_has_a_world_twin(dataset):
    """Each pool config has a realistic-world twin of the same name, and QuCo-RAG also has the faithful preset
    (``quco-published.yaml``, the twin of the pool's ``quco.yaml``)."""
    from quco.methods import method_class

    root = Path(__file__).resolve().parents[1] / "configs"
    pool_files = sorted((root / dataset).glob("*.yaml"))
    world_files = sorted((root / "world" / dataset).glob("*.yaml"))
    published = [
        "quco-published.yaml",
        "quco-published-random.yaml",
        "wo-rag-published.yaml",
        "sr-rag-published.yaml",
    ]
    assert sorted(p.name for p in world_files) == sorted([p.name for p in pool_files] + published)
    for world_path in world_files:
        pool_path = root / dataset / world_path.name.replace("-published", "")
        if world_path.name == "quco-published-random.yaml":
            pool_path = root / dataset / "quco-random.yaml"
        pool, world = load_config(pool_path), load_config(world_path)
        method_class(world.method)(world.params)  # parameters valid
        assert world.method == pool.method and world.generation == pool.generation
        # the published prompt of the dataset (tests/test_published_prompts.py)
        if "-published" in world_path.name:
            assert world.prompt.exemplars == f"published:{dataset}"
            assert world.prompt.fewshot == pool.prompt.fewshot and world.prompt.shot_separator == "\n"
            assert world.prompt.passage_format == "text"
            assert bool(world.prompt.question_prefix) == (dataset == "hotpotqa")
            quco = world.method.startswith("quco")
            assert world.prompt.template == ("published:new_prompt_v1" if quco else "published:llama-2")
            assert world.prompt.exemplar_header == (None if quco else "")
        else:
            assert world.prompt == pool.prompt
        if world.method != "wo-rag":
            assert world.retriever.corpus == f"haystack:{dataset}"
        if world.method == "quco":
            if world_path.name == "quco.yaml":  # the default: stage 1 calibrated on our corpus
                assert_published_stage2(world.params)
                assert_calibrated_outside_evaluation(world_path)
            else:
                assert_published_thresholds(world.params, pool.params["entity_threshold"])
            assert world.corpus_stats.corpus == f"wiki-articles+pool:{dataset}"
            assert (
                world.corpus_stats.cooccurrence == "window_exact"
                and world.corpus_stats.max_diff_tokens == 1000
            )
        elif world.method in ("dtr", "dtr-random"):
            assert (
                world.params.get("path_retriever") == "pipeline"
                or world.params.get("standard_retriever") == "pipeline"
            )
        elif world.method == "quco-random":
            # its QuCo-RAG row's queries and passages: only the decisions differ
            matched = "quco-published.yaml" if "published" in world_path.name else "quco.yaml"
            quco = load_config(root / "world" / dataset / matched).params
            same = {k: quco[k] for k in ("sentence_query", "stage2_passages") if k in quco}
            assert world.params == pool.params | same
        else:
            assert world.params == pool.params


def test_pubmedqa_world_configs_carry_the_hotpotqa_settings_with_pubmedqa_corpora_and_exemplars():
    from quco.eval.run.command import infer_dataset
    from quco.methods import method_class

    root = Path(__file__).resolve().parents[1] / "configs" / "world"
    files = sorted((root / "pubmedqa").glob("*.yaml"))
    assert {p.stem for p in files} == {
        "wo-rag", "sr-rag", "fs-rag", "flare", "dtr-ugt", "dtr", "dtr-random", "quco", "quco-published",
        "quco-random", "random", "dragin", "seakr", "gate",
    }  # fmt: skip
    for path in files:
        cfg, hotpot = load_config(path), load_config(root / "hotpotqa" / path.name)
        method_class(cfg.method)(cfg.params)
        assert infer_dataset(cfg, path) == "pubmedqa"
        if path.name == "quco.yaml":  # its own stage-1 threshold, calibrated on PQA-L 200-299
            assert_calibrated_outside_evaluation(path)
            cfg.params.pop("entity_threshold"), hotpot.params.pop("entity_threshold")
        assert (cfg.method, cfg.params, cfg.generation, cfg.generator) == (
            hotpot.method,
            hotpot.params,
            hotpot.generation,
            hotpot.generator,
        ), path.name
        assert cfg.prompt.exemplars == "builtin:pubmedqa" and cfg.prompt.fewshot == hotpot.prompt.fewshot
        if cfg.method != "wo-rag":
            assert cfg.retriever.corpus == "haystack:pubmedqa"
            assert cfg.retriever.model_dump(exclude={"corpus"}) == hotpot.retriever.model_dump(
                exclude={"corpus"}
            )
        if cfg.method == "quco":
            assert cfg.corpus_stats.corpus == "wiki-articles+pool:pubmedqa"
            assert cfg.corpus_stats.model_dump(exclude={"corpus"}) == hotpot.corpus_stats.model_dump(
                exclude={"corpus"}
            )


def test_index_haystack_command(article_slices, pool_slice, tmp_path):
    from quco.cli import app

    args = [
        "index",
        "haystack",
        "--dataset",
        "hotpotqa",
        "--pool",
        str(pool_slice),
        "--out",
        str(tmp_path / "h"),
    ]
    for p in article_slices:
        args += ["--articles", str(p)]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "built in" in _flat(first.output) and f"{N_POOL} pool paragraphs" in _flat(first.output)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "reused" in _flat(again.output)
    bad = CliRunner().invoke(app, ["index", "haystack", "--dataset", "musique", "--out", str(tmp_path / "m")])
    assert bad.exit_code == 2 and "no paragraph pool" in _flat(bad.output)


@pytest.mark.parametrize("scan_ratio", [0, 10**12])  # always read the tokens around / always list positions
def test_window_exact_strategies_agree_with_the_plain_scan(
    article_index, article_slices, monkeypatch, scan_ratio
):
    from quco.corpus_stats import local as local_mod

    monkeypatch.setattr(local_mod, "SCAN_RATIO", scan_ratio)
    exact = LocalInfiniGram(article_index, cooccurrence="window_exact", max_diff_tokens=300)
    scan = IndexScan(exact)
    pairs = _sample_pairs(article_slices, 60) + [(["the"], ["of"]), (["Ed Wood"], ["the", "a"])]
    for a, b in pairs:
        assert exact.cooccur(a, b).count in [s for _, s in scan.window(a, b, 300)], (a, b)


def test_index_read_into_memory_counts_the_same(article_index):
    mapped = LocalInfiniGram(article_index, cooccurrence="window_exact")
    in_ram = LocalInfiniGram(article_index, cooccurrence="window_exact", load_to_ram=True, prefetch=True)
    for phrase in ("Anarchism", "the", "Ed Wood", "Zqxjv Nonexistent"):
        assert mapped.count(phrase).count == in_ram.count(phrase).count
    assert mapped.cooccur("Anarchism", "Proudhon").count == in_ram.cooccur("Anarchism", "Proudhon").count
