"""A local OpenAI-compatible llama.cpp server (``python -m llama_cpp.server``) in a child process, started and
stopped by its owner: the tests and benchmarks of the 'openai' backend and of ``quco serve``.

It lives beside the tests, not in the library: nothing in ``quco`` starts a server. The benchmarks import it
from here (``bench/`` puts the repository root on ``sys.path``)."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from quco.errors import ConfigError
from quco.llm.llamacpp import BATCH_TOKENS, LlamaCppError, _import_llama_cpp

logger = logging.getLogger(__name__)


@dataclass
class ServedModel:
    """One model of a ``LlamaServer``: its alias (the request's ``model``) and llama.cpp settings."""

    alias: str
    path: str
    n_ctx: int = 4096
    logits_all: bool = False  # llama-cpp-python's server needs it for logprobs (and is then much slower)
    n_threads: int | None = None
    n_batch: int = BATCH_TOKENS  # as the in-process backend, so that both evaluate prompts alike


class LlamaServer:
    """``python -m llama_cpp.server`` on loopback, started and stopped by its owner (tests, benchmarks).

    With several models the server loads one at a time and swaps on demand (about a second per swap).
    """

    def __init__(
        self,
        models: Sequence[ServedModel],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        if not models:
            raise ConfigError("a LlamaServer needs at least one model")
        self.models = list(models)
        self.host = host
        self.port = port or _free_port(host)
        self.api_key = api_key
        self.log_path = Path(log_path) if log_path else None
        self.process: Any = None
        self._config_path: Path | None = None
        self._log: Any = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self, timeout_s: float = 120.0) -> LlamaServer:
        _import_llama_cpp()
        self.stop()  # a restart after kill(): drop the old config file and log handle
        settings: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "models": [
                {
                    "model": m.path,
                    "model_alias": m.alias,
                    "n_ctx": m.n_ctx,
                    "n_batch": m.n_batch,
                    "n_ubatch": m.n_batch,
                    "logits_all": m.logits_all,
                    "n_threads": m.n_threads or max(1, os.cpu_count() or 1),
                    "verbose": False,
                }
                for m in self.models
            ],
        }
        if self.api_key:
            settings["api_key"] = self.api_key
        fd, name = tempfile.mkstemp(prefix="quco-llama-server-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(settings, fh)
        self._config_path = Path(name)
        self._log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--config_file", name],
            stdout=self._log,
            stderr=self._log,
        )
        deadline = time.monotonic() + timeout_s
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise LlamaCppError(
                    f"the llama.cpp server exited with code {self.process.returncode} while starting"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            try:
                if httpx.get(f"{self.base_url}/models", headers=headers, timeout=2.0).status_code == 200:
                    logger.info("llama.cpp server ready at %s (pid %d)", self.base_url, self.process.pid)
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise LlamaCppError(f"the llama.cpp server did not answer at {self.base_url} within {timeout_s:g} s")

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s) and remove its config file."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._config_path is not None:
            self._config_path.unlink(missing_ok=True)
            self._config_path = None
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


__all__ = ["LlamaServer", "ServedModel"]
