"""Index math that a limit left unsimplified, simplified again in a small e-graph of its own.

When the kernel stage stops at a limit (conv2d's window trick makes many
div/mod index expressions, and together they grow the e-graph past its
budget long before each one would be simplified), the extracted kernels can
keep `(h + 35*kh) % 34`-style terms that the symbolic rules reduce to
`h + kh` in a few steps when the expression is alone. So the maximal pure
index expressions (integer/boolean ALU ops over ranges, variables and
constants) that still contain a div or mod are simplified in a small
e-graph by the same rules (`pipeline.simplify_all`: all of a kernel's new
expressions in one e-graph), and substituted. Results
are memoized, so the schedule candidates of a kernel (the same expressions
with ranges bound differently) share the work.
"""

from __future__ import annotations

from egraph_compiler.egraph import EGraphSession
from egraph_compiler.ops import OP_TABLE, Ops
from egraph_compiler.uop import UOp

LEAVES = (Ops.CONST, Ops.RANGE, Ops.DEFINE_VAR)
NEEDS_WORK = (Ops.IDIV, Ops.MOD)


def _is_index_math(u: UOp, pure: dict[UOp, bool]) -> bool:
    if u not in pure:
        ok = u.op in LEAVES or (OP_TABLE[u.op].is_alu and not u.dtype.is_float)
        pure[u] = ok and all(_is_index_math(s, pure) for s in u.src)
    return pure[u]


def maximal_index_exprs(ast: UOp) -> list[UOp]:
    """Pure index expressions containing a div or mod that are not part of a larger pure index expression."""
    pure: dict[UOp, bool] = {}
    nodes = ast.toposort()
    for u in nodes:
        _is_index_math(u, pure)
    inside: set[UOp] = set()
    for u in nodes:
        if pure[u] and u.op not in LEAVES:
            inside.update(s for s in u.src)
    return [u for u in nodes if pure[u] and u not in inside and u.op not in LEAVES
            and any(x.op in NEEDS_WORK for x in u.toposort())]


class LateSimplifier:
    def __init__(self, session: EGraphSession | None = None) -> None:
        """session: a session with the symbolic rules to work in (optimize passes its kernel session: building
        the symbolic one would cost a first call ~0.1 s)."""
        self.memo: dict[UOp, UOp] = {}
        self.session = session

    def __call__(self, ast: UOp) -> UOp:
        from egraph_compiler.pipeline import simplify_all

        exprs = maximal_index_exprs(ast)
        new = [u for u in exprs if u not in self.memo]
        for u, r in zip(new, simplify_all(new, self.session)):   # one e-graph for all of a kernel's new expressions
            self.memo[u] = r.result if r.result.dtype is u.dtype else u
        mapping = {u: self.memo[u] for u in exprs if self.memo[u] is not u}
        return ast.substitute(mapping) if mapping else ast
