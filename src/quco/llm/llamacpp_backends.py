"""llama.cpp's CPU kernels chosen at run time, for a build that keeps them in loadable modules.

A llama.cpp built with ``GGML_BACKEND_DL=ON`` links no backend into its libraries: each backend is a module
(``libggml-cpu-haswell.so``, ...) loaded when the program asks for it, and with ``GGML_CPU_ALL_VARIANTS=ON`` there
is one CPU module per x86 level, of which ggml loads the best this processor runs. llama-cpp-python does not ask
(its model loading then fails with "no backends are loaded"), so quco does, before the first model is loaded. A
build with its kernels linked in (the portable build of the ``Makefile``) has its backends already and is left
alone. ``docs/evaluation_model.md`` says how to build one and what it measured.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from pathlib import Path
from typing import Any

from quco.errors import QucoError

logger = logging.getLogger(__name__)

_SUFFIX = {"win32": ".dll", "darwin": ".dylib"}.get(sys.platform, ".so")
_loaded: list[Path] | None = None  # the module folders loaded from, once per process


def _ggml(lib_dir: Path) -> ctypes.CDLL:
    """The ggml library libllama was linked against. A wheel holds no symbolic links, so ``libggml.so``,
    ``libggml.so.0`` and so on are copies, each with a backend registry of its own: the one already in the
    process is found by its name without opening another copy (``RTLD_NOLOAD``)."""
    names = sorted({p.name for p in lib_dir.glob(f"libggml{_SUFFIX}*")} | {f"ggml{_SUFFIX}"}, key=len)
    for name in names:
        try:
            ggml = ctypes.CDLL(name, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
        ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
        ggml.ggml_backend_load_all_from_path.restype = None
        return ggml
    raise QucoError(f"llama-cpp-python's ggml library (from {lib_dir}) is not loaded")


def module_dirs(package_dir: Path) -> list[Path]:
    """Folders holding backend modules of a ``GGML_BACKEND_DL`` build: the package's ``lib`` folder, or the
    ``bin`` folder beside the package, where ggml's own install rule puts them (``CMAKE_INSTALL_BINDIR``)."""
    candidates = (package_dir / "lib", package_dir.parent / "bin", package_dir.parent / "lib")
    return [d for d in candidates if d.is_dir() and any(d.glob(f"*ggml-cpu*{_SUFFIX}"))]


def load_cpu_backends(llama_cpp: Any) -> list[Path]:
    """Load the backend modules of a build that keeps them apart (ggml picks the best CPU variant); nothing for a
    build with its backends linked in. Returns the folders loaded from."""
    global _loaded
    if _loaded is not None:
        return _loaded
    package_dir = Path(llama_cpp.__file__).resolve().parent
    ggml = _ggml(package_dir / "lib")
    if ggml.ggml_backend_dev_count() > 0:
        _loaded = []
        return _loaded
    dirs = module_dirs(package_dir)
    for d in dirs:
        ggml.ggml_backend_load_all_from_path(str(d).encode())
    if ggml.ggml_backend_dev_count() == 0:
        raise QucoError(
            f"this llama.cpp build has no backend linked in and no backend module was found beside {package_dir} "
            "(a GGML_BACKEND_DL build keeps them in libggml-cpu-*.so); rebuild llama-cpp-python with the flags of "
            "docs/serving.md"
        )
    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    logger.info("llama.cpp backends loaded from %s: %s", ", ".join(map(str, dirs)), info.strip())
    _loaded = dirs
    return _loaded
