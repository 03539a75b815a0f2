"""The CUDA backend on an NVIDIA GPU, side by side with cuBLAS (cupy.matmul), CuPy and the HBM bandwidth.

    python bench/gpu.py                  # needs CuPy and a GPU (pip install cupy-cuda12x)
    python bench/gpu.py --compile-only   # no GPU: optimize for "cuda", nvcc for sm_80 and sm_90, the estimates
    python bench/gpu.py --quick --only softmax,mul_add --json out.json

Every program is optimized for target "cuda", placed on the GPU once and timed with CUDA events (median of the
repeats, kernels only); its output is checked against the peer's. Peers: cupy.matmul (cuBLAS) for the GEMMs, the
same computation written with CuPy for softmax, layernorm and attention, and the device-to-device copy bandwidth
for the memory-bound programs. The goals of the CUDA backend: float16 GEMM at 4096 at 70% of cuBLAS, elementwise
and softmax at 80% of the copy bandwidth.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from egraph_compiler import Tensor, optimize
from egraph_compiler.backends.cuda_toolchain import compile_ptx, find_nvcc

F16, F32 = "float16", "float32"


@dataclass(frozen=True)
class GPUBench:
    name: str
    shapes: dict[str, tuple[tuple[int, ...], str]]  # input -> (shape, dtype)
    expr: Callable[..., Any]  # our Tensor program
    peer: Callable[..., Any]  # the same on CuPy arrays (cp module first)
    peer_name: str
    kind: str  # "flop" or "byte"
    work: float  # flops, or bytes each input read once + output written once
    goal: float | None = None  # fraction of the peer (flop) or of the copy bandwidth (byte)
    tol: float = 1e-3


def _softmax(cp: Any, x: Any) -> Any:
    e = cp.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layernorm(cp: Any, x: Any) -> Any:
    y = x - x.mean(-1, keepdims=True)
    return y / cp.sqrt((y * y).mean(-1, keepdims=True) + np.float32(1e-5))


def _attention(cp: Any, q: Any, k: Any, v: Any) -> Any:
    s = cp.matmul(q, k.transpose(0, 2, 1)) * np.float32(1 / math.sqrt(q.shape[-1]))
    return cp.matmul(_softmax(cp, s), v)


def suite(quick: bool) -> list[GPUBench]:
    n16, n32, rows, cols, n = (512, 256, 512, 1024, 1 << 20) if quick else (4096, 4096, 16384, 4096, 1 << 26)
    bh, seq, dim = (2, 128, 64) if quick else (16, 1024, 64)
    return [
        GPUBench(
            f"gemm_f16_{n16}",
            {"a": ((n16, n16), F16), "b": ((n16, n16), F16)},
            lambda a, b: (a.cast("float32") @ b.cast("float32")).cast("float16"),
            lambda cp, a, b: cp.matmul(a, b),
            "cuBLAS",
            "flop",
            2.0 * n16**3,
            0.7,
            2e-2,
        ),
        GPUBench(
            f"gemm_f32_{n32}",
            {"a": ((n32, n32), F32), "b": ((n32, n32), F32)},
            lambda a, b: a @ b,
            lambda cp, a, b: cp.matmul(a, b),
            "cuBLAS",
            "flop",
            2.0 * n32**3,
            None,
            1e-2,
        ),
        GPUBench(
            "softmax", {"x": ((rows, cols), F32)}, lambda x: x.softmax(-1), _softmax, "CuPy", "byte", 2.0 * rows * cols * 4, 0.8
        ),
        GPUBench(
            "layernorm",
            {"x": ((rows, cols), F32)},
            lambda x: x.layernorm(-1, eps=1e-5),
            _layernorm,
            "CuPy",
            "byte",
            2.0 * rows * cols * 4,
            0.8,
        ),
        GPUBench(
            "mul_add",
            {"a": ((n,), F32), "b": ((n,), F32), "c": ((n,), F32)},
            lambda a, b, c: a * b + c,
            lambda cp, a, b, c: a * b + c,
            "CuPy",
            "byte",
            4.0 * n * 4,
            0.8,
        ),
        GPUBench("sum", {"x": ((n,), F32)}, lambda x: x.sum(), lambda cp, x: x.sum(), "CuPy", "byte", 4.0 * n, 0.8),
        GPUBench(
            "attention",
            {"q": ((bh, seq, dim), F32), "k": ((bh, seq, dim), F32), "v": ((bh, seq, dim), F32)},
            lambda q, k, v: q.scaled_dot_product_attention(k, v),
            _attention,
            "CuPy+cuBLAS",
            "flop",
            4.0 * bh * seq * seq * dim,
            None,
            1e-2,
        ),
    ]


@dataclass
class Row:
    bench: GPUBench
    optimize_s: float = math.nan
    compile_s: float = math.nan
    estimate_s: float = math.nan
    kernels: int = 0
    ours_ms: float | None = None
    peer_ms: float | None = None
    ok: bool | None = None
    check: str = ""
    error: str | None = None
    ptx: dict[str, bool] = field(default_factory=dict)

    def rate(self, ms: float | None) -> float | None:
        return None if ms is None else self.bench.work / (ms * 1e-3) / (1e12 if self.bench.kind == "flop" else 1e9)


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build(b: GPUBench) -> tuple[Any, float]:
    t0 = time.perf_counter()
    prog = optimize(b.expr(*(Tensor.empty(*s, dtype=d, name=k) for k, (s, d) in b.shapes.items())), target="cuda")
    return prog, time.perf_counter() - t0


def estimate_of(prog: Any) -> float:
    return sum(s["estimate"]["seconds"] for s in prog.report.extra.get("schedules", []))


def event_ms(cp: Any, fn: Callable[[], Any], repeat: int, warmup: int = 2) -> float:
    """Median milliseconds of fn() on the current stream, each call between two CUDA events."""
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def copy_gbs(cp: Any, repeat: int) -> float:
    """Device-to-device copy of 1 GiB: bytes read + written per second (the practical HBM bandwidth)."""
    src = cp.ones(1 << 28, cp.float32)
    dst = cp.empty_like(src)
    ms = event_ms(cp, lambda: cp.copyto(dst, src), repeat)
    return 2 * src.nbytes / (ms * 1e-3) / 1e9


def run_gpu(b: GPUBench, cp: Any, repeat: int) -> Row:
    row = Row(b)
    try:
        prog, row.optimize_s = build(b)
        row.estimate_s, row.kernels = estimate_of(prog), len(prog.kernels)
        t0 = time.perf_counter()
        compiled = prog.compile()
        row.compile_s = time.perf_counter() - t0
        rs = np.random.default_rng(0)
        host = {k: rs.standard_normal(s).astype(d) for k, (s, d) in b.shapes.items()}
        dev = {k: cp.asarray(v) for k, v in host.items()}
        bufs = prog.place_buffers(**dev)

        def ours() -> None:
            for run in compiled:
                run(bufs)

        row.ours_ms = event_ms(cp, ours, repeat)
        want = b.peer(cp, *dev.values())
        row.peer_ms = event_ms(cp, lambda: b.peer(cp, *dev.values()), repeat)
        got = prog.backend.get(prog.buffers[prog.outputs[0]], bufs[prog.outputs[0]])
        ref = cp.asnumpy(want).astype(np.float32).reshape(got.shape)
        err = float(np.max(np.abs(got.astype(np.float32) - ref) / (np.abs(ref) + 1.0)))
        row.ok, row.check = bool(err <= b.tol), f"max rel err {err:.2g}"
    except Exception as e:  # one failing program must not hide the others' figures
        row.error = f"{type(e).__name__}: {e}"[:500]
    return row


def run_compile_only(b: GPUBench) -> Row:
    row = Row(b)
    try:
        prog, row.optimize_s = build(b)
        row.estimate_s, row.kernels = estimate_of(prog), len(prog.kernels)
        t0 = time.perf_counter()
        for arch in ("sm_80", "sm_90"):
            ptx = compile_ptx(prog.source, arch)
            row.ptx[arch] = ".entry" in ptx
        row.compile_s = time.perf_counter() - t0
        row.ok = all(row.ptx.values())
    except Exception as e:
        row.error = f"{type(e).__name__}: {e}"[:500]
    return row


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def table(headers: list[str], rows: list[list[str]]) -> str:
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(cells)) + " |"
    return "\n".join([line(headers), "|" + "|".join("-" * (x + 2) for x in w) + "|"] + [line(r) for r in rows])


def report_gpu(rows: list[Row], gbs: float, device: str) -> str:
    out = [f"device: {device}; copy bandwidth {gbs:.0f} GB/s (read + write, 1 GiB)"]
    cells = []
    for r in rows:
        b = r.bench
        unit = "TFLOP/s" if b.kind == "flop" else "GB/s"
        ours, peer = r.rate(r.ours_ms), r.rate(r.peer_ms)
        if b.kind == "flop":
            frac = ours / peer if ours and peer else None
            vs = f"{fmt(frac and 100 * frac, '.0f')}% of {b.peer_name}"
        else:
            frac = ours / gbs if ours else None
            vs = f"{fmt(frac and 100 * frac, '.0f')}% of copy BW"
        goal = "" if b.goal is None or frac is None else ("met" if frac >= b.goal else f"missed ({b.goal:.0%})")
        speed = r.peer_ms / r.ours_ms if r.ours_ms and r.peer_ms else None
        cells.append(
            [
                b.name,
                fmt(r.ours_ms),
                fmt(r.peer_ms),
                fmt(speed, ".2f"),
                f"{fmt(ours, '.1f')} {unit}",
                vs,
                goal,
                r.error or r.check,
                fmt(r.optimize_s, ".2f"),
                fmt(r.compile_s, ".2f"),
                fmt(r.estimate_s * 1e3),
            ]
        )
    out.append(
        table(
            [
                "program",
                "ours ms",
                "peer ms",
                "speedup",
                "ours rate",
                "vs",
                "goal",
                "check",
                "optimize s",
                "compile s",
                "estimate ms",
            ],
            cells,
        )
    )
    return "\n".join(out)


def report_compile(rows: list[Row]) -> str:
    cells = [
        [
            r.bench.name,
            str(r.kernels),
            fmt(r.optimize_s, ".2f"),
            fmt(r.compile_s, ".2f"),
            fmt(r.estimate_s * 1e3),
            fmt(r.rate(r.estimate_s * 1e3), ".1f") + (" TFLOP/s" if r.bench.kind == "flop" else " GB/s"),
            r.error or ", ".join(f"{a} {'ok' if ok else 'no .entry'}" for a, ok in r.ptx.items()),
        ]
        for r in rows
    ]
    return "no GPU run (--compile-only): nvcc PTX for sm_80 and sm_90, and the cost model's estimate\n" + table(
        ["program", "kernels", "optimize s", "nvcc s", "estimate ms", "estimated rate", "nvcc"], cells
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes")
    ap.add_argument("--only", metavar="NAME[,NAME]", help="these programs (name prefixes)")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per measurement (default 20)")
    ap.add_argument("--compile-only", action="store_true", help="no GPU: nvcc for sm_80/sm_90 and the estimates")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = ap.parse_args(argv)
    os.environ.setdefault("EGC_DISK_CACHE", "0")  # optimize times measured cold, not from a disk cache
    benches = suite(args.quick)
    if args.only:
        want = args.only.split(",")
        benches = [b for b in benches if any(b.name.startswith(w) for w in want)]
        if not benches:
            print(f"gpu bench: no program matches {args.only!r}", file=sys.stderr)
            return 2
    if args.compile_only:
        if find_nvcc() is None:
            print("gpu bench: nvcc not found (install the CUDA toolkit or put nvcc on PATH)", file=sys.stderr)
            return 2
        rows = []
        for i, b in enumerate(benches, 1):
            progress(f"[{i}/{len(benches)}] {b.name}: optimize, nvcc sm_80 + sm_90")
            rows.append(run_compile_only(b))
        text, meta = report_compile(rows), {"mode": "compile-only"}
    else:
        try:
            import cupy as cp  # type: ignore[import-not-found]

            device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        except Exception as e:
            print(
                f"gpu bench: no usable GPU ({type(e).__name__}: {e}); pip install cupy-cuda12x, or run with --compile-only",
                file=sys.stderr,
            )
            return 2
        gbs = copy_gbs(cp, args.repeat)
        progress(f"{device}: copy bandwidth {gbs:.0f} GB/s")
        rows = []
        for i, b in enumerate(benches, 1):
            progress(f"[{i}/{len(benches)}] {b.name}")
            rows.append(run_gpu(b, cp, args.repeat))
        text, meta = report_gpu(rows, gbs, device), {"mode": "gpu", "device": device, "copy_gbs": gbs}
    print(text)
    if args.json:
        doc = {
            **meta,
            "results": [
                {
                    "name": r.bench.name,
                    "kind": r.bench.kind,
                    "work": r.bench.work,
                    "ours_ms": r.ours_ms,
                    "peer": r.bench.peer_name,
                    "peer_ms": r.peer_ms,
                    "ok": r.ok,
                    "check": r.check,
                    "error": r.error,
                    "optimize_s": r.optimize_s,
                    "compile_s": r.compile_s,
                    "estimate_s": r.estimate_s,
                    "kernels": r.kernels,
                    "ptx": r.ptx,
                }
                for r in rows
            ],
        }
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
