"""The ``quco`` command: ask, demo, index, methods (and the evaluation and serving commands)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from quco.cli_support import err, friendly_errors, out
from quco.cli_support import setup_logging as _setup_logging
from quco.config import load_config, parse_override
from quco.errors import QucoError

app = typer.Typer(
    name="quco",
    help="Dynamic retrieval-augmented generation: QuCo-RAG and the methods it is compared against.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
index_app = typer.Typer(help="Build retrieval and corpus-statistics indexes.", no_args_is_help=False)
app.add_typer(index_app, name="index")
serve_app = typer.Typer(help="Run quco's HTTP services.", no_args_is_help=True)
app.add_typer(serve_app, name="serve")


def _mount_optional() -> None:
    """Commands that live with their subsystems (evaluation, calibration)."""
    from quco.eval.cli.calibrate import calibrate_command
    from quco.eval.cli.commands import eval_app
    from quco.serve.cli import api as serve_api

    app.add_typer(eval_app)
    app.command("calibrate")(calibrate_command)
    serve_app.command("api")(serve_api)

    from quco.llm.models_cli import models_app  # `quco models`: list the known models, pull one

    app.add_typer(models_app, name="models")

    from quco.eval.cli.results import results_app  # `quco results run|table PLAN`: the results table

    app.add_typer(results_app, name="results")

    from quco.eval.cli.gate import gate_app  # `quco gate fit|frontier`: retrieval gates at equal cost

    app.add_typer(gate_app, name="gate")


DEMO_QUESTIONS = (
    "Who was born first, Albert Einstein or Niels Bohr?",
    "Which river flows through the city where Wolfgang Amadeus Mozart was born?",
    "Are the Eiffel Tower and the Louvre in the same city?",
)
DEMO_NOTE = (
    "The default generator is Gemma-3-270m, a tiny base model: it follows the answer format, but most of its "
    "facts are wrong. It is here so that every decision can be watched on any laptop. For real answers, plug in "
    "a real model (README, 'Plugging in real parts'): `quco models pull qwen2.5-coder-1.5b-instruct` fetches the "
    "evaluation model, or point --set generator.backend=openai at any OpenAI-compatible server."
)


def _overrides(sets: list[str] | None) -> dict[str, Any]:
    return dict(parse_override(s) for s in sets or [])


ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML config file.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a config field, e.g. --set retriever.top_k=5 (repeatable)."),
]
MethodOpt = Annotated[str | None, typer.Option("--method", "-m", help="Method name (see `quco methods`).")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")]
ProgressOpt = Annotated[bool, typer.Option(help="Show progress bars (off for logs of unattended runs).")]
# Options shared by the `quco index` subcommands.
CorpusOpt = Annotated[str, typer.Option("--corpus", help="JSONL/TSV corpus, or 'wiki-summaries'.")]
IndexOutOpt = Annotated[Path | None, typer.Option("--out", help="Index directory (default: the cache).")]
OnErrorOpt = Annotated[str, typer.Option(help="On a bad corpus line: 'stop' or 'skip'.")]
CorporaOpt = Annotated[
    list[str],
    typer.Option(
        "--corpus",
        help="JSONL/TSV corpus, 'wiki-summaries', 'wiki-articles', 'wiki-articles+pool:DATASET' or "
        "'haystack:DATASET'; repeat to index several files as one corpus.",
    ),
]


def _build_pipeline(config: Path | None, method: str | None, sets: list[str] | None):  # noqa: ANN202
    cfg = load_config(
        config, overrides=_overrides(sets), method=method
    )  # bad settings fail before heavy imports
    from quco.pipeline import Pipeline

    return Pipeline.from_config(cfg)


@app.command()
@friendly_errors
def ask(
    question: Annotated[str, typer.Argument(help="The question to answer.")],
    method: MethodOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the trace as JSON instead of a readable view.")
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Answer one question and show every decision the method made."""
    _setup_logging(verbose)
    if not question.strip():
        raise QucoError('the question is empty; ask something, e.g. quco ask "Who wrote Hamlet?"')
    from quco.inputs import check_text

    check_text(question)
    t0 = time.perf_counter()
    pipe = _build_pipeline(config, method, set_)
    ready = time.perf_counter() - t0
    trace = pipe.answer(question)
    if as_json:
        sys.stdout.write(trace.to_json(indent=2) + "\n")
    else:
        from quco.render import render_trace

        render_trace(trace, out)
        out.print(f"[dim]start-up {ready:.1f}s, answer {trace.seconds:.1f}s[/dim]")


@app.command()
@friendly_errors
def demo(
    method: MethodOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Answer a few sample questions on the embedded default and print their traces, each with its answer."""
    from quco.render import render_trace

    _setup_logging(verbose)
    out.print(f"[yellow]{DEMO_NOTE}[/yellow]", soft_wrap=True)
    t0 = time.perf_counter()
    pipe = _build_pipeline(config, method, set_)
    out.print(f"[dim]pipeline ready in {time.perf_counter() - t0:.1f}s (method {pipe.method.name})[/dim]")
    for q in DEMO_QUESTIONS:
        trace = pipe.answer(q)
        how = _state_answer(trace, pipe)
        render_trace(trace, out)
        out.print(f"[bold]decision path:[/bold] {_decision_path(trace)}; {how}", soft_wrap=True)
    out.print(f"[yellow]{DEMO_NOTE}[/yellow]", soft_wrap=True)


def _state_answer(trace: Any, pipe: Any) -> str:
    """Make sure the trace ends with a stated answer; returns how it was stated.

    When the method stopped before "So the answer is", the model is asked to finish that sentence: one more
    LLM call, counted in the trace (role ``answer_reprompt``), as the evaluation's default answer protocol does.
    """
    if trace.answer:
        return f"the model stated the answer itself (stop: {trace.stop_reason})"
    from quco.answer import PUBLISHED

    pipe.finish(trace, PUBLISHED)
    if not trace.answer:
        return f"the method stopped without an answer ({trace.stop_reason}), and the re-prompt gave none"
    return (
        f"the method stopped without an answer ({trace.stop_reason}), so the answer comes from one counted "
        "re-prompt ('So the answer is')"
    )


def _decision_path(trace: Any) -> str:
    """The steps' decisions in one line: what each step decided and why."""
    parts = []
    for step in trace.steps:
        reason = f" ({step.reason})" if step.reason else ""
        parts.append(f"{step.stage} → {step.decision}{reason}")
    return " · ".join(parts) or "no step"


@app.command()
def methods() -> None:
    """List the available methods."""
    from quco.methods import available_methods, method_class

    for name in available_methods():
        out.print(f"[bold]{name}[/bold]  {method_class(name).description}")


@index_app.callback(invoke_without_command=True)
@friendly_errors
def index_all(
    ctx: typer.Context,
    corpus: Annotated[
        str | None, typer.Option("--corpus", help="JSONL/TSV corpus (id, text, title), or 'wiki-summaries'.")
    ] = None,
    on_error: OnErrorOpt = "stop",
    tokenizer: Annotated[
        str, typer.Option(help="Corpus-statistics tokenizer: wordpiece, bytes, or a file.")
    ] = "wordpiece",
    progress: ProgressOpt = True,
    verbose: VerboseOpt = False,
) -> None:
    """Build the BM25 index and the corpus-statistics index of a corpus (both checked for completeness)."""
    if ctx.invoked_subcommand is not None:
        return
    _setup_logging(verbose)
    if corpus is None:
        err.print(ctx.get_help())
        raise typer.Exit(2)
    _index_bm25(corpus, None, on_error, progress)
    _index_stats(corpus, None, tokenizer, on_error, progress)


def _index_bm25(corpus: str | list[str], out_dir: Path | None, on_error: str, progress: bool) -> None:
    from quco.retrieval import index_corpus
    from quco.world.corpora import resolve_corpus

    report = index_corpus(resolve_corpus(corpus), out_dir=out_dir, on_error=on_error, progress=progress)
    out.print(
        f"BM25: {report.passages_indexed} passages indexed from {report.lines_read} lines "
        f"({report.skipped} skipped) {'reused, checked' if report.reused else 'built'} in {report.seconds:.1f}s "
        f"-> {report.index_dir}"
    )


def _index_stats(
    corpus: str | list[str], out_dir: Path | None, tokenizer: str, on_error: str, progress: bool
) -> None:
    from quco.corpus_stats import default_index_dir, ensure_local_index
    from quco.retrieval import CorpusReport
    from quco.world.corpora import corpus_docs

    docs = corpus_docs(corpus, on_error=on_error)  # type: ignore[arg-type]
    target = out_dir or default_index_dir(docs.fingerprint, tokenizer, docs.source.index_home)
    report = CorpusReport()
    t0 = time.perf_counter()
    manifest, reused = ensure_local_index(
        lambda: docs(report),
        docs.fingerprint,
        tokenizer,
        target,
        progress=progress,
        total_docs=docs.expected_docs,
    )
    target = target.expanduser().resolve()
    if reused:
        out.print(f"corpus statistics: index exists ({manifest.doc_count} documents) -> {target}")
        return
    if manifest.doc_count != report.passages:
        raise QucoError(
            f"index holds {manifest.doc_count} documents but {report.passages} were read; rebuild it"
        )
    out.print(
        f"corpus statistics: {manifest.doc_count} documents indexed from {report.lines_read} lines "
        f"({report.skipped} skipped), {manifest.token_count} tokens in {time.perf_counter() - t0:.1f}s "
        f"(tokenizing {manifest.tokenize_seconds:.1f}s, suffix array {manifest.suffix_array_seconds:.1f}s) "
        f"-> {target}"
    )


@index_app.command("bm25")
@friendly_errors
def index_bm25(
    corpus: CorporaOpt,
    out_dir: IndexOutOpt = None,
    on_error: OnErrorOpt = "stop",
    progress: ProgressOpt = True,
    verbose: VerboseOpt = False,
) -> None:
    """Build the BM25 retrieval index of a corpus."""
    _setup_logging(verbose)
    _index_bm25(corpus, out_dir, on_error, progress)


@index_app.command("stats")
@friendly_errors
def index_stats_cmd(
    corpus: CorporaOpt,
    out_dir: IndexOutOpt = None,
    tokenizer: Annotated[
        str, typer.Option(help="wordpiece (default), bytes, or a tokenizers JSON file.")
    ] = "wordpiece",
    on_error: OnErrorOpt = "stop",
    progress: ProgressOpt = True,
    verbose: VerboseOpt = False,
) -> None:
    """Build a local Infini-gram index (corpus statistics) of a corpus."""
    _setup_logging(verbose)
    _index_stats(corpus, out_dir, tokenizer, on_error, progress)


@index_app.command("haystack")
@friendly_errors
def index_haystack_cmd(
    dataset: Annotated[
        str | None,
        typer.Option(
            help="Dataset whose paragraph pool joins the articles: hotpotqa, 2wikimultihopqa or pubmedqa."
        ),
    ] = None,
    pool: Annotated[Path | None, typer.Option(help="Another pool file instead of the dataset's.")] = None,
    articles: Annotated[
        list[Path] | None,
        typer.Option("--articles", help="Article files (default: the four Wikipedia shards); repeatable."),
    ] = None,
    words: Annotated[int, typer.Option(help="Words per article passage (DPR: 100).")] = 100,
    out_dir: IndexOutOpt = None,
    force: Annotated[bool, typer.Option(help="Rebuild even if a matching haystack exists.")] = False,
    progress: ProgressOpt = True,
    verbose: VerboseOpt = False,
) -> None:
    """Build the retrieval haystack: Wikipedia articles in 100-word passages plus a dataset's paragraph pool."""
    from quco.world.haystack import ensure_haystack, plan

    _setup_logging(verbose)
    t0 = time.perf_counter()
    target, manifest, reused = ensure_haystack(
        plan(dataset, articles=articles, pool=pool, words=words), out_dir, progress=progress, force=force
    )
    what = "reused" if reused else f"built in {time.perf_counter() - t0:.1f}s"
    out.print(
        f"haystack {manifest.name}: {manifest.passages:,} passages ({manifest.article_passages:,} from "
        f"articles, {manifest.pool_passages:,} pool paragraphs), {what} -> {target / manifest.file}"
    )


@index_app.command("world")
@friendly_errors
def index_world_cmd(
    dataset: Annotated[str, typer.Option(help="hotpotqa, 2wikimultihopqa or pubmedqa.")],
    tokenizer: Annotated[
        str, typer.Option(help="Corpus-statistics tokenizer: wordpiece, bytes, or a file.")
    ] = "wordpiece",
    progress: ProgressOpt = True,
    verbose: VerboseOpt = False,
) -> None:
    """Build everything the realistic world's configs use: the haystack, its BM25 index, and the statistics
    index of the articles plus the pool (in QUCO_WORLD_DIR, default <cache>/world)."""
    from quco.world.haystack import ensure_haystack, plan
    from quco.world.sources import pool_for

    _setup_logging(verbose)
    name = pool_for(dataset).dataset
    ensure_haystack(plan(name), progress=progress)  # built here, so that --no-progress covers it too
    _index_bm25(f"haystack:{name}", None, "stop", progress)
    _index_stats(f"wiki-articles+pool:{name}", None, tokenizer, "stop", progress)


@index_app.command("dense")
@friendly_errors
def index_dense_cmd(
    corpus: CorpusOpt,
    out_dir: IndexOutOpt = None,
    model: Annotated[
        str, typer.Option(help="sentence-transformers model (default: the bundled MiniLM).")
    ] = "all-MiniLM-L6-v2",
    on_error: OnErrorOpt = "stop",
    progress: ProgressOpt = True,
    verbose: VerboseOpt = False,
) -> None:
    """Build a dense (sentence-transformers + FAISS) index of a corpus, embeddings stored once and memory-mapped."""
    from quco.retrieval.dense import index_dense
    from quco.world.corpora import resolve_source

    _setup_logging(verbose)
    source = resolve_source(corpus)
    report = index_dense(source, out_dir=out_dir, model=model, progress=progress, on_error=on_error)
    out.print(
        f"dense: {report.passages_indexed} passages ({report.dim}-dim, {report.model}) from {report.lines_read} lines "
        f"({report.skipped} skipped) in {report.seconds:.1f}s -> {report.index_dir}"
    )


@app.command("config")
@friendly_errors
def show_config(config: ConfigOpt = None, method: MethodOpt = None, set_: SetOpt = None) -> None:
    """Print the resolved configuration (defaults, file and overrides) as JSON."""
    cfg = load_config(config, overrides=_overrides(set_), method=method)
    sys.stdout.write(json.dumps(cfg.model_dump(), indent=2) + "\n")


@serve_app.command("stats")
@friendly_errors
def serve_stats_cmd(
    index: Annotated[
        list[str],
        typer.Option(
            "--index", help="NAME=DIR[,DIR...] or DIR: a local index (or its shards) to serve; repeatable."
        ),
    ],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind (0 picks a free one).")] = 8765,
    api_key_env: Annotated[
        str,
        typer.Option(help="Environment variable holding the bearer key; unset variable = loopback only."),
    ] = "QUCO_API_KEY",
    concurrency: Annotated[int, typer.Option(help="Counts computed at once.")] = 2,
    queue: Annotated[int, typer.Option(help="Requests waiting for a slot before new ones get 429.")] = 16,
    rate_limit: Annotated[
        float | None,
        typer.Option(
            help="Requests per second per client address (429 with Retry-After above), as the hosted API "
            "limits each IP; default: no limit."
        ),
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Serve local indexes over the hosted Infini-gram API's JSON protocol."""
    from quco.corpus_stats.server import check_exposure, serve_stats

    _setup_logging(verbose)
    named: dict[str, list[str]] = {}
    for spec in index:
        name, sep, dirs = spec.partition("=")
        if not sep:
            name, dirs = Path(spec).name, spec
        named[name] = [d for d in dirs.split(",") if d]
    key = os.environ.get(api_key_env) or None
    check_exposure(host, key, api_key_env)  # before the indexes are opened
    serve_stats(
        named,
        host=host,
        port=port,
        api_key=key,
        api_key_env=api_key_env,
        concurrency=concurrency,
        queue=queue,
        rate_limit=rate_limit,
    )


_mount_optional()


def main() -> None:
    # OpenMP's busy-waiting makes torch generation 10x slower on shared cores; set before torch loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    app()


if __name__ == "__main__":
    main()
