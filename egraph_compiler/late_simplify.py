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

Most of these terms are a div or mod that the terms' bounds settle (ir/affine.py). `strip_identities` first
drops the `+ 0`, `* 1` and `// 1` a limit leaves around them, then `fold_affine_divmod` settles those
directly, and only what it leaves with a div or mod of more than a bare range or variable (`j // 32` is as
simple as it gets) goes to the e-graph: each e-graph costs ~0.1 s, and every schedule candidate brings new
expressions.
"""

from __future__ import annotations

import time

from egraph_compiler.egraph.session import EGraphSession
from egraph_compiler.ir.affine import fold_affine_divmod
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
