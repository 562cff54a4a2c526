"""Evaluation speed on the evaluation model: questions per hour and prompt tokens evaluated per question.

SR-RAG, FLARE and QuCo-RAG answer the same HotpotQA dev questions (configs/hotpotqa settings, generator
``llamacpp`` with ``qwen2.5-coder-1.5b-instruct``; pull it first with ``quco models pull qwen2.5-coder-1.5b-instruct``)
through ``quco eval``'s own code path, once per mode, in one run:

    off       1 process, 1 decoding thread and every core evaluating prompts (llama-cpp-python's defaults, as
              quco ran before); every prompt evaluated in full: the savings switched off
    legacy    as off, with the previous rule: reuse whole 512-token batches of the last prompt
    reuse     as off, with the exemplar prefix's saved state and the last prompt's state (the generator's default)
    threads2  1 process, 2 threads; reuse (`quco eval`'s default on 2 cores)
    procs2    2 worker processes with 1 thread each (`quco eval --workers 2`); reuse
    seq2      2 sequences decoded in parallel in one llama.cpp context: llama.cpp's llama-server with
              --parallel 2 and 2 threads, reached through the openai backend by 2 worker threads
    answerstop  as threads2, with QuCo-RAG's ``stop_after_answer``: drafts end once the answer sentence is
              whole (QuCo-RAG only; its answers, decisions and kept text must equal those of threads2)
    variants  as threads2, on another llama-cpp-python build installed into --llama-cpp-dir (pip install
              --target), run in a child process: a build whose CPU kernels are chosen at run time
              (GGML_BACKEND_DL with GGML_CPU_ALL_VARIANTS, docs/evaluation_model.md) against the portable one

    python bench/bench_eval_speed.py [--questions 20] [--modes off,reuse,procs2,threads2,seq2,legacy,answerstop]
                                     [--methods sr-rag,flare,quco] [--out DIR] [--llama-server PATH]
                                     [--llama-cpp-dir DIR]

Each (mode, method) cell is a resumable ``quco eval`` run directory under ``--out``; running the bench again
finishes interrupted cells and reports recorded ones (timings are summed over the sittings that answered
questions). Timings are wall clock on a possibly shared machine: the load average is sampled during every
cell and printed beside it. Modes off, reuse, threads2 and procs2 must give the same answers; the table says
whether they did (seq2 and legacy evaluate prompts differently, so their answers may differ).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from quco.config import PipelineConfig, load_config
from quco.eval.run.runner import EvalOptions, Questions, run_eval
from quco.eval.runs.store import RESULTS_FILE
from quco.llm.models import model_path
from quco.model_catalog import known_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support
from support.llama_server import _free_port  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
MODEL = "qwen2.5-coder-1.5b-instruct"
SAME_AS_OFF = ("reuse", "threads2", "procs2")


@dataclass(frozen=True)
class Mode:
    name: str
    threads: int
    workers: int
    reuse: bool = True
    shared_prefix: bool = True
    chunk: int = 1024
    server: bool = False
    batch_threads: int | None = None  # threads evaluating prompts when not `threads` (in-process modes only)
    stop_after_answer: bool = False  # QuCo-RAG's option; the mode runs QuCo-RAG only
    other_build: bool = False  # the llama-cpp-python build in --llama-cpp-dir, in a child process


MODES = {
    m.name: m
    for m in (
        Mode("off", 1, 1, reuse=False, batch_threads=os.cpu_count()),
        Mode("legacy", 1, 1, shared_prefix=False, chunk=512, batch_threads=os.cpu_count()),
        Mode("reuse", 1, 1, batch_threads=os.cpu_count()),
        Mode("threads2", 2, 1),
        Mode("procs2", 1, 2),
        Mode("seq2", 2, 2, server=True),
        Mode("answerstop", 2, 1, stop_after_answer=True),
        Mode("variants", 2, 1, other_build=True),
    )
}


class LoadSampler:
    """The 1-minute load average, sampled every few seconds while a cell runs."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self.every_s)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class CppServer:
    """llama.cpp's llama-server decoding ``slots`` sequences in one context (``ctx`` tokens each)."""

    def __init__(self, binary: str, gguf: Path, slots: int, threads: int, ctx: int = 4096) -> None:
        self.port = _free_port("127.0.0.1")
        self.args = [
            binary, "-m", str(gguf), "--host", "127.0.0.1", "--port", str(self.port), "--parallel", str(slots),
            "-c", str(ctx * slots), "-t", str(threads), "-b", "1024", "-ub", "1024", "--alias", MODEL,
            "--no-webui", "-lv", "0",
        ]  # fmt: skip
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def cpu_seconds(self) -> float:
        if self.process is None:
            return 0.0
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> CppServer:
        self.process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError("llama-server did not start")

    def __exit__(self, *exc: object) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def config_for(method: str, mode: Mode, base_url: str | None = None) -> PipelineConfig:
    overrides: dict[str, Any] = {"generator.model": MODEL, "generator.threads": mode.threads}
    if mode.stop_after_answer:
        overrides["params.stop_after_answer"] = True
    if base_url is None:
        overrides["generator.backend"] = "llamacpp"
    else:
        overrides |= {
            "generator.backend": "openai",
            "generator.base_url": base_url,
            "generator.concurrency": 2,
        }
    return load_config(CONFIGS / f"hotpotqa/{method}.yaml", overrides=overrides)


def run_cell(mode: Mode, method: str, args: argparse.Namespace, server: CppServer | None) -> dict[str, Any]:
    """Answer the questions of one cell (resuming its run directory); wall and CPU seconds of this sitting."""
    from quco.pipeline import Pipeline

    cfg = config_for(method, mode, server.base_url if server else None)
    target: Any = cfg
    if mode.workers == 1 and not mode.server:  # built before the clock starts: model loading is not timed
        target = Pipeline.from_config(cfg, progress=False)
        gen = target.generator
        gen.clear_cache()
        gen.reuse, gen.shared_prefix, gen.chunk = mode.reuse, mode.shared_prefix, mode.chunk
        if mode.batch_threads:  # quco: prompts on `threads` threads; llama-cpp-python: on every core
            gen.llama._ctx.set_n_threads(mode.threads, mode.batch_threads)
    cpu0, children0 = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    server0 = server.cpu_seconds() if server else 0.0
    with LoadSampler() as load:
        start = time.perf_counter()
        summary = run_eval(target, "hotpotqa", Questions(limit=args.questions, offset=args.offset), EvalOptions(out_dir=args.out / mode.name / method, workers=mode.workers, progress=False))  # fmt: skip
        wall = time.perf_counter() - start
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - cpu0 + children.ru_utime + children.ru_stime
    cpu -= children0.ru_utime + children0.ru_stime
    if server:
        cpu += server.cpu_seconds() - server0
    return {"new": summary.new, "errors": summary.errors, "wall": wall, "cpu": cpu, "load": load.samples}


def run_child_cell(mode: Mode, method: str, args: argparse.Namespace) -> dict[str, Any]:
    """One cell in a child process that imports llama_cpp from --llama-cpp-dir (the child times itself, with its
    model loaded before its clock starts, as run_cell does)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(args.llama_cpp_dir), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [
        sys.executable, __file__, "--child", f"{mode.name}/{method}", "--questions", str(args.questions),
        "--offset", str(args.offset), "--out", str(args.out), "--llama-cpp-dir", str(args.llama_cpp_dir),
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_cell(spec: str, args: argparse.Namespace) -> None:
    """The child's side of run_child_cell: check which build it runs, answer the cell, print its figures."""
    import llama_cpp

    from quco.llm.llamacpp_backends import load_cpu_backends

    where = Path(llama_cpp.__file__).resolve()
    if not where.is_relative_to(args.llama_cpp_dir.resolve()):
        raise SystemExit(f"the child imported llama_cpp from {where}, not from {args.llama_cpp_dir}")
    modules = load_cpu_backends(llama_cpp)
    info = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    print(f"{spec}: llama_cpp {llama_cpp.__version__} from {where.parent}; backend modules from "
          f"{', '.join(map(str, modules)) or 'none (linked in)'}; {info}", file=sys.stderr, flush=True)  # fmt: skip
    mode_name, method = spec.split("/")
    print(json.dumps(run_cell(MODES[mode_name], method, args, None)), flush=True)


def records(path: Path) -> dict[str, dict[str, Any]]:
    file = path / RESULTS_FILE
    if not file.is_file():
        return {}
    return {r["id"]: r for r in map(json.loads, file.read_text("utf-8").splitlines())}


def _steps(rec: dict[str, Any]) -> list[tuple]:
    return [
        (s["decision"], s["draft"], tuple(s["queries"])) for s in (rec.get("trace") or {}).get("steps", [])
    ]


def _kept_steps(rec: dict[str, Any]) -> list[tuple]:
    """Decisions, kept text and queries: what ``stop_after_answer`` must not change (drafts get shorter)."""
    return [
        (s["decision"], s["kept"], tuple(s["queries"])) for s in (rec.get("trace") or {}).get("steps", [])
    ]


def cell_row(mode: str, method: str, cell: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    recs = records(args.out / mode / method)
    n = len(recs)
    counters = [(r.get("trace") or {}).get("counters", {}) for r in recs.values()]

    def per_q(key: str, role: str | None = None) -> float:
        vals = [
            sum(c.get(key, {}).values()) if role is None else c.get(key, {}).get(role, 0) for c in counters
        ]
        return sum(vals) / n if n else 0.0

    base, steps = {"answerstop": ("threads2", _kept_steps), "variants": ("threads2", _steps)}.get(
        mode, ("off", _steps)
    )
    off = records(args.out / base / method)
    same = None
    if (mode in SAME_AS_OFF or mode in ("answerstop", "variants")) and off:
        common = [i for i in recs if i in off]
        same = sum(
            recs[i]["prediction"] == off[i]["prediction"] and steps(recs[i]) == steps(off[i]) for i in common
        )
        same = f"{same}/{len(common)}" + ("" if base == "off" else " (vs threads2)")
    answered = cell.get("new", 0)
    wall = cell.get("wall", 0.0)
    loads = cell.get("load", [])
    return {
        "mode": mode,
        "method": method,
        "questions": n,
        "timed": answered,
        "q_per_hour": 3600 * answered / wall if wall and answered else None,
        "cpu_s_per_q": cell.get("cpu", 0.0) / answered if answered else None,
        "prompt_sent": per_q("prompt_tokens"),
        "prompt_evaluated": None if mode == "seq2" else per_q("prompt_tokens_evaluated"),
        "generated": per_q("generated_tokens"),
        "em": sum(float(r.get("em") or 0) for r in recs.values()) / n if n else 0.0,
        "load": statistics.fmean(loads) if loads else None,
        "same_as_off": same,
    }


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table(rows: list[dict[str, Any]], totals: dict[str, dict[str, float]]) -> str:
    head = (
        "| mode | method | q | q/hour | CPU s/q | prompt tokens sent/q | evaluated/q | generated/q | EM | "
        "load avg | same answers as off |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['method']} | {r['questions']} | {_fmt(r['q_per_hour'], 1)} | "
            f"{_fmt(r['cpu_s_per_q'], 1)} | {_fmt(r['prompt_sent'])} | {_fmt(r['prompt_evaluated'])} | "
            f"{_fmt(r['generated'])} | {100 * r['em']:.0f} | {_fmt(r['load'], 1)} | {_fmt(r['same_as_off'])} |"
        )
    lines.append("")
    lines.append("| mode | questions (all methods) | q/hour | speed-up vs off |")
    lines.append("|---|---|---|---|")
    base = totals.get("off", {}).get("qph")
    for mode, t in totals.items():
        ratio = f"{t['qph'] / base:.2f}x" if base and t.get("qph") else "n/a"
        lines.append(f"| {mode} | {t['n']} | {_fmt(t.get('qph'), 1)} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--modes", default="off,reuse,procs2,threads2,seq2,legacy")
    parser.add_argument("--methods", default="sr-rag,flare,quco")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-eval-speed"))
    parser.add_argument(
        "--llama-cpp-dir",
        type=Path,
        help="a folder holding another llama-cpp-python build (pip install --target DIR WHEEL) for the variants mode",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)  # MODE/METHOD: one cell, in a child process
    parser.add_argument(
        "--llama-server",
        default=shutil.which("llama-server")
        or shutil.which("llama-server", path=str(Path(sys.executable).parent)),
        help="llama.cpp's llama-server binary for the seq2 mode (`make llama-server` builds it)",
    )
    args = parser.parse_args()
    if args.child:
        child_cell(args.child, args)
        return
    modes = [MODES[m] for m in args.modes.split(",") if m]
    methods = [m for m in args.methods.split(",") if m]
    gguf = model_path(known_model(MODEL))
    args.out.mkdir(parents=True, exist_ok=True)
    state_path = args.out / "bench.json"
    state: dict[str, Any] = json.loads(state_path.read_text()) if state_path.is_file() else {}
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores", flush=True)

    # The savings on and off for every method first, then the other ways of using both cores.
    first = [m for m in modes if m.name in ("off", "reuse", "procs2")]
    order = [(mode, method) for method in methods for mode in first]
    order += [(mode, method) for method in methods for mode in modes if mode not in first]
    order = [(mode, method) for mode, method in order if method == "quco" or not mode.stop_after_answer]
    for mode, method in order:
        key = f"{mode.name}/{method}"
        if len(records(args.out / mode.name / method)) >= args.questions:
            continue
        if mode.server and not (args.llama_server and Path(args.llama_server).is_file()):
            print(f"{key}: skipped (no llama-server; `make llama-server` builds it)", flush=True)
            continue
        if mode.other_build and not (args.llama_cpp_dir and (args.llama_cpp_dir / "llama_cpp").is_dir()):
            print(f"{key}: skipped (no llama-cpp-python build in --llama-cpp-dir)", flush=True)
            continue
        print(f"{key}: running", flush=True)
        if mode.other_build:
            cell = run_child_cell(mode, method, args)
        elif mode.server:
            with CppServer(args.llama_server, gguf, slots=2, threads=mode.threads) as server:
                cell = run_cell(mode, method, args, server)
        else:
            cell = run_cell(mode, method, args, None)
        old = state.get(key, {"new": 0, "wall": 0.0, "cpu": 0.0, "load": [], "errors": 0})
        state[key] = {k: old[k] + cell[k] for k in ("new", "wall", "cpu", "load", "errors")}
        state_path.write_text(json.dumps(state, indent=1))
        row = cell_row(mode.name, method, state[key], args)
        print(json.dumps(row), flush=True)

    rows = [
        cell_row(mode.name, method, state.get(f"{mode.name}/{method}", {}), args)
        for method in methods
        for mode in modes
        if method == "quco" or not mode.stop_after_answer
    ]
    totals: dict[str, dict[str, float]] = {}
    for mode in modes:
        cells = [state.get(f"{mode.name}/{m}", {}) for m in methods]
        n, wall = sum(c.get("new", 0) for c in cells), sum(c.get("wall", 0.0) for c in cells)
        totals[mode.name] = {"n": n, "qph": 3600 * n / wall if wall and n else None}
    report = table(rows, totals)
    (args.out / "report.md").write_text(report + "\n")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print(report)


if __name__ == "__main__":
    main()
