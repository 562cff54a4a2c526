"""Loading llama.cpp's CPU kernel modules (quco.llm.llamacpp_backends)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quco.llm import llamacpp_backends
from quco.llm.llamacpp_backends import load_cpu_backends, module_dirs

llama_cpp = pytest.importorskip("llama_cpp", reason="the llamacpp extra is part of the test install")


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_module_dirs_finds_the_kernel_modules_where_a_dl_build_installs_them(tmp_path: Path) -> None:
    package = tmp_path / "site" / "llama_cpp"
    _touch(package / "lib" / "libllama.so")
    _touch(package / "lib" / "libggml.so")
    assert module_dirs(package) == []  # a build with its kernels linked in has no module
    _touch(tmp_path / "site" / "bin" / "libggml-cpu-haswell.so")  # ggml's install rule: CMAKE_INSTALL_BINDIR
    _touch(tmp_path / "site" / "bin" / "libggml-cpu-x64.so")
    assert module_dirs(package) == [tmp_path / "site" / "bin"]
    _touch(package / "lib" / "libggml-cpu-sse42.so")
    assert module_dirs(package) == [package / "lib", tmp_path / "site" / "bin"]


def test_the_installed_build_has_its_cpu_backend_linked_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The portable build of the Makefile: its backend is there already, so nothing is loaded (the check goes
    through the real ggml library of the installed package). A GGML_BACKEND_DL build is measured by
    bench/bench_eval_speed.py's variants mode."""
    monkeypatch.setattr(llamacpp_backends, "_loaded", None)
    assert load_cpu_backends(llama_cpp) == []
    assert "CPU : " in llama_cpp.llama_print_system_info().decode()  # the CPU backend, with its features
