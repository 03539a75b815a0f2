"""Direct lowering: a tensor graph to kernel ASTs in one walk, without the e-graph.

The e-graph's rangeify (rules/rangeify.py) offers every value inline in every index context that reads it and
lets the extractor choose; even its default schedule (every materialization candidate in a buffer of its own)
costs a saturation, an extraction and a ranking, 10-17 ms a UOp. Under a time limit shorter than the search,
`lower_graph` builds a default schedule directly, in milliseconds: each materialized value is a kernel that
stores it over a loop per axis of its shape, and everything else is computed inline, by pushing the kernel's
index through the movement ops to the loads:

    PERMUTE  the index permuted back          EXPAND  0 on each broadcast axis
    SHRINK   i + start                        FLIP    n - 1 - i
    PAD      i - before, the loads gated by before <= i < before + n, the value 0 outside
    RESHAPE  the index flattened over the new shape and unflattened over the old, per group of axes
    REDUCE   a REDUCE range per reduced axis  ALU     each operand at the index, broadcast axes at 0

Index math is folded as it is built (constants, x + 0, x * 1) and its divs and mods by their terms' bounds
(ir/affine.py). The loop nests are the plain ones (outputs' axes in order, the reduction innermost); for a
reduction kernel `register_tiles` offers register-tiled variants (a vector along an output axis, rows of another
beside it) for a cost model to pick from, and the LLVM backend's vectorizer and parallel outer loop do the rest.
`lower_graph` returns the kernels in dependency order, each loading the others' values from their buffers: a
Program's kernels (optimize._program_of).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from itertools import count

from egraph_compiler.ir.affine import fold_affine_divmod
from egraph_compiler.ir.diagnostics import UnsupportedOp
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.ir.ops import OP_TABLE, AxisType, Category, Ops, reshape_groups
from egraph_compiler.ir.uop import UOp, toposort
from egraph_compiler.kernel.analysis import StoreItem, axis_type, index_of, range_size, store_items
from egraph_compiler.kernel.program import linear_terms

Index = tuple[UOp, ...]  # one index UOp per axis of a tensor
PASS_THROUGH = (Ops.DETACH, Ops.CONTIGUOUS_BACKWARD)


def unsupported(roots: list[UOp]) -> str | None:
    """Why the graph cannot be lowered directly (a symbolic size, an empty tensor, a BITCAST that changes the
    element size, an op without a tensor-level lowering), else None."""
    for u in toposort(roots):
        if u.op is Ops.DEFINE_VAR or any(not isinstance(d, int) for d in u.shape):
            return "a symbolic size"
        if 0 in u.shape:
            return "an empty tensor"
        if u.op is Ops.BITCAST and u.dtype.itemsize != u.src[0].dtype.itemsize:
            return "a BITCAST that changes the element size"
        cat = OP_TABLE[u.op].category
        if not (OP_TABLE[u.op].is_alu or cat in (Category.MOVEMENT, Category.SOURCE, Category.MARKER, Category.REDUCE)):
            return f"{u.op.name} has no direct lowering"
        if u.op in (Ops.INDEX, Ops.STACK, Ops.PARAM):
            return f"{u.op.name} has no direct lowering"
    return None


def _c(v: int) -> UOp:
    return UOp.const(v, dtypes.index)


def _is_c(u: UOp, v: int | None = None) -> bool:
    return u.op is Ops.CONST and (v is None or u.arg == v)


def _add(a: UOp, b: UOp) -> UOp:
    if _is_c(a) and _is_c(b):
        return _c(int(a.arg) + int(b.arg))
    if _is_c(a, 0):
        return b
    if _is_c(b, 0):
        return a
    return UOp(Ops.ADD, dtypes.index, (a, b))


def _mul(a: UOp, k: int) -> UOp:
    if k == 0 or _is_c(a, 0):
        return _c(0)
    if k == 1:
        return a
    if _is_c(a):
        return _c(int(a.arg) * k)
    return UOp(Ops.MUL, dtypes.index, (a, _c(k)))


def _divmod(a: UOp, k: int, op: Ops) -> UOp:
    if k == 1:
        return a if op is Ops.IDIV else _c(0)
    if _is_c(a):
        return _c(int(a.arg) // k if op is Ops.IDIV else int(a.arg) % k)
    return fold_affine_divmod(UOp(op, dtypes.index, (a, _c(k))))


def _linear(idx: Index, shape: tuple[int, ...]) -> UOp:
    """The row-major flat index of idx in a tensor of `shape`."""
    out, stride = _c(0), 1
    for i, n in reversed(list(zip(idx, shape))):
        out, stride = _add(_mul(i, stride), out), stride * n
    return out


def _unflatten(flat: UOp, shape: tuple[int, ...]) -> Index:
    """The row-major index of flat position `flat` in `shape`."""
    out: list[UOp] = []
    stride = math.prod(shape)
    for a, n in enumerate(shape):
        stride //= n
        whole = _divmod(flat, stride, Ops.IDIV)
        out.append(_c(0) if n == 1 else whole if a == 0 else _divmod(whole, n, Ops.MOD))
    return tuple(out)


def _reshape_index(idx: Index, old: tuple[int, ...], new: tuple[int, ...]) -> Index:
    """The index into the reshape's source of element idx of its result: flattened and unflattened within each
    group of axes whose sizes multiply to the same product (an axis kept as it is passes through)."""
    out: list[UOp] = []
    i = 0
    for nd, od in reshape_groups(old, new):
        part = idx[i : i + len(nd)]
        i += len(nd)
        out += [part[0]] if len(nd) == 1 and nd == od else _unflatten(_linear(part, tuple(nd)), tuple(od))
    return tuple(out)


def _lt(a: UOp, b: UOp) -> UOp | None:
    """a < b as a bool UOp, None where it always holds (by the index expressions' bounds)."""
    if a.vmax < b.vmin:
        return None
    return UOp(Ops.CMPLT, dtypes.bool, (a, b))


def _and(a: UOp | None, b: UOp | None) -> UOp | None:
    if a is None or b is None:
        return b if a is None else a
    return UOp(Ops.AND, dtypes.bool, (a, b))


Key = tuple[UOp, Index, UOp | None]  # a value, the index of the element wanted, the gate of its loads
Plan = tuple[list[Key], Callable[[list[UOp]], UOp]]  # the elements it needs, and how it is made of them


class _Kernel:
    """What lowering one kernel keeps: the value it stores, its number (range keys), each element's UOp by its
    Key, and the REDUCE ranges it made."""

    def __init__(self, root: UOp, number: int) -> None:
        self.root, self.number = root, number
        self.memo: dict[Key, UOp] = {}
        self.reduces = count()


class _Kernels:
    """The kernels of one graph: `sink(u)` is the SINK that stores materialized value u into its buffer."""

    def __init__(self, buffers: Mapping[UOp, UOp]) -> None:
        self.buffers = buffers  # value -> its flat BUFFER (inputs, constants, intermediates and outputs)
        self.numbers = count()

    def sink(self, u: UOp) -> UOp:
        k = _Kernel(u, next(self.numbers))
        idx = tuple(_range(n, AxisType.LOOP, ("out", k.number, a)) for a, n in enumerate(u.shape))
        value = self._value((u.src[0] if u.op is Ops.CONTIGUOUS else u, idx, None), k)
        buf = self.buffers[u]
        store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, _linear(idx, u.shape))), value))
        loops = [r for r in idx if r.op is Ops.RANGE]
        return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, *loops)) if loops else store,))

    def _value(self, want: Key, k: _Kernel) -> UOp:
        """The element `want` in kernel k: its plan's elements first, with a stack (chains of thousands of ops)."""
        plans: dict[Key, Plan] = {}
        stack = [want]
        while stack:
            key = stack[-1]
            if key in k.memo:
                stack.pop()
                continue
            if key not in plans:
                plans[key] = self._plan(key, k)
            needs, make = plans[key]
            if missing := [n for n in needs if n not in k.memo]:
                stack += missing
                continue
            stack.pop()
            k.memo[key] = make([k.memo[n] for n in needs])
        return k.memo[want]

    def _load(self, u: UOp, idx: Index, gate: UOp | None) -> UOp:
        buf = self.buffers[u]
        ptr = UOp(Ops.INDEX, buf.dtype, (buf, _linear(idx, u.shape)))
        if gate is None:
            return UOp(Ops.LOAD, buf.dtype, (ptr,))
        return UOp(Ops.LOAD, buf.dtype, (ptr, UOp.const(0, buf.dtype), gate))

    def _plan(self, key: Key, k: _Kernel) -> Plan:
        u, idx, gate = key
        if u in self.buffers and u is not k.root:
            return [], lambda _: self._load(u, idx, gate)
        if u.op is Ops.CONST:
            return [], lambda _: UOp.const(u.arg, u.dtype)
        if OP_TABLE[u.op].is_alu:
            return [(s, _broadcast(idx, s.shape), gate) for s in u.src], lambda v: UOp(u.op, u.dtype, tuple(v), u.arg)
        src = u.src[0]
        if u.op in PASS_THROUGH or u.op is Ops.CONTIGUOUS:
            return [(src, idx, gate)], lambda v: v[0]
        if u.op is Ops.BITCAST:
            return [(src, idx, gate)], lambda v: UOp(Ops.BITCAST, u.dtype, (v[0],))
        if u.op is Ops.REDUCE:
            op, axes = u.arg
            n = next(k.reduces)
            inner = tuple(
                _range(s, AxisType.REDUCE, ("red", k.number, n, a)) if a in axes else i
                for a, (i, s) in enumerate(zip(idx, src.shape))
            )
            rngs = [r for a, r in enumerate(inner) if a in axes and r.op is Ops.RANGE]
            return [(src, inner, gate)], lambda v: UOp(Ops.REDUCE, u.dtype, (v[0], *rngs), (op, ())) if rngs else v[0]
        if u.op is Ops.PAD:
            shifted = tuple(_add(i, _c(-b)) for i, (b, _) in zip(idx, u.arg))
            valid = None
            for j, n in zip(shifted, src.shape):
                valid = _and(valid, _and(_lt(_c(-1), j), _lt(j, _c(n))))
            if valid is None:
                return [(src, shifted, gate)], lambda v: v[0]
            zero = UOp.const(0, u.dtype)
            return [(src, shifted, _and(gate, valid))], lambda v: UOp(Ops.WHERE, u.dtype, (valid, v[0], zero))
        return [(src, _movement_index(u, idx), gate)], lambda v: v[0]


def _range(n: int, kind: AxisType, key: tuple) -> UOp:
    """A loop over n (a constant 0 where n is 1)."""
    return _c(0) if n == 1 else UOp(Ops.RANGE, dtypes.index, (_c(n),), (key, kind))


def _broadcast(idx: Index, shape: tuple[int, ...]) -> Index:
    """The index of an operand of `shape` (right-aligned, broadcast axes at 0) for an element at idx."""
    tail = idx[len(idx) - len(shape) :] if shape else ()
    return tuple(_c(0) if s == 1 else i for i, s in zip(tail, shape))


def _movement_index(u: UOp, idx: Index) -> Index:
    """The index into the source of movement op u (PERMUTE, EXPAND, SHRINK, FLIP, RESHAPE) of its element idx."""
    src = u.src[0].shape
    if u.op is Ops.PERMUTE:
        back = [0] * len(u.arg)
        for j, p in enumerate(u.arg):
            back[p] = j
        return tuple(idx[back[a]] for a in range(len(back)))
    if u.op is Ops.EXPAND:
        return tuple(_c(0) if s == 1 else i for i, s in zip(idx, src))
    if u.op is Ops.SHRINK:
        return tuple(_add(i, _c(a)) for i, (a, _) in zip(idx, u.arg))
    if u.op is Ops.FLIP:
        return tuple(_add(_mul(i, -1), _c(n - 1)) if f else i for i, f, n in zip(idx, u.arg, src))
    if u.op is Ops.RESHAPE:
        return _reshape_index(idx, src, u.shape)
    raise UnsupportedOp(at=u.op.name, why=f"{u.op.name} has no direct lowering", suggestion="optimize without a time limit")


def lower_graph(roots: list[UOp], buffers: Mapping[UOp, UOp]) -> list[UOp]:
    """The kernel AST of every materialized value the roots need (each root's included), in dependency order:
    each stores its value into its buffer and loads the others' from theirs. `buffers`: every value with a buffer
    of its own (inputs and constants, each materialized value, each root) -> its flat BUFFER UOp (arg
    (name, (size,)))."""
    ks = _Kernels(buffers)
    values = [u for u in toposort(roots) if u in buffers and u.op is not Ops.BUFFER]
    return [ks.sink(u) for u in values]


def anonymous(ast: UOp) -> UOp:
    """The kernel with its buffers and ranges named by order of appearance: kernels equal so differ only in which
    buffers they address (a model's layers), and a choice made from the AST alone (a register tile) holds for all."""
    names: dict[UOp, UOp] = {}
    for u in ast.toposort():
        if u.op is Ops.BUFFER:
            names[u] = UOp(Ops.BUFFER, u.dtype, (), (f"b{len(names)}", u.arg[1]))
        elif u.op is Ops.RANGE:
            names[u] = UOp(Ops.RANGE, u.dtype, u.src, ((f"r{len(names)}",), u.arg[1]))
    return ast.substitute(names)


ROW_TILES = (8, 4)  # register tile heights tried along a second output axis


def register_tiles(ast: UOp, lanes: int) -> list[UOp]:
    """Register-tiled variants of a directly lowered reduction kernel (one STORE under its output loops), for a
    cost model to choose from: an output axis split into a loop over tiles of 2 * lanes, lanes or lanes / 2
    elements and an UPCAST range inside it (a vector) where some load or the store then walks the vector with
    stride 1, alone or with a second output axis split into ROW_TILES rows the same way (the loads that do not
    depend on it are reused across the rows). Each in the plain loop order and, where the vector's axis is not
    the first, with its loop over tiles outermost (a packed panel of a GEMM's B then stays in cache while every
    row of A passes it). Factors divide the axis: no remainder. An elementwise kernel gets none (LLVM vectorizes
    its inner loop)."""
    (item,) = store_items(ast)
    if not any(u.op is Ops.REDUCE for u in item.store.toposort()):
        return []
    loops = [r for r in item.ranges if axis_type(r) is AxisType.LOOP]
    out = []
    for vec in loops:
        orders = (False, True) if vec is not loops[0] else (False,)
        for fv in dict.fromkeys((2 * lanes, lanes, max(1, lanes // 2))):
            if fv < 2 or range_size(vec) % fv or not _unit_stride(_split(item, {vec: fv}), vec, fv):
                continue
            tiles = [{vec: fv}] + [
                {row: fr, vec: fv} for row in loops if row is not vec for fr in ROW_TILES if range_size(row) % fr == 0
            ]
            out += [_split(item, t, vec if first else None) for t in tiles for first in orders]
    return out


def _unit_stride(ast: UOp, r: UOp, f: int) -> bool:
    """Does a load or the store of the tiled kernel walk r's inner part (its UPCAST range) with stride 1?"""
    inner = ("split", r.arg[0], f, 1)
    for u in ast.toposort():
        if u.op in (Ops.LOAD, Ops.STORE) and (idx := index_of(u.src[0])) is not None:
            terms = linear_terms(idx) or {}
            if any(x is not None and x.arg[0] == inner and c == 1 for x, c in terms.items()):
                return True
    return False


def _split(item: StoreItem, factors: dict[UOp, int], first: UOp | None = None) -> UOp:
    """The kernel of `item` with each range r in `factors` written as (outer * f + inner): the outer loops where r
    was (`first`'s outermost), the inner parts UPCAST, innermost in the order of `factors`; divs and mods of the
    indices folded where the parts' bounds settle them (a packed operand's panel index: (32 * jo + ji) // 32 is
    jo)."""
    parts = {}
    for r, f in factors.items():
        outer = _range(range_size(r) // f, AxisType.LOOP, ("split", r.arg[0], f, 0))
        parts[r] = (outer, _range(f, AxisType.UPCAST, ("split", r.arg[0], f, 1)))
    store = item.store.substitute({r: _add(_mul(o, range_size(i)), i) for r, (o, i) in parts.items()})
    indices = {u.src[1] for u in store.toposort() if u.op is Ops.INDEX and len(u.src) > 1}
    store = store.substitute({i: folded for i in indices if (folded := fold_affine_divmod(i)) is not i})
    ranges = [parts[r][0] if r in parts else r for r in item.ranges]
    if first is not None:
        ranges = [parts[first][0]] + [r for r in ranges if r is not parts[first][0]]
    ranges = [r for r in ranges if r.op is Ops.RANGE] + [parts[r][1] for r in factors]
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, *ranges)),))
