"""Extraction benchmark: question entities and (head, relation, tail) claims against our hand-checked gold set.

Usage:
  python bench/bench_extraction.py [--extractors rules,llm,llm-published] [--label NAME]
      [--config CONFIG.yaml] [--set generator.backend=llamacpp --set generator.model=DIR ...]
      [--chat auto|on|off] [--max-new-tokens 256] [--limit N]
      [--retriever CONFIG.yaml | --gold-pool] [--retriever-set retriever.top_k=3] [--query head_relation]
      [--out results.json]

Gold: bench/data/extraction_gold/questions.jsonl (question entities of 50 HotpotQA and 50 2Wiki-style
questions) and claims.jsonl (claims of 100 sentences the evaluation model generated); docs/extraction.md
describes how they were written and checked.

Per extractor it prints entity precision/recall/F1 (exact after normalising, and lenient containment),
head/tail/pair precision and recall of the claims, how often a "no fact" sentence got an empty list, and
LLM calls, tokens and seconds per item (questions and sentences together). Every LLM call goes through
the engine's counted ``RunContext.llm_call("extractor")``.

With a retriever (``--retriever`` names a pipeline config whose ``retriever`` section is used; ``--gold-pool``
builds a pool of the gold questions' own paragraphs), it also reports, for the sentences whose gold claims
name evidence, how often one of the stage-2 queries the extractor's claims make (as QuCo-RAG builds them,
``--query``) retrieves in its top k a paragraph that supports or refutes a gold claim: a paragraph of an
evidence article that states the claim's true value. The "gold" row runs the gold claims' own queries.

The extractor "rules" is whatever ``quco`` is first on PYTHONPATH, so the same script measures an older
checkout (``PYTHONPATH=<old>/src python bench/bench_extraction.py --extractors rules``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import inspect
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GOLD_DIR = Path(__file__).resolve().parent / "data" / "extraction_gold"
PUBLISHED_PROMPTS = "fewshot/quco_rag/prompt_templates.json"  # under the data directory
HOTPOT_SOURCE = "hotpotqa/raw/insightspike_hotpotqa_sample500_not_in_300_1000.jsonl"
TWOWIKI_CORPUS = "2wikimultihopqa/corpus/hipporag_2wikimultihopqa_corpus.json.gz"
QUERY_RULES = ("head_relation", "full_triplet", "original_sentence")


# ------------------------------------------------------------------------------------------------ gold


def _load_scoring() -> None:
    """The scoring rules of this checkout, importable as ``quco_text_scoring`` even when PYTHONPATH puts an
    older quco first (the "rules before" row), so both rows are scored by the same rules."""
    if "quco_text_scoring" in sys.modules:
        return
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "src" / "quco" / "text" / "scoring.py"
    spec = importlib.util.spec_from_file_location("quco_text_scoring", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["quco_text_scoring"] = module
    spec.loader.exec_module(module)


_load_scoring()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_gold(
    gold_dir: Path = GOLD_DIR, questions_file: str = "questions.jsonl"
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The gold questions and claim sentences (plain dicts, as written in the JSONL files)."""
    return read_jsonl(gold_dir / questions_file), read_jsonl(gold_dir / "claims.jsonl")


def gold_items(names: list[str], aliases: dict[str, list[str]] | None = None):
    from quco_text_scoring import GoldItem

    aliases = aliases or {}
    return [GoldItem(n, tuple(aliases.get(n, ()))) for n in names]


def gold_claims(sentence: dict[str, Any]):
    from quco_text_scoring import GoldClaim, GoldItem

    out = []
    for c in sentence["claims"]:
        tail = c.get("tail")
        out.append(
            GoldClaim(
                GoldItem(c["head"], tuple(c.get("head_aliases", ()))),
                c.get("relation", ""),
                GoldItem(tail, tuple(c.get("tail_aliases", ()))) if tail else None,
            )
        )
    return out


def context_of(sentence: dict[str, Any]) -> str:
    """What an extractor may read besides the sentence: the question and the text generated before it."""
    return " ".join(p for p in (sentence.get("question", ""), sentence.get("previous", "")) if p).strip()


# ------------------------------------------------------------------------------------------- extractors


@dataclass
class Extractor:
    name: str
    entities: Any
    triplets: Any
    needs_llm: bool


def build_extractors(names: list[str], args: argparse.Namespace, generator: Any) -> list[Extractor]:
    from quco.text import (
        LLMEntityExtractor,
        LLMTripletExtractor,
        RuleEntityExtractor,
        RuleTripletExtractor,
        load_external_prompts,
    )

    out = []
    for name in names:
        if name == "rules":
            out.append(Extractor(name, RuleEntityExtractor(), RuleTripletExtractor(), False))
            continue
        if name not in ("llm", "llm-published"):
            raise SystemExit(f"unknown extractor {name!r}: use rules, llm or llm-published")
        prompts = None
        if name == "llm-published":
            from quco.paths import data_dir

            prompts = load_external_prompts(Path(args.published_prompts or data_dir() / PUBLISHED_PROMPTS))
        chat = _chat(generator, args.chat)
        max_new = args.max_new_tokens
        out.append(
            Extractor(
                name,
                LLMEntityExtractor(prompts, max_new, chat),
                LLMTripletExtractor(prompts, max_new, chat),
                True,
            )
        )
    return out


def _chat(generator: Any, mode: str):
    try:
        from quco.text import extractor_chat
    except ImportError:  # an older checkout: no chat templates
        if mode == "on":
            raise SystemExit("this quco has no chat-template support (quco.text.extractor_chat)") from None
        return None
    return extractor_chat(generator, mode)


def _accepts_context(triplet_extractor: Any) -> bool:
    try:
        return "context" in inspect.signature(triplet_extractor.triplets).parameters
    except (TypeError, ValueError):
        return False


# ----------------------------------------------------------------------------------------------- costs


@dataclass
class Cost:
    items: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0

    def add(self, trace: Any, seconds: float) -> None:
        c = trace.counters
        self.items += 1
        self.calls += c.llm_calls.get("extractor", 0)
        self.prompt_tokens += c.prompt_tokens.get("extractor", 0)
        self.generated_tokens += c.generated_tokens.get("extractor", 0)
        self.seconds += seconds


class Runner:
    """Runs extractors the way the engine does: a fresh trace per item, LLM calls through the context."""

    def __init__(self, config: Any, generator: Any) -> None:
        self.config = config
        self.generator = generator
        self._parts = None

    def context(self):
        from quco.engine.context import Parts, RunContext
        from quco.prompts import load_template
        from quco.trace import Trace

        if self._parts is None:
            self._parts = Parts(
                config=self.config,
                generator=self.generator,
                text=None,
                exemplars=[],
                template=load_template("quco"),
            )
        return RunContext(self._parts, Trace(question="", method="extraction-bench"))


class Checkpoint:
    """Results per item, appended to a JSONL file as they come, so that a long LLM run resumes where it
    stopped and a later run reuses them (with the calls, tokens and seconds they cost when measured). A
    reused LLM item is parsed again from the model's recorded output, so parser fixes apply to it."""

    def __init__(self, path: Path | None, ex: Extractor, args: argparse.Namespace) -> None:
        self.path = path
        prompts = getattr(ex.entities, "prompts", None)
        chat = getattr(ex.entities, "chat", None)
        self.setup = json.dumps(
            [ex.name, getattr(prompts, "source", ""), bool(chat), getattr(ex.entities, "max_new_tokens", 0)]
        )
        self.done: dict[str, dict[str, Any]] = {}
        if path is not None and path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.done[row["key"]] = row

    def run(
        self, kind: str, text: str, context: str, runner: Runner, cost: Cost, fn: Any
    ) -> tuple[Any, list[str]]:
        key = hashlib.sha256(json.dumps([self.setup, kind, text, context]).encode("utf-8")).hexdigest()
        row = self.done.get(key)
        if row is None:
            ctx = runner.context()
            llm, raw = _recording(ctx.llm_call("extractor"))
            start = time.perf_counter()
            result = fn(llm)
            seconds = time.perf_counter() - start
            c = ctx.trace.counters
            row = {
                "key": key,
                "kind": kind,
                "text": text,
                "result": result,
                "raw": raw,
                "calls": c.llm_calls.get("extractor", 0),
                "prompt_tokens": c.prompt_tokens.get("extractor", 0),
                "generated_tokens": c.generated_tokens.get("extractor", 0),
                "seconds": seconds,
            }
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            self.done[key] = row
        elif row["raw"]:
            # Parse the recorded output again with the current code: no model call, same cost as measured.
            replies = iter(row["raw"])
            row = {**row, "result": fn(lambda prompt, max_new_tokens: next(replies))}
        cost.items += 1
        cost.calls += row["calls"]
        cost.prompt_tokens += row["prompt_tokens"]
        cost.generated_tokens += row["generated_tokens"]
        cost.seconds += row["seconds"]
        return row["result"], row["raw"]


# ------------------------------------------------------------------------------------------- retrieval


def _norm_title(title: str) -> str:
    from quco_text_scoring import normalise

    return normalise(title.replace("_", " "), keep_parens=True)


def bears_on(passage: Any, claim: dict[str, Any]) -> bool:
    """A passage supports or refutes a claim when it comes from one of the claim's evidence articles and
    states the claim's true value (any of ``facts``; no facts listed: the article itself is enough)."""
    from quco_text_scoring import normalise

    titles = {_norm_title(t) for t in claim.get("evidence", [])}
    if not titles or _norm_title(passage.title or "") not in titles:
        return False
    facts = [normalise(f, keep_parens=True) for f in claim.get("facts", []) if normalise(f, keep_parens=True)]
    if not facts:
        return True
    text = normalise(passage.text or "", keep_parens=True)
    return any(f in text for f in facts)


def queries_for(triplets: list[tuple[str, str, str | None]], sentence: str, rule: str) -> list[str]:
    """Stage-2 queries as QuCo-RAG builds them from claims (methods/quco.py ``_query_for``)."""
    out = []
    for head, relation, tail in triplets:
        if rule == "head_relation":
            q = f"{head} {relation}".strip()
        elif rule == "full_triplet":
            q = " ".join(x for x in (head, relation, tail) if x)
        else:
            q = sentence
        out.append(q)
    return list(dict.fromkeys(q for q in out if q.strip()))


@dataclass
class RetrievalScore:
    sentences: int = 0  # sentences whose gold claims name evidence
    hits: int = 0
    queries: int = 0
    hit_ids: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float | None:
        return self.hits / self.sentences if self.sentences else None


def score_retrieval(retriever: Any, k: int, sentence: dict[str, Any], queries: list[str], rs: RetrievalScore):
    claims = [c for c in sentence["claims"] if c.get("evidence")]
    if not claims:
        return None
    rs.sentences += 1
    rs.queries += len(queries)
    if not queries:
        return False
    results = retriever.search(queries, k)
    hit = any(bears_on(p, c) for hits in results for p in hits for c in claims)
    if hit:
        rs.hits += 1
        rs.hit_ids.append(sentence["id"])
    return hit


def build_gold_pool(questions: list[dict[str, Any]]) -> Path:
    """A JSONL pool of the gold questions' own paragraphs: the HotpotQA distractor contexts of the gold
    HotpotQA questions and the whole 2Wiki paragraph corpus the 2Wiki-style questions were written from.
    Written once into the cache directory (it is derived data, not part of the project)."""
    from quco.paths import cache_dir, data_dir

    ids = {q["id"].removeprefix("hotpotqa-") for q in questions if q["dataset"] == "hotpotqa"}
    rows = []
    with (data_dir() / HOTPOT_SOURCE).open(encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["id"] in ids:
                ctx = r["context"]
                for title, sents in zip(ctx["title"], ctx["sentences"], strict=True):
                    rows.append({"title": title, "text": "".join(sents).strip()})
    with gzip.open(data_dir() / TWOWIKI_CORPUS, "rt", encoding="utf-8") as f:
        rows.extend({"title": r["title"], "text": r["text"]} for r in json.load(f))
    seen: set[tuple[str, str]] = set()
    unique = []
    for r in rows:
        key = (r["title"], r["text"])
        if key not in seen:
            seen.add(key)
            unique.append(r)
    blob = "\n".join(json.dumps(r, ensure_ascii=False) for r in unique) + "\n"
    digest = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]
    out = cache_dir() / "extraction-bench" / f"gold-pool-{digest}.jsonl"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp-{os.getpid()}")
        for i, r in enumerate(unique):
            r["id"] = f"gold-pool-{i}"
        tmp.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in unique) + "\n", encoding="utf-8")
        os.replace(tmp, out)
    return out


# ------------------------------------------------------------------------------------------------- run


def run_extractor(
    ex: Extractor,
    questions: list[dict[str, Any]],
    sentences: list[dict[str, Any]],
    runner: Runner,
    retriever: Any,
    args: argparse.Namespace,
    progress: bool,
) -> dict[str, Any]:
    from quco_text_scoring import PR, ClaimScores, score_set

    ent, ent_len = PR(), PR()
    ent_by_ds: dict[str, PR] = {}
    cost = Cost()
    records: list[dict[str, Any]] = []
    total = len(questions) + len(sentences)
    done = 0
    checkpoint = Checkpoint(args.checkpoint, ex, args)
    for q in questions:

        def extract_entities(llm: Any, q: dict[str, Any] = q) -> list[str]:
            return ex.entities.question_entities(q["question"], llm)

        predicted, raw = checkpoint.run("question", q["question"], "", runner, cost, extract_entities)
        gold = gold_items(q["entities"], q.get("aliases"))
        optional = gold_items(q.get("optional", []))
        s = score_set(predicted, gold, optional)
        ent.add(s)
        ent_by_ds.setdefault(q["dataset"], PR()).add(s)
        ent_len.add(score_set(predicted, gold, optional, lenient=True))
        records.append({"id": q["id"], "kind": "question", "predicted": predicted, "raw": raw})
        done += 1
        _tick(progress, ex.name, done, total)

    claims = ClaimScores()
    claims_by_ds: dict[str, ClaimScores] = {}
    dataset_of = args.dataset_of
    rs = RetrievalScore()
    with_context = _accepts_context(ex.triplets) and not args.no_context
    for sent in sentences:
        context = context_of(sent) if with_context else ""

        def extract_triplets(llm: Any, sent: dict[str, Any] = sent, context: str = context) -> list[list]:
            if with_context:
                trips = ex.triplets.triplets(sent["sentence"], llm, context=context)
            else:
                trips = ex.triplets.triplets(sent["sentence"], llm)
            return [[t.head, t.relation, t.tail] for t in trips]

        found, raw = checkpoint.run("sentence", sent["sentence"], context, runner, cost, extract_triplets)
        triples = [tuple(t) for t in found]
        pairs, gold = [(h, t) for h, _, t in triples], gold_claims(sent)
        claims.add_sentence(pairs, gold)
        ds = dataset_of.get(sent["question_id"], sent["id"].split("-")[0])
        claims_by_ds.setdefault(ds, ClaimScores()).add_sentence(pairs, gold)
        rec: dict[str, Any] = {"id": sent["id"], "kind": "sentence", "predicted": triples, "raw": raw}
        if retriever is not None:
            queries = queries_for(triples, sent["sentence"], args.query)
            rec["queries"] = queries
            rec["hit"] = score_retrieval(retriever, args.top_k, sent, queries, rs)
        records.append(rec)
        done += 1
        _tick(progress, ex.name, done, total)
    if progress:
        print(file=sys.stderr)
    return {
        "name": ex.name,
        "entities": ent,
        "entities_lenient": ent_len,
        "entities_by_dataset": ent_by_ds,
        "claims": claims,
        "claims_by_dataset": claims_by_ds,
        "cost": cost,
        "retrieval": rs if retriever is not None else None,
        "context": with_context,
        "records": records,
    }


def run_gold_retrieval(sentences: list[dict[str, Any]], retriever: Any, args: argparse.Namespace):
    rs = RetrievalScore()
    for sent in sentences:
        triples = [(c["head"], c.get("relation", ""), c.get("tail")) for c in sent["claims"]]
        score_retrieval(retriever, args.top_k, sent, queries_for(triples, sent["sentence"], args.query), rs)
    return rs


def _recording(llm: Any) -> tuple[Any, list[str]]:
    """The counted LLM call, also keeping what the model wrote (for reading the errors afterwards)."""
    raw: list[str] = []

    def call(prompt: str, max_new_tokens: int) -> str:
        out = llm(prompt, max_new_tokens)
        raw.append(out)
        return out

    return call, raw


def _tick(progress: bool, name: str, done: int, total: int) -> None:
    if progress:
        print(f"\r{name}: {done}/{total}", end="", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------- table


def _pct(x: float | None) -> str:
    return "  -  " if x is None else f"{100 * x:5.1f}"


def _row_name(label: str, name: str) -> str:
    """ "rules before" for the rules under a label, "<label> llm" for the others."""
    if not label:
        return name
    return label if name == "rules" or name in label else f"{label} {name}"


def by_dataset(results: list[dict[str, Any]], label: str) -> str:
    """Entity F1 and head/tail pair F1 per dataset (HotpotQA and 2Wiki-style items)."""
    lines = []
    for r in results:
        if r.get("gold_only"):
            continue
        parts = []
        for ds in sorted(r["entities_by_dataset"]):
            e = r["entities_by_dataset"][ds]
            c = r["claims_by_dataset"].get(ds)
            parts.append(f"{ds}: entF1 {_pct(e.f1).strip()} pairF1 {_pct(c.pairs.f1 if c else None).strip()}")
        lines.append(f"{_row_name(label, r['name']):<24} " + " | ".join(parts))
    return "\n".join(lines)


def table(results: list[dict[str, Any]], label: str) -> str:
    head = (
        f"{'extractor':<24} {'entP':>5} {'entR':>5} {'entF1':>5} | {'entP~':>5} {'entR~':>5} | "
        f"{'headP':>5} {'headR':>5} {'tailP':>5} {'tailR':>5} {'pairP':>5} {'pairR':>5} {'empty':>5} | "
        f"{'calls':>5} {'tok/it':>7} {'s/item':>6} | {'stage2':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        name = _row_name(label, r["name"])
        if r.get("gold_only"):
            rs = r["retrieval"]
            pad = head.rindex("|") - 24
            lines.append(f"{r['name']:<24}{'':>{pad}}| {_pct(rs.rate):>6}")
            continue
        e, el, c, cost = r["entities"], r["entities_lenient"], r["claims"], r["cost"]
        n = max(cost.items, 1)
        empty = c.empty_right / c.empty_gold if c.empty_gold else None
        stage2 = _pct(r["retrieval"].rate) if r["retrieval"] is not None else "  n/a"
        tokens = (cost.prompt_tokens + cost.generated_tokens) / n
        lines.append(
            f"{name:<24} {_pct(e.precision)} {_pct(e.recall)} {_pct(e.f1)} | "
            f"{_pct(el.precision)} {_pct(el.recall)} | "
            f"{_pct(c.heads.precision)} {_pct(c.heads.recall)} {_pct(c.tails.precision)} "
            f"{_pct(c.tails.recall)} {_pct(c.pairs.precision)} {_pct(c.pairs.recall)} {_pct(empty)} | "
            f"{cost.calls / n:5.2f} {tokens:7.1f} {cost.seconds / n:6.3f} | {stage2:>6}"
        )
    return "\n".join(lines)


def summary(r: dict[str, Any]) -> dict[str, Any]:
    def pr(x: Any) -> dict[str, Any]:
        return {
            "precision": x.precision,
            "recall": x.recall,
            "f1": x.f1,
            "tp_pred": x.tp_pred,
            "n_pred": x.n_pred,
            "tp_gold": x.tp_gold,
            "n_gold": x.n_gold,
        }

    if r.get("gold_only"):
        rs = r["retrieval"]
        return {"name": r["name"], "stage2": {"rate": rs.rate, "sentences": rs.sentences, "hits": rs.hits}}
    c, cost = r["claims"], r["cost"]
    out = {
        "name": r["name"],
        "context": r["context"],
        "entities": pr(r["entities"]),
        "entities_lenient": pr(r["entities_lenient"]),
        "entities_by_dataset": {k: pr(v) for k, v in r["entities_by_dataset"].items()},
        "pairs_by_dataset": {k: pr(v.pairs) for k, v in r["claims_by_dataset"].items()},
        "heads": pr(c.heads),
        "tails": pr(c.tails),
        "pairs": pr(c.pairs),
        "heads_lenient": pr(c.heads_lenient),
        "tails_lenient": pr(c.tails_lenient),
        "empty": {"right": c.empty_right, "gold": c.empty_gold},
        "cost": vars(cost),
        "records": r["records"],
    }
    if r["retrieval"] is not None:
        rs = r["retrieval"]
        out["stage2"] = {"rate": rs.rate, "sentences": rs.sentences, "hits": rs.hits, "queries": rs.queries}
    return out


# ------------------------------------------------------------------------------------------------ main


def _overrides(pairs: list[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--extractors", default="rules", help="comma list of rules, llm, llm-published")
    ap.add_argument("--label", default="", help="prefix of the row names (e.g. 'rules before')")
    ap.add_argument("--gold", type=Path, default=GOLD_DIR)
    ap.add_argument("--config", type=Path, default=None, help="pipeline config for the generator")
    ap.add_argument("--set", dest="set_", action="append", default=[], help="config override key=value")
    ap.add_argument("--chat", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--max-new-tokens", type=int, default=256, help="extractor budget (published: 256)")
    ap.add_argument("--published-prompts", default=None, help="QuCo-RAG prompt_templates.json")
    ap.add_argument(
        "--prefix-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="llama.cpp: reuse the saved state of the prompts' instruction and examples (outputs are the same)",
    )
    ap.add_argument("--limit", type=int, default=None, help="first N questions and first N sentences")
    ap.add_argument("--no-context", action="store_true", help="never pass the context to triplet extractors")
    ap.add_argument("--retriever", type=Path, default=None, help="pipeline config whose retriever is used")
    ap.add_argument("--gold-pool", action="store_true", help="retrieve from the gold questions' paragraphs")
    ap.add_argument("--retriever-set", action="append", default=[], help="override for the retriever config")
    ap.add_argument("--query", choices=QUERY_RULES, default="head_relation")
    ap.add_argument("--top-k", type=int, default=None, help="passages per query (default: the config's)")
    ap.add_argument("--out", type=Path, default=None, help="write summaries and per-item predictions here")
    ap.add_argument(
        "--checkpoint", type=Path, default=None, help="JSONL of per-item results to resume from and append to"
    )
    ap.add_argument(
        "--heldout",
        action="store_true",
        help="question entities of questions_heldout.jsonl (57 HotpotQA questions not used to develop the rules)",
    )
    ap.add_argument("--part", choices=["all", "questions", "sentences"], default="all", help="items to run")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from quco.config import load_config

    questions, sentences = load_gold(args.gold)
    args.dataset_of = {q["id"]: q["dataset"] for q in questions}
    if args.heldout:  # HotpotQA questions the entity rules were not developed on; no sentences
        questions, sentences = load_gold(args.gold, "questions_heldout.jsonl")[0], []
    if args.limit:
        questions, sentences = questions[: args.limit], sentences[: args.limit]
    if args.part == "questions":
        sentences = []
    elif args.part == "sentences":
        questions = []
    names = [n.strip() for n in args.extractors.split(",") if n.strip()]
    config = load_config(args.config, overrides=_overrides(args.set_) or None)
    generator = None
    if any(n != "rules" for n in names):
        from quco.pipeline import shared_generator

        generator = shared_generator(config.generator)
        if not args.prefix_cache and hasattr(generator, "reuse"):
            # The extractors' prompts declare their instruction and examples shared; llama.cpp evaluates that
            # part once and restores its state, exactly as a run does. Off: every prompt is evaluated whole.
            generator.reuse = False
    runner = Runner(config, generator)

    retriever = None
    if args.retriever is not None or args.gold_pool:
        from quco.retrieval import build_retriever

        r_over = _overrides(args.retriever_set)
        if args.gold_pool:
            r_over.setdefault("retriever.corpus", str(build_gold_pool(questions)))
        r_config = load_config(args.retriever, overrides=r_over or None)
        retriever = build_retriever(r_config.retriever, progress=not args.no_progress)
        args.top_k = args.top_k or r_config.retriever.top_k
        print(
            f"retriever: {r_config.retriever.corpus} (top {args.top_k}, query {args.query})", file=sys.stderr
        )

    results = []
    for ex in build_extractors(names, args, generator):
        results.append(run_extractor(ex, questions, sentences, runner, retriever, args, not args.no_progress))
    if retriever is not None:
        results.append(
            {
                "name": "gold claims",
                "gold_only": True,
                "retrieval": run_gold_retrieval(sentences, retriever, args),
            }
        )

    n_claims = sum(len(s["claims"]) for s in sentences)
    print(
        f"gold: {len(questions)} questions ({sum(len(q['entities']) for q in questions)} entities), "
        f"{len(sentences)} sentences ({n_claims} claims); matching: exact after normalising, ~ lenient "
        "containment; empty: share of no-fact sentences given []; calls, tok/it and s/item per item "
        "(questions and sentences)"
    )
    if retriever is not None:
        n = results[-1]["retrieval"].sentences
        print(
            f"stage2: share of the {n} sentences whose gold claims name evidence for which a query built from "
            f"the claims ({args.query}) retrieves, in its top {args.top_k}, a passage supporting or refuting one"
        )
    print(table(results, args.label))
    print(by_dataset(results, args.label))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"label": args.label, "argv": sys.argv[1:], "results": [summary(r) for r in results]}
        args.out.write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
