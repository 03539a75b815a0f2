"""The facts every consumer of a kernel AST reads off it, computed one way for all of them: the ranges a value
depends on, and the items of a kernel (each STORE with the END ranges around it), checked against the contract.

The renderers (backends/llvm.py, backends/cuda.py through kernel/gpu_launch.py), the reference backend and the
CPU estimate (extract/loop_cost.py) all take these from here, so they agree on what a kernel is: a range a stored
value uses must be bound by an END around its STORE (or reduced over inside it), everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from egraph_compiler.ir.diagnostics import UnsupportedOp
from egraph_compiler.ir.ops import Ops
from egraph_compiler.ir.uop import UOp

CONTRACT = "check the kernel AST against egraph_compiler/kernel/program.py"


def range_size(r: UOp) -> int:
    """A RANGE's trip count, for code: a symbolic bound is refused (sizes are bound before lowering)."""
    b = r.src[0]
    if b.op is not Ops.CONST:
        raise UnsupportedOp(
            at=f"RANGE {r.arg[0]!r}",
            why="kernels need constant range bounds",
            suggestion="bind symbolic sizes before lowering",
        )
    return int(b.arg)


def trip_count(r: UOp) -> int:
    """A RANGE's trip count, for estimates: 1 where the bound is not a constant."""
    b = r.src[0]
    return int(b.arg) if b.op is Ops.CONST else 1


class RangeDeps(dict[UOp, frozenset[UOp]]):
    """RANGEs each node's value depends on, computed on first lookup and kept: a RANGE depends on itself, a
    REDUCE binds its own ranges, an AFTER (a buffer after other kernels' stores) depends on its buffer only, any
    other node on the union of its sources'. Deep kernels are walked iteratively."""

    def __missing__(self, u: UOp) -> frozenset[UOp]:
        # sources first, each one's entry there when x needs it; a node whose sources are all known needs no walk
        # (so asking node by node in topological order stays linear)
        for x in (u,) if all(s in self for s in u.src) else u.toposort():
            if x in self:
                continue
            if x.op is Ops.RANGE:
                d = frozenset((x,))
            elif x.op is Ops.REDUCE:
                d = self[x.src[0]] - frozenset(x.src[1:])
            elif x.op is Ops.AFTER:
                d = self[x.src[0]]
            else:
                d = frozenset().union(*(self[s] for s in x.src))
            self[x] = d
        return self[u]


@dataclass(frozen=True)
class StoreItem:
    """One entry of a kernel's SINK: a STORE and the END ranges around it, outermost first."""

    store: UOp
    ranges: tuple[UOp, ...]


def store_items(ast: UOp, deps: RangeDeps | None = None) -> list[StoreItem]:
    """The kernel's items, in order. A constant in an END's list is a range of one proven 0: it binds nothing and
    is left out. Raises UnsupportedOp for anything else the contract does not allow: a root that is not SINK, an
    entry that is not a STORE under ENDs, an END over something other than distinct RANGEs, or a stored value
    over a range no END around it binds."""
    if ast.op is not Ops.SINK:
        raise UnsupportedOp(at=ast.op.name, why="a kernel must be rooted at SINK", suggestion="wrap it in SINK(...)")
    deps = RangeDeps() if deps is None else deps
    out = []
    for entry in ast.src:
        ranges: list[UOp] = []
        st = entry
        while st.op is Ops.END:  # an outer END's ranges are the outer loops
            ranges += [r for r in st.src[1:] if r.op is not Ops.CONST]
            st = st.src[0]
        if st.op is not Ops.STORE:
            raise UnsupportedOp(at=st.op.name, why="expected STORE under END", suggestion=CONTRACT)
        if any(r.op is not Ops.RANGE for r in ranges) or len(set(ranges)) != len(ranges):
            raise UnsupportedOp(at="END", why="END closes distinct RANGEs", suggestion=CONTRACT)
        if deps[st] - set(ranges):  # name the first in the store's order, so the message is the same every run
            free = next(r for r in st.toposort() if r in deps[st] and r not in ranges)
            raise UnsupportedOp(
                at=f"RANGE {free.arg[0]!r}",
                why="a stored value uses a range no END binds",
                suggestion="close every range the store uses with END, or reduce over it",
            )
        out.append(StoreItem(st, tuple(ranges)))
    return out
