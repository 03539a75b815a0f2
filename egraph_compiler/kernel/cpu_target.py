"""The CPU a program is compiled for: the host, or a named x86 CPU (`cpu="haswell"`, or EGC_CPU).

One description serves the LLVM backend (the `target-cpu` and `target-features` it asks LLVM for) and the CPU
cost model (vector width and register count, which decide which schedules pay). The host is read from
llvmlite's host CPU name and features; a named CPU is one of LLVM's x86 CPU names, whose ISA level comes from
the table below, and LLVM derives its features from the name. Code for a named CPU runs on this host, so a
CPU whose ISA the host lacks is refused with a diagnostic rather than crashing on an illegal instruction.
Cache sizes and core count are always the host's: they describe where the code runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

from egraph_compiler.ir.diagnostics import InvalidArgument

ENV = "EGC_CPU"
HOST_NAMES = ("host", "native")

# ISA level -> (vector bytes, vector registers). "sse" covers SSE2 .. SSE4.2 (x86-64, -v2).
ISA_VECTORS = {"avx512": (64, 32), "avx2": (32, 16), "avx": (32, 16), "sse": (16, 16)}
# ISA level -> the host feature flags it needs (llvmlite's names)
ISA_NEEDS = {"avx512": ("avx512f", "avx2", "fma"), "avx2": ("avx2", "fma"), "avx": ("avx",), "sse": ()}

# LLVM x86 CPU names by the widest vector ISA they have (the common server and desktop parts)
NAMED: dict[str, str] = {
    **dict.fromkeys(("x86-64", "x86-64-v2", "nehalem", "westmere", "core2", "btver2"), "sse"),
    **dict.fromkeys(("sandybridge", "ivybridge", "bdver1", "bdver2"), "avx"),
    **dict.fromkeys(
        ("x86-64-v3", "haswell", "broadwell", "skylake", "alderlake", "raptorlake", "znver1", "znver2", "znver3", "bdver4"),
        "avx2",
    ),
    **dict.fromkeys(
        (
            "x86-64-v4",
            "skylake-avx512",
            "cascadelake",
            "cooperlake",
            "icelake-server",
            "icelake-client",
            "tigerlake",
            "sapphirerapids",
            "emeraldrapids",
            "graniterapids",
            "znver4",
            "znver5",
        ),
        "avx512",
    ),
}


# CPUs that execute each 512-bit operation as two 256-bit halves: half the AVX-512 FMA peak
HALF_WIDTH_AVX512 = frozenset({"znver4"})


@dataclass(frozen=True)
class CPUTarget:
    """What code is generated for: LLVM's CPU name and feature string, and the vector ISA they imply."""

    name: str  # LLVM's CPU name ("znver4", "haswell")
    features: str  # LLVM's feature string; "" lets LLVM derive them from the name
    isa: str  # "avx512", "avx2", "avx" or "sse"
    host: bool  # the host CPU itself (its exact features)

    @property
    def simd_bytes(self) -> int:
        return ISA_VECTORS[self.isa][0]

    @property
    def vector_regs(self) -> int:
        return ISA_VECTORS[self.isa][1]

    @property
    def fma_vectors_per_cycle(self) -> int:
        """Full-width FMA vectors a core issues a cycle: two, but one where 512-bit operations run as two
        256-bit halves (AMD Zen 4)."""
        return 1 if self.isa == "avx512" and self.name in HALF_WIDTH_AVX512 else 2

    def describe(self) -> str:
        return f"{self.name} ({self.isa.upper()}{', host' if self.host else ''})"


def _host_features() -> dict[str, bool]:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return dict(llvm.get_host_cpu_features())


def _isa_of(feats: dict[str, bool]) -> str:
    for isa in ("avx512", "avx2", "avx"):
        if all(feats.get(f, False) for f in ISA_NEEDS[isa]):
            return isa
    return "sse"


@cache
def host_cpu() -> CPUTarget:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    feats = llvm.get_host_cpu_features()
    return CPUTarget(llvm.get_host_cpu_name(), feats.flatten(), _isa_of(dict(feats)), host=True)


def cpu_target(cpu: str | None = None) -> CPUTarget:
    """The CPU to compile for: `cpu` if given, else $EGC_CPU, else the host. Raises InvalidArgument (E1006) for
    a name LLVM's x86 table here does not know, or a CPU whose vector ISA this host cannot run."""
    where = "cpu" if cpu is not None else f"${ENV}"
    name = cpu if cpu is not None else os.environ.get(ENV, "").strip() or None
    return _resolve(name, where)


@cache
def _resolve(name: str | None, where: str) -> CPUTarget:
    if name is None or (isinstance(name, str) and name.lower() in HOST_NAMES):
        return host_cpu()
    if not isinstance(name, str) or name.lower() not in NAMED:
        raise InvalidArgument(
            at=f"{where}={name!r}",
            why="not an x86 CPU name this compiler knows",
            suggestion=f"use 'host' or one of: {', '.join(sorted(NAMED))}",
        )
    key = name.lower()
    isa = NAMED[key]
    missing = [f for f in ISA_NEEDS[isa] if not _host_features().get(f, False)]
    if missing:
        raise InvalidArgument(
            at=f"{where}={name!r}",
            why=f"code for {key} uses {isa.upper()}, which this host lacks ({', '.join(missing)})",
            suggestion=f"compile for this host (cpu=None) or a CPU of at most "
            f"{host_cpu().isa.upper()}; the code runs here, so it must be legal here",
        )
    return CPUTarget(key, "", isa, host=False)
