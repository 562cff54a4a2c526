"""Serving benchmark: QuCo-RAG throughput against one llama.cpp server, and ``quco serve`` under load.

Part 1: questions per minute for N HotpotQA dev questions (default 40) with QuCo-RAG through the OpenAI
backend, against one llama.cpp server with 1, 2 and 4 parallel slots, answered sequentially and by as many
client threads as slots. Parallel slots need llama.cpp's own ``llama-server`` (``--llama-server PATH``; ``make llama-server`` builds it);
llama-cpp-python's server decodes one request at a time, so without that binary only 1 slot is measured.
Part 2: ``quco serve`` (a child process) under 8 concurrent clients for 100 requests: p50/p95 latency, errors,
peak memory of the service and of the LLM server.

    python bench/bench_serve.py [--questions 40] [--requests 100] [--llama-server PATH]

The evaluation data is read from quco.paths.data_dir() (QUCO_DATA_DIR); indexes go to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from quco.config import PipelineConfig, load_config
from quco.llm.models import default_gguf_path
from quco.paths import data_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support
from support.llama_server import LlamaServer, ServedModel, _free_port  # noqa: E402

HOTPOT_DEV = "hotpotqa/hotpot_dev_0_300_unified.jsonl"


def questions(n: int) -> list[dict[str, Any]]:
    with (data_dir() / HOTPOT_DEV).open(encoding="utf-8") as fh:
        rows = [json.loads(line) for _, line in zip(range(n), fh, strict=False)]
    return rows


def corpus_of(rows: list[dict[str, Any]], out: Path) -> Path:
    """The questions' gold and distractor paragraphs as a JSONL corpus (the retriever's and the stats' corpus)."""
    seen: set[str] = set()
    with out.open("w", encoding="utf-8") as fh:
        for row in rows:
            for para in row["context_paragraphs"]:
                if para["title"] not in seen:
                    seen.add(para["title"])
                    fh.write(
                        json.dumps({"id": f"p{len(seen)}", "title": para["title"], "text": para["text"]})
                        + "\n"
                    )
    return out


def pipeline_config(
    work: Path, corpus: Path, base_url: str, max_new_tokens: int, concurrency: int
) -> PipelineConfig:
    return load_config(
        overrides={
            "generator.backend": "openai",
            "generator.base_url": base_url,
            "generator.model": "gemma3-270m",
            "generator.max_context_tokens": 2048,
            "generator.concurrency": concurrency,
            "retriever.corpus": str(corpus),
            "retriever.index_dir": str(work / "bm25"),
            "corpus_stats.index_dir": str(work / "stats"),
            "prompt.fewshot": 4,
            "generation.max_new_tokens": max_new_tokens,
        },
        method="quco",
    )


class CppServer:
    """llama.cpp's ``llama-server`` with ``slots`` parallel sequences (each gets ``ctx_per_slot`` tokens)."""

    def __init__(self, binary: str, model: str, slots: int, ctx_per_slot: int = 2048) -> None:
        self.port = _free_port("127.0.0.1")
        self.args = [
            binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port), "--parallel", str(slots),
            "-c", str(ctx_per_slot * slots), "-t", str(os.cpu_count() or 1), "--alias", "gemma3-270m",
            "--no-webui", "-lv", "0",
        ]  # fmt: skip
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def __enter__(self) -> CppServer:
        self.process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("llama-server did not start")

    def __exit__(self, *exc: object) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def peak_rss_mb(pid: int | None) -> float | None:
    """VmHWM (peak resident memory) of a live process, in MiB."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def throughput(cfg: PipelineConfig, rows: list[dict[str, Any]], workers: int) -> tuple[float, int, list[str]]:
    """Answer every question with ``workers`` client threads on one shared pipeline: (questions/min, errors)."""
    from quco.pipeline import Pipeline

    pipe = Pipeline.from_config(cfg, progress=False)
    pipe.answer(rows[0]["question"])  # warm-up: indexes loaded, exemplar prefix cached by the server
    errors: list[str] = []

    def one(row: dict[str, Any]) -> str:
        try:
            return pipe.answer(row["question"]).stop_reason
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors.append(f"{type(exc).__name__}: {exc}")
            return "error"

    start = time.perf_counter()
    if workers == 1:
        reasons = [one(r) for r in rows]
    else:
        with ThreadPoolExecutor(workers) as pool:
            reasons = list(pool.map(one, rows))
    elapsed = time.perf_counter() - start
    return len(rows) / elapsed * 60, len(errors), reasons


def part1(
    args: argparse.Namespace, rows: list[dict[str, Any]], work: Path, corpus: Path
) -> list[dict[str, Any]]:
    model = str(default_gguf_path())
    results = []
    slot_counts = [1, 2, 4] if args.llama_server else [1]
    for slots in slot_counts:
        for workers in sorted({1, max(2, slots)}):
            # A fresh server per measurement: a server that has answered the same questions before would
            # serve them from its prompt cache, and the second client pattern would look faster than it is.
            server = (
                CppServer(args.llama_server, model, slots)
                if args.llama_server
                else LlamaServer([ServedModel("gemma3-270m", model, n_ctx=2048)])
            )
            with server:
                cfg = pipeline_config(
                    work, corpus, server.base_url, args.max_new_tokens, concurrency=max(2, slots)
                )
                qpm, errors, reasons = throughput(cfg, rows, workers)
                row = {
                    "server": "llama-server" if args.llama_server else "llama-cpp-python",
                    "slots": slots,
                    "client": "sequential" if workers == 1 else f"concurrent x{workers}",
                    "questions": len(rows),
                    "questions_per_min": round(qpm, 2),
                    "errors": errors,
                    "llm_peak_rss_mb": round(peak_rss_mb(server.pid) or 0, 1),
                }
                results.append(row)
                print(json.dumps(row), flush=True)
    return results


def serve_child(settings_path: str) -> None:
    """Run ``quco serve`` in this (child) process from a JSON description."""
    import uvicorn

    from quco.serve.app import create_app
    from quco.serve.service import ServeSettings

    spec = json.loads(Path(settings_path).read_text())
    cfg = PipelineConfig.model_validate(spec["config"])
    settings = ServeSettings(config=cfg, concurrency=spec["concurrency"], queue=spec["queue"], timeout_s=600)
    uvicorn.run(
        create_app(settings), host="127.0.0.1", port=spec["port"], log_level="warning", access_log=False
    )


def part2(args: argparse.Namespace, rows: list[dict[str, Any]], work: Path, corpus: Path) -> dict[str, Any]:
    model = str(default_gguf_path())
    server = (
        CppServer(args.llama_server, model, 4)
        if args.llama_server
        else LlamaServer([ServedModel("gemma3-270m", model, n_ctx=2048)])
    )
    with server:
        cfg = pipeline_config(work, corpus, server.base_url, args.max_new_tokens, concurrency=4)
        port = _free_port("127.0.0.1")
        spec = {"config": cfg.model_dump(), "concurrency": 4, "queue": 16, "port": port}
        spec_path = work / "serve.json"
        spec_path.write_text(json.dumps(spec))
        child = subprocess.Popen([sys.executable, __file__, "--serve-child", str(spec_path)])
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.3)
            latencies: list[float] = []
            errors: list[str] = []
            lock = threading.Lock()
            counter = iter(range(args.requests))

            def client() -> None:
                with httpx.Client(timeout=600) as http:
                    for i in counter:
                        q = rows[i % len(rows)]["question"]
                        t0 = time.perf_counter()
                        r = http.post(
                            f"{url}/v1/answer", json={"question": q, "options": {"include_trace": False}}
                        )
                        dt = time.perf_counter() - t0
                        with lock:
                            latencies.append(dt)
                            if r.status_code != 200:
                                errors.append(f"{r.status_code}: {r.text[:200]}")

            start = time.perf_counter()
            threads = [threading.Thread(target=client) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - start
            lat = sorted(latencies)
            result = {
                "clients": args.clients,
                "requests": len(lat),
                "errors": len(errors),
                "p50_s": round(statistics.median(lat), 2),
                "p95_s": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 2),
                "requests_per_min": round(len(lat) / elapsed * 60, 2),
                "serve_peak_rss_mb": round(peak_rss_mb(child.pid) or 0, 1),
                "llm_peak_rss_mb": round(peak_rss_mb(server.pid) or 0, 1),
            }
            if errors:
                result["first_error"] = errors[0]
            print(json.dumps(result), flush=True)
            return result
        finally:
            child.terminate()
            child.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--llama-server",
        default=os.environ.get("QUCO_LLAMA_SERVER")
        or shutil.which("llama-server")
        or shutil.which("llama-server", path=str(Path(sys.executable).parent)),  # `make llama-server`
    )
    parser.add_argument("--skip", choices=["part1", "part2"], default=None)
    parser.add_argument("--serve-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_child:
        serve_child(args.serve_child)
        return
    rows = questions(args.questions)
    with tempfile.TemporaryDirectory(prefix="quco-bench-serve-") as tmp:
        work = Path(tmp)
        corpus = corpus_of(questions(max(args.questions, 100)), work / "corpus.jsonl")
        print(
            f"# corpus: paragraphs of the first {max(args.questions, 100)} HotpotQA dev questions", flush=True
        )
        out: dict[str, Any] = {}
        if args.skip != "part1":
            out["throughput"] = part1(args, rows, work, corpus)
        if args.skip != "part2":
            out["serve"] = part2(args, rows, work, corpus)
    print("# summary")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
