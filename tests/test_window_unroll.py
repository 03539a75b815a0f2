"""A depthwise convolution's window unrolled whole (rules/optops.py `r-whole`, AVX-512 code), and the estimate of
the loads its copies share (extract/loop_cost.py distinct_copies): a tile of output rows reads each input row once
for the three output rows that need it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import conv_ref
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler import AxisType, Ops, Tensor, UOp, optimize
from egraph_compiler.extract.loop_cost import CPUMachine, distinct_copies, estimate, zero_fill
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.kernel.cpu_target import cpu_target, host_cpu

HAS_AVX2 = host_cpu().isa in ("avx2", "avx512")
NEEDS_AVX512 = pytest.mark.skipif(host_cpu().isa != "avx512", reason="the window is unrolled whole in AVX-512 code")


def _rows(gate: str = "window") -> tuple[UOp, UOp, UOp]:
    """A load of input row ro*7 + ru + kh - 1 of a 28x28 image (ru: 7 rows of a tile, kh: the window's row), under
    the window's padding gate, a Padto gate on the tile's row alone, or none; and its two unrolled ranges."""
    ro, ru = UOp.range(4, 0), UOp.range(7, 1, AxisType.UPCAST)
    kh = UOp.range(3, 2, AxisType.UNROLL)
    row = ro * 7 + ru + kh - 1
    src = UOp(Ops.BUFFER, dtypes.float32, (), ("x", (28 * 28,)))
    idx = UOp.build(Ops.INDEX, (src, row * 28))
    if gate == "none":
        return UOp.build(Ops.LOAD, (idx,)), ru, kh
    valid = (row >= 0) & (row < 28) if gate == "window" else (ro * 7 + ru) < 27
    return UOp.build(Ops.LOAD, (idx, UOp.const(0.0, dtypes.float32), valid)), ru, kh


@pytest.mark.parametrize(("gate", "distinct"), [("none", 9), ("window", 9), ("tile", 21)])
def test_copies_reading_the_same_element_under_the_same_gate_count_once(gate: str, distinct: int) -> None:
    """7 output rows x 3 window rows read 9 input rows: copies with the same index and the same gate sides are one
    load. A gate that tells them apart (a padded tile's row, not the window's) keeps all 21."""
    load, ru, kh = _rows(gate)
    assert distinct_copies(load, (ru, kh)) == distinct


def test_an_index_not_linear_in_the_ranges_counts_every_copy() -> None:
    ru, kh = UOp.range(7, 1, AxisType.UPCAST), UOp.range(3, 2, AxisType.UNROLL)
    src = UOp(Ops.BUFFER, dtypes.float32, (), ("x", (64,)))
    load = UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (src, (ru + kh) % 5)),))
    assert distinct_copies(load, (ru, kh)) == 21


def test_a_guarded_value_that_is_zero_off_its_gate_costs_nothing_more() -> None:
    """WHERE(g, LOAD(.., g), 0): the masked load already gives 0 where g is false (no blend in the code)."""
    load, _, _ = _rows("window")
    gate = load.src[2]
    zero = UOp.const(0.0, dtypes.float32)
    assert zero_fill(UOp.build(Ops.WHERE, (gate, load, zero)))
    assert not zero_fill(UOp.build(Ops.WHERE, (gate, load, UOp.const(1.0, dtypes.float32))))
    assert not zero_fill(UOp.build(Ops.WHERE, (gate.src[0], load, zero)))


def _alternatives(t: Tensor, cpu: str | None = None) -> list[tuple[str, Any]]:
    alts: list[tuple[str, Any]] = []
    optimize(t, target="llvm", cpu=cpu, alternatives=alts, cache=False)
    return alts


@NEEDS_AVX512
def test_a_depthwise_window_is_unrolled_in_a_tile_of_rows() -> None:
    """A depthwise 3x3 over 28x28 images, 64 channels, AVX-512 code: the estimate ranks first a tile of output rows
    with the window unrolled whole (each input row loaded once for the three output rows that read it; 1.8-2x
    faster than 8 channels x a row, the best without it), and prices it below the best tile without it."""
    m = CPUMachine.for_cpu(cpu_target(None))
    x, w = Tensor.empty((1, 64, 28, 28), dtype="float32", name="x"), Tensor.empty((64, 1, 3, 3), dtype="float32", name="w")
    alts = _alternatives(x.conv2d(w, padding=1, groups=64))
    best = alts[0][0]
    assert "3r 1R 3r" in best and "64L" in best.split("]")[0], [d for d, _ in alts[:5]]
    plain = [q for d, q in alts if "3r" not in d]
    assert plain, [d for d, _ in alts]
    assert estimate(alts[0][1].kernels[0].ast, m).seconds < estimate(plain[0].kernels[0].ast, m).seconds


@pytest.mark.parametrize(
    ("cpu", "groups"),
    [
        pytest.param(None, 1, marks=NEEDS_AVX512),
        pytest.param("haswell", 16, marks=pytest.mark.skipif(not HAS_AVX2, reason="runs AVX2 code")),
    ],
)
def test_a_window_is_unrolled_whole_only_where_it_leaves_no_loop(cpu: str | None, groups: int) -> None:
    """A dense 3x3 convolution's window inside its loop over input channels is never unrolled whole (no faster
    natively, up to 1.16x slower in AVX2 code than its reduction unrolled by 4), and AVX2 code (16 registers)
    does not unroll a depthwise one either (1.04-1.22x slower)."""
    x = Tensor.empty((1, 16, 14, 14), dtype="float32", name="x")
    w = Tensor.empty((16, 16 // groups, 3, 3), dtype="float32", name="w")
    alts = _alternatives(x.conv2d(w, padding=1, groups=groups), cpu)
    assert alts and not [d for d, _ in alts if "3r" in d]


@NEEDS_AVX512
@settings(max_examples=4, deadline=None)
@given(c=st.integers(2, 12), hw=st.integers(3, 33), stride=st.sampled_from([1, 2]))
def test_every_schedule_with_an_unrolled_window_matches_numpy(c: int, hw: int, stride: int) -> None:
    """Every ranked schedule of a depthwise 3x3 convolution padded by 1 (random channels and image sizes, primes and
    images smaller than a tile included) with its window unrolled whole, the best four, matches numpy; some
    schedules do."""
    rng = np.random.default_rng(c * 1000 + hw * 10 + stride)
    xv = rng.standard_normal((1, c, hw, hw), dtype=np.float32)
    wv = rng.standard_normal((c, 1, 3, 3), dtype=np.float32)
    x, w = Tensor.empty(xv.shape, dtype="float32", name="x"), Tensor.empty(wv.shape, dtype="float32", name="w")
    alts = _alternatives(x.conv2d(w, stride=stride, padding=1, groups=c))
    ref = np.concatenate([conv_ref(xv[:, i : i + 1], wv[i : i + 1], stride, 1) for i in range(c)], axis=1)
    unrolled = [(d, q) for d, q in alts if "3r" in d]
    for sched, prog in unrolled[:4]:  # the best four (each compiles a program)
        np.testing.assert_allclose(prog(x=xv, w=wv), ref, rtol=1e-4, atol=1e-4, err_msg=sched)
    assert unrolled, [d for d, _ in alts]
