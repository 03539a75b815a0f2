"""Real models against PyTorch eager and torch.compile (inductor, CPU), on the same inputs, in one run.

    python bench/models.py [--quick | --variants] [--only NAME[,NAME]] [--repeat N] [--rounds N] [--no-compile]
                           [--json FILE] [--target cuda]

Per model: our first-call time (`opt+jit s`: optimize, LLVM compile and the first run), run time (median of
repeated calls, compilation excluded), kernel count and the cost model's estimate beside the measured time;
PyTorch eager's run time; torch.compile's compile time (its first call, caches off) and run time. Ratios are peer
time / our time: above 1 means we are faster. Every output is checked against PyTorch eager's. The dense chain
runs at several depths to show how run time and first-call time grow with depth. All of ours are optimized before
any of torch's (whose idle threads and compile workers linger on the cores). Then the run times are taken in
`--rounds` interleaved rounds, ours, eager and compiled back to back in each, with a pause after torch's calls
(its OpenMP threads spin a while before they sleep): a machine whose speed drifts by 1.5x for seconds at a time
(a shared VM) slows all three alike within a round. A time is the median of its rounds' medians, a ratio the
median of its rounds' ratios. Programs of microseconds are timed over enough calls to fill 50 ms.

`--variants`: the same kinds of model at other sizes (other widths, batches, sequence lengths, head and channel
counts: model_defs.variants), a check that the suite's own sizes are not special.

Results table to stdout, progress to stderr. Exit status 0, or 1 if any of our results was wrong or failed.
torch is an optional benchmark extra (`pip install -e '.[models]'`), never a runtime dependency.

`--target cuda`: ours on the GPU (CuPy inputs, read in place; CuPy outputs) against PyTorch on the same GPU; every
timed call ends with a device synchronize, for ours and the peers alike.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import table, time_calls
from model_defs import DENSE_DEPTHS, Model, suite, variants


@dataclass
class Row:
    model: str
    label: str
    ok: bool = False
    error: str | None = None
    max_err: float | None = None
    first_call_s: float | None = None
    ours_ms: float | None = None
    estimate_ms: float | None = None
    baseline_estimate_ms: float | None = None
    kernels: int | None = None
    eager_ms: float | None = None
    compile_s: float | None = None
    compiled_ms: float | None = None
    notes: list[str] = field(default_factory=list)
    kernels_detail: str | None = None  # --describe: each kernel's nest and estimate beside its measured time
    x_eager: float | None = None  # the median of the interleaved rounds' eager / ours
    x_compiled: float | None = None  # ... and compiled / ours

    def ratio(self, peer: str) -> float | None:
        return getattr(self, f"x_{peer}") if self.ok else None


MIN_TIMED_S = 0.05  # timed calls of a fast program fill at least this long (median_ms)
ROUNDS = 5  # interleaved timing rounds per model
PAUSE_S = 0.2  # after torch's calls in a round, before ours: its OpenMP threads spin a while before they sleep
SETTLE_S = 2.0  # before the rounds: inductor's compile workers wind down


def progress(msg: str) -> None:
    print(f"[models {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median_ms(fn: Any, repeat: int) -> float:
    """Median wall time in ms of fn() (bench/measure.py's timing: one warm-up, at least 3 calls, up to `repeat`
    within 10 s); a program of microseconds gets as many calls as fill MIN_TIMED_S (up to 1,000), for ours and the
    peers alike: ten calls of a 10 us program time the caches warming up more than the program."""
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    return time_calls(fn, repeat=max(repeat, min(1000, int(MIN_TIMED_S / max(once, 1e-6))))).median_s * 1e3


def run_ours(
    m: Model, x: dict[str, np.ndarray], row: Row, repeat: int, target: str = "llvm", describe: bool = False
) -> tuple[np.ndarray, Any]:
    """Optimize and run our program; returns its output (checked against torch's later) and the timed call."""
    from egraph_compiler import Tensor, optimize

    ts = {k: Tensor.empty(*v.shape, dtype="float32", name=k) for k, v in x.items()}
    if target == "cuda":
        import cupy

        x = {k: cupy.asarray(v) for k, v in x.items()}
        sync = cupy.cuda.Device().synchronize
    else:
        sync = lambda: None
    t0 = time.perf_counter()
    prog = optimize(m.ours(**ts), target=target)
    out = prog(**x)
    sync()
    row.first_call_s = time.perf_counter() - t0
    row.kernels = len(prog.kernels)
    fusion = prog.report.extra.get("fusion", {})
    row.estimate_ms = fusion.get("chosen_s", math.nan) * 1e3
    row.baseline_estimate_ms = fusion.get("baseline_s", math.nan) * 1e3
    row.notes = [n for n in prog.report.notes if "fusion" in n or "roofline" in n]
    if describe:
        row.kernels_detail = prog.describe(prog.profile(repeat=max(3, repeat), **x))
    return (out.get() if target == "cuda" else np.asarray(out)), lambda: (prog(**x), sync())


def check(m: Model, out: np.ndarray, ref: np.ndarray, row: Row) -> None:
    row.max_err = float(np.max(np.abs(np.asarray(out, dtype=np.float64) - ref))) if ref.size else 0.0
    row.ok = bool(np.allclose(out, ref, rtol=m.rtol, atol=m.atol))


def run_torch(
    m: Model, x: dict[str, np.ndarray], row: Row, compile_too: bool, target: str = "llvm"
) -> tuple[np.ndarray, dict[str, Any]]:
    """Run eager (the reference output) and compile with torch.compile (its first call timed); returns the
    reference and the peers' timed calls by name ("eager", and "compiled" where it ran)."""
    import torch

    device = "cuda" if target == "cuda" else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    tx = {k: torch.from_numpy(v).to(device) for k, v in x.items()}

    def calls(fn: Any) -> Any:
        def call() -> None:
            with torch.no_grad():
                fn(**tx)
            sync()

        return call

    timed = {"eager": calls(m.torch)}
    with torch.no_grad():
        ref = m.torch(**tx).cpu().numpy()
        if compile_too:
            torch._dynamo.reset()
            fn = torch.compile(m.torch)
            t0 = time.perf_counter()
            out = fn(**tx).cpu().numpy()
            row.compile_s = time.perf_counter() - t0
            if not np.allclose(out, ref, rtol=m.rtol, atol=m.atol):
                row.notes.append("torch.compile's output differs from eager's")
            timed["compiled"] = calls(fn)
    return ref, timed


def time_rounds(row: Row, calls: dict[str, Any], repeat: int, rounds: int) -> None:
    """The calls ("ours" first, then the peers) timed back to back, `rounds` times: each time the median of its
    rounds' medians, each peer's ratio the median of its rounds' ratios."""
    ms: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(max(1, rounds)):
        for name, fn in calls.items():
            ms[name].append(median_ms(fn, repeat))
        time.sleep(PAUSE_S)
    row.ours_ms = statistics.median(ms["ours"])
    for peer in ("eager", "compiled"):
        if peer in ms:
            setattr(row, f"{peer}_ms", statistics.median(ms[peer]))
            setattr(row, f"x_{peer}", statistics.median(p / o for p, o in zip(ms[peer], ms["ours"])))


def fmt(v: float | None, spec: str = ".2f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                flags = Path("/proc/cpuinfo").read_text()
                isa = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "SSE"
                return f"{name} ({isa}, {os.cpu_count()} cores)"
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def results_table(rows: list[Row]) -> str:
    head = (
        "model",
        "ok",
        "kern",
        "opt+jit s",
        "ours ms",
        "est ms",
        "est/meas",
        "eager ms",
        "x eager",
        "compile s",
        "compiled ms",
        "x compiled",
    )
    cells = []
    for r in rows:
        est_ratio = None if r.estimate_ms is None or not r.ours_ms else r.estimate_ms / r.ours_ms
        cells.append(
            [
                r.model,
                "yes" if r.ok else ("ERR" if r.error else "WRONG"),
                fmt(r.kernels, "d"),
                fmt(r.first_call_s),
                fmt(r.ours_ms, ".3f"),
                fmt(r.estimate_ms, ".3f"),
                fmt(est_ratio),
                fmt(r.eager_ms, ".3f"),
                fmt(r.ratio("eager")),
                fmt(r.compile_s, ".1f"),
                fmt(r.compiled_ms, ".3f"),
                fmt(r.ratio("compiled")),
            ]
        )
    lines = [table(list(head), cells)]
    eager = [x for r in rows if (x := r.ratio("eager")) is not None]
    comp = [x for r in rows if (x := r.ratio("compiled")) is not None]
    lines.append(
        f"geomean: {fmt(geomean(eager))}x PyTorch eager ({len(eager)} models), "
        f"{fmt(geomean(comp))}x torch.compile ({len(comp)} models)   (above 1: ours is faster)"
    )
    chain = sorted((int(d), r) for r in rows if (d := r.model.removeprefix("dense_chain_")).isdigit() and r.ok)
    if len(chain) > 1:
        lines.append(
            "dense chain, per layer: "
            + ", ".join(
                f"depth {d}: run {fmt(r.ours_ms / d, '.4f')} ms, first call {fmt(r.first_call_s / d, '.3f')} s"
                for d, r in chain
                if r.ours_ms is not None and r.first_call_s is not None
            )
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes of the same models (a smoke run)")
    ap.add_argument("--variants", action="store_true", help="the same kinds of model at other sizes (model_defs.variants)")
    ap.add_argument("--only", default="", help="comma-separated model names (prefixes match)")
    ap.add_argument("--repeat", type=int, default=10, help="timed calls per round")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved timing rounds (ours, eager, compiled)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (its compiles take minutes)")
    ap.add_argument("--json", default="", help="write the rows to this file")
    ap.add_argument("--describe", action="store_true", help="print each kernel's estimate beside its measured time")
    ap.add_argument("--target", default="llvm", choices=("llvm", "cuda"), help="ours (and torch's device): CPU or GPU")
    args = ap.parse_args(argv)
    # torch.compile's compile time is measured cold: no FX-graph or kernel cache from an earlier run
    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    os.environ.setdefault("EGC_DISK_CACHE", "0")  # and ours measured cold: no program from an earlier run's disk cache
    try:
        import torch
    except ImportError:
        print("bench/models.py needs PyTorch: pip install -e '.[models]'", file=sys.stderr)
        return 2
    models = variants() if args.variants else suite(args.quick)
    if args.only:
        wanted = args.only.split(",")
        models = [m for m in models if any(m.name.startswith(w) for w in wanted)]
    print(
        f"CPU: {cpu_name()}; load average {os.getloadavg()[0]:.2f}; torch {torch.__version__} "
        f"({torch.get_num_threads()} threads); float32; dense chain depths {DENSE_DEPTHS}"
    )
    if args.target == "cuda":
        print(f"GPU: {torch.cuda.get_device_name()}; ours and torch on the GPU, each timed call synchronized")
    rows: list[Row] = []
    ours: list[tuple[np.ndarray, Any] | None] = []
    # ours first, every model: torch leaves OpenMP threads spinning and inductor's compile workers behind, which on
    # a small machine take cores from whatever runs after them (a ResNet block timed after the GPT-2 block's
    # torch.compile ran 30% slower); our pool threads sleep when idle
    for m in models:
        row = Row(m.name, m.label)
        rows.append(row)
        progress(f"{m.name}: ours")
        try:
            ours.append(run_ours(m, m.inputs(), row, args.repeat, args.target, args.describe))
        except Exception as e:
            ours.append(None)
            row.error = f"{type(e).__name__}: {e}"
            progress("".join(traceback.format_exception_only(e)).strip())
    peers: list[dict[str, Any] | None] = []
    for m, row, got in zip(models, rows, ours):
        x = m.inputs()
        progress(f"{m.name}: torch")
        peers.append(None)
        try:
            ref, peers[-1] = run_torch(m, x, row, not args.no_compile, args.target)
        except Exception as e:  # a peer's failure is reported; ours cannot be checked without its result
            row.error = row.error or f"torch: {type(e).__name__}: {e}"
            progress(f"torch: {type(e).__name__}: {e}")
            continue
        if got is not None:
            check(m, got[0], ref, row)
    time.sleep(SETTLE_S)
    for m, row, got, timed in zip(models, rows, ours, peers):
        if got is None or timed is None:
            continue
        progress(f"{m.name}: timing ({args.rounds} interleaved rounds)")
        time_rounds(row, {"ours": got[1], **timed}, args.repeat, args.rounds)
        progress(
            f"{m.name}: ours {fmt(row.ours_ms, '.3f')} ms (estimate {fmt(row.estimate_ms, '.3f')}), eager "
            f"{fmt(row.eager_ms, '.3f')} ms, compiled {fmt(row.compiled_ms, '.3f')} ms"
        )
    for r in rows:
        if r.kernels_detail:
            print(f"--- {r.model}: kernels (estimate beside measured, each run alone)\n{r.kernels_detail}")
    print(results_table(rows))
    for r in rows:
        for n in r.notes:
            print(f"note {r.model}: {n}")
        if r.error:
            print(f"error {r.model}: {r.error}")
    if args.json:
        meta = {"cpu": cpu_name(), "target": args.target}
        if args.target == "cuda":
            meta["gpu"] = torch.cuda.get_device_name()
        Path(args.json).write_text(json.dumps({**meta, "rows": [asdict(r) for r in rows]}, indent=2))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
