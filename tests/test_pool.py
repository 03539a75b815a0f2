"""Max and average pooling on the LLVM backend against numpy, over random shapes, strides and padding, in native
and AVX2 code. A float max reduction keeps vector accumulators (program.vector_accumulators), so a pool's window
is compare-selects on vectors: NaN must still propagate and -inf padding must never win over a real value."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler import Tensor, optimize
from egraph_compiler.kernel.cpu_target import host_cpu

CPUS = [None, pytest.param("haswell", marks=pytest.mark.skipif(host_cpu().isa not in ("avx2", "avx512"), reason="AVX2"))]


def pool_ref(x: np.ndarray, op: str, k: int, s: int, p: int) -> np.ndarray:
    """numpy's pool: the window's max (NaN propagates) over -inf padding, or its mean with the padding's zeros."""
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf if op == "max" else 0.0)
    oh, ow = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
    wins = np.stack([xp[:, :, i : i + s * (oh - 1) + 1 : s, j : j + s * (ow - 1) + 1 : s] for i in range(k) for j in range(k)])
    return wins.max(0) if op == "max" else wins.sum(0) / np.float32(k * k)


def run_pool(x: np.ndarray, op: str, k: int, s: int, p: int, cpu: str | None) -> np.ndarray:
    t = Tensor.empty(x.shape, dtype="float32", name="x")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = t.max_pool2d(k, stride=s, padding=p) if op == "max" else t.avg_pool2d(k, stride=s, padding=p)
        prog = optimize(y, target="llvm", cpu=cpu)
    return np.asarray(prog(x=x))


def check(x: np.ndarray, op: str, k: int, s: int, p: int, cpu: str | None) -> None:
    got, want = run_pool(x, op, k, s, p, cpu), pool_ref(x, op, k, s, p)
    assert got.shape == want.shape
    if op == "max":  # exactly numpy's values, NaN where a window holds one
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cpu", CPUS)
@settings(max_examples=12, deadline=None)
@given(
    b=st.integers(1, 3),
    c=st.integers(1, 19),
    hw=st.tuples(st.integers(1, 37), st.integers(1, 37)),
    k=st.integers(1, 4),
    s=st.integers(1, 3),
    pad=st.integers(0, 2),
    op=st.sampled_from(["max", "avg"]),
    seed=st.integers(0, 2**16),
)
def test_pools_match_numpy(
    cpu: str | None, b: int, c: int, hw: tuple[int, int], k: int, s: int, pad: int, op: str, seed: int
) -> None:
    p = min(pad, k // 2)
    h, w = max(hw[0], k - 2 * p), max(hw[1], k - 2 * p)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    if op == "max":  # the values a compare-select can get wrong: NaN, infinities, signed zeros
        flat = x.reshape(-1)
        picks = rng.choice(flat.size, size=min(flat.size, 6), replace=False)
        flat[picks] = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, np.nan], dtype=np.float32)[: picks.size]
    check(x, op, k, s, p, cpu)


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("op", ["max", "avg"])
@pytest.mark.parametrize("shape,s", [((2, 64, 56, 56), 1), ((2, 64, 112, 112), 2)])
def test_resnet_stem_pools_match_numpy(cpu: str | None, op: str, shape: tuple[int, ...], s: int) -> None:
    """ResNet's 3x3 pools at sizes whose tiles are wide (32 columns, channels unrolled): the forms that ran
    1.6-32x slower as scalar chains, and must give the same values as vectors."""
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    x[0, 3, 5, 7] = np.nan
    check(x, op, 3, s, 1, cpu)
