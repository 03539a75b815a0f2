"""Symbolic dimensions: sizes bound at call time, within declared bounds.

A placeholder may have a symbolic size (`Tensor.empty((Variable("B", 1, 64), 64))`, or `("B", 64)`). The graph is
built at one concrete size of each variable (its trace size), and a program is compiled for a few sizes of it,
the variable's ShapeSet (`Variable.buckets`): a call of size b runs the program of the smallest bucket >= b on
its inputs padded with zeros along the dimension, and returns the first b rows of each output.

That is exact where the dimension only indexes independent rows (a batch): every output row is computed from the
same row of the inputs and from nothing along the dimension (weights, constants, broadcasts). `row_axes` checks
this over the whole graph and finds, for every node, which of its axes carry a variable's rows (an axis of
size b * block holds row r in positions [r * block, (r + 1) * block), after a reshape merged it with inner
axes); a graph that reduces, pads, slices, flips, gathers or stacks along the rows, or meets them with a
concrete-size tensor, is refused with a diagnostic that names the dimension and the op. `resize` rebuilds the
graph at other sizes of the variables, and is what compiles each bucket.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from egraph_compiler.ir.diagnostics import InvalidArgument, SymbolicDimError
from egraph_compiler.ir.ops import OP_TABLE, Category, Ops
from egraph_compiler.ir.uop import UOp, toposort

DEFAULT_BOUNDS = (1, 1024)  # a dimension named by a string alone ("B")
MAX_BUCKETS = 16


@dataclass(frozen=True)
class Variable:
    """A symbolic size `name`, lo <= size <= hi. `buckets`: the sizes programs are compiled for (the ShapeSet;
    default: the powers of two from lo up, and hi), each call padded to the smallest one at or above its size."""

    name: str
    lo: int
    hi: int
    buckets: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.name):
            raise InvalidArgument(
                at="Variable", why=f"name {self.name!r} is not an identifier", suggestion="name it like 'B' or 'batch'"
            )
        for v in (self.lo, self.hi, *self.buckets):
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidArgument(
                    at=f"Variable {self.name!r}", why=f"{v!r} is not an int", suggestion="bounds and buckets are ints"
                )
        if not 1 <= self.lo <= self.hi:
            raise InvalidArgument(
                at=f"Variable {self.name!r}",
                why=f"bounds [{self.lo}, {self.hi}] are empty or below 1",
                suggestion="declare 1 <= lo <= hi",
            )
        if any(not self.lo <= b <= self.hi for b in self.buckets):
            raise InvalidArgument(
                at=f"Variable {self.name!r}",
                why=f"buckets {self.buckets} are not all within [{self.lo}, {self.hi}]",
                suggestion="list sizes within the bounds (hi is always one)",
            )
        sizes = set(self.buckets) | {self.hi}
        if not self.buckets:  # powers of two from lo: no call pads more than twice its size
            p = 1 << max(0, (self.lo - 1).bit_length())
            while p < self.hi:
                sizes.add(p)
                p *= 2
        kept = sorted(sizes)[-MAX_BUCKETS:]  # the largest ones: every size still has a bucket at or above it
        object.__setattr__(self, "buckets", tuple(kept))

    @property
    def trace(self) -> int:
        """The size the graph is built at: the largest bucket (2 where that is 1, so no axis looks broadcast)."""
        return max(self.hi, 2)

    def bucket(self, size: int) -> int:
        """The bucket a call of `size` runs in (the caller checked the bounds)."""
        return next(b for b in self.buckets if b >= size)

    def check(self, size: int, where: str) -> None:
        if not self.lo <= size <= self.hi:
            raise SymbolicDimError(
                at=where,
                why=f"dimension {self.name!r} is {size}, outside its bounds [{self.lo}, {self.hi}]",
                suggestion=f"pass between {self.lo} and {self.hi} along {self.name!r}, or declare wider bounds",
                dimension=self.name,
            )


def as_variable(d: Any, where: str) -> Variable | None:
    """A shape entry as a Variable (a str is one with DEFAULT_BOUNDS); None for anything else."""
    if isinstance(d, Variable):
        return d
    if isinstance(d, str):
        try:
            return Variable(d, *DEFAULT_BOUNDS)
        except InvalidArgument as e:
            raise InvalidArgument(at=where, why=e.why, suggestion=e.suggestion) from None
    return None


def placeholder_arg(name: str, shape: tuple[int, ...], axes: dict[int, Variable]) -> tuple[Any, ...]:
    """A placeholder BUFFER's arg: (name, shape), and its symbolic axes where it has some. They are part of the
    node, so a placeholder of a symbolic size is never the same UOp as a fixed one of the same name and shape."""
    return (name, shape, tuple(sorted(axes.items()))) if axes else (name, shape)


def symbolic_placeholders(roots: list[UOp]) -> dict[UOp, dict[int, Variable]]:
    """The graph's placeholders with symbolic sizes, and their symbolic axes."""
    return {u: dict(u.arg[2]) for u in toposort(roots) if u.op is Ops.BUFFER and not u.src and len(u.arg) > 2}


Rows = dict[int, tuple[str, int]]  # axis -> (variable name, block): the axis holds row r at [r * block, (r+1) * block)
ELEMENTWISE = (Category.UNARY, Category.BINARY, Category.TERNARY, Category.MARKER)


def _elementwise(u: UOp) -> bool:
    """Does u combine its sources element by element (its sources and it of one shape)?"""
    return OP_TABLE[u.op].category in ELEMENTWISE or u.op is Ops.BITCAST


def _refuse(u: UOp, name: str, why: str) -> SymbolicDimError:
    return SymbolicDimError(
        at=f"{u.op.name} {u.shape}",
        why=f"dimension {name!r} {why}: a symbolic size must index independent rows (a batch)",
        suggestion=f"keep {name!r} a batch dimension (no reduction, padding, slicing or mixing along it), "
        "or give it a fixed size",
        dimension=name,
    )


def _regroup(src: tuple[int, ...], dst: tuple[int, ...], axis: int, block: int, size: int) -> tuple[int, int] | None:
    """Where a reshape from `src` to `dst` puts the rows of src's `axis` (of `size` rows of `block`): (axis, block)
    in dst, or None where a row does not stay one run of one axis."""
    outer, inner = math.prod(src[:axis]), block * math.prod(src[axis + 1 :])
    for j in range(len(dst)):
        rest = math.prod(dst[j + 1 :])
        if math.prod(dst[:j]) == outer and inner % rest == 0 and dst[j] == size * (inner // rest):
            return j, inner // rest
    return None


def _along_rows(u: UOp, rows: Rows) -> None:
    """Refuse a pad, slice, flip or reduction along row axes (a whole-axis slice or a zero pad changes nothing)."""
    for a, (name, _) in rows.items():
        if u.op in (Ops.PAD, Ops.SHRINK) and tuple(u.arg[a]) not in ((0, 0), (0, u.src[0].shape[a])):
            raise _refuse(u, name, "is padded or sliced")
        if u.op is Ops.FLIP and u.arg[a]:
            raise _refuse(u, name, "is flipped")
        if u.op is Ops.REDUCE and a in u.arg[1]:
            raise _refuse(u, name, "is reduced over")


class _Analysis:
    def __init__(self, roots: list[UOp], placeholders: dict[UOp, dict[int, Variable]]) -> None:
        self.trace = {v.name: v.trace for axes in placeholders.values() for v in axes.values()}
        self.rows: dict[UOp, Rows] = {}
        order = toposort(roots)
        for u in order:
            if u in placeholders:
                self.rows[u] = {a: (v.name, 1) for a, v in placeholders[u].items()}
            else:
                self.rows[u] = self.forward(u)
        # operands that meet rows without carrying them (a broadcast bias, a constant) are resized too: the axes
        # they must grow along, found from the users down
        for u in reversed(order):
            for s, need in self.backward(u):
                have = self.rows[s]
                for a, nb in need.items():
                    if have.get(a, nb) != nb:
                        raise _refuse(u, nb[0], f"meets {have[a][0]!r} along axis {a}")
                    have[a] = nb

    def forward(self, u: UOp) -> Rows:
        srcs = [self.rows[s] for s in u.src]
        if not any(srcs):
            return {}
        if _elementwise(u):
            out: Rows = {}
            for m in srcs:
                for a, nb in m.items():
                    if out.setdefault(a, nb) != nb:
                        raise _refuse(u, nb[0], f"meets {out[a][0]!r} along axis {a}")
            return out
        (m,) = srcs[:1]
        src = u.src[0]
        if u.op is Ops.RESHAPE:
            return self.reshaped(u, m, src.shape, u.shape)
        if u.op is Ops.PERMUTE:
            return {i: m[p] for i, p in enumerate(u.arg) if p in m}
        if u.op is Ops.EXPAND:
            return dict(m)
        if u.op in (Ops.PAD, Ops.SHRINK, Ops.FLIP) or (u.op is Ops.REDUCE and len(u.src) == 1):
            _along_rows(u, m)
            return dict(m)
        name = next(nb[0] for s in srcs for nb in s.values())
        raise _refuse(u, name, f"reaches {u.op.name}, which may mix rows")

    def backward(self, u: UOp) -> list[tuple[UOp, Rows]]:
        """(source, the row axes it must have) for u's sources that meet u's rows without carrying them."""
        rows = self.rows[u]
        if not rows:
            return []
        if _elementwise(u):
            return [(s, self._need(u, s, dict(rows))) for s in u.src if s.shape == u.shape]
        src = u.src[0] if u.src else None
        if src is None or u.op in (Ops.BUFFER, Ops.CONST):
            return []
        if u.op is Ops.EXPAND:  # axes expanded from 1 get the new size in the arg; the others come from src
            return [(src, self._need(u, src, {a: nb for a, nb in rows.items() if src.shape[a] != 1}))]
        if u.op is Ops.RESHAPE:
            return [(src, self._need(u, src, self.reshaped(u, rows, u.shape, src.shape)))]
        if u.op is Ops.PERMUTE:
            return [(src, self._need(u, src, {p: rows[i] for i, p in enumerate(u.arg) if i in rows}))]
        if u.op in (Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.REDUCE):
            _along_rows(u, rows)
            return [(src, self._need(u, src, dict(rows)))]
        return []

    def reshaped(self, u: UOp, rows: Rows, frm: tuple[int, ...], to: tuple[int, ...]) -> Rows:
        """The row axes `rows` of shape `frm` where the reshape u (either way) puts them in shape `to`."""
        out: Rows = {}
        for a, (name, block) in rows.items():
            moved = _regroup(frm, to, a, block, self.trace[name])
            if moved is None:
                raise _refuse(u, name, f"is split across axes by a reshape of {u.src[0].shape} to {u.shape}")
            out[moved[0]] = (name, moved[1])
        return out

    def _need(self, u: UOp, s: UOp, need: Rows) -> Rows:
        """`need` where s can grow along it: s carries those rows, or is resizable there (not a concrete buffer)."""
        for a, (name, _) in need.items():
            if a not in self.rows[s] and s.op is Ops.BUFFER:
                raise _refuse(u, name, f"meets a tensor of fixed size {s.shape[a]} ({s.arg[0]!r}) along axis {a}")
        return need


def row_axes(roots: list[UOp], placeholders: dict[UOp, dict[int, Variable]]) -> dict[UOp, Rows]:
    """Every node's axes that carry a variable's rows (see the module docstring); raises SymbolicDimError where
    the graph mixes rows."""
    return _Analysis(roots, placeholders).rows


def resize(roots: list[UOp], rows: dict[UOp, Rows], sizes: dict[str, int]) -> list[UOp]:
    """The graph again with every variable at `sizes` (its row axes rebuilt, everything else as it was)."""
    out: dict[UOp, UOp] = {}
    for u in toposort(roots):
        r = rows.get(u, {})
        src = tuple(out[s] for s in u.src)
        shape = tuple(sizes[r[a][0]] * r[a][1] if a in r else d for a, d in enumerate(u.shape)) if r else u.shape
        arg: Any = u.arg
        if u.op is Ops.BUFFER and r:  # a placeholder of fixed size now
            arg = (u.arg[0], shape)
        elif u.op in (Ops.RESHAPE, Ops.EXPAND) and r:
            arg = shape
        elif u.op is Ops.SHRINK and r:  # a whole-axis shrink along the rows (the analysis allows no other)
            arg = tuple((0, shape[a]) if a in r else p for a, p in enumerate(u.arg))
        new = u if src == u.src and arg == u.arg else UOp(u.op, u.dtype, src, arg)
        if new.shape != shape:  # the analysis and the rebuild disagree: a bug, never a silently wrong graph
            raise SymbolicDimError(
                at=f"{u.op.name} {u.shape}",
                why=f"resizing to {sizes} gave shape {new.shape}, not {shape}",
                suggestion="give the dimensions fixed sizes, and report the graph as a bug",
            )
        out[u] = new
    return [out[r] for r in roots]


__all__ = [
    "DEFAULT_BOUNDS",
    "Rows",
    "Variable",
    "as_variable",
    "placeholder_arg",
    "resize",
    "row_axes",
    "symbolic_placeholders",
]
