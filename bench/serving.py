"""Serving figures in one run: what a call costs besides the work, streaming bandwidth through `prog(...)`, a
repeated optimize, and the memory plan, beside numpy and PyTorch eager (when installed) on the same inputs.

    python bench/serving.py [--json FILE]

- call overhead: a one-kernel program (x * 2 + 1) on 64 float32 elements, called as `prog(x=...)` and as
  `prog(x=..., out=o)`, against numpy's `np.add(np.multiply(x, 2, out=o), 1, out=o)` and torch's `x * 2 + 1`;
  medians of batches of calls, in microseconds a call.
- a * b + c on 16M float32 elements through `prog(...)` (and with `out=`), as GB/s of compulsory traffic
  (three reads, one write), against numpy, torch and a plain copy (the machine's streaming bandwidth as numpy
  reaches it).
- repeat optimize: the first optimize of a GPT-2 block and of a small graph, then the same graphs built again
  from scratch (the compile cache).
- memory: peak bytes of the GPT-2 and ResNet blocks with the intermediates' arena and without (inputs, outputs
  and intermediates, from the plan), beside PyTorch eager's: the inputs plus the high-water mark of resident
  memory over one call after two warm-up calls, measured in a child process whose allocator maps every large
  block afresh (MALLOC_MMAP_THRESHOLD_), so freed tensors leave the resident set (Linux only). Where ours is
  above PyTorch's, the block is optimized again with `memory_limit` set to what PyTorch's peak leaves for
  intermediates (its result checked against the first), both with their estimate and run time.
- symbolic batch: an MLP (256 -> 1024, GELU, -> 256, residual) over a batch `Variable("B", 1, 64)`, called at
  several sizes (each runs its bucket's program on inputs padded to it), beside the same MLP compiled for that
  size alone and PyTorch eager; every result checked against numpy.
- new process: a fresh Python process that builds, optimizes and runs the GPT-2 block once, with an empty disk
  cache (cold) and again with the cache the first one left (warm): wall time of the whole process, and from its
  start to the first result. Everything else here runs with the disk cache off, so first optimizes are cold.
  The children import modules from their bytecode cache, as an installed package does (pip compiles it at
  install): the package and this directory are compiled first (`python -m compileall`), and an environment's
  PYTHONDONTWRITEBYTECODE is dropped for the children (with it set and no bytecode, every process compiles
  every module it imports from source, 0.07-0.15 s here).

Results to stdout; progress to stderr. Exit status 1 if any of our results was wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_defs import gpt2_block, resnet_block
from models import cpu_name

import egraph_compiler
from egraph_compiler import Tensor, optimize


def per_call_us(fn: Callable[[], Any], budget_s: float = 0.3, rounds: int = 7) -> float:
    """Median over `rounds` of the mean time of a batch of calls that fills `budget_s / rounds`."""
    fn()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.02:
        fn()
        n += 1
    batch = max(1, int(n * budget_s / rounds / 0.02))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter() - t0) / batch)
    return statistics.median(times) * 1e6


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def call_overhead(torch: Any, ok: list[bool]) -> dict[str, float | None]:
    x = Tensor.empty(64, name="x")
    prog = optimize(x * 2.0 + 1.0, target="llvm")
    xv = np.linspace(-1, 1, 64, dtype=np.float32)
    out = np.empty(64, np.float32)
    ok.append(bool(np.allclose(prog(x=xv), xv * 2 + 1)))
    row: dict[str, float | None] = {
        "ours_us": per_call_us(lambda: prog(x=xv)),
        "ours_out_us": per_call_us(lambda: prog(x=xv, out=out)),
        "numpy_us": per_call_us(lambda: np.add(np.multiply(xv, 2, out=out), 1, out=out)),
        "torch_us": None,
    }
    if torch is not None:
        xt = torch.from_numpy(xv)
        row["torch_us"] = per_call_us(lambda: xt * 2 + 1)
    return row


def streaming(torch: Any, ok: list[bool]) -> dict[str, float | None]:
    n = 1 << 24
    a, b, c = (Tensor.empty(n, name=k) for k in "abc")
    prog = optimize(a * b + c, target="llvm")
    rng = np.random.default_rng(0)
    av, bv, cv = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    out = np.empty(n, np.float32)
    ok.append(bool(np.allclose(prog(a=av, b=bv, c=cv), av * bv + cv, rtol=1e-6, atol=1e-6)))
    traffic = 4 * n * 4  # three reads and a write

    def gbs(fn: Callable[[], Any], nbytes: int = traffic) -> float:
        return nbytes / (per_call_us(fn, budget_s=2.0, rounds=5) * 1e-6) / 1e9

    row: dict[str, float | None] = {
        "ours_gbs": gbs(lambda: prog(a=av, b=bv, c=cv)),
        "ours_out_gbs": gbs(lambda: prog(a=av, b=bv, c=cv, out=out)),
        "numpy_gbs": gbs(lambda: np.add(np.multiply(av, bv, out=out), cv, out=out)),
        "copy_gbs": gbs(lambda: np.copyto(out, av), 2 * n * 4),
        "torch_gbs": None,
    }
    if torch is not None:
        at, bt, ct = (torch.from_numpy(v) for v in (av, bv, cv))
        row["torch_gbs"] = gbs(lambda: torch.addcmul(ct, at, bt))
    return row


SYMBOLIC_SIZES = (1, 5, 16, 48, 64)


def symbolic_batch(torch: Any, ok: list[bool]) -> dict[str, Any]:
    """The symbolic-batch MLP at each size: ours (its bucket), ours compiled for the size alone, torch eager (ms)."""
    from egraph_compiler import Variable

    c, h = 256, 1024
    rng = np.random.default_rng(0)
    w1, w2 = ((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in ((c, h), (h, c)))

    def mlp(x: Any) -> Any:
        return (x @ Tensor.empty(c, h, name="w1")).gelu() @ Tensor.empty(h, c, name="w2") + x

    t0 = time.perf_counter()
    prog = optimize(mlp(Tensor.empty((Variable("B", 1, 64), c), name="x")), target="llvm")
    row: dict[str, Any] = {"optimize_s": time.perf_counter() - t0, "sizes": {}}

    def at(n: int) -> dict[str, float | None]:
        x = rng.standard_normal((n, c)).astype(np.float32)
        z = x @ w1
        want = 0.5 * z * (1 + np.tanh(0.7978845608 * (z + 0.044715 * z**3))) @ w2 + x
        ok.append(bool(np.allclose(prog(x=x, w1=w1, w2=w2), want, rtol=1e-3, atol=1e-3)))
        fixed = optimize(mlp(Tensor.empty(n, c, name="x")), target="llvm")
        cell: dict[str, float | None] = {
            "ours_ms": per_call_us(lambda: prog(x=x, w1=w1, w2=w2)) / 1e3,
            "fixed_ms": per_call_us(lambda: fixed(x=x, w1=w1, w2=w2)) / 1e3,
            "torch_ms": None,
        }
        if torch is not None:
            xt, w1t, w2t = (torch.from_numpy(v) for v in (x, w1, w2))
            gelu = torch.nn.functional.gelu
            with torch.no_grad():
                cell["torch_ms"] = per_call_us(lambda: gelu(xt @ w1t, approximate="tanh") @ w2t + xt) / 1e3
        return cell

    for n in SYMBOLIC_SIZES:
        row["sizes"][n] = at(n)
    row["buckets_compiled"] = repr(prog)
    return row


def repeat_optimize() -> dict[str, float]:
    def small() -> Any:
        a, b = Tensor.empty(32, 48, name="a"), Tensor.empty(48, 16, name="b")
        return (a @ b).softmax(axis=1)

    def gpt2() -> Any:
        m = gpt2_block()
        return m.ours(**{k: Tensor.empty(s, name=k) for k, s in m.shapes.items()})

    row = {}
    for name, build in (("small", small), ("gpt2", gpt2)):
        t0 = time.perf_counter()
        optimize(build(), target="llvm")
        row[f"{name}_first_s"] = time.perf_counter() - t0
        graph = build()
        t0 = time.perf_counter()
        optimize(graph, target="llvm")
        row[f"{name}_repeat_ms"] = (time.perf_counter() - t0) * 1e3
    return row


CHILD = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import numpy as np
from model_defs import gpt2_block
from egraph_compiler import Tensor, optimize
m = gpt2_block()
prog = optimize(m.ours(**{k: Tensor.empty(s, name=k) for k, s in m.shapes.items()}), target="llvm")
out = prog(**m.inputs())
print(time.perf_counter() - t0, float(np.abs(out).sum()))
"""


def new_process() -> dict[str, float]:
    """Cold and warm disk cache: a fresh process's first GPT-2 block result (see the module docstring)."""
    import subprocess
    import tempfile

    row = {}
    with tempfile.TemporaryDirectory(prefix="egc-cache-") as d:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(EGC_CACHE_DIR=d, EGC_DISK_CACHE="1")
        package = Path(egraph_compiler.__file__).resolve().parent
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(package), str(Path(__file__).resolve().parent)], check=True
        )
        sums = []
        for kind in ("cold", "warm"):
            t0 = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(Path(__file__).resolve().parent)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            row[f"{kind}_process_s"] = time.perf_counter() - t0
            first, total = out.stdout.split()
            row[f"{kind}_first_result_s"] = float(first)
            sums.append(float(total))
    row["same_result"] = float(sums[0] == sums[1])
    return row


TORCH_PEAK = """
import re, sys
sys.path.insert(0, sys.argv[1])
import torch
from model_defs import gpt2_block, resnet_block

def status(field):
    return int(re.search(field + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024

torch.set_grad_enabled(False)
for m in (gpt2_block(), resnet_block()):
    ins = {k: torch.from_numpy(v) for k, v in m.inputs().items()}
    for _ in range(2):
        del_me = m.torch(**ins)
        del del_me
    calls = []
    for _ in range(3):
        open("/proc/self/clear_refs", "w").write("5")  # resets VmHWM to the resident set now
        before = status("VmRSS")
        out = m.torch(**ins)
        calls.append(status("VmHWM") - before)
        del out
    print(m.name, sum(v.numel() * v.element_size() for v in ins.values()) + min(calls))
"""


def torch_peaks() -> dict[str, int]:
    """PyTorch eager's peak bytes per model (see the module docstring); empty without torch or /proc."""
    import subprocess

    if torch_or_none() is None or not Path("/proc/self/clear_refs").exists():
        return {}
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    here = str(Path(__file__).resolve().parent)
    out = subprocess.run([sys.executable, "-c", TORCH_PEAK, here], env=env, capture_output=True, text=True)
    return {name: int(v) for name, v in (line.split() for line in out.stdout.splitlines() if line.strip())}


def _run_ms(prog: Any, inputs: dict[str, np.ndarray]) -> float:
    prog(**inputs)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        prog(**inputs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def memory(ok: list[bool]) -> dict[str, dict[str, Any]]:
    """Each block's memory plan beside PyTorch's peak; where ours is above it, the block again under
    `memory_limit` = what PyTorch's peak leaves for intermediates, with both estimates and run times."""
    rows = {}
    theirs = torch_peaks()
    for m in (gpt2_block(), resnet_block()):
        out = m.ours(**{k: Tensor.empty(s, name=k) for k, s in m.shapes.items()})
        prog = optimize(out, target="llvm")
        inputs = m.inputs()
        row: dict[str, Any] = {**prog.report.extra["memory"], "torch_peak_bytes": theirs.get(m.name)}
        row["estimate_ms"], row["run_ms"] = prog.report.extra["fusion"]["chosen_s"] * 1e3, _run_ms(prog, inputs)
        tp = theirs.get(m.name)
        if tp is not None and row["peak_bytes"] > tp:
            budget = max(0, tp - (row["peak_bytes"] - row["arena_bytes"]))
            lean = optimize(out, target="llvm", memory_limit=budget)
            ok.append(bool(np.allclose(lean(**inputs), prog(**inputs), rtol=1e-4, atol=1e-4)))
            row["limited"] = {
                "memory_limit": budget,
                **lean.report.extra["memory"],
                "estimate_ms": lean.report.extra["fusion"]["chosen_s"] * 1e3,
                "run_ms": _run_ms(lean, inputs),
            }
        rows[m.name] = row
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="", help="also write the figures to this file")
    args = ap.parse_args()
    os.environ["EGC_DISK_CACHE"] = "0"  # first optimizes measured cold; new_process() gives its children a cache
    torch = torch_or_none()
    ok: list[bool] = []
    print("call overhead ...", file=sys.stderr, flush=True)
    calls = call_overhead(torch, ok)
    print("streaming a * b + c ...", file=sys.stderr, flush=True)
    stream = streaming(torch, ok)
    print("repeat optimize ...", file=sys.stderr, flush=True)
    repeat = repeat_optimize()
    print("memory plans ...", file=sys.stderr, flush=True)
    mem = memory(ok)
    print("symbolic batch ...", file=sys.stderr, flush=True)
    sym = symbolic_batch(torch, ok)
    print("new processes, cold and warm disk cache ...", file=sys.stderr, flush=True)
    fresh = new_process()
    ok.append(bool(fresh["same_result"]))

    def fmt(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    print(f"# serving figures on {cpu_name()}")
    t = calls["torch_us"]
    print(
        f"call overhead (x*2+1, 64 floats): ours {calls['ours_us']:.2f} us, with out= {calls['ours_out_us']:.2f} us; "
        f"numpy {calls['numpy_us']:.2f} us ({calls['ours_us'] / calls['numpy_us']:.1f}x numpy); "
        f"torch eager {fmt(t, '.2f')} us" + (f" ({calls['ours_us'] / t:.2f}x torch)" if t else "")
    )
    print(
        f"a*b+c, 16M floats (GB/s of compulsory traffic): ours {stream['ours_gbs']:.1f}, with out= "
        f"{stream['ours_out_gbs']:.1f}; numpy {stream['numpy_gbs']:.1f}; torch {fmt(stream['torch_gbs'], '.1f')}; "
        f"copy {stream['copy_gbs']:.1f} (ours = {stream['ours_out_gbs'] / stream['copy_gbs']:.0%} of copy bandwidth)"
    )
    print(
        f"optimize: small graph {repeat['small_first_s']:.2f} s, again {repeat['small_repeat_ms']:.2f} ms; GPT-2 block "
        f"{repeat['gpt2_first_s']:.2f} s, again {repeat['gpt2_repeat_ms']:.2f} ms"
    )
    for name, m in mem.items():
        tp = m["torch_peak_bytes"]
        vs = f"; PyTorch eager {tp / 2**20:.1f} MiB ({m['peak_bytes'] / tp:.2f}x)" if tp else "; PyTorch eager n/a"
        print(
            f"memory {name}: peak {m['peak_bytes'] / 2**20:.1f} MiB with the arena, {m['peak_bytes_unplanned'] / 2**20:.1f} "
            f"MiB without ({m['intermediates']} intermediates in {m['arena_bytes'] / 2**20:.1f} MiB){vs}; estimate "
            f"{m['estimate_ms']:.2f} ms, run {m['run_ms']:.2f} ms"
        )
        if lim := m.get("limited"):
            print(
                f"memory {name}, memory_limit={lim['memory_limit']:,} bytes (PyTorch's peak less our inputs and outputs): "
                f"peak {lim['peak_bytes'] / 2**20:.1f} MiB ({lim['peak_bytes'] / tp:.2f}x PyTorch), {lim['intermediates']} "
                f"intermediates in {lim['arena_bytes'] / 2**20:.1f} MiB; estimate {lim['estimate_ms']:.2f} ms, run "
                f"{lim['run_ms']:.2f} ms"
            )
    print(f"symbolic batch MLP, B in [1, 64]: optimize {sym['optimize_s']:.2f} s; {sym['buckets_compiled']} after the calls")
    for n, cell in sym["sizes"].items():
        tt = cell["torch_ms"]
        print(
            f"  B={n:<3} ours {cell['ours_ms']:.3f} ms, compiled for {n} alone {cell['fixed_ms']:.3f} ms "
            f"({cell['ours_ms'] / cell['fixed_ms']:.2f}x), torch eager {fmt(tt, '.3f')} ms"
            + (f" ({tt / cell['ours_ms']:.2f}x ours)" if tt else "")
        )
    print(
        f"new process, GPT-2 block: cold {fresh['cold_process_s']:.2f} s (first result {fresh['cold_first_result_s']:.2f} s); "
        f"warm disk cache {fresh['warm_process_s']:.2f} s (first result {fresh['warm_first_result_s']:.2f} s, "
        f"{fresh['warm_first_result_s'] / fresh['cold_first_result_s']:.1%} of cold)"
    )
    if args.json:
        figures = {"calls": calls, "stream": stream, "repeat": repeat, "memory": mem, "symbolic": sym, "new_process": fresh}
        Path(args.json).write_text(json.dumps(figures, indent=2))
    if not all(ok):
        print("WRONG RESULT", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
