"""Local Infini-gram corpus statistics on real text, checked against plain-Python scans of the same documents."""

from __future__ import annotations

import gzip
import json
import unicodedata
from collections import defaultdict
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from quco.config import CorpusStatsConfig
from quco.corpus_stats import local as local_mod
from quco.corpus_stats.base import CorpusStats
from quco.corpus_stats.build import StatsIndexError, build_local_index
from quco.corpus_stats.factory import build_corpus_stats, default_index_dir
from quco.corpus_stats.local import LocalInfiniGram
from quco.corpus_stats.tokenizer import load_tokenizer
from quco.errors import QucoError
from quco.paths import data_dir

N_WIKI = 1200
N_HOTPOT = 1500


def _wiki(n: int) -> list[tuple[str, str]]:
    with gzip.open(
        data_dir() / "wikipedia" / "enwiki_vital_level4_summaries.jsonl.gz", "rt", encoding="utf-8"
    ) as f:
        rows = [json.loads(line) for line in islice(f, n)]
    return [(f"wiki:{r['id']}", f"{r['title']}\n{r['text']}") for r in rows]


def _hotpot(n: int) -> list[tuple[str, str]]:
    path = data_dir() / "hotpotqa" / "corpus" / "hotpot_dev_first500_pooled_paragraphs.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in islice(f, n)]
    return [(f"hotpot:{i}", f"{r['title']}\n{r['text']}") for i, r in enumerate(rows)]


def _question_entities(n_questions: int = 60) -> list[list[str]]:
    """Titles of the supporting paragraphs of real HotpotQA questions: the entity pairs QuCo-RAG checks."""
    out = []
    with open(data_dir() / "hotpotqa" / "hotpot_dev_0_300_unified.jsonl", encoding="utf-8") as f:
        for line in islice(f, n_questions):
            titles = list(dict.fromkeys(t for t, _ in json.loads(line)["supporting_facts"]))
            out.append(titles)
    return out


@pytest.fixture(scope="session")
def corpus() -> list[tuple[str, str]]:
    return _wiki(N_WIKI) + _hotpot(N_HOTPOT)


@pytest.fixture(scope="session")
def wp_index(tmp_path_factory, corpus) -> Path:
    return build_local_index(
        corpus, tmp_path_factory.mktemp("wp") / "idx", tokenizer="wordpiece", progress=False
    )


@pytest.fixture(scope="session")
def byte_index(tmp_path_factory, corpus) -> Path:
    docs = corpus[:800] + corpus[-400:]
    return build_local_index(docs, tmp_path_factory.mktemp("by") / "idx", tokenizer="bytes", progress=False)


# ---------------------------------------------------------------------------------------------- references


class TokenScan:
    """Reference counts by walking every document's token list in Python (no suffix array involved)."""

    def __init__(self, docs: list[tuple[str, str]], spec: str) -> None:
        self.tok = load_tokenizer(spec)
        self.docs = [self.tok.encode(text) for _, text in docs]
        self.first: list[dict[int, list[int]]] = []
        for ids in self.docs:
            where: dict[int, list[int]] = defaultdict(list)
            for i, t in enumerate(ids):
                where[t].append(i)
            self.first.append(where)

    def _occ(self, d: int, seq: list[int]) -> set[int]:
        ids = self.docs[d]
        return {i for i in self.first[d].get(seq[0], []) if ids[i : i + len(seq)] == seq}

    def count(self, aliases: list[str]) -> int:
        seqs = [self.tok.encode(a) for a in aliases]
        # distinct start positions covered by any alias
        return sum(len(set().union(*(self._occ(d, s) for s in seqs))) for d in range(len(self.docs)))

    def docs_with(self, aliases: list[str]) -> set[int]:
        seqs = [self.tok.encode(a) for a in aliases]
        return {d for d in range(len(self.docs)) if any(self._occ(d, s) for s in seqs)}


class ByteScan:
    """Reference counts on raw UTF-8 text with bytes.find: independent of any tokenizer code."""

    def __init__(self, docs: list[tuple[str, str]]) -> None:
        self.docs = [unicodedata.normalize("NFC", text).encode("utf-8") for _, text in docs]

    @staticmethod
    def _occ(doc: bytes, needle: bytes) -> set[int]:
        out, i = set(), doc.find(needle)
        while i >= 0:
            out.add(i)
            i = doc.find(needle, i + 1)
        return out

    def count(self, aliases: list[str]) -> int:
        needles = [a.encode("utf-8") for a in aliases]
        return sum(len(set().union(*(self._occ(d, n) for n in needles))) for d in self.docs)

    def docs_with(self, aliases: list[str]) -> set[int]:
        needles = [a.encode("utf-8") for a in aliases]
        return {i for i, d in enumerate(self.docs) if any(n in d for n in needles)}


@pytest.fixture(scope="session")
def wp_scan(corpus) -> TokenScan:
    return TokenScan(corpus, "wordpiece")


@pytest.fixture(scope="session")
def byte_scan(corpus) -> ByteScan:
    return ByteScan(corpus[:800] + corpus[-400:])


def _phrases(corpus) -> list[list[str]]:
    """Single entities, alias sets, frequent words, absent names and n-grams cut from the documents."""
    ents = [t for ts in _question_entities() for t in ts]
    rng = np.random.default_rng(7)
    ngrams = []
    for k in rng.choice(len(corpus), 25, replace=False):
        words = corpus[int(k)][1].split()
        if len(words) > 6:
            i = int(rng.integers(0, len(words) - 4))
            ngrams.append(" ".join(words[i : i + int(rng.integers(1, 4))]))
    out = [[e] for e in ents[:40]] + [[g] for g in ngrams]
    out += [["the"], ["of"], ["American"], ["Zqxjv Nonexistent"]]
    out += [["Paris", "Lutetia"], ["United States", "United States of America", "USA"], ["film", "films"]]
    return out


def _pairs() -> list[tuple[list[str], list[str]]]:
    pairs = []
    for ts in _question_entities():
        if len(ts) >= 2:
            pairs.append(([ts[0]], [ts[1]]))
    pairs += [
        (["Ed Wood"], ["the"]),
        (["American"], ["film"]),
        (["the"], ["of"]),
        (["Paris"], ["France", "French"]),
    ]
    pairs += [(["Scott Derrickson"], ["Zqxjv Nonexistent"])]
    return pairs


# ---------------------------------------------------------------------------------------------- tests


def test_satisfies_protocol_and_describes_itself(wp_index, corpus):
    stats = LocalInfiniGram(wp_index)
    assert isinstance(stats, CorpusStats)
    man = stats.manifests[0]
    assert man.doc_count == len(corpus) == stats.doc_count
    assert man.tokenizer == "wordpiece" and man.token_dtype == "u16" and man.engine_version
    assert (wp_index / "tokenizer.json").is_file() and (wp_index / "doc_ids.txt").read_text().count(
        "\n"
    ) == len(corpus)
    r = stats.count("Scott Derrickson")
    assert r.status == "ok" and r.exact and r.backend == "infini-gram-local" and r.index == "idx"
    assert r.total_tokens == man.token_count > 100_000 and r.seconds > 0
    assert r.per_billion == pytest.approx(r.count * 1e9 / man.token_count)


def test_counts_match_token_scan(wp_index, wp_scan, corpus):
    stats = LocalInfiniGram(wp_index)
    checked = nonzero = 0
    for aliases in _phrases(corpus):
        expected = wp_scan.count(aliases)
        got = stats.count(aliases if len(aliases) > 1 else aliases[0])
        assert got.status == "ok", got.error
        assert got.count == expected, (aliases, got.count, expected)
        checked += 1
        nonzero += expected > 0
    assert checked >= 60 and nonzero >= 50


def test_counts_are_case_insensitive_for_wordpiece(wp_index):
    stats = LocalInfiniGram(wp_index)
    assert stats.count("ed wood").count == stats.count("ED WOOD").count == stats.count("Ed  Wood").count > 0


def test_alias_prefix_is_not_double_counted(wp_index, wp_scan):
    stats = LocalInfiniGram(wp_index)
    both = stats.count(["United States", "United States of America"]).count
    assert both == stats.count("United States").count == wp_scan.count(["United States"]) > 0


@pytest.mark.parametrize("strategy", ["enumerate", "scan"])
def test_document_cooccurrence_matches_scan(wp_index, wp_scan, monkeypatch, strategy):
    # Both exact strategies (enumerate both sides / scan the rare side's documents) must agree with Python.
    monkeypatch.setattr(local_mod, "SCAN_RATIO", 10**12 if strategy == "enumerate" else 0)
    stats = LocalInfiniGram(wp_index)
    nonzero = 0
    for a, b in _pairs():
        expected = len(wp_scan.docs_with(a) & wp_scan.docs_with(b))
        got = stats.cooccur(a, b)
        assert got.status == "ok" and got.exact, got.error
        assert got.count == expected, (a, b, got.count, expected)
        nonzero += expected > 0
    assert nonzero >= 20


def test_documents_with_maps_positions_to_the_right_documents(wp_index, wp_scan):
    stats = LocalInfiniGram(wp_index)
    for aliases in (["Scott Derrickson"], ["Paris", "France"], ["the"]):
        assert set(stats.documents_with(aliases).tolist()) == wp_scan.docs_with(aliases)


def test_byte_index_matches_raw_text(byte_index, byte_scan, corpus):
    stats = LocalInfiniGram(byte_index)
    assert stats.tokenizer.token_dtype == "u8"
    for aliases in _phrases(corpus)[:45]:
        got = stats.count(aliases if len(aliases) > 1 else aliases[0])
        assert got.count == byte_scan.count(aliases), aliases
    for a, b in _pairs()[:30]:
        expected = len(byte_scan.docs_with(a) & byte_scan.docs_with(b))
        assert stats.cooccur(a, b).count == expected, (a, b)
    # bytes are case-sensitive and match inside words
    assert stats.count("american").count != stats.count("American").count


def test_window_cooccurrence_lies_within_documents_and_can_undercount(wp_index, wp_scan):
    doc = LocalInfiniGram(wp_index, cooccurrence="document")
    win = LocalInfiniGram(wp_index, cooccurrence="window", max_diff_tokens=1000)
    undercounts = []
    for a, b in _pairs():
        w, d = win.cooccur(a, b), doc.cooccur(a, b)
        assert w.status == d.status == "ok"
        if w.count > 0:  # a window match never spans a document separator
            assert d.count > 0, (a, b)
        if d.count > 0 and w.count == 0:
            undercounts.append((a, b))
    # short passages + a 1000-token window: the engine drops true same-document pairs (stack.md §1)
    assert undercounts, "expected at least one pair the window count misses"
    # ... and it is the document boundary, not distance: a narrower window finds some of the same pairs
    narrower = [LocalInfiniGram(wp_index, cooccurrence="window", max_diff_tokens=k) for k in (50, 100, 300)]
    assert any(w.cooccur(a, b).count > 0 for a, b in undercounts for w in narrower)


def test_window_is_approximate_when_a_clause_is_subsampled(wp_index):
    win = LocalInfiniGram(wp_index, cooccurrence="window", max_clause_freq=1000, max_diff_tokens=10)
    r = win.cooccur("the", "of")
    assert r.status == "ok" and r.exact is False and r.count > 0


def test_failed_lookups_are_unknown_not_raised(wp_index):
    stats = LocalInfiniGram(wp_index)
    for r in (stats.count(""), stats.count([]), stats.cooccur("Paris", "   ")):
        assert r.status == "unknown" and r.count is None and r.error
    results = stats.count_many(["Paris", "", "Ed Wood"])
    assert [r.status for r in results] == ["ok", "unknown", "ok"]
    pairs = stats.cooccur_many([("Paris", "France"), ("Ed Wood", "Tim Burton")])
    assert all(r.status == "ok" for r in pairs) and pairs[1].count >= 1


def test_query_syntax_in_phrases_is_literal(wp_index, wp_scan):
    stats = LocalInfiniGram(wp_index)
    # "AND" inside an entity is text to count, not a conjunction
    assert stats.count("Ed Wood AND Tim Burton").count == wp_scan.count(["Ed Wood AND Tim Burton"]) == 0
    assert stats.count("(film)").count == wp_scan.count(["(film)"]) > 0


def test_sharded_and_multi_directory_indexes_agree(tmp_path, corpus, wp_scan):
    sharded = build_local_index(corpus, tmp_path / "sharded", max_shard_tokens=120_000, progress=False)
    stats = LocalInfiniGram(sharded)
    assert len(stats.manifests[0].shards) >= 3
    half = len(corpus) // 2
    d1 = build_local_index(corpus[:half], tmp_path / "part1", progress=False)
    d2 = build_local_index(corpus[half:], tmp_path / "part2", progress=False)
    multi = LocalInfiniGram([d1, d2])
    assert multi.doc_count == len(corpus) and multi.total_tokens == stats.total_tokens
    for aliases in (["Scott Derrickson"], ["the"], ["Paris", "France"], ["Ed Wood"]):
        assert stats.count(aliases).count == multi.count(aliases).count == wp_scan.count(aliases)
    for a, b in _pairs()[:25]:
        expected = len(wp_scan.docs_with(a) & wp_scan.docs_with(b))
        assert stats.cooccur(a, b).count == multi.cooccur(a, b).count == expected, (a, b)


def test_bad_paths_and_existing_dirs_fail_clearly(tmp_path, corpus):
    for word in ("table", "offset", "tokenized"):
        with pytest.raises(StatsIndexError, match=word):
            build_local_index(corpus[:5], tmp_path / f"my_{word}s" / "idx", progress=False)
    out = build_local_index(corpus[:50], tmp_path / "ok", progress=False)
    with pytest.raises(StatsIndexError, match="already exists"):
        build_local_index(corpus[:50], out, progress=False)
    with pytest.raises(StatsIndexError, match="not a quco"):
        LocalInfiniGram(tmp_path)
    with pytest.raises(QucoError, match="no documents"):
        build_local_index([], tmp_path / "empty", progress=False)


def test_crash_during_build_leaves_nothing(tmp_path, corpus):
    def docs():
        yield from corpus[:300]
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        build_local_index(docs(), tmp_path / "crash", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_build_corpus_stats_builds_once_then_reuses(tmp_path, monkeypatch, corpus):
    monkeypatch.setenv("QUCO_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def docs():
        calls.append(1)
        return iter(corpus[N_WIKI : N_WIKI + 400])

    cfg = CorpusStatsConfig()
    s1 = build_corpus_stats(cfg, docs, "fp-abc", progress=False)
    assert isinstance(s1, LocalInfiniGram) and s1.dirs[0] == default_index_dir("fp-abc", "wordpiece")
    s2 = build_corpus_stats(cfg, docs, "fp-abc", progress=False)
    assert len(calls) == 1 and s2.count("Ed Wood").count == s1.count("Ed Wood").count > 0
    win = build_corpus_stats(
        cfg.model_copy(update={"cooccurrence": "window"}), docs, "fp-abc", progress=False
    )
    assert win.cooccurrence == "window" and len(calls) == 1


def test_build_corpus_stats_refuses_mismatched_index(tmp_path, corpus):
    index_dir = tmp_path / "given"
    cfg = CorpusStatsConfig(index_dir=str(index_dir))
    build_corpus_stats(cfg, lambda: iter(corpus[:100]), "fp-one", progress=False)
    with pytest.raises(QucoError, match="built from corpus 'fp-one'"):
        build_corpus_stats(cfg, lambda: iter(corpus[:100]), "fp-two", progress=False)
    with pytest.raises(QucoError, match="tokenizer wordpiece, not bytes"):
        build_corpus_stats(
            cfg.model_copy(update={"tokenizer": "bytes"}), lambda: iter([]), "fp-one", progress=False
        )
    with pytest.raises(QucoError, match="contains 'table'"):
        build_corpus_stats(CorpusStatsConfig(index_dir=str(tmp_path / "timetable")), lambda: iter([]), "x")
