"""What this machine offers a process: the cores it may run on, how busy it is, and which processor it is."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# The widest vector instructions llama.cpp's CPU kernels can use, widest first (x86 flags in /proc/cpuinfo).
_SIMD = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"))


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS tells it, else every core)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The machine's 1-minute load average, or None where the OS does not give one."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on this platform
        return None


@functools.cache
def cpu_name() -> str:
    """The processor, as a run records it beside each question's seconds: seconds from two machines are not
    comparable, and a virtual machine's model name alone can hide which generation of processor it is.

    On Linux: the model name with its family and model numbers and widest vector instructions, e.g.
    "AMD EPYC (family 23, model 1; AVX2)"; elsewhere what the platform module says.
    """
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    return describe_cpuinfo(text) or platform.processor() or platform.machine() or "unknown"


def describe_cpuinfo(text: str) -> str:
    """The first processor of a /proc/cpuinfo text, described as ``cpu_name`` does ("" if it names none)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    name = fields.get("model name") or fields.get("hardware") or fields.get("cpu model") or ""
    if not name:
        return ""
    details = []
    if "cpu family" in fields and "model" in fields:
        details.append(f"family {fields['cpu family']}, model {fields['model']}")
    flags = set(fields.get("flags", "").split())
    simd = next((label for flag, label in _SIMD if flag in flags), None)
    if simd:
        details.append(simd)
    return f"{name} ({'; '.join(details)})" if details else name
