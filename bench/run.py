"""Benchmark the compiler's LLVM CPU backend against numpy and tinygrad's CPU device, on the same inputs.

    python bench/run.py [--quick] [--only NAME[,NAME]] [--repeat N] [--beam] [--json FILE] [--list]
                        [--budget S] [--timeout S]

For each program: our compiler (`optimize(expr, target="llvm")`, whatever schedule it picks), numpy with its
default threads and with one BLAS thread, tinygrad's CPU device through TinyJit (and with BEAM=2 under --beam).
Steady-state times are medians of repeated calls with compilation excluded; first-call times (ours: optimize +
compile + first run, with the kernel cache cleared; tinygrad: its first call, disk cache off) are reported apart.
Ratios are peer time / our time: above 1 means we are faster. Our outputs are checked against numpy's.

Results table to stdout, progress to stderr. Exit status 0, or 1 if any of our results was wrong or failed.
tinygrad is optional: without it the tinygrad columns read n/a.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from measure import Result, amount, blas_threads, copy_bandwidth, have_threadpoolctl, run_numpy, table
from programs import Benchmark, check, select, suite
from worker import launch

PEERS = ("numpy", "numpy_1t", "tinygrad", "tinygrad_beam")
HEAD = {"numpy": "numpy", "numpy_1t": "np 1thr", "tinygrad": "tinygrad", "tinygrad_beam": "tg BEAM2"}
COPY_N = 1 << 24


@dataclass
class Row:
    bench: Benchmark
    ours: Result
    peers: dict[str, Result] = field(default_factory=dict)

    def ratio(self, peer: str) -> float | None:
        """peer time / our time (> 1: ours is faster); None if either is missing or ours was wrong."""
        p = self.peers.get(peer)
        if not self.ours.ok or self.ours.median_ms is None or p is None or p.median_ms is None:
            return None
        return p.median_ms / self.ours.median_ms

    def rate(self) -> float | None:
        """Our GFLOP/s or GB/s."""
        return None if self.ours.median_ms is None else self.bench.work / (self.ours.median_ms * 1e-3) / 1e9


def progress(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- running ----------------------------------------------------------------------------------------------------------


@dataclass
class Options:
    quick: bool
    repeat: int
    budget_s: float
    timeout_s: float
    beam: bool
    tinygrad: bool
    workdir: Path


def launch_checked(
    peer: str, bench: Benchmark, x: dict[str, np.ndarray], ref: np.ndarray, opt: Options, key: str, beam: bool = False
) -> Result:
    """One worker process on the saved inputs; its output (if any) checked against numpy's."""
    res, out = launch(
        peer,
        bench,
        opt.workdir / f"{bench.name}.npz",
        opt.workdir / f"{bench.name}.{key}",
        quick=opt.quick,
        repeat=opt.repeat,
        budget_s=opt.budget_s,
        timeout_s=opt.timeout_s,
        beam=beam,
    )
    if out is not None:
        res.ok, res.check = check(bench, out, ref, x)
    return res


def run_peers(bench: Benchmark, x: dict[str, np.ndarray], ref: np.ndarray, opt: Options) -> dict[str, Result]:
    """numpy (default threads, one thread) and tinygrad (default, BEAM=2 under --beam)."""
    progress(f"{bench.name}: numpy")
    peers = {"numpy": run_numpy(bench, x, opt.repeat, opt.budget_s)}
    if have_threadpoolctl():
        peers["numpy_1t"] = run_numpy(bench, x, opt.repeat, opt.budget_s, one_thread=True)
    else:
        peers["numpy_1t"] = launch_checked("numpy", bench, x, ref, opt, "numpy_1t")
    modes = ([("tinygrad", False)] + ([("tinygrad_beam", True)] if opt.beam else [])) if opt.tinygrad else []
    for key, beam in modes:
        progress(f"{bench.name}: {key}")
        peers[key] = launch_checked("tinygrad", bench, x, ref, opt, key, beam)
    return peers


def run_bench(bench: Benchmark, opt: Options) -> Row:
    x = bench.inputs()
    ref = bench.reference(**x)
    inputs = opt.workdir / f"{bench.name}.npz"
    np.savez(inputs, **x)
    progress(f"{bench.name}: ours (optimize + compile + run)")
    ours = launch_checked("ours", bench, x, ref, opt, "ours")
    if ours.error:
        progress(f"{bench.name}: ours FAILED: {ours.error}")
    if ours.first_call_s is not None:
        progress(
            f"{bench.name}: ours first call {ours.first_call_s:.2f} s (optimize "
            f"{ours.details['optimize_s']:.2f} s), {fmt_ms(ours.median_ms)} ms/run, check {check_cell(ours)}"
        )
    row = Row(bench, ours, run_peers(bench, x, ref, opt))
    inputs.unlink(missing_ok=True)
    return row


# ---- printing ---------------------------------------------------------------------------------------------------------


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "n/a"
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" if ms >= 1 else f"{ms:.3f}"


def fmt_s(s: float | None) -> str:
    return "n/a" if s is None else f"{s:.2f}"


def fmt_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.3g}x"


def peer_cell(res: Result | None) -> str:
    if res is None or res.median_ms is None:
        return "err" if res is not None and res.error else "n/a"
    return fmt_ms(res.median_ms) + ("!" if res.ok is False else "")


def check_cell(ours: Result) -> str:
    if ours.error and ours.first_call_s is None:
        return "ERROR"
    return "ok" if ours.ok else "MISMATCH" if ours.ok is False else "?"


def rate_cell(row: Row, copy_gbs: float) -> str:
    r = row.rate()
    if r is None:
        return "n/a"
    if row.bench.kind == "flop":
        return f"{r:.2f} GFLOP/s"
    return f"{r:.2f} GB/s ({100 * r / copy_gbs:.0f}% copy)"


def programs_table(rows: list[Row]) -> str:
    return table(
        ["benchmark", "program", "inputs (float32)", "rate counts"],
        [
            [r.bench.name, r.bench.label, r.bench.size, amount(r.bench.work, "FLOP" if r.bench.kind == "flop" else "B moved")]
            for r in rows
        ],
        left=4,
    )


def speed_table(rows: list[Row], peers: list[str], copy_gbs: float) -> str:
    headers = [
        "benchmark",
        "ours ms",
        *(f"{HEAD[p]} ms" for p in peers),
        "ours rate",
        *(f"vs {HEAD[p]}" for p in peers),
        "check",
    ]
    body = [
        [
            r.bench.name,
            fmt_ms(r.ours.median_ms),
            *(peer_cell(r.peers.get(p)) for p in peers),
            rate_cell(r, copy_gbs),
            *(fmt_ratio(r.ratio(p)) for p in peers),
            check_cell(r.ours),
        ]
        for r in rows
    ]
    return table(headers, body)


def first_call_table(rows: list[Row], beam: bool) -> str:
    headers = [
        "benchmark",
        "ours 1st call s",
        "optimize s",
        "compile s",
        "1st run s",
        "kernels",
        "stop",
        "prog() ms",
        "tinygrad 1st s",
        *(["tg BEAM2 1st s"] if beam else []),
    ]
    body = []
    for r in rows:
        d = r.ours.details
        body.append(
            [
                r.bench.name,
                fmt_s(r.ours.first_call_s),
                fmt_s(d.get("optimize_s")),
                fmt_s(d.get("compile_s")),
                fmt_s(d.get("first_run_s")),
                str(d.get("kernels", "n/a")),
                str(d.get("stop_reason") or "n/a"),
                fmt_ms(d.get("call_median_ms")),
                fmt_s(_first(r, "tinygrad")),
                *([fmt_s(_first(r, "tinygrad_beam"))] if beam else []),
            ]
        )
    return table(headers, body)


def _first(row: Row, peer: str) -> float | None:
    p = row.peers.get(peer)
    return None if p is None else p.first_call_s


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def summary(rows: list[Row], peers: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for p in peers:
        rs = [r for r in (row.ratio(p) for row in rows) if r is not None]
        out[p] = {"geomean_speedup": geomean(rs), "benchmarks": len(rs)}
    return out


def notes(rows: list[Row]) -> list[str]:
    lines = []
    for r in rows:
        if r.ours.error:
            lines.append(f"{r.bench.name}: ours failed: {r.ours.error}")
        if r.ours.ok is False:
            lines.append(f"{r.bench.name}: ours MISMATCH vs numpy: {r.ours.check}")
        for p, res in r.peers.items():
            if res.error:
                lines.append(f"{r.bench.name}: {HEAD[p]} failed: {res.error}")
            elif res.ok is False:
                lines.append(f"{r.bench.name}: {HEAD[p]} output differs from numpy (marked !): {res.check}")
        if r.bench.note:
            lines.append(f"{r.bench.name}: {r.bench.note}")
    return lines


def report(rows: list[Row], meta: dict[str, Any], opt: Options) -> str:
    peers = ["numpy", "numpy_1t", *(["tinygrad"] + (["tinygrad_beam"] if opt.beam else []))]
    summ = summary(rows, peers)
    parts = [
        f"egraph-compiler bench: {meta['machine']} (load average {meta['load_avg_1min']} at start); "
        f"median of up to {opt.repeat} runs"
        f"{' (quick sizes)' if opt.quick else ''}; ratios = peer time / ours (>1: ours faster)",
        f"numpy {meta['numpy']} (BLAS threads {meta['blas_threads'] or 'unknown'}); "
        f"tinygrad {meta['tinygrad'] or 'not installed'}"
        f" (CPU device, clang, TinyJit{', BEAM=2 column' if opt.beam else ''}); ours: LLVM backend, "
        f"{meta['llvm_threads']} threads",
        "",
        programs_table(rows),
        "",
        speed_table(rows, peers, meta["copy_gbs"]),
        "",
        "first call (ours: optimize + compile + first run, kernel cache cleared; tinygrad: first TinyJit call, "
        "disk cache off); prog() ms = median of prog(**inputs) (buffer set-up and output copy included)",
        first_call_table(rows, opt.beam),
        "",
        f"numpy copy bandwidth: {meta['copy_gbs']:.2f} GB/s (np.copyto of {COPY_N} float32, read + write counted)",
    ]
    if not opt.tinygrad:
        parts.append("tinygrad was not installed: tinygrad columns are n/a (pip install -e '.[bench]')")
    for p in peers:
        g = summ[p]["geomean_speedup"]
        parts.append(f"geomean speedup over {HEAD[p]}: {fmt_ratio(g)} over {summ[p]['benchmarks']} benchmark(s)")
    found = notes(rows)
    parts += ["", "notes:", *(f"  {n}" for n in found)] if found else []
    return "\n".join(parts)


# ---- main -------------------------------------------------------------------------------------------------------------


def tinygrad_available() -> bool:
    try:
        return importlib.util.find_spec("tinygrad") is not None
    except (ImportError, ValueError):
        return False


def version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_meta(opt: Options) -> dict[str, Any]:
    from egraph_compiler.backends.llvm import LLVMBackend

    return {
        "machine": f"{cpu_name()}, {os.cpu_count()} cpus",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "tinygrad": version("tinygrad") if opt.tinygrad else None,
        "egraph_compiler": version("egraph-compiler"),
        "blas_threads": blas_threads(),
        "llvm_threads": LLVMBackend().threads,
        "quick": opt.quick,
        "repeat": opt.repeat,
        "budget_s": opt.budget_s,
        "beam": opt.beam,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_avg_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def to_json(rows: list[Row], meta: dict[str, Any], opt: Options) -> dict[str, Any]:
    peers = ["numpy", "numpy_1t", "tinygrad", "tinygrad_beam"]
    return {
        "meta": meta,
        "summary": summary(rows, peers),
        "results": [
            {
                "name": r.bench.name,
                "program": r.bench.label,
                "inputs": {k: list(s) for k, s in r.bench.shapes.items()},
                "kind": r.bench.kind,
                "work": r.bench.work,
                "rate": r.rate(),
                "rate_unit": "GFLOP/s" if r.bench.kind == "flop" else "GB/s",
                "ours": r.ours.as_dict(),
                "peers": {p: res.as_dict() for p, res in r.peers.items()},
                "speedup": {p: r.ratio(p) for p in peers if p in r.peers},
            }
            for r in rows
        ],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes: the whole run takes well under a minute")
    ap.add_argument("--only", metavar="NAME[,NAME]", help="run these benchmarks (names or prefixes: gemm = every gemm)")
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per measurement (default 10; 3 with --quick)")
    ap.add_argument("--beam", action="store_true", help="add tinygrad with BEAM=2 (its search takes minutes)")
    ap.add_argument("--json", metavar="FILE", help="also write every number to FILE as JSON")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds per measurement after which repeats stop (at least 3 runs; default 10, 2 quick)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds allowed per contestant process: ours or tinygrad on one benchmark (default 600)",
    )
    args = ap.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        ap.error("--repeat must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    # SIGTERM as an exception: subprocess.run then kills the running worker instead of leaving it behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("EGC_DISK_CACHE", "0")  # first-call times measured cold, not from a disk cache
    args = parse_args(argv)
    try:
        benches = select(suite(args.quick), args.only)
    except ValueError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    if args.list:
        print(programs_table([Row(b, Result()) for b in benches]))
        return 0
    with tempfile.TemporaryDirectory(prefix="egc-bench-") as tmp:
        opt = Options(
            args.quick,
            args.repeat or (3 if args.quick else 10),
            args.budget or (2.0 if args.quick else 10.0),
            args.timeout,
            args.beam,
            tinygrad_available(),
            Path(tmp),
        )
        if not opt.tinygrad:
            progress("tinygrad is not installed: its columns will read n/a (pip install -e '.[bench]')")
        meta = machine_meta(opt)
        meta["copy_gbs"], meta["copy_ms"] = copy_bandwidth(COPY_N, opt.repeat)
        progress(f"numpy copy bandwidth {meta['copy_gbs']:.2f} GB/s")
        rows = []
        for i, b in enumerate(benches, 1):
            progress(f"[{i}/{len(benches)}] {b.name}: {b.label}, {b.size}")
            rows.append(run_bench(b, opt))
    print(report(rows, meta, opt))
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(rows, meta, opt), indent=1))
        progress(f"wrote {args.json}")
    return 0 if all(r.ours.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
