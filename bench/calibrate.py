"""How well the CPU estimate ranks schedules: every ranked loop nest of real kernels, timed.

    python bench/calibrate.py [--quick] [--only NAME[,NAME]] [--limit N] [--cpu NAME] [--json FILE]

For each kernel shape (GEMMs, transformer products, ResNet convolutions, softmax, layernorm), optimize with
`alternatives=[]` gives every ranked schedule of every kernel as a runnable program; each distinct kernel (up to
`--limit` per kernel of the program) is compiled and timed alone. Per kernel the table prints the schedule the
estimate picks (`schedule.tie_winner`, as `rank_kernel` ranks), its measured time, the best
measured time among the candidates, their ratio (the regret: 1.00 means the estimate picked the fastest) and the
estimate over the measurement. Two models of the model benchmark are calibrated whole (their kernels carry
the epilogues and fusion context that bare shapes lack). The summary is the geomean regret and the geomean
factor between estimate and
measurement: the figures a change to `extract/loop_cost.py` should improve. Kernels are timed through their
Python entry (about 0.1 ms a call), so shapes below a millisecond say little. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import model_defs

from egraph_compiler import Tensor, optimize
from egraph_compiler.extract.loop_cost import CPUMachine, estimate
from egraph_compiler.extract.schedule import describe_schedule, tie_winner
from egraph_compiler.ir.ops import Ops
from egraph_compiler.kernel.cpu_target import cpu_target
from egraph_compiler.kernel.program import canonical_kernel


def _t(*shape: int, name: str) -> Tensor:
    return Tensor.empty(shape, dtype="float32", name=name)


def _gemm(m: int, k: int, n: int) -> Callable[[], Tensor]:
    return lambda: _t(m, k, name="a") @ _t(k, n, name="b")


def _conv(b: int, ci: int, co: int, hw: int, s: int = 1, k: int = 3) -> Callable[[], Tensor]:
    return lambda: _t(b, ci, hw, hw, name="x").conv2d(_t(co, ci, k, k, name="w"), stride=s, padding=k // 2)


SHAPES: dict[str, Callable[[], Tensor]] = {
    "gemm_256": _gemm(256, 256, 256),
    "gemm_1024": _gemm(1024, 1024, 1024),
    "gemm_1000": _gemm(1000, 1000, 1000),
    "tfm_128x768x2304": _gemm(128, 768, 2304),
    "tfm_128x3072x768": _gemm(128, 3072, 768),
    "mlp_512x4096x1024": _gemm(512, 4096, 1024),
    "conv_c64_56": _conv(1, 64, 64, 56),
    "conv_c64_56_b4": _conv(4, 64, 64, 56),
    "conv_c128_28": _conv(1, 128, 128, 28),
    "conv_c256_14": _conv(1, 256, 256, 14),
    "conv_c64_56_s2": _conv(1, 64, 128, 56, 2),
    "softmax_512x1024": lambda: _t(512, 1024, name="x").softmax(-1),
    "layernorm_512x1024": lambda: _t(512, 1024, name="x").layernorm(-1),
}


def _model(make: Callable[[], Any]) -> Callable[[], Tensor]:
    """A model of the model benchmark, whole: its kernels with their epilogues and fusion context."""

    def build() -> Tensor:
        m = make()
        return m.ours(**{k: _t(*s, name=k) for k, s in m.shapes.items()})

    return build


SHAPES.update({"model_resnet_block": _model(model_defs.resnet_block), "model_mlp": _model(model_defs.mlp)})
QUICK: dict[str, Callable[[], Tensor]] = {
    "gemm_64": _gemm(64, 64, 64),
    "softmax_32x64": lambda: _t(32, 64, name="x").softmax(-1),
}


def _median_s(run: Callable[[], None], repeat: int) -> float:
    run()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t)
        if ts[-1] > 0.2:
            break
    return sorted(ts)[len(ts) // 2]


def measure(
    name: str, build: Callable[[], Tensor], limit: int, cpu: str | None, repeat: int
) -> dict[tuple[str, ...], list[tuple[str, Any, float]]]:
    """Per kernel of the program (keyed by what it writes): (schedule, kernel AST, measured seconds) for each
    distinct candidate."""
    t = build()
    rng = np.random.default_rng(0)
    inputs = {
        u.arg[0]: rng.standard_normal(u.arg[1]).astype(np.float32) for u in t.uop.toposort() if u.op is Ops.BUFFER and not u.src
    }
    alts: list[tuple[str, Any]] = []
    optimize(t, target="llvm", alternatives=alts, cpu=cpu)
    seen: set[Any] = set()
    fams: dict[tuple[str, ...], list[tuple[str, Any, float]]] = {}
    for _, prog in alts:
        comp = prog.compile()
        bufs = prog.place_buffers(**inputs)
        for k, run in zip(prog.kernels, comp):
            key, fam = canonical_kernel(k.ast), tuple(k.writes)
            if key in seen or len(fams.get(fam, [])) >= limit:
                continue
            seen.add(key)
            fams.setdefault(fam, []).append((describe_schedule(k.ast), k.ast, _median_s(lambda r=run, b=bufs: r(b), repeat)))
    print(
        f"[calibrate] {name}: {len(alts)} schedules, {sum(map(len, fams.values()))} kernels timed", file=sys.stderr, flush=True
    )
    return fams


def pick(cands: list[tuple[str, Any, float]], machine: CPUMachine) -> tuple[int, float]:
    """The candidate the estimate picks (as rank_kernel: least code within CODE_TIE of the best) and its
    estimate."""
    ests = [estimate(a, machine) for _, a, _ in cands]
    i = tie_winner(ests)
    return i, ests[i].seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two small shapes (a smoke run)")
    ap.add_argument("--only", default="", help="comma-separated shape names (prefixes match)")
    ap.add_argument("--limit", type=int, default=40, help="candidates timed per kernel (default 40)")
    ap.add_argument("--cpu", default=None, help="LLVM CPU name to generate and price code for (default: host)")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per candidate (default 5)")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    args = ap.parse_args(argv)
    if args.limit < 1 or args.repeat < 1:
        ap.error("--limit and --repeat must be positive")
    warnings.simplefilter("ignore")
    shapes = QUICK if args.quick else SHAPES
    if args.only:
        shapes = {n: b for n, b in shapes.items() if any(n.startswith(p) for p in args.only.split(","))}
    machine = CPUMachine.for_cpu(cpu_target(args.cpu))
    print(f"machine model: {machine.describe()}")
    print(f"{'kernel':32s} {'n':>3s}  {'estimate picks':44s} {'meas ms':>9s} {'best ms':>9s} {'regret':>6s} {'est/meas':>8s}")
    rows = []
    for name, build in shapes.items():
        for fam, cands in measure(name, build, args.limit, args.cpu, args.repeat).items():
            i, est = pick(cands, machine)
            best = min(t for _, _, t in cands)
            desc, _, t = cands[i]
            rows.append(
                {
                    "kernel": f"{name}:{','.join(fam)}",
                    "candidates": len(cands),
                    "pick": desc,
                    "measured_s": t,
                    "best_s": best,
                    "regret": t / best,
                    "estimate_s": est,
                }
            )
            r = rows[-1]
            print(
                f"{r['kernel']:32s} {len(cands):3d}  {desc[:44]:44s} {t * 1e3:9.3f} {best * 1e3:9.3f} "
                f"{t / best:6.2f} {est / t:8.2f}"
            )
    if rows:
        regret = math.exp(sum(math.log(r["regret"]) for r in rows) / len(rows))
        factor = math.exp(sum(abs(math.log(r["estimate_s"] / r["measured_s"])) for r in rows) / len(rows))
        print(
            f"geomean regret {regret:.3f} (1.00: every pick the fastest), worst {max(r['regret'] for r in rows):.2f}; "
            f"estimate within {factor:.2f}x of the measurement in geomean, "
            f"{sum(1 for r in rows if not 1 / 3 <= r['estimate_s'] / r['measured_s'] <= 3)} of {len(rows)} beyond 3x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine.describe(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
