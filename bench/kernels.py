"""GEMM and convolution kernels against numpy and PyTorch (CPU), on the same inputs, in one run.

    python bench/kernels.py [--quick | --extra] [--only NAME[,NAME]] [--cpu NAME] [--repeat N] [--json FILE]

The shapes real models are made of: square GEMMs (including sizes no tile divides), the products of a transformer
block at 128 tokens, the 3x3 and 1x1 convolutions of ResNet-18 at batch 1 and 8, and a depthwise 3x3 (MobileNet).
Per shape: our first-call time (optimize + compile + first run), our run time (median, compilation excluded) with
GFLOP/s and the fraction of the machine model's peak, the cost model's estimate beside it, numpy's time (GEMMs;
its default threads) and PyTorch's. Ratios are peer time / our time: above 1 means we are faster.

`--extra`: shapes outside that list, the kind a held-out check picks: odd and thin GEMMs (a matrix-vector product
and products of 8 and 33 rows among them), a ResNet stem, a 1x1 expansion, 5x5 and grouped convolutions, other
batches and depthwise sizes.

`--cpu haswell` generates and prices AVX2 code (on any AVX2 or AVX-512 host); the header prints the machine model
used. By default the peers are held to the same ISA (`--peers same`: OpenBLAS's Haswell kernels, oneDNN and ATen
at AVX2, MKL at AVX2), so that AVX2 code is judged against AVX2 code; `--peers native` lets them run their best
code for the host. The header prints what each peer ran. Ours runs first for each
shape, then torch, then numpy, with a pause between them: their thread pools spin for a while after a call, on
the cores the next contestant is timed on; each then calls itself for WARMUP_S untimed before it is timed.
Outputs are checked against numpy (float64 accumulation). torch is optional: without it the torch column reads
n/a. Exit status 1 if any of our results was wrong or failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
import warnings
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import table, time_calls

SETTLE_S = 0.3  # between peers: OpenBLAS's and OpenMP's idle threads spin for a while before they sleep
WARMUP_S = 0.3  # each contestant's untimed calls first: after the pause the VM's cores run slow for a while


@dataclass(frozen=True)
class Shape:
    name: str
    kind: str  # "gemm" or "conv"
    dims: tuple[int, ...]  # gemm: (m, k, n); conv: (batch, cin, hw, cout, kernel, stride, groups)

    @property
    def flops(self) -> float:
        if self.kind == "gemm":
            m, k, n = self.dims
            return 2.0 * m * k * n
        b, cin, hw, cout, ks, stride, groups = self.dims
        ho = (hw + 2 * (ks // 2) - ks) // stride + 1
        return 2.0 * b * cout * ho * ho * (cin // groups) * ks * ks


def shapes(quick: bool) -> list[Shape]:
    if quick:
        return [
            Shape("gemm_250", "gemm", (250, 250, 250)),
            Shape("gemm_256", "gemm", (256, 256, 256)),
            Shape("tfm_128x768x768", "gemm", (128, 768, 768)),
            Shape("conv3x3_b1_c64_28", "conv", (1, 64, 28, 64, 3, 1, 1)),
            Shape("dw3x3_b1_c64_28", "conv", (1, 64, 28, 64, 3, 1, 64)),
        ]
    out = [Shape(f"gemm_{n}", "gemm", (n, n, n)) for n in (256, 512, 1000, 1024, 2048, 250)]
    out += [Shape(f"tfm_128x{k}x{n}", "gemm", (128, k, n)) for k, n in ((768, 2304), (768, 768), (768, 3072), (3072, 768))]
    # ResNet-18's convolutions: (cin, hw, cout, kernel, stride)
    layers = [
        (64, 56, 64, 3, 1),
        (64, 56, 128, 3, 2),
        (64, 56, 128, 1, 2),
        (128, 28, 128, 3, 1),
        (128, 28, 256, 3, 2),
        (256, 14, 256, 3, 1),
        (256, 14, 512, 3, 2),
        (512, 7, 512, 3, 1),
    ]
    for b in (1, 8):
        out += [
            Shape(f"conv{k}x{k}_s{s}_b{b}_c{ci}_{hw}_to{co}", "conv", (b, ci, hw, co, k, s, 1)) for ci, hw, co, k, s in layers
        ]
    out.append(Shape("dw3x3_b1_c256_28", "conv", (1, 256, 28, 256, 3, 1, 256)))
    return out


def extra_shapes() -> list[Shape]:
    """Held-out-like shapes (not the issue's list): GEMMs (m, k, n) and convolutions (batch, cin, hw, cout,
    kernel, stride, groups)."""
    gemms = [(300, 300, 300), (777, 777, 777), (1500, 1500, 1500), (96, 640, 1920), (200, 3000, 200)]
    gemms += [(64, 4096, 64), (33, 511, 129), (8, 768, 3072), (16, 768, 3072), (1, 768, 3072), (1, 4096, 4096)]
    convs = [
        (1, 3, 224, 64, 7, 2, 1),  # ResNet's stem
        (1, 256, 14, 1024, 1, 1, 1),  # ResNet-50's 1x1 expansion
        (2, 96, 20, 160, 3, 1, 1),
        (4, 64, 30, 64, 5, 1, 1),
        (2, 64, 28, 64, 3, 1, 2),  # two groups
        (1, 32, 112, 32, 3, 1, 32),  # depthwise (MobileNet's first)
        (1, 144, 56, 144, 3, 2, 144),  # depthwise, stride 2
    ]
    out = [Shape(f"x_gemm_{m}x{k}x{n}", "gemm", (m, k, n)) for m, k, n in gemms]
    for b, ci, hw, co, k, st, g in convs:
        kind = "dw" if g == ci == co else f"g{g}conv" if g > 1 else "conv"
        out.append(Shape(f"x_{kind}{k}x{k}_s{st}_b{b}_c{ci}_{hw}_to{co}", "conv", (b, ci, hw, co, k, st, g)))
    return out


def inputs(s: Shape) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(s.name.encode()))
    if s.kind == "gemm":
        m, k, n = s.dims
        return {
            "a": rng.standard_normal((m, k), dtype=np.float32),
            "b": rng.standard_normal((k, n), dtype=np.float32) / np.float32(math.sqrt(k)),
        }
    b, cin, hw, cout, ks, _, groups = s.dims
    return {
        "x": rng.standard_normal((b, cin, hw, hw), dtype=np.float32),
        "w": rng.standard_normal((cout, cin // groups, ks, ks), dtype=np.float32)
        / np.float32(math.sqrt(cin // groups * ks * ks)),
    }


def reference(s: Shape, x: dict[str, np.ndarray]) -> np.ndarray:
    """numpy in float64: the oracle (GEMM) or an im2col convolution (conv)."""
    if s.kind == "gemm":
        return x["a"].astype(np.float64) @ x["b"].astype(np.float64)
    _, cin, _, cout, ks, stride, groups = s.dims
    p = ks // 2
    xp = np.pad(x["x"].astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (ks, ks), axis=(2, 3))[:, :, ::stride, ::stride]
    cg, og = cin // groups, cout // groups
    outs = []
    for g in range(groups):
        wg = x["w"][g * og : (g + 1) * og].astype(np.float64)
        outs.append(np.einsum("bchwij,ocij->bohw", win[:, g * cg : (g + 1) * cg], wg, optimize=True))
    return np.concatenate(outs, axis=1)


def build_ours(s: Shape, cpu: str | None) -> Any:
    from egraph_compiler import Tensor, optimize

    if s.kind == "gemm":
        m, k, n = s.dims
        a, b = Tensor.empty((m, k), dtype="float32", name="a"), Tensor.empty((k, n), dtype="float32", name="b")
        return optimize(a @ b, target="llvm", cpu=cpu)
    b_, cin, hw, cout, ks, stride, groups = s.dims
    x = Tensor.empty((b_, cin, hw, hw), dtype="float32", name="x")
    w = Tensor.empty((cout, cin // groups, ks, ks), dtype="float32", name="w")
    return optimize(x.conv2d(w, stride=stride, padding=ks // 2, groups=groups), target="llvm", cpu=cpu)


def torch_fn(s: Shape, x: dict[str, np.ndarray]) -> Callable[[], Any] | None:
    try:
        import torch
    except ImportError:
        return None
    t = {k: torch.from_numpy(v) for k, v in x.items()}
    if s.kind == "gemm":
        return lambda: torch.matmul(t["a"], t["b"])
    _, _, _, _, ks, stride, groups = s.dims
    return lambda: torch.nn.functional.conv2d(t["x"], t["w"], stride=stride, padding=ks // 2, groups=groups)


@dataclass
class Row:
    name: str
    gflop: float
    ok: bool = False
    error: str | None = None
    first_call_s: float | None = None
    ours_ms: float | None = None
    estimate_ms: float | None = None
    schedule: str = ""
    numpy_ms: float | None = None
    torch_ms: float | None = None
    kind: str = "gemm"  # Shape.kind


def run_shape(s: Shape, cpu: str | None, repeat: int) -> Row:
    row = Row(s.name, s.flops / 1e9, kind=s.kind)
    x = inputs(s)
    ref = reference(s, x)
    try:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the roofline warning: the table shows estimate and time anyway
            prog = build_ours(s, cpu)
        out = prog(**x)
        row.first_call_s = time.perf_counter() - t0
        row.ok = bool(np.allclose(out, ref, rtol=1e-3, atol=1e-3))
        row.ours_ms = time_calls(lambda: prog(**x), repeat=repeat, warmup_s=WARMUP_S).median_s * 1e3
        scheds = prog.report.extra.get("schedules", [])
        row.estimate_ms = sum(sc["estimate"]["seconds"] for sc in scheds) * 1e3 if scheds else None
        row.schedule = "; ".join(sc["chosen"] for sc in scheds)
    except Exception as e:  # reported in the table, the run goes on
        row.error = "".join(traceback.format_exception_only(e)).strip().splitlines()[0][:200]
    fn = torch_fn(s, x)
    if fn is not None:
        import torch

        time.sleep(SETTLE_S)
        with torch.no_grad():
            row.torch_ms = time_calls(fn, repeat=repeat, warmup_s=WARMUP_S).median_s * 1e3
    if s.kind == "gemm":
        a, b = x["a"], x["b"]
        time.sleep(SETTLE_S)
        row.numpy_ms = time_calls(lambda: a @ b, repeat=repeat, warmup_s=WARMUP_S).median_s * 1e3
    time.sleep(SETTLE_S)
    return row


def fmt(v: float | None, spec: str = ".2f") -> str:
    return "n/a" if v is None else format(v, spec)


def results_table(rows: list[Row], peak: float) -> str:
    head = (
        "shape",
        "ok",
        "GFLOP",
        "opt+jit s",
        "ours ms",
        "GFLOP/s",
        "of peak",
        "est ms",
        "numpy ms",
        "x numpy",
        "torch ms",
        "x torch",
    )
    cells = []
    for r in rows:
        rate = r.gflop / (r.ours_ms * 1e-3) if r.ours_ms else None
        cells.append(
            [
                r.name,
                "yes" if r.ok else ("ERR" if r.error else "WRONG"),
                fmt(r.gflop, ".3f"),
                fmt(r.first_call_s),
                fmt(r.ours_ms, ".3f"),
                fmt(rate, ".1f"),
                fmt(rate / peak if rate else None, ".0%"),
                fmt(r.estimate_ms, ".3f"),
                fmt(r.numpy_ms, ".3f"),
                fmt(r.numpy_ms / r.ours_ms if r.numpy_ms and r.ours_ms and r.ok else None),
                fmt(r.torch_ms, ".3f"),
                fmt(r.torch_ms / r.ours_ms if r.torch_ms and r.ours_ms and r.ok else None),
            ]
        )
    lines = [table(list(head), cells)]

    def geo(xs: list[float]) -> str | None:
        return fmt(math.exp(sum(map(math.log, xs)) / len(xs))) if xs else None

    for kind in ("gemm", "conv"):
        sel = [r for r in rows if r.kind == kind and r.ok and r.ours_ms]
        ratios = [
            f"{g}x {peer}"
            for peer, g in (
                ("numpy", geo([r.numpy_ms / r.ours_ms for r in sel if r.numpy_ms])),
                ("torch", geo([r.torch_ms / r.ours_ms for r in sel if r.torch_ms])),
            )
            if g is not None
        ]
        if sel:
            lines.append(f"{kind}: geomean {', '.join(ratios) or 'no peer'} ({len(sel)} shapes)")
    return "\n".join(lines)


# What holds each peer's libraries to an ISA: read when the library loads, so set before the process starts
PEER_ISA_ENV = {
    "avx2": {
        "OPENBLAS_CORETYPE": "Haswell",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
}


def _peers_unheld(isa: str) -> dict[str, str]:
    """The settings that hold the peers to `isa` and are not yet in this process's environment."""
    return {k: v for k, v in PEER_ISA_ENV.get(isa, {}).items() if os.environ.get(k) != v}


def _blas_kernels() -> str:
    """The BLAS numpy calls and the kernels it picked for this host (threadpoolctl when installed)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "BLAS kernels unknown"
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(f"{i.get('internal_api')} {i.get('architecture', '?')} kernels" for i in blas) or "no BLAS found"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="five small shapes (a smoke run)")
    group.add_argument("--extra", action="store_true", help="held-out-like shapes outside the issue's list")
    ap.add_argument("--only", default="", help="comma-separated shape names (prefixes match)")
    ap.add_argument("--cpu", default=None, help="the CPU to generate code for (an LLVM name: haswell = AVX2)")
    ap.add_argument(
        "--peers",
        choices=("same", "native"),
        default="same",
        help="same: hold numpy and torch to the ISA our code is generated for; native: their best for the host",
    )
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", default="", help="write the rows to this file")
    args = ap.parse_args(argv)
    os.environ.setdefault("EGC_DISK_CACHE", "0")  # first-call times measured cold, not from a disk cache
    from egraph_compiler.extract.loop_cost import CPUMachine
    from egraph_compiler.kernel.cpu_target import cpu_target

    target = cpu_target(args.cpu)
    unheld = _peers_unheld(target.isa) if args.peers == "same" else {}
    if unheld and argv is None:  # the peers read these settings when they load: start the script again with them
        os.environ.update(unheld)
        os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]])
    if unheld:  # called from Python: the libraries are loaded already, and this process is not ours to replace
        print(f"note: the peers keep their own ISA (run the script to hold them to {target.isa})")
    machine = CPUMachine.for_cpu(target)
    peak = machine.peak_flops() / 1e9
    try:
        import torch

        onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "host's")
        peers = f"numpy {np.__version__} ({_blas_kernels()}), torch {torch.__version__} ({torch.get_num_threads()} "
        peers += f"threads, ATen {torch.backends.cpu.get_cpu_capability()}, oneDNN {onednn} ISA)"
    except ImportError:
        peers = f"numpy {np.__version__} ({_blas_kernels()}), torch not installed"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine model: {machine.describe()}; peak {peak:.0f} GFLOP/s (float32 FMA on every core)")
    print(f"load average {load:.2f}; {peers}; float32")
    todo = extra_shapes() if args.extra else shapes(args.quick)
    if args.only:
        todo = [s for s in todo if any(s.name.startswith(w) for w in args.only.split(","))]
    rows = []
    for s in todo:
        print(f"[kernels {time.strftime('%H:%M:%S')}] {s.name}", file=sys.stderr, flush=True)
        rows.append(run_shape(s, args.cpu, args.repeat))
    print(results_table(rows, peak))
    for r in rows:
        if r.error:
            print(f"error {r.name}: {r.error}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"machine": machine.describe(), "peers": peers, "peak_gflops": peak, "rows": [asdict(r) for r in rows]},
                indent=2,
            )
        )
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
