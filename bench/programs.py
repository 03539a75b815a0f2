"""The benchmark programs: sizes, the tensor expression, a numpy implementation, the work done, the tolerance.

One expression function serves both our Tensor and tinygrad's (their APIs agree on every op used here), so both
compilers get the same program; numpy gets a hand-written equivalent. Inputs are float32 standard normal, drawn
once per benchmark from a fixed seed, and every implementation is timed on those same arrays.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

Arrays = dict[str, np.ndarray]
LN_EPS = 1e-5


@dataclass(frozen=True)
class Benchmark:
    name: str
    label: str  # what it computes, for the table
    shapes: dict[str, tuple[int, ...]]  # input name -> shape (all float32)
    expr: Callable[..., Any]  # (**tensors) -> tensor; our Tensor or tinygrad's
    reference: Callable[..., np.ndarray]  # (**arrays) -> array: the numpy peer, also the correctness oracle
    kind: str  # "flop" (compute: GFLOP/s) or "byte" (memory-bound: GB/s)
    work: float  # flops, or bytes moved (each input read once, output written once)
    rtol: float = 1e-3
    atol: float = 1e-3
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> str:
        return ", ".join(f"{k} {'x'.join(map(str, s)) or 'scalar'}" for k, s in self.shapes.items())

    def inputs(self) -> Arrays:
        """The benchmark's inputs: float32 N(0, 1), seeded by the benchmark's name (so every run agrees)."""
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        return {k: rng.standard_normal(s, dtype=np.float32) for k, s in self.shapes.items()}


# ---- numpy implementations ------------------------------------------------------------------------------------------


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_layernorm(x: np.ndarray) -> np.ndarray:
    y = x - x.mean(-1, keepdims=True)
    return y / np.sqrt((y * y).mean(-1, keepdims=True) + np.float32(LN_EPS))


def np_conv2d_pad1(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """im2col + one BLAS GEMM (tensordot), stride 1, padding 1: numpy's idiomatic conv."""
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))  # (n, cin, ho, wo, kh, kw)
    out = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3]))  # (n, ho, wo, cout)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def np_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = (q @ k.transpose(0, 2, 1)) * np.float32(1 / math.sqrt(q.shape[-1]))
    return np_softmax(s) @ v


# ---- the suite --------------------------------------------------------------------------------------------------------

F32 = 4


def gemm(n: int) -> Benchmark:
    return Benchmark(
        f"gemm_{n}", "a @ b (float32)", {"a": (n, n), "b": (n, n)}, lambda a, b: a @ b, lambda a, b: a @ b, "flop", 2.0 * n**3
    )


def conv2d(n: int, c: int, hw: int, cout: int) -> Benchmark:
    flops = 2.0 * n * cout * hw * hw * c * 9
    return Benchmark(
        "conv2d",
        "x.conv2d(w, padding=1), 3x3, stride 1, no bias",
        {"x": (n, c, hw, hw), "w": (cout, c, 3, 3)},
        lambda x, w: x.conv2d(w, padding=1),
        np_conv2d_pad1,
        "flop",
        flops,
    )


def softmax(rows: int, cols: int) -> Benchmark:
    return Benchmark(
        "softmax", "x.softmax(-1)", {"x": (rows, cols)}, lambda x: x.softmax(-1), np_softmax, "byte", 2.0 * rows * cols * F32
    )


def layernorm(rows: int, cols: int) -> Benchmark:
    return Benchmark(
        "layernorm",
        "x.layernorm(-1), eps 1e-5, no affine",
        {"x": (rows, cols)},
        lambda x: x.layernorm(-1, eps=LN_EPS),
        np_layernorm,
        "byte",
        2.0 * rows * cols * F32,
    )


def mul_add(n: int) -> Benchmark:
    return Benchmark(
        "mul_add",
        "a * b + c",
        {"a": (n,), "b": (n,), "c": (n,)},
        lambda a, b, c: a * b + c,
        lambda a, b, c: a * b + c,
        "byte",
        4.0 * n * F32,
    )


def total(n: int) -> Benchmark:
    # float32 accumulation error grows with n: the check allows 1e-5 of sum(|x|) (numpy itself sums pairwise)
    return Benchmark(
        "sum",
        "x.sum() to a scalar",
        {"x": (n,)},
        lambda x: x.sum(),
        lambda x: np.asarray(x.sum()),
        "byte",
        1.0 * n * F32,
        atol=1e-3,
        extra={"atol_l1": 1e-5},
    )


def attention(bh: int, seq: int, dim: int) -> Benchmark:
    flops = 4.0 * bh * seq * seq * dim  # the two matmuls; softmax not counted
    return Benchmark(
        "attention",
        "softmax(q @ k^T / sqrt(d)) @ v",
        {"q": (bh, seq, dim), "k": (bh, seq, dim), "v": (bh, seq, dim)},
        lambda q, k, v: q.scaled_dot_product_attention(k, v),
        np_attention,
        "flop",
        flops,
        note="GFLOP/s counts the two matmuls only",
    )


def suite(quick: bool = False) -> list[Benchmark]:
    """Every benchmark in table order; `quick` shrinks every size so the whole run takes seconds."""
    if quick:
        return [
            gemm(32),
            gemm(64),
            gemm(128),
            conv2d(1, 8, 8, 8),
            softmax(64, 128),
            layernorm(64, 128),
            mul_add(1 << 16),
            total(1 << 16),
            attention(2, 32, 16),
        ]
    return [
        gemm(256),
        gemm(512),
        gemm(1024),
        conv2d(8, 64, 32, 64),
        softmax(4096, 1024),
        layernorm(4096, 1024),
        mul_add(1 << 24),
        total(1 << 24),
        attention(8, 512, 64),
    ]


def select(benches: list[Benchmark], only: str | None) -> list[Benchmark]:
    """`--only a,b`: exact names, or prefixes (`gemm` picks every gemm_N); an unknown name is an error."""
    if not only:
        return benches
    want = [w.strip() for w in only.split(",") if w.strip()]
    unknown = [w for w in want if not any(b.name == w or b.name.startswith(w) for b in benches)]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {', '.join(unknown)}; --list shows them")
    return [b for b in benches if any(b.name == w or b.name.startswith(w) for w in want)]


def check(bench: Benchmark, out: Any, ref: np.ndarray, x: Arrays) -> tuple[bool, str]:
    """Compare an output with numpy's: (ok, a short description of the error)."""
    got = np.asarray(out)
    if got.shape != ref.shape:
        return False, f"shape {got.shape} != numpy's {ref.shape}"
    got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
    atol = bench.atol
    if "atol_l1" in bench.extra:
        atol = max(atol, bench.extra["atol_l1"] * float(np.abs(next(iter(x.values()))).astype(np.float64).sum()))
    err = np.abs(got64 - ref64)
    ok = bool(np.all(err <= atol + bench.rtol * np.abs(ref64)))
    max_abs = float(err.max()) if err.size else 0.0
    return ok, f"max abs err {max_abs:.3g} (rtol {bench.rtol:g}, atol {atol:.3g})"
