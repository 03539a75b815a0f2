"""How closely `optimize(..., time_limit=T)` keeps to T: wall time against the limit, for the benchmark models.

    python bench/time_limits.py [--quick] [--limits 0.25,1,2,4,none] [--only NAME[,NAME]] [--target cuda]

For each model and limit: optimize's wall time, its ratio to the limit, whether it kept within 10% or 0.2 s
(the goal), how the program was built ("direct": lowered without the e-graph, under a limit short for the
search; "search": the e-graph, cut where the limit fell), the chosen program's estimate beside its measured time
(median of 5 calls after a warm-up) and whether its result matches the reference interpreter. A limit of
"none" is the search without one: the program the others are measured against. `--target cuda` times
optimize for the GPU; its programs run (and are checked) only where CuPy sees a GPU, else those columns say "-". The compile
caches are off (`cache=False`): every call optimizes afresh. Exit status 1 if a result was wrong.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from typing import Any

import numpy as np
from model_defs import suite

from egraph_compiler import Tensor, optimize
from egraph_compiler.ir.interpret import evaluate
from egraph_compiler.kernel.cpu_target import host_cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the small sizes of the models")
    ap.add_argument("--limits", default="0.25,1,2,4,none", help="comma-separated time limits in seconds, or none")
    ap.add_argument("--only", default="gpt2,mlp,resnet_block,dense_chain_8,dense_chain_48", help="model name prefixes")
    ap.add_argument("--target", default="llvm", choices=("llvm", "cuda"), help="the target optimized for")
    args = ap.parse_args(argv)
    runs = args.target == "llvm" or _gpu()
    limits = [None if x == "none" else float(x) for x in args.limits.split(",")]
    only = [p for p in args.only.split(",") if p]
    models = [m for m in suite(args.quick) if not only or any(m.name.startswith(p) for p in only)]
    print(f"# CPU {host_cpu().name}, load {os.getloadavg()[0]:.1f}; goal: wall <= limit + max(10%, 0.2 s)")
    print(
        f"{'model':24s} {'limit s':>8s} {'wall s':>8s} {'ratio':>6s} {'kept':>5s} {'built':>7s} {'estimate ms':>12s} "
        f"{'run ms':>9s} {'correct':>8s}"
    )
    ok_all = True
    for m in models:
        for limit in limits:
            ts = {k: Tensor.empty(s, dtype="float32", name=k) for k, s in m.shapes.items()}
            out = m.ours(**ts)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the roofline warning of a program left unranked
                prog = optimize(out, target=args.target, time_limit=limit, cache=False)
            wall = time.perf_counter() - t0
            run, correct = _run(prog, m, out) if runs else ("-", "-")
            ok_all &= correct != "WRONG"
            kept = limit is None or wall <= limit + max(0.1 * limit, 0.2)
            built = "direct" if any("lowered without the e-graph" in n for n in prog.report.notes) else "search"
            print(
                f"{m.name:24s} {'none' if limit is None else f'{limit:.2f}':>8s} {wall:8.2f} "
                f"{'-' if limit is None else f'{wall / limit:.2f}':>6s} {'yes' if kept else 'NO':>5s} {built:>7s} "
                f"{prog.report.cost_after * 1e3:12.3g} {run:>9s} {correct:>8s}",
                flush=True,
            )
    return 0 if ok_all else 1


def _gpu() -> bool:
    try:
        import cupy  # type: ignore[import-not-found]

        return bool(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no CuPy, no driver, no device
        return False


def _run(prog: Any, m: Any, out: Tensor) -> tuple[str, str]:
    """The program's median time over 5 calls after a warm-up (ms), and whether it matches the interpreter."""
    x = m.inputs()
    want = evaluate([out.uop], x)
    want = want[0] if isinstance(want, (list, tuple)) else want
    ok = bool(np.allclose(np.asarray(prog(**x)), want, rtol=m.rtol, atol=m.atol))
    times = []
    for _ in range(5):
        t1 = time.perf_counter()
        prog(**x)
        times.append(time.perf_counter() - t1)
    return f"{statistics.median(times) * 1e3:.3g}", "ok" if ok else "WRONG"


if __name__ == "__main__":
    sys.exit(main())
