"""Integer IDIV and MOD, defined once: floor division and its remainder, over any implementation's values.

IDIV rounds toward negative infinity and MOD takes the divisor's sign (Python's `//` and `%`); x // 0 == x % 0 == 0;
INT_MIN // -1 wraps to INT_MIN. Machines divide by truncation, and the floor differs from it by one exactly when the
remainder is non-zero and its sign differs from the divisor's. `floor_divide` states that correction, the guards
for 0 and -1, and what proven operand bounds let an implementation skip, once. Each implementation supplies its
own `IntArith` (numpy arrays in the reference, LLVM instructions, C for CUDA, Z3 terms in the prover), so they
compute the same function by construction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:  # the op table (ops.py, which uop.py imports) computes with floor_divide
    from egraph_compiler.ir.uop import UOp


class IntArith[V, B](Protocol):
    """The integer operations floor division is built from, in one dtype: V an integer value of the implementation
    (an array, an SSA name, a C expression, a Z3 term), B one of its booleans. `tdiv`/`trem` truncate (C, LLVM) and
    are only ever given a divisor that is neither 0 nor (for a signed dtype) -1; `unsigned` says both operands
    are non-negative, so an unsigned division may be used."""

    def const(self, v: int) -> V: ...
    def eq(self, x: V, v: int) -> B: ...
    def either(self, p: B, q: B) -> B: ...
    def select(self, c: B, x: V, y: V) -> V: ...
    def tdiv(self, a: V, b: V, unsigned: bool) -> V: ...
    def trem(self, a: V, b: V, unsigned: bool) -> V: ...
    def needs_floor(self, r: V, b: V) -> B: ...  # r != 0 and r, b of opposite signs
    def dec_if(self, c: B, q: V) -> V: ...  # q - 1 where c
    def add_if(self, c: B, r: V, b: V) -> V: ...  # r + b where c
    def neg(self, x: V) -> V: ...  # 0 - x, wrapping


class DivFacts(NamedTuple):
    """What is known of the operands: each False lets an implementation leave a guard or the correction out."""

    signed: bool = True
    zero: bool = True  # the divisor may be 0
    minus_one: bool = True  # the divisor may be -1 (signed dtypes)
    mixed: bool = True  # an operand may be negative: truncation and floor may differ

    @classmethod
    def of(cls, a: UOp, b: UOp) -> DivFacts:
        """The facts that the operands' proven bounds (vmin/vmax) establish."""
        signed = not b.dtype.is_unsigned
        return cls(
            signed=signed,
            zero=b.vmin <= 0 <= b.vmax,
            minus_one=signed and b.vmin <= -1 <= b.vmax,
            mixed=signed and (a.vmin < 0 or b.vmin < 0),
        )


UNKNOWN = DivFacts()  # nothing known: every guard and the correction


class _Guards[V, B](NamedTuple):
    zero: B | None
    minus_one: B | None
    either: B | None
    divisor: V  # the divisor, replaced by 1 where a guard holds


def _guards[V, B](ar: IntArith[V, B], b: V, facts: DivFacts) -> _Guards[V, B]:
    zero = ar.eq(b, 0) if facts.zero else None
    minus_one = ar.eq(b, -1) if facts.signed and facts.minus_one else None
    if zero is None or minus_one is None:
        either = zero if minus_one is None else minus_one
    else:
        either = ar.either(zero, minus_one)
    return _Guards(zero, minus_one, either, b if either is None else ar.select(either, ar.const(1), b))


def floor_divide[V, B](ar: IntArith[V, B], a: V, b: V, facts: DivFacts = UNKNOWN, remainder: bool = False) -> V:
    """a // b, or a % b with `remainder`, as IDIV/MOD define them, in `ar`'s operations."""
    g = _guards(ar, b, facts)
    if not facts.mixed:  # both non-negative (or unsigned): truncation is floor
        out = (ar.trem if remainder else ar.tdiv)(a, g.divisor, True)
    elif remainder:
        r = ar.trem(a, g.divisor, False)
        out = ar.add_if(ar.needs_floor(r, b), r, b)
    else:
        q, r = ar.tdiv(a, g.divisor, False), ar.trem(a, g.divisor, False)
        out = ar.dec_if(ar.needs_floor(r, b), q)
        if g.minus_one is not None:
            out = ar.select(g.minus_one, ar.neg(a), out)
    zeroed = g.either if remainder else g.zero  # x % -1 is 0 too; x // -1 is -x
    return out if zeroed is None else ar.select(zeroed, ar.const(0), out)
