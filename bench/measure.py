"""Timing helpers and the in-process contestants: our compiler and numpy (default threads, one BLAS thread)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from programs import Arrays, Benchmark


@dataclass
class Timing:
    median_s: float
    min_s: float
    runs: int


@dataclass
class Result:
    """One contestant on one benchmark. Times in ms (steady state) and s (first call); None when not measured."""

    median_ms: float | None = None
    min_ms: float | None = None
    runs: int = 0
    first_call_s: float | None = None
    ok: bool | None = None  # output agrees with numpy's (None: not checked)
    check: str = ""
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def set_timing(self, t: Timing) -> None:
        self.median_ms, self.min_ms, self.runs = t.median_s * 1e3, t.min_s * 1e3, t.runs

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_calls(
    fn: Callable[[], Any],
    sync: Callable[[], Any] = lambda: None,
    repeat: int = 10,
    budget_s: float = 10.0,
    warmup: int = 1,
    warmup_s: float = 0.0,
) -> Timing:
    """Median wall time of `fn(); sync()` over `repeat` calls after `warmup` untimed ones (and more until `warmup_s`
    seconds have gone by: a VM's cores come back from idle at a fraction of their speed, for up to a second here);
    stops early (after at least 3 calls, or `repeat` if fewer) once `budget_s` seconds have gone by, so slow
    programs stay affordable."""
    start = time.perf_counter()
    done = 0
    while done < warmup or time.perf_counter() - start < warmup_s:
        fn()
        sync()
        done += 1
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeat:
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
        if len(times) >= min(3, repeat) and time.perf_counter() - start > budget_s:
            break
    return Timing(statistics.median(times), min(times), len(times))


def table(headers: list[str], rows: list[list[str]], left: int = 1) -> str:
    """Aligned columns: the first `left` ones left-aligned (names), the rest right-aligned (numbers)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(
        c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    ).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def amount(x: float, unit: str) -> str:
    scale, prefix = next(((s, p) for s, p in ((1e9, "G"), (1e6, "M"), (1e3, "k")) if x >= s), (1.0, ""))
    return f"{x / scale:.3g} {prefix}{unit}"


def short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


# ---- our compiler -----------------------------------------------------------------------------------------------------


def warm_up_ours() -> None:
    """Pay the one-time costs (egglog, LLVM initialization) before any first-call time is taken."""
    from egraph_compiler import Tensor
    from egraph_compiler.optimize import optimize

    x = Tensor.empty((4,), dtype="float32", name="x")
    optimize(x * 2 + 1, target="llvm")(x=np.ones(4, np.float32))


def bound_runner(prog: Any, x: Arrays) -> Callable[[], None]:
    """The program's compiled kernels on buffers placed once, as a TinyJit replay runs on buffers it holds:
    what `prog(**x)` does minus setting up the buffers (inputs coerced, outputs allocated) and copying outputs out."""
    compiled = prog.compile()
    bufs = prog.place_buffers(**x)

    def run() -> None:
        for kernel in compiled:
            kernel(bufs)

    return run


def run_ours(
    bench: Benchmark, x: Arrays, repeat: int, budget_s: float, say: Callable[[str], None] = lambda _: None
) -> tuple[Result, np.ndarray | None]:
    """First call (optimize + compile + first run, kernel cache cleared) and steady-state times of our compiler;
    with the first call's output (None if it failed). `say` hears which step is running."""
    from egraph_compiler import Tensor
    from egraph_compiler.backends import llvm
    from egraph_compiler.optimize import optimize

    res = Result()
    try:
        tensors = {k: Tensor.empty(s, dtype="float32", name=k) for k, s in bench.shapes.items()}
        llvm.clear_cache()
        say("optimize")
        t0 = time.perf_counter()
        prog = optimize(bench.expr(**tensors), target="llvm")
        t1 = time.perf_counter()
        say("compile")
        prog.compile()
        t2 = time.perf_counter()
        say("first run")
        out = prog(**x)
        t3 = time.perf_counter()
    except Exception as e:
        res.error = short_error(e)
        return res, None
    res.first_call_s = t3 - t0
    res.details = {
        "optimize_s": t1 - t0,
        "compile_s": t2 - t1,
        "first_run_s": t3 - t2,
        "kernels": len(prog.kernels),
        "stop_reason": str(getattr(prog.report, "stop_reason", "")),
        "phases_s": dict(getattr(prog.report, "phases", {}) or {}),
    }
    try:
        say("timing the kernels")
        res.set_timing(time_calls(bound_runner(prog, x), repeat=repeat, budget_s=budget_s))
        say("timing prog(**inputs)")
        call = time_calls(lambda: prog(**x), repeat=min(repeat, 3), budget_s=budget_s, warmup=0)
        res.details["call_median_ms"] = call.median_s * 1e3
    except Exception as e:
        res.error = short_error(e)
    return res, np.asarray(out)


# ---- numpy ------------------------------------------------------------------------------------------------------------


def have_threadpoolctl() -> bool:
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        return False
    return True


def blas_threads() -> int | None:
    """OpenBLAS/MKL threads numpy uses by default (None when threadpoolctl is missing)."""
    if not have_threadpoolctl():
        return None
    from threadpoolctl import threadpool_info

    counts = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
    return max(counts) if counts else None


def run_numpy(bench: Benchmark, x: Arrays, repeat: int, budget_s: float, one_thread: bool = False) -> Result:
    """numpy in this process; `one_thread` limits BLAS to one thread through threadpoolctl."""
    res = Result()
    fn = lambda: bench.reference(**x)
    try:
        if one_thread:
            from threadpoolctl import threadpool_limits

            with threadpool_limits(limits=1, user_api="blas"):
                res.set_timing(time_calls(fn, repeat=repeat, budget_s=budget_s))
        else:
            res.set_timing(time_calls(fn, repeat=repeat, budget_s=budget_s))
    except Exception as e:
        res.error = short_error(e)
    return res


def copy_bandwidth(n: int, repeat: int) -> tuple[float, float]:
    """numpy's copy bandwidth: np.copyto of n float32, counting the read and the write. (GB/s, median ms)."""
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    dst = np.empty_like(src)
    t = time_calls(lambda: np.copyto(dst, src), repeat=max(repeat, 5), budget_s=5.0)
    return 2 * src.nbytes / t.median_s / 1e9, t.median_s * 1e3
