"""A contestant in a process of its own: our compiler, tinygrad's CPU device (default, or BEAM=2), or numpy with one
BLAS thread set through the environment (the fallback when threadpoolctl is not installed).

    python bench/worker.py {ours,tinygrad,numpy} --bench NAME --inputs FILE.npz --out PREFIX [--quick] [--repeat N]
                           [--budget S]

It writes PREFIX.json (a measure.Result) and, for ours and tinygrad, PREFIX.npy (the output, which the parent checks
against numpy); progress lines go to stderr. `launch` (used by run.py) sets the environment: for tinygrad DEV=CPU
(its default clang mode; the LLVM mode is not used), CACHELEVEL=0 (no disk cache, so the first call really
compiles, and BEAM really searches) and BEAM=0 or 2; for numpy OMP/OPENBLAS/MKL_NUM_THREADS=1. A process per run
keeps one benchmark's caches (tinygrad's, or one BEAM setting's) out of the next one's first-call time, and lets
`--timeout` stop a program that optimizes or runs for too long without stopping the whole bench. Ours runs with its
address space capped at half the machine's memory (see limit_memory).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from measure import Result, run_ours, short_error, time_calls, warm_up_ours
from programs import Arrays, Benchmark, suite

HERE = Path(__file__).resolve()
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# ---- in the worker ----------------------------------------------------------------------------------------------------


def run_tinygrad(bench: Benchmark, x: Arrays, repeat: int, budget_s: float) -> tuple[Result, np.ndarray | None]:
    """First call (schedule + codegen + compile, + BEAM search when on, + run) and TinyJit replay times.
    Every timed call ends with the device's synchronize(), so queued work is counted."""
    from tinygrad import Device, Tensor, TinyJit
    from tinygrad.helpers import BEAM, NUM_CPU_THREADS

    dev = Device[Device.DEFAULT]
    (Tensor.ones(4).contiguous() * 2 + 1).realize().numpy()  # device start-up, outside the first-call time
    tensors = {k: Tensor(v).realize() for k, v in x.items()}
    dev.synchronize()
    jit = TinyJit(lambda **t: bench.expr(**t).realize())
    res = Result(
        details={
            "device": Device.DEFAULT,
            "renderer": type(dev.renderer).__name__,
            "beam": BEAM.value,
            "cpu_threads": NUM_CPU_THREADS.value,
        }
    )
    t0 = time.perf_counter()
    jit(**tensors)
    dev.synchronize()
    res.first_call_s = time.perf_counter() - t0
    # warmup=2: the second call captures the JIT, later ones replay it
    res.set_timing(time_calls(lambda: jit(**tensors), dev.synchronize, repeat=repeat, budget_s=budget_s, warmup=2))
    return res, jit(**tensors).numpy()


def limit_memory(fraction: float = 0.5) -> None:
    """Cap this process's address space at `fraction` of the machine's memory (where the OS allows), so that a
    program whose optimization blows up ends as a MemoryError in its row, not as the OOM killer's victim."""
    try:
        import resource

        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        resource.setrlimit(resource.RLIMIT_AS, (int(total * fraction), resource.RLIM_INFINITY))
    except (ImportError, ValueError, OSError, AttributeError):
        pass


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_numpy(bench: Benchmark, x: Arrays, repeat: int, budget_s: float) -> Result:
    res = Result(details={k: os.environ.get(k) for k in ONE_THREAD})
    res.set_timing(time_calls(lambda: bench.reference(**x), repeat=repeat, budget_s=budget_s))
    return res


def worker_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("peer", choices=("ours", "tinygrad", "numpy"))
    ap.add_argument("--bench", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--budget", type=float, default=10.0)
    args = ap.parse_args(argv)
    bench = next(b for b in suite(args.quick) if b.name == args.bench)
    with np.load(args.inputs) as f:
        x = {k: f[k] for k in bench.shapes}
    out: np.ndarray | None = None
    try:
        if args.peer == "ours":
            limit_memory()
            say("warming up")
            warm_up_ours()
            res, out = run_ours(bench, x, args.repeat, args.budget, say)
        elif args.peer == "tinygrad":
            res, out = run_tinygrad(bench, x, args.repeat, args.budget)
        else:
            res = run_numpy(bench, x, args.repeat, args.budget)
    except Exception as e:
        res = Result(error=short_error(e))
    if out is not None:
        np.save(args.out + ".npy", out)
    Path(args.out + ".json").write_text(json.dumps(res.as_dict()))
    return 0


# ---- in the parent ----------------------------------------------------------------------------------------------------


def launch(
    peer: str,
    bench: Benchmark,
    inputs: Path,
    prefix: Path,
    *,
    quick: bool,
    repeat: int,
    budget_s: float,
    timeout_s: float,
    beam: bool = False,
) -> tuple[Result, np.ndarray | None]:
    """Run one worker; its Result and output (None if it wrote none). Never raises: failures become Result.error."""
    env = dict(os.environ)
    if peer == "tinygrad":
        env.update(DEV="CPU", CACHELEVEL="0", BEAM="2" if beam else "0")
    else:
        env.update(ONE_THREAD)
    cmd = [
        sys.executable,
        str(HERE),
        peer,
        "--bench",
        bench.name,
        "--inputs",
        str(inputs),
        "--out",
        str(prefix),
        "--repeat",
        str(repeat),
        "--budget",
        str(budget_s),
        *(["--quick"] if quick else []),
    ]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
        step = err.strip().splitlines()[-1:] or ["?"]
        return Result(error=f"timed out after {timeout_s:g} s (--timeout), during: {step[0]}"[:300]), None
    result_file, out_file = Path(f"{prefix}.json"), Path(f"{prefix}.npy")
    if not result_file.is_file():
        lines = (proc.stderr or proc.stdout or "").strip().splitlines()
        return Result(error=f"worker exited {proc.returncode}: {lines[-1] if lines else 'no output'}"[:300]), None
    data: dict[str, Any] = json.loads(result_file.read_text())
    return Result(**data), (np.load(out_file) if out_file.is_file() else None)


if __name__ == "__main__":
    sys.exit(worker_main())
