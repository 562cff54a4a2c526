"""The persistent SQLite cache (two processes at once included) and corpus-relative thresholds."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from itertools import islice
from pathlib import Path

import pytest

from quco.corpus_stats.base import CountResult
from quco.corpus_stats.build import build_local_index
from quco.corpus_stats.cache import CachedCorpusStats
from quco.corpus_stats.local import LocalInfiniGram
from quco.corpus_stats.rates import QUCO_REFERENCE_TOKENS, CountThreshold
from quco.paths import data_dir


def _docs(start: int, n: int) -> list[tuple[str, str]]:
    with gzip.open(
        data_dir() / "wikipedia" / "enwiki_vital_level4_summaries.jsonl.gz", "rt", encoding="utf-8"
    ) as f:
        rows = [json.loads(line) for line in islice(f, start, start + n)]
    return [(f"wiki:{r['id']}", f"{r['title']}\n{r['text']}") for r in rows]


def _titles(n: int = 120) -> list[str]:
    return [t.split("\n", 1)[0] for _, t in _docs(0, n)]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    return build_local_index(_docs(0, 700), tmp_path_factory.mktemp("cache") / "wiki", progress=False)


def test_hits_misses_and_identical_answers(index_dir, tmp_path):
    inner = LocalInfiniGram(index_dir)
    cached = CachedCorpusStats(inner, tmp_path / "c.sqlite")
    titles = _titles(60)
    first = cached.count_many(titles)
    assert cached.stats() == {"hits": 0, "misses": 60} and not any(r.cached for r in first)
    second = cached.count_many(titles)
    assert cached.stats() == {"hits": 60, "misses": 60} and all(r.cached for r in second)
    assert (
        [r.count for r in first] == [r.count for r in second] == [r.count for r in inner.count_many(titles)]
    )
    assert second[0].query == titles[0] and second[0].total_tokens == inner.total_tokens
    pairs = list(zip(titles[:20], ["the"] * 20, strict=True))
    assert [r.count for r in cached.cooccur_many(pairs)] == [r.count for r in cached.cooccur_many(pairs)]
    assert cached.hits == 80
    # alias order does not matter for an OR; a reopened cache still has everything
    again = CachedCorpusStats(LocalInfiniGram(index_dir), tmp_path / "c.sqlite")
    assert again.count(["Paris", "France"]).cached is False
    assert again.count(["France", "Paris"]).cached is True


def test_unknown_answers_are_not_cached(index_dir, tmp_path):
    cached = CachedCorpusStats(LocalInfiniGram(index_dir), tmp_path / "c.sqlite")
    assert cached.count("").status == "unknown"
    assert cached.count("").status == "unknown" and cached.misses == 2 and cached.hits == 0


def test_keys_separate_semantics_and_corpora(index_dir, tmp_path):
    path = tmp_path / "c.sqlite"
    pairs = [("Albert Einstein", "physics"), ("Paris", "France")]
    doc = CachedCorpusStats(LocalInfiniGram(index_dir), path)
    win = CachedCorpusStats(LocalInfiniGram(index_dir, cooccurrence="window", max_diff_tokens=20), path)
    assert [r.count for r in doc.cooccur_many(pairs)] == [
        r.count for r in LocalInfiniGram(index_dir).cooccur_many(pairs)
    ]
    w = win.cooccur_many(pairs)
    assert win.misses == 2 and not any(r.cached for r in w)
    other_dir = build_local_index(_docs(700, 300), tmp_path / "other", progress=False)
    other = CachedCorpusStats(LocalInfiniGram(other_dir), path)
    assert other.count("Paris").cached is False  # another corpus: never served from the first one's entries


WORKER = textwrap.dedent(
    """
    import json, sys
    from quco.corpus_stats.cache import CachedCorpusStats
    from quco.corpus_stats.local import LocalInfiniGram
    index_dir, path, order = sys.argv[1], sys.argv[2], sys.argv[3]
    titles = json.loads(sys.stdin.read())
    pairs = list(zip(titles, titles[1:]))
    if order == "reverse":
        titles, pairs = titles[::-1], pairs[::-1]
    stats = CachedCorpusStats(LocalInfiniGram(index_dir), path)
    out = {}
    for _ in range(3):
        for t in titles:  # one transaction per lookup: maximal interleaving with the other process
            r = stats.count(t)
            assert r.status == "ok", r.error
            out[t] = r.count
        for a, b in pairs:
            r = stats.cooccur(a, b)
            out[a + " & " + b] = r.count
    print(json.dumps({"counts": out, "hits": stats.hits, "misses": stats.misses}))
    """
)


def test_two_processes_share_one_cache(index_dir, tmp_path):
    path = tmp_path / "shared.sqlite"
    titles = _titles(120)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(index_dir), str(path), order],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for order in ("forward", "reverse")
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(json.dumps(titles), timeout=120)
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out))
    assert outs[0]["counts"] == outs[1]["counts"]
    n = len(titles) + len(titles) - 1
    for o in outs:
        assert o["hits"] + o["misses"] == 3 * n and o["hits"] >= 2 * n  # rounds 2 and 3 are all hits
    # together they computed each key about once: the other process's answers were reused
    assert outs[0]["misses"] + outs[1]["misses"] < 2 * n
    reader = CachedCorpusStats(LocalInfiniGram(index_dir), path)
    results = reader.count_many(titles)
    assert all(r.cached for r in results)
    assert {t: r.count for t, r in zip(titles, results, strict=True)} == {
        t: outs[0]["counts"][t] for t in titles
    }


def test_thresholds_as_rates_transfer_between_index_sizes(index_dir):
    stats = LocalInfiniGram(index_dir)
    r = stats.count("Paris")
    assert r.per_billion == pytest.approx(r.count * 1e9 / stats.total_tokens)
    # QuCo's binary threshold (20 on the 4.6T-token index) as a rate, then on this small index
    th = CountThreshold.from_reference(20)
    assert th.per_billion == pytest.approx(20e9 / QUCO_REFERENCE_TOKENS)
    assert th.limit(stats.total_tokens) == pytest.approx(20 * stats.total_tokens / QUCO_REFERENCE_TOKENS)
    assert th.limit(None) == 20
    assert th.is_below(stats.count("Zqxjv Nonexistent")) is True
    assert th.is_below(r) is (r.count < th.limit(stats.total_tokens))
    assert CountThreshold(per_billion=1e6).is_below(r) is (r.count < 1e6 * stats.total_tokens / 1e9)
    unknown = CountResult(query="x", count=None, status="unknown", error="down")
    assert th.is_below(unknown) is None
    view = th.describe(r)
    assert (
        view["count"] == r.count and view["total_tokens"] == stats.total_tokens and view["limit_per_billion"]
    )
