"""IDIV/MOD's one definition (egraph_compiler/ir/floordiv.py) against Python's own // and %, the oracle: floor
division and the divisor-signed remainder, x // 0 == x % 0 == 0, and results wrapped to the dtype's width (so
INT_MIN // -1 is INT_MIN). The reference interpreter computes with it (numpy), and so do the LLVM and CUDA
renderers with the guards that operand bounds leave out; those are checked against the reference in their own
test files. Here: the definition itself, for every integer dtype, and the facts read off bounds being sound."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler.ir.dtypes import DType, dtypes
from egraph_compiler.ir.floordiv import DivFacts, floor_divide
from egraph_compiler.ir.ops import OP_TABLE, Ops
from egraph_compiler.ir.uop import UOp

INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32]


def wrap(v: int, d: DType) -> int:
    """v in d's two's-complement width."""
    v &= (1 << d.bits) - 1
    return v - (1 << d.bits) if not d.is_unsigned and v >= 1 << (d.bits - 1) else v


def oracle(a: int, b: int, d: DType, remainder: bool) -> int:
    if b == 0:
        return 0
    return wrap(a % b if remainder else a // b, d)


def limits(d: DType) -> tuple[int, int]:
    return (0, (1 << d.bits) - 1) if d.is_unsigned else (-(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1)


@st.composite
def operands(draw: st.DrawFn) -> tuple[DType, list[int], list[int]]:
    d = draw(st.sampled_from(INTS))
    lo, hi = limits(d)
    edge = st.sampled_from(sorted({lo, hi, 0, 1, -1 if lo < 0 else 2, lo + 1, hi - 1}))
    value = st.one_of(edge, st.integers(lo, hi), st.integers(max(lo, -9), min(hi, 9)))
    n = draw(st.integers(1, 24))
    return d, draw(st.lists(value, min_size=n, max_size=n)), draw(st.lists(value, min_size=n, max_size=n))


@settings(max_examples=300, deadline=None)
@given(operands(), st.booleans())
def test_reference_is_python_floor_division(ops: tuple[DType, list[int], list[int]], remainder: bool) -> None:
    d, xs, ys = ops
    a, b = np.array(xs, dtype=d.np), np.array(ys, dtype=d.np)
    got = OP_TABLE[Ops.MOD if remainder else Ops.IDIV].ref(a, b, d)
    assert [int(v) for v in got] == [oracle(x, y, d, remainder) for x, y in zip(xs, ys)]


class PyInts:
    """Python ints in one dtype's width, C's truncating division: a second, scalar implementation of IntArith."""

    def __init__(self, d: DType) -> None:
        self.d = d

    def const(self, v: int) -> int:
        return v

    def eq(self, x: int, v: int) -> bool:
        return x == v

    def either(self, p: bool, q: bool) -> bool:
        return p or q

    def select(self, c: bool, x: int, y: int) -> int:
        return x if c else y

    def tdiv(self, a: int, b: int, unsigned: bool) -> int:
        assert b != 0 and (not unsigned or (a >= 0 and b > 0)), "floor_divide guards the divisor"
        q = abs(a) // abs(b)
        return wrap(q if (a < 0) == (b < 0) else -q, self.d)

    def trem(self, a: int, b: int, unsigned: bool) -> int:
        assert b != 0 and (not unsigned or (a >= 0 and b > 0))
        return a - b * self.tdiv(a, b, unsigned) if b != -1 else 0

    def needs_floor(self, r: int, b: int) -> bool:
        return r != 0 and (r < 0) != (b < 0)

    def dec_if(self, c: bool, q: int) -> int:
        return q - 1 if c else q

    def add_if(self, c: bool, r: int, b: int) -> int:
        return r + b if c else r

    def neg(self, x: int) -> int:
        return wrap(-x, self.d)


@st.composite
def bounded(draw: st.DrawFn) -> tuple[DType, tuple[int, int], tuple[int, int]]:
    d = draw(st.sampled_from([dtypes.int8, dtypes.int32, dtypes.uint8, dtypes.index]))
    lo, hi = limits(d) if d is not dtypes.index else (-1000, 1000)
    small = st.integers(max(lo, -20), min(hi, 20))
    ia, ib = sorted(draw(st.tuples(small, small))), sorted(draw(st.tuples(small, small)))
    return d, (ia[0], ia[1]), (ib[0], ib[1])


@settings(max_examples=200, deadline=None)
@given(bounded(), st.booleans())
def test_facts_from_bounds_are_sound(case: tuple[DType, tuple[int, int], tuple[int, int]], remainder: bool) -> None:
    """With the guards the operands' bounds leave out, every value inside the bounds still divides correctly (the
    LLVM and CUDA renderers read the facts this way)."""
    d, (alo, ahi), (blo, bhi) = case
    facts = DivFacts.of(UOp.variable("a", alo, ahi, d), UOp.variable("b", blo, bhi, d))
    for x in range(alo, ahi + 1):
        for y in range(blo, bhi + 1):
            assert floor_divide(PyInts(d), x, y, facts, remainder) == oracle(x, y, d, remainder), (x, y, facts)


def test_facts_drop_guards() -> None:
    idx = dtypes.index
    assert DivFacts.of(UOp.variable("a", 0, 9, idx), UOp.const(4)) == DivFacts(True, False, False, False)
    assert DivFacts.of(UOp.variable("a", -3, 9, idx), UOp.variable("b", 0, 5, idx)) == DivFacts(True, True, False, True)
    assert DivFacts.of(UOp.variable("a", 0, 9, dtypes.uint32), UOp.variable("b", 0, 5, dtypes.uint32)).mixed is False
