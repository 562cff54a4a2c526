"""The machine a question ran on: the processor's description recorded beside its seconds."""

from __future__ import annotations

from quco.machine import cpu_name, describe_cpuinfo

ZEN = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 avx fma avx2 bmi2

processor\t: 1
model name\t: another processor that is not read
"""


def test_a_cpuinfo_names_model_family_and_widest_vector_instructions() -> None:
    assert describe_cpuinfo(ZEN) == "AMD EPYC (family 23, model 1; AVX2)"
    wide = ZEN.replace("avx2 bmi2", "avx2 avx512f bmi2")
    assert describe_cpuinfo(wide) == "AMD EPYC (family 23, model 1; AVX-512)"
    plain = "model name\t: Some CPU\nflags\t: fpu sse2\n"
    assert describe_cpuinfo(plain) == "Some CPU"
    assert describe_cpuinfo("processor\t: 0\nBogoMIPS\t: 50.00\n") == ""  # names nothing: the platform's word


def test_this_machine_has_a_name() -> None:
    assert cpu_name() and cpu_name() == cpu_name()
