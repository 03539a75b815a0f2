"""Index math that a limit left unsimplified, simplified again in a small e-graph of its own.

When the kernel stage stops at a limit (conv2d's window trick makes many
div/mod index expressions, and together they grow the e-graph past its
budget long before each one would be simplified), the extracted kernels can
keep `(h + 35*kh) % 34`-style terms that the symbolic rules reduce to
`h + kh` in a few steps when the expression is alone. So the maximal pure
index expressions (integer/boolean ALU ops over ranges, variables and
constants) that still contain a div or mod are simplified in a small
e-graph by the same rules (`simplify.simplify_all`: all of a kernel's new
expressions in one e-graph), and substituted. Results
are memoized, so the schedule candidates of a kernel (the same expressions
with ranges bound differently) share the work.

Most of these terms are a div or mod of an affine sum of ranges whose
remainder part (every coefficient taken modulo the divisor) provably stays
within one multiple of the divisor (a split range recombined,
`(32*jo + ji) // 32` with ji < 32, a packed operand's view, a convolution's
window index `(10*r + i) % 9` with r + i < 9). `strip_identities` first drops
the `+ 0`, `* 1` and `// 1` a limit leaves around them, then
`fold_affine_divmod` settles those directly, from the terms'
bounds (where the remainder part spans several multiples, the whole
multiples still come out: `(64*h + i + 1536) // 32` is `2*h + 48 + i // 32`),
and only what it leaves with a div or mod of more than a bare range
or variable (`j // 32` is as simple as it gets) goes to the e-graph: each
e-graph costs ~0.1 s, and every schedule candidate brings new expressions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from egraph_compiler.egraph.session import EGraphSession
from egraph_compiler.ir.dtypes import DType
from egraph_compiler.ir.ops import OP_TABLE, Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.simplify import simplify_all

LEAVES = (Ops.CONST, Ops.RANGE, Ops.DEFINE_VAR)
LATE_PATIENCE = 3  # steps without a better result before the e-graph of a kernel's index math stops
NEEDS_WORK = (Ops.IDIV, Ops.MOD)


class IndexMath:
    """What late simplification asks of a node, remembered across calls (nodes are immutable and interned, and
    the schedule candidates of a kernel share most of theirs): is it pure index math (integer/boolean ALU ops over
    ranges, variables and constants), and does it contain a div or mod."""

    def __init__(self) -> None:
        self.pure: dict[UOp, bool] = {}
        self.divmod: dict[UOp, bool] = {}

    def maximal_exprs(self, ast: UOp) -> list[UOp]:
        """Pure index expressions containing a div or mod that are not part of a larger pure index expression."""
        pure, divmod = self.pure, self.divmod
        nodes = ast.toposort()
        for u in nodes:  # sources before users
            if u not in pure:
                ok = u.op in LEAVES or (OP_TABLE[u.op].is_alu and not u.dtype.is_float)
                pure[u] = ok and all(pure[s] for s in u.src)
                divmod[u] = u.op in NEEDS_WORK or any(divmod[s] for s in u.src)
        inside: set[UOp] = set()
        for u in nodes:
            if pure[u] and u.op not in LEAVES:
                inside.update(u.src)
        return [u for u in nodes if pure[u] and divmod[u] and u not in inside and u.op not in LEAVES]


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
    if lo < 0 or min(terms.values(), default=0) < 0 or not (whole or c >= d):
        return None
    left = UOp(op, like.dtype, (_build_affine(rest, like), UOp.const(d, like.dtype)))
    return ({**whole, left: 1}, c // d) if op is Ops.IDIV else ({left: 1}, 0)


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


def _zero(u: UOp) -> bool:
    return u.op is Ops.CONST and type(u.arg) is int and u.arg == 0


def _one(u: UOp) -> bool:
    return u.op is Ops.CONST and type(u.arg) is int and u.arg == 1


def strip_identities(u: UOp) -> UOp:
    """Integer index math without its `x + 0`, `x * 1`, `x * 0` and `x // 1`: what a limit leaves in a kernel's
    indices is full of them, and each one multiplies what the symbolic rules' e-graph has to rewrite (ResNet-18's
    conv indices grew 15k-50k-node e-graphs)."""
    new: dict[UOp, UOp] = {}
    for x in u.toposort():
        src = tuple(new[s] for s in x.src)
        same = _identity(x.op, src, x.dtype)
        new[x] = same if same is not None and same.dtype is x.dtype else x if src == x.src else UOp(x.op, x.dtype, src, x.arg)
    return new[u]


def _identity(op: Ops, src: tuple[UOp, ...], dtype: DType) -> UOp | None:
    """What `op` over `src` equals when it adds 0, multiplies by 1 or 0, or divides by 1; else None."""
    if op is Ops.ADD:
        return src[1] if _zero(src[0]) else src[0] if _zero(src[1]) else None
    if op is Ops.MUL and (_zero(src[0]) or _zero(src[1])):
        return UOp.const(0, dtype)
    if op is Ops.MUL and _one(src[0]):
        return src[1]
    return src[0] if op in (Ops.MUL, Ops.IDIV) and _one(src[1]) else None


def _rename_ranges(u: UOp, prefix: str = "late") -> tuple[UOp, dict[UOp, UOp]]:
    """u with its RANGEs named prefix0, prefix1, ... by first appearance (same bounds and kinds), and the map back."""
    ranges = [x for x in u.toposort() if x.op is Ops.RANGE]
    to = {r: UOp(Ops.RANGE, r.dtype, r.src, (f"{prefix}{i}", *r.arg[1:])) for i, r in enumerate(ranges)}
    return (u.substitute(to) if to else u), {v: k for k, v in to.items()}


class LateSimplifier:
    def __init__(self, session: EGraphSession | None = None, deadline: float | None = None) -> None:
        """session: a session with the symbolic rules to work in (optimize passes its kernel session: building
        the symbolic one would cost a first call ~0.1 s); deadline: a perf_counter time (the caller's time limit)
        past which expressions get the affine fold alone, no saturation."""
        self.memo: dict[UOp, UOp] = {}
        self.index_math = IndexMath()
        self.canonical: dict[UOp, UOp] = {}  # an expression with its ranges renamed by position -> its result
        self.session = session
        self.deadline = deadline

    def __call__(self, ast: UOp) -> UOp:
        exprs = self.index_math.maximal_exprs(ast)
        hard: list[tuple[UOp, UOp]] = []  # (expression, without its identities) for the e-graph
        late = self.deadline is not None and time.perf_counter() > self.deadline
        for u in exprs:
            if u not in self.memo:
                stripped = strip_identities(u)
                folded = fold_affine_divmod(stripped)
                if not late and any(x.op in NEEDS_WORK and x.src[0].op not in LEAVES for x in folded.toposort()):
                    hard.append((u, stripped))
                else:
                    self.memo[u] = folded if folded.dtype is u.dtype else u
        # the same index math over other ranges (a model's repeated layers, a kernel's candidates over one range
        # another e-class named) is simplified once: ranges renamed by first appearance
        renamed = [_rename_ranges(stripped) for _, stripped in hard]
        todo = list(dict.fromkeys(c for c, _ in renamed if c not in self.canonical))
        # one e-graph for all of them (every schedule candidate brings some, so they stop sooner than simplify()),
        # each over ranges of its own, as the kernel had them: ranges shared between expressions make their
        # rewrites meet and the e-graph reach its limits sooner
        apart = [_rename_ranges(c, f"late{j}_") for j, c in enumerate(todo)]
        done = simplify_all([a for a, _ in apart], self.session, patience=LATE_PATIENCE) if todo else []
        for c, (_, back), r in zip(todo, apart, done):
            self.canonical[c] = r.result.substitute(back) if r.result.dtype is c.dtype else c
        for (u, _), (c, back) in zip(hard, renamed):
            self.memo[u] = self.canonical[c].substitute(back) if self.canonical[c] is not c else u
        mapping = {u: self.memo[u] for u in exprs if self.memo[u] is not u}
        return ast.substitute(mapping) if mapping else ast
