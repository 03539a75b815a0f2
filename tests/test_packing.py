"""Packed GEMM operands (egraph_compiler/packing.py) and the index strides through a packed panel's div/mod."""

from __future__ import annotations

import itertools

import numpy as np
from egraph_compiler.backends.reference import evaluate
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler import Tensor, optimize
from egraph_compiler.ops import AxisType, Ops
from egraph_compiler.packing import PANEL, pack_matmul_operands
from egraph_compiler.program import stride
from egraph_compiler.uop import UOp


def E(*shape: int, name: str) -> Tensor:
    return Tensor.empty(shape, dtype="float32", name=name)


@settings(max_examples=8, deadline=None)
@given(st.sampled_from([256, 300]), st.sampled_from([32, 48]), st.sampled_from([64, 96]), st.booleans())
def test_the_packed_view_has_the_same_values(m: int, k: int, n: int, epilogue: bool) -> None:
    """The rewrite reads B through P.permute(1, 0, 2).reshape(K, N): the reference interpreter gives the same
    result for the rewritten graph as for the original."""
    t = E(m, k, name="a") @ E(k, n, name="b")
    if epilogue:
        t = (t + E(n, name="c")).relu()
    (packed,), packs = pack_matmul_operands([t.uop])
    assert len(packs) == 1 and packs[0].shape == (n // PANEL, k, PANEL)
    rng = np.random.default_rng(m + k + n)
    x = {u.arg[0]: rng.standard_normal(u.arg[1]).astype(np.float32)
         for u in t.uop.toposort() if u.op is Ops.BUFFER and not u.src}
    np.testing.assert_allclose(evaluate(packed, x), evaluate(t.uop, x), rtol=1e-5, atol=1e-5)


def test_small_or_unaligned_products_are_not_packed() -> None:
    """Too few rows to pay for the copy, or columns no panel divides: nothing to offer."""
    for a, b in (((16, 64), (64, 64)), ((256, 64), (64, 40)), ((256, 64), (64, 32))):
        t = E(*a, name="a") @ E(*b, name="b")
        assert pack_matmul_operands([t.uop]) == ([t.uop], [])


def test_a_long_reduction_reads_a_packed_copy() -> None:
    """512x2048 @ 2048x1024: every step of the reduction moves B's unpacked column a page (1024 floats) ahead; the
    search keeps the packed copy (one more kernel), and the product matches numpy."""
    t = E(512, 2048, name="a") @ E(2048, 1024, name="b")
    prog = optimize(t, target="llvm")
    packs = [d for d in prog.report.extra["fusion"]["decisions"] if d["tensor"].startswith("PACK")]
    assert packs and packs[0]["decision"] == "materialized"
    rng = np.random.default_rng(1)
    a = rng.standard_normal((512, 2048), dtype=np.float32)
    b = rng.standard_normal((2048, 1024), dtype=np.float32)
    np.testing.assert_allclose(prog(a=a, b=b), a.astype(np.float64) @ b, rtol=1e-3, atol=1e-2)


def _range(i: int, n: int, kind: AxisType = AxisType.LOOP) -> UOp:
    return UOp(Ops.RANGE, UOp.const(0).dtype, (UOp.const(n),), (("t", i), kind))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.sampled_from([2, 4, 8, 16]), st.sampled_from([1, 2, 3, 4, 8, 16]), st.integers(-8, 40),
       st.sampled_from([4, 8, 16, 32, 48]), st.booleans())
def test_stride_through_mod_and_div_is_exact(s: int, n: int, outer: int, const: int, c: int, div: bool) -> None:
    """Whenever stride() gives a step for `(outer*o + s*r + const) % c` (or `//`) along r, consecutive values of r
    differ by exactly that step for every value of o: checked by enumeration."""
    o, r = _range(0, 4), _range(1, n, AxisType.UPCAST)
    e = o * UOp.const(outer) + r * UOp.const(s) + UOp.const(const)
    idx = e // UOp.const(c) if div else e % UOp.const(c)
    step = stride(idx, r)
    if step is None:
        return
    def val(ov: int, rv: int) -> int:
        v = outer * ov + s * rv + const
        q = abs(v) // c * (1 if v >= 0 else -1)   # C semantics: truncation toward zero
        return q if div else v - q * c

    for ov, rv in itertools.product(range(4), range(n - 1)):
        assert val(ov, rv + 1) - val(ov, rv) == step
