"""Index math as affine sums of ranges: the div and mod of such sums folded where the terms' bounds settle them.

Most divs and mods in a kernel's indices are of an affine sum of ranges whose remainder part (every
coefficient taken modulo the divisor) provably stays within one multiple of the divisor (a split range
recombined, `(32*jo + ji) // 32` with ji < 32, a packed operand's view, a convolution's window index
`(10*r + i) % 9` with r + i < 9), or whose whole multiples come out (`(64*h + i + 1536) // 32` is
`2*h + 48 + i // 32`), or a range split by a factor of the divisor (`(16*a + u) // 32` is `a // 2` for u < 16).
`fold_affine_divmod` settles those from the terms' bounds alone, without an e-graph: the late simplifier
(egraph_compiler/late_simplify.py) before it builds one, and the binding of split ranges
(kernel/split_ranges.py) where it writes a range as its parts.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from egraph_compiler.ir.ops import Ops
from egraph_compiler.ir.uop import UOp

Affine = tuple[dict[UOp, int], int]  # sum of coefficient * atom, plus a constant


def _affine_bounds(a: Affine) -> tuple[int, int]:
    terms, c = a
    lo = hi = c
    for atom, k in terms.items():
        x, y = int(atom.vmin) * k, int(atom.vmax) * k
        lo, hi = lo + min(x, y), hi + max(x, y)
    return lo, hi


def _divmod_affine(a: Affine, d: int, op: Ops, like: UOp) -> Affine | None:
    """a // d or a % d (d > 0, a never negative) as an affine sum: a = d * whole + rest once every coefficient is
    taken modulo d (whatever the signs). Where rest stays within one multiple of d, that is all (`(10*r + i) % 9`
    is `r + i` where r + i < 9: a convolution's window index); where it spans more and is never negative, the
    multiples come out and rest keeps the div or mod (`(64*h + i + 1536) // 32` is `2*h + 48 + i // 32`: a head's
    column in a fused QKV matrix); None where nothing comes out."""
    terms, c = a
    whole = {x: k // d for x, k in terms.items() if k // d}
    rest: Affine = ({x: k % d for x, k in terms.items() if k % d}, c % d)
    lo, hi = _affine_bounds(rest)
    if lo // d == hi // d:
        q = lo // d
        return (whole, c // d + q) if op is Ops.IDIV else (rest[0], rest[1] - q * d)
    if lo < 0 or min(terms.values(), default=0) < 0:
        return None
    if (split := _split_divmod(rest, d, op, like)) is not None:
        return _plus((whole, c // d), split) if op is Ops.IDIV else split
    if not (whole or c >= d):
        return None
    left = UOp(op, like.dtype, (_build_affine(rest, like), UOp.const(d, like.dtype)))
    return ({**whole, left: 1}, c // d) if op is Ops.IDIV else ({left: 1}, 0)


def _split_divmod(rest: Affine, d: int, op: Ops, like: UOp) -> Affine | None:
    """rest // d or rest % d (rest never negative, its coefficients below d) where rest is g * G + R with g a
    divisor of d and R within [0, g): G // (d / g), and g * (G % (d / g)) + R. A range split by g read through a
    layout blocked by a multiple of g: `(16*a + u) // 32` is `a // 2` and `(16*a + u) % 32` is `16*(a % 2) + u`
    for u < 16 (a convolution's 16 output channels a tile, in a weight packed 32 channels a block; left as it
    was, every channel's address is its own and the tile's weights load one by one). The largest such g wins;
    G's own div or mod folds further where it can. None where no g > 1 fits."""
    terms, c = rest
    for g in sorted(_common_factors(d, list(terms.values())), reverse=True):
        big = {x: k // g for x, k in terms.items() if k % g == 0}
        small: Affine = ({x: k for x, k in terms.items() if k % g}, c % g)
        lo, hi = _affine_bounds(small)
        if not big or lo < 0 or hi >= g:
            continue
        outer: Affine = (big, c // g)
        n = d // g
        inner = _divmod_affine(outer, n, op, like)
        if inner is None:
            inner = ({UOp(op, like.dtype, (_build_affine(outer, like), UOp.const(n, like.dtype))): 1}, 0)
        if op is Ops.IDIV:
            return inner
        return _plus(({x: k * g for x, k in inner[0].items()}, inner[1] * g), small)
    return None


def _common_factors(d: int, coefficients: list[int]) -> set[int]:
    """The factors g of d (1 < g < d) that some coefficients share with it: gcd(d, k) for each coefficient k, and
    the gcds of those (the largest g for the terms it divides; d's other divisors fit no more terms)."""
    out = {g for k in coefficients if 1 < (g := math.gcd(d, k)) < d}
    grown = True
    while grown:
        more = {g for a in out for b in out if (g := math.gcd(a, b)) > 1} - out
        grown, out = bool(more), out | more
    return out


def _plus(a: Affine, b: Affine) -> Affine:
    terms = dict(a[0])
    for x, k in b[0].items():
        terms[x] = terms.get(x, 0) + k
    return {x: k for x, k in terms.items() if k}, a[1] + b[1]


def _build_affine(a: Affine, like: UOp) -> UOp:
    terms, c = a
    out: UOp | None = None
    for atom, k in terms.items():
        if k:
            t = atom if k == 1 else atom * k
            out = t if out is None else out + t
    if out is None:
        return UOp.const(c, like.dtype)
    return out + c if c else out


def fold_affine_divmod(u: UOp) -> UOp:
    """u with every div or mod by a positive constant of a never-negative affine sum (of ranges, variables and
    other terms, bounded by their vmin/vmax) replaced by the affine sum it equals, where the bounds prove it, and
    every `(x // c) * c + x % c` in a sum put back together as x."""
    return _fold(u)[0]


def affine_bounds(u: UOp) -> tuple[int, int]:
    """u's bounds from its affine form, like terms combined (`(i + 1) + -2*i + 6` is `7 - i`, in [0, 7] for i in
    [0, 7], where interval arithmetic gives [-7, 14]), intersected with its interval bounds."""
    out, aff = _fold(u)
    lo, hi = _affine_bounds(aff.get(out) or ({out: 1}, 0))
    return max(lo, int(u.vmin)), min(hi, int(u.vmax))


def _recombine(t: dict[UOp, int], of: Callable[[UOp], Affine]) -> int | None:
    """Replace a*c*(x // c) + a*(x % c) among the terms t by a*x (in place; x's own affine form); returns the
    constant that adds, None if nothing was put back (a reshape's flat index taken apart and put back together:
    `(r // 9) * 9 + r % 9` is r)."""
    const: int | None = None
    for m in [a for a in t if a.op is Ops.MOD and a.src[1].op is Ops.CONST and type(a.src[1].arg) is int]:
        c, k = m.src[1].arg, t.get(m, 0)
        d = next((a for a in t if a.op is Ops.IDIV and a.src == m.src), None)
        if c > 0 and k and d is not None and t[d] == k * c:
            del t[m], t[d]
            xt, xc = of(m.src[0])
            for atom, v in xt.items():
                t[atom] = t.get(atom, 0) + v * k
            const = (const or 0) + xc * k
    return const


def _fold(u: UOp) -> tuple[UOp, dict[UOp, Affine]]:
    """fold_affine_divmod's result, and the affine form of each rebuilt node that has one."""
    aff: dict[UOp, Affine] = {}  # the rebuilt nodes that are affine sums
    new: dict[UOp, UOp] = {}

    def of(x: UOp) -> Affine:
        return aff.get(x) or ({x: 1}, 0)

    for x in u.toposort():
        src = tuple(new[s] for s in x.src)
        y = x if src == x.src else UOp(x.op, x.dtype, src, x.arg)
        if y.op is Ops.CONST and type(y.arg) is int:
            aff[y] = ({}, y.arg)
        elif y.op is Ops.ADD:
            (t0, c0), (t1, c1) = of(y.src[0]), of(y.src[1])
            t = dict(t0)
            for atom, k in t1.items():
                t[atom] = t.get(atom, 0) + k
            put_back = _recombine(t, of)
            form = ({atom: k for atom, k in t.items() if k}, c0 + c1 + (put_back or 0))
            if put_back is not None:  # (x // c) * c + x % c put back together: the node is rebuilt from its form
                y = _build_affine(form, y)
            aff[y] = form
        elif y.op is Ops.MUL and (consts := [i for i, s in enumerate(y.src) if s in aff and not aff[s][0]]):
            k = aff[y.src[consts[-1]]][1]  # times a constant: the other side scaled
            t, c = of(y.src[1 - consts[-1]])
            aff[y] = ({atom: v * k for atom, v in t.items() if v * k}, c * k)
        elif (
            y.op in (Ops.IDIV, Ops.MOD)
            and y.src[1].op is Ops.CONST
            and type(y.src[1].arg) is int
            and y.src[1].arg > 0
            and _affine_bounds(of(y.src[0]))[0] >= 0
            and (r := _divmod_affine(of(y.src[0]), y.src[1].arg, y.op, y)) is not None
        ):
            y = _build_affine(r, y)
            aff[y] = r
        new[x] = y
    return new[u], aff


__all__ = ["Affine", "affine_bounds", "fold_affine_divmod"]
