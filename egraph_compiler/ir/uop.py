"""UOp: the one IR node type, immutable and hash-consed.

A UOp is (op, dtype, src, arg). Structurally equal UOps are the same Python
object, so `is` is structural equality and graphs share subterms. dtype is
stored; shape, vmin/vmax and device are derived from the op table.
"""

from __future__ import annotations

import hashlib
import math
import struct
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from egraph_compiler.ir.diagnostics import DTypeError, InvalidArgument, InvalidSize
from egraph_compiler.ir.dtypes import DType, as_const, dtypes, to_dtype
from egraph_compiler.ir.ops import OP_TABLE, ArgKind, AxisType, Category, Ops, check_arity

ConstLike = bool | int | float


class Blob:
    """Immutable raw data of a BINARY node, identified by its content digest."""

    __slots__ = ("data", "digest")

    def __init__(self, data: np.ndarray) -> None:
        arr = np.ascontiguousarray(data).copy()
        arr.setflags(write=False)
        self.data = arr
        h = hashlib.blake2b(arr.tobytes(), digest_size=16)
        h.update(str((arr.dtype.str, arr.shape)).encode())
        self.digest = h.hexdigest()

    def __hash__(self) -> int:
        return hash(self.digest)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Blob) and other.digest == self.digest

    def __repr__(self) -> str:
        return f"Blob({self.data.dtype}{list(self.data.shape)}, {self.digest[:8]})"


def arg_key(arg: Any) -> Any:
    """Hash key of an arg: floats by bit pattern so 0.0/-0.0 and NaNs stay distinct and stable."""
    if isinstance(arg, float):
        return ("f", struct.pack("<d", arg))
    if isinstance(arg, bool):
        return ("b", arg)
    if isinstance(arg, tuple):
        return tuple(arg_key(a) for a in arg)
    return arg


MAX_BYTES = 1 << 62  # a tensor larger than this has byte offsets that int64 index math cannot hold
_INTERN_LOCK = threading.RLock()  # re-entrant: validating a new node's shape may build others


def _shape_str(s: Any) -> str:
    return "x".join(map(str, s)) if s else "()"


class UOp:
    _interned: weakref.WeakValueDictionary[Any, UOp] = weakref.WeakValueDictionary()
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    arg_key: Any

    def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        src = tuple(src)
        key = (op, dtype, src, arg_key(arg))
        try:
            hit = UOp._interned.get(key)
        except TypeError:
            raise InvalidArgument(
                at=op.name, why=f"arg {arg!r} is not hashable", suggestion="use tuples, not lists or arrays, in a UOp's arg"
            ) from None
        if hit is not None:
            return hit
        with _INTERN_LOCK:  # two threads building the same node get one UOp (identity is equality)
            hit = UOp._interned.get(key)
            if hit is not None:
                return hit
            return UOp._make(op, dtype, src, arg, key)

    @staticmethod
    def _make(op: Ops, dtype: DType, src: tuple[UOp, ...], arg: Any, key: Any) -> UOp:
        check_arity(op, len(src))
        self = object.__new__(UOp)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "arg", arg)
        object.__setattr__(self, "arg_key", key[3])  # arg_key(arg), kept: structural keys of kernels ask for it
        nbytes = math.prod(self.shape) * max(1, dtype.itemsize)  # computing the shape validates it (a diagnostic)
        if nbytes > MAX_BYTES:
            raise InvalidSize(
                at=op.name,
                why=f"a {dtype.name} tensor of shape {self.shape} takes {nbytes} bytes, "
                "beyond the 2**62 that 64-bit byte offsets address",
                suggestion="use smaller shapes",
            )
        UOp._interned[key] = self
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("UOp is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (UOp, (self.op, self.dtype, self.src, self.arg))

    # ---- construction helpers ----------------------------------------------------------------

    @staticmethod
    def build(op: Ops, src: Iterable[UOp] = (), arg: Any = None, dtype: DType | None = None) -> UOp:
        """Construct with the dtype derived by the op table's dtype rule."""
        src = tuple(src)
        rule = OP_TABLE[op].dtype_rule
        dt = rule(tuple(s.dtype for s in src), arg, dtype) if rule is not None else (dtype or dtypes.void)
        return UOp(op, dt, src, arg)

    @staticmethod
    def const(value: ConstLike, dtype: DType | str = dtypes.index) -> UOp:
        dt = to_dtype(dtype)
        if not isinstance(value, (bool, int, float, np.number, np.bool_)):
            raise InvalidArgument(at="UOp.const", why=f"{value!r} is not a scalar", suggestion="pass a bool, int or float")
        return UOp(Ops.CONST, dt, (), as_const(value.item() if isinstance(value, np.generic) else value, dt))

    @staticmethod
    def variable(name: str, lo: int, hi: int, dtype: DType | str = dtypes.index) -> UOp:
        if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
            raise InvalidArgument(
                at="UOp.variable", why=f"{name!r} is not an ASCII identifier", suggestion="use a name like 'x'"
            )
        if not (isinstance(lo, int) and isinstance(hi, int)) or lo > hi:
            raise InvalidArgument(
                at=f"UOp.variable({name!r})",
                why=f"bounds [{lo}, {hi}] are not integers with lo <= hi",
                suggestion="give inclusive integer bounds lo <= hi",
            )
        return UOp(Ops.DEFINE_VAR, to_dtype(dtype), (), (name, lo, hi))

    @staticmethod
    def range(bound: int | UOp, key: Any, axis_type: AxisType = AxisType.LOOP) -> UOp:
        if (
            not isinstance(bound, (UOp, int, np.integer))
            or isinstance(bound, bool)
            or (not isinstance(bound, UOp) and bound < 0)
        ):
            raise InvalidArgument(
                at="UOp.range",
                why=f"bound {bound!r} is not a non-negative int or a UOp",
                suggestion="pass the loop's trip count",
            )
        b = bound if isinstance(bound, UOp) else UOp.const(int(bound), dtypes.index)
        return UOp(Ops.RANGE, dtypes.index, (b,), (key, axis_type))

    def const_like(self, value: ConstLike) -> UOp:
        return UOp.const(value, self.dtype)

    def _operand(self, x: UOp | ConstLike) -> UOp:
        if isinstance(x, UOp):
            return x
        if isinstance(x, (bool, int, float, np.number, np.bool_)):
            return UOp.const(x, self.dtype)
        raise InvalidArgument(
            at=f"{self.op.name} operand",
            why=f"cannot combine a UOp with {type(x).__name__}",
            suggestion="use a UOp or a python number",
        )

    def alu(self, op: Ops, *others: UOp | ConstLike) -> UOp:
        srcs = (self, *(self._operand(o) for o in others))
        # an index expression absorbs plain int constants of another int dtype
        if any(s.dtype is dtypes.index for s in srcs):
            srcs = tuple(s.cast(dtypes.index) if s.op is Ops.CONST and s.dtype.is_int else s for s in srcs)
        return UOp.build(op, srcs)

    # ---- symbolic API --------------------------------------------------------------------------

    def __add__(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.ADD, x)

    def __radd__(self, x: UOp | ConstLike) -> UOp:
        return self._operand(x).alu(Ops.ADD, self)

    def __mul__(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.MUL, x)

    def __rmul__(self, x: UOp | ConstLike) -> UOp:
        return self._operand(x).alu(Ops.MUL, self)

    def __neg__(self) -> UOp:
        return self.logical_not() if self.dtype.is_bool else self.alu(Ops.MUL, -1)

    def __sub__(self, x: UOp | ConstLike) -> UOp:
        return self + (-self._operand(x))

    def __rsub__(self, x: UOp | ConstLike) -> UOp:
        return self._operand(x) + (-self)

    def __floordiv__(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.IDIV, x)

    def __rfloordiv__(self, x: UOp | ConstLike) -> UOp:
        return self._operand(x).alu(Ops.IDIV, self)

    def __mod__(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.MOD, x)

    def __rmod__(self, x: UOp | ConstLike) -> UOp:
        return self._operand(x).alu(Ops.MOD, self)

    def __lt__(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.CMPLT, x)

    def __gt__(self, x: UOp | ConstLike) -> UOp:
        return self._operand(x).alu(Ops.CMPLT, self)

    def __le__(self, x: UOp | ConstLike) -> UOp:
        return (self > x).logical_not()

    def __ge__(self, x: UOp | ConstLike) -> UOp:
        return (self < x).logical_not()

    def __and__(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.AND, x)

    def __rand__(self, x: UOp | ConstLike) -> UOp:
        return self._operand(x).alu(Ops.AND, self)

    def __or__(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.OR, x)

    def __ror__(self, x: UOp | ConstLike) -> UOp:
        return self._operand(x).alu(Ops.OR, self)

    def __xor__(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.XOR, x)

    def __rxor__(self, x: UOp | ConstLike) -> UOp:
        return self._operand(x).alu(Ops.XOR, self)

    def __lshift__(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.SHL, x)

    def __rshift__(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.SHR, x)

    def __truediv__(self, x: UOp | ConstLike) -> UOp:
        if not self.dtype.is_float:
            raise DTypeError(
                at="UOp '/'",
                why=f"true division of {self.dtype.name} values",
                suggestion="use // for integer floor division, or cast to a float dtype",
            )
        return self * self._operand(x).reciprocal()

    def ne(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.CMPNE, x)

    def eq(self, x: UOp | ConstLike) -> UOp:
        return self.ne(x).logical_not()

    def logical_not(self) -> UOp:
        return self.alu(Ops.CMPNE, True) if self.dtype.is_bool else self.ne(0).logical_not()

    def where(self, a: UOp | ConstLike, b: UOp | ConstLike) -> UOp:
        if isinstance(a, UOp):
            return self.alu(Ops.WHERE, a, a._operand(b))
        if isinstance(b, UOp):
            return self.alu(Ops.WHERE, b._operand(a), b)
        dt = dtypes.default_float if isinstance(a, float) or isinstance(b, float) else dtypes.index
        return self.alu(Ops.WHERE, UOp.const(a, dt), UOp.const(b, dt))

    def maximum(self, x: UOp | ConstLike) -> UOp:
        return self.alu(Ops.MAX, x)

    def minimum(self, x: UOp | ConstLike) -> UOp:
        return -((-self).maximum(-self._operand(x)))

    def cast(self, dtype: DType | str) -> UOp:
        dt = to_dtype(dtype)
        if dt == self.dtype:
            return self
        if self.op is Ops.CONST:
            return UOp.const(self.arg, dt)
        return UOp(Ops.CAST, dt, (self,))

    def bitcast(self, dtype: DType | str) -> UOp:
        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise DTypeError(
                at="BITCAST",
                why=f"{self.dtype.name} and {dt.name} have different sizes",
                suggestion="bitcast between dtypes of equal size",
            )
        return self if dt == self.dtype else UOp(Ops.BITCAST, dt, (self,))

    def trunc(self) -> UOp:
        return self.alu(Ops.TRUNC)

    def reciprocal(self) -> UOp:
        return self.alu(Ops.RECIP)

    def exp2(self) -> UOp:
        return self.alu(Ops.EXP2)

    def log2(self) -> UOp:
        return self.alu(Ops.LOG2)

    def sin(self) -> UOp:
        return self.alu(Ops.SIN)

    def cos(self) -> UOp:
        return self.alu(Ops.COS)

    def sqrt(self) -> UOp:
        return self.alu(Ops.SQRT)

    # ---- movement / reduce helpers (tensor level) ----------------------------------------------

    def reshape(self, shape: tuple[int, ...]) -> UOp:
        return self if tuple(shape) == self.shape else UOp(Ops.RESHAPE, self.dtype, (self,), tuple(shape))

    def expand(self, shape: tuple[int, ...]) -> UOp:
        return self if tuple(shape) == self.shape else UOp(Ops.EXPAND, self.dtype, (self,), tuple(shape))

    def permute(self, order: tuple[int, ...]) -> UOp:
        return self if tuple(order) == tuple(range(len(order))) else UOp(Ops.PERMUTE, self.dtype, (self,), tuple(order))

    def pad(self, pads: tuple[tuple[int, int], ...]) -> UOp:
        pads = tuple((int(b), int(a)) for b, a in pads)
        return self if all(p == (0, 0) for p in pads) else UOp(Ops.PAD, self.dtype, (self,), pads)

    def shrink(self, bounds: tuple[tuple[int, int], ...]) -> UOp:
        bounds = tuple((int(b), int(e)) for b, e in bounds)
        same = all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape)) and len(bounds) == len(self.shape)
        return self if same else UOp(Ops.SHRINK, self.dtype, (self,), bounds)

    def flip(self, flags: tuple[bool, ...]) -> UOp:
        return self if not any(flags) else UOp(Ops.FLIP, self.dtype, (self,), tuple(bool(f) for f in flags))

    def reduce(self, op: Ops, axes: tuple[int, ...]) -> UOp:
        axes = tuple(sorted(set(axes)))
        return self if not axes else UOp(Ops.REDUCE, self.dtype, (self,), (op, axes))

    def contiguous(self) -> UOp:
        return UOp(Ops.CONTIGUOUS, self.dtype, (self,))

    # ---- derived properties --------------------------------------------------------------------

    @cached_property
    def shape(self) -> tuple[int, ...]:
        rule = OP_TABLE[self.op].shape_rule
        return rule(tuple(s.shape for s in self.src), self.arg) if rule is not None else ()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def device(self) -> str | None:
        if any("device" not in s.__dict__ for s in self.src):  # fill sources first: deep graphs need no recursion
            for u in self.toposort()[:-1]:
                if "device" not in u.__dict__:
                    u.__dict__["device"] = u._device()
        return self._device()

    def _device(self) -> str | None:
        if self.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.RANGE):
            return None
        if self.op in (Ops.BUFFER, Ops.PARAM):
            return "CPU"
        return next((s.device for s in self.src if s.device is not None), None)

    @cached_property
    def _min_max(self) -> tuple[int | float, int | float]:
        if any("_min_max" not in s.__dict__ for s in self.src):  # fill sources first: deep graphs need no recursion
            for u in self.toposort()[:-1]:
                if "_min_max" not in u.__dict__:
                    u.__dict__["_min_max"] = u._bounds()
        return self._bounds()

    def _bounds(self) -> tuple[int | float, int | float]:
        rule = OP_TABLE[self.op].bounds
        if rule is None or self.dtype is dtypes.void:
            return (self.dtype.min, self.dtype.max)
        lo, hi = rule(tuple(s._min_max for s in self.src), self.arg, self.dtype)
        if lo != lo or hi != hi or lo > hi:  # NaN or empty: fall back to the dtype range
            return (self.dtype.min, self.dtype.max)
        if self.dtype.is_int or self.dtype.is_bool:
            if lo < self.dtype.min or hi > self.dtype.max:  # may wrap around
                return (self.dtype.min, self.dtype.max)
            return (int(lo), int(hi))
        return (lo, hi)

    @property
    def vmin(self) -> int | float:
        return self._min_max[0]

    @property
    def vmax(self) -> int | float:
        return self._min_max[1]

    # ---- graph utilities -----------------------------------------------------------------------

    def toposort(self) -> list[UOp]:
        """All nodes reachable from self, sources before users (iterative: deep graphs are fine)."""
        return list(_toposort_of(self))

    def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
        """Replace nodes by identity (bottom-up, iterative)."""
        out: dict[UOp, UOp] = {}
        for u in self.toposort():
            if u in mapping:
                out[u] = mapping[u]
                continue
            new_src = tuple(out[s] for s in u.src)
            out[u] = u if new_src == u.src else UOp(u.op, u.dtype, new_src, u.arg)
        return out[self]

    def variables(self) -> list[UOp]:
        return [u for u in self.toposort() if u.op is Ops.DEFINE_VAR]

    # ---- printing ------------------------------------------------------------------------------

    def render(self) -> str:
        """Python-evaluable infix form of an integer/boolean expression (`where` and `max` as calls)."""
        names: dict[UOp, str] = {}
        for u in self.toposort():
            names[u] = _render_one(u, [names[s] for s in u.src])
        return names[self]

    def __repr__(self) -> str:
        return pretty(self)

    def __str__(self) -> str:
        return pretty(self)

    def __bool__(self) -> bool:  # hash-consed nodes are always truthy; comparisons build nodes
        return True


def toposort(roots: Iterable[UOp], sources: Callable[[UOp], tuple[UOp, ...]] | None = None) -> list[UOp]:
    """Nodes reachable from roots, sources before users; `sources` picks the edges to follow (default: all)."""
    order: list[UOp] = []
    seen: set[int] = set()
    edges = (lambda u: u.src) if sources is None else sources
    for root in roots:  # a depth-first post-order, each node's sources in their order
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(edges(root)))]
        while stack:
            u, todo = stack[-1]
            for s in todo:
                if id(s) not in seen:
                    seen.add(id(s))
                    stack.append((s, iter(edges(s))))
                    break
            else:
                stack.pop()
                order.append(u)
    return order


def check_placeholder_names(roots: list[UOp]) -> None:
    """Two different placeholders under one name would be one buffer read two ways: refused, naming both."""
    seen: dict[str, UOp] = {}
    for u in toposort(roots):
        if u.op is Ops.BUFFER and not u.src:
            first = seen.setdefault(u.arg[0], u)
            if first is not u:
                raise InvalidArgument(
                    at=f"placeholder {u.arg[0]!r}",
                    why=f"two different inputs share the name: {first.dtype.name}"
                    f"{list(first.arg[1])} and {u.dtype.name}{list(u.arg[1])}",
                    suggestion="give each Tensor.empty its own name (or use the same tensor twice)",
                )


@lru_cache(maxsize=256)
def _toposort_of(u: UOp) -> tuple[UOp, ...]:
    """The toposort of one node, for the few nodes asked about again and again (a kernel being estimated)."""
    return tuple(toposort([u]))


def _render_const(u: UOp) -> str:
    v = u.arg
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        if v != v:
            return "float('nan')"
        if v in (float("inf"), float("-inf")):
            return f"float('{v}')"
    return repr(v)


def _render_one(u: UOp, s: list[str]) -> str:
    sp = OP_TABLE[u.op]
    if u.op is Ops.CONST:
        return _render_const(u)
    if u.op is Ops.DEFINE_VAR:
        return u.arg[0]
    if u.op is Ops.RANGE:
        return range_name(u)
    if u.op is Ops.CAST:
        if u.dtype.is_bool:
            return f"({s[0]}!=0)"
        return f"int({s[0]})" if u.dtype.is_int else f"float({s[0]})"
    if u.op is Ops.TRUNC and u.dtype.is_float:
        return f"float(int({s[0]}))"
    if sp.py is not None:
        return sp.py.format(*s)
    inner = ", ".join(s + ([repr(u.arg)] if u.arg is not None else []))
    return f"{u.op.name}({inner})"


def range_name(u: UOp) -> str:
    key, axis_type = u.arg
    flat = key if isinstance(key, (int, str)) else "_".join(str(k) for k in _flatten_key(key))
    return f"{'ridx' if axis_type is AxisType.REDUCE else 'idx'}{flat}"


def _flatten_key(k: Any) -> Iterator[Any]:
    if isinstance(k, tuple):
        for x in k:
            yield from _flatten_key(x)
    else:
        yield k


def pretty(root: UOp, max_lines: int = 60) -> str:
    """One line per node, shared nodes printed once and referred to by number."""
    order = root.toposort()
    users: dict[UOp, int] = {}
    for u in order:
        for s in u.src:
            users[s] = users.get(s, 0) + 1
    if len(order) == 1:
        return _node_line(root, [])
    ids = {u: i for i, u in enumerate(order)}
    lines = [f"%{ids[u]} = {_node_line(u, [f'%{ids[s]}' for s in u.src])}" for u in order]
    if len(lines) > max_lines:
        lines = lines[: max_lines // 2] + [f"... {len(lines) - max_lines} more ..."] + lines[-max_lines // 2 :]
    return "\n".join(lines)


def _node_line(u: UOp, srcs: list[str]) -> str:
    parts = [f"{u.op.name}:{u.dtype.name}"]
    if u.shape:
        parts.append(f"[{_shape_str(u.shape)}]")
    if u.arg is not None:
        parts.append(repr(u.arg))
    if srcs:
        parts.append("(" + ", ".join(srcs) + ")")
    return " ".join(parts)


def graph_inputs(roots: Iterable[UOp]) -> list[UOp]:
    """Named placeholder buffers (no data) reachable from roots, in first-seen order."""
    return [u for u in toposort(roots) if u.op is Ops.BUFFER and not u.src]


def is_category(u: UOp, cat: Category) -> bool:
    return OP_TABLE[u.op].category is cat


def argkind(u: UOp) -> ArgKind:
    return OP_TABLE[u.op].arg


MapFn = Callable[[UOp], UOp]
