"""The op table: every op is declared here, once.

Each `OpSpec` says what an op is (category, arity, what its `arg` holds), how
its dtype, shape and integer bounds are derived, what it means (numpy
reference semantics), and how renderers spell it. The UOp class, the egglog
encoding and decoding, the reference interpreter and the renderers all read
this table; nothing else lists ops.

Integer division: IDIV is *floor* division and MOD its remainder (the sign of
MOD follows the divisor), as the UOp spec defines them; renderers emit C's or
LLVM's truncating instructions only where operands are proven non-negative.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any, cast

import numpy as np

from egraph_compiler.ir.diagnostics import BroadcastMismatch, DTypeError, InvalidArgument, ShapeMismatch
from egraph_compiler.ir.dtypes import DType, compute_np, dtypes
from egraph_compiler.ir.floordiv import DivFacts, floor_divide

Shape = tuple[int, ...]
Bounds = tuple[int | float, int | float]


class Ops(Enum):
    # source
    PARAM = auto()
    BUFFER = auto()
    CONST = auto()
    BINARY = auto()
    DEFINE_VAR = auto()
    # movement
    PERMUTE = auto()
    FLIP = auto()
    RESHAPE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    INDEX = auto()
    STACK = auto()
    BITCAST = auto()
    # reduce
    REDUCE = auto()
    # call
    FUNCTION = auto()
    CALL = auto()
    TUPLE = auto()
    GETTUPLE = auto()
    # memory
    LOAD = auto()
    STORE = auto()
    # ordering
    RANGE = auto()
    END = auto()
    AFTER = auto()
    GROUP = auto()
    SINK = auto()
    LINEAR = auto()
    # elementwise: unary
    RECIP = auto()
    TRUNC = auto()
    CAST = auto()
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    # elementwise: binary
    ADD = auto()
    MUL = auto()
    MAX = auto()
    MOD = auto()
    IDIV = auto()
    CMPLT = auto()
    CMPNE = auto()
    XOR = auto()
    OR = auto()
    AND = auto()
    SHR = auto()
    SHL = auto()
    # elementwise: ternary
    WHERE = auto()
    # markers
    CONTIGUOUS = auto()
    CONTIGUOUS_BACKWARD = auto()
    DETACH = auto()
    # codegen
    SPECIAL = auto()
    WMMA = auto()
    BARRIER = auto()
    IF = auto()
    ENDIF = auto()
    DEFINE_LOCAL = auto()
    DEFINE_REG = auto()
    VECTORIZE = auto()
    GEP = auto()
    # added later, last, so that the values above (pickled UOps refer to ops by value) stay the same
    COS = auto()  # elementwise unary
    FDIV = auto()  # elementwise binary

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    # members are singletons compared by identity: hashed in C, not by name in Python (kernel keys hash many)
    __hash__ = object.__hash__


class Category(Enum):
    SOURCE = auto()
    MOVEMENT = auto()
    REDUCE = auto()
    CALL = auto()
    LOAD = auto()
    STORE = auto()
    ORDERING = auto()
    UNARY = auto()
    BINARY = auto()
    TERNARY = auto()
    MARKER = auto()
    CODEGEN = auto()


class AxisType(Enum):
    """What a RANGE is used for (the spec's AxisType table)."""

    GLOBAL = "g"
    LOCAL = "l"
    WARP = "w"
    THREAD = "t"
    LOOP = "L"
    REDUCE = "R"
    GROUP_REDUCE = "G"
    UPCAST = "u"
    UNROLL = "r"

    def __repr__(self) -> str:
        return f"AxisType.{self.name}"

    __hash__ = object.__hash__  # as Ops'


class ArgKind(Enum):
    """What an op's `arg` holds; the encoder/decoder and validators dispatch on it."""

    NONE = auto()
    VALUE = auto()  # CONST: bool | int | float
    VAR = auto()  # DEFINE_VAR: (name, lo, hi)
    BUFFER = auto()  # BUFFER/PARAM: (name, shape)
    BLOB = auto()  # BINARY: Blob
    SHAPE = auto()  # RESHAPE/EXPAND: new shape
    PERM = auto()  # PERMUTE: permutation
    FLAGS = auto()  # FLIP: one bool per axis
    PAIRS = auto()  # PAD: (before, after) per axis; SHRINK: (start, end) per axis
    REDUCE = auto()  # REDUCE: (Ops.ADD | Ops.MAX | Ops.MUL, axes)
    RANGE = auto()  # RANGE: (key, AxisType)
    INT = auto()  # GETTUPLE index
    NAME = auto()  # SPECIAL, DEFINE_LOCAL, DEFINE_REG, WMMA config
    ANY = auto()


@dataclass(frozen=True)
class OpSpec:
    op: Ops
    category: Category
    arity: tuple[int, int | None]  # (min, max); max None means variadic
    arg: ArgKind = ArgKind.NONE
    dtype_rule: Callable[[tuple[DType, ...], Any, DType | None], DType] | None = None
    shape_rule: Callable[[tuple[Shape, ...], Any], Shape] | None = None
    bounds: Callable[[tuple[Bounds, ...], Any, DType], Bounds] | None = None
    ref: Callable[..., np.ndarray] | None = None  # numpy semantics (elementwise, movement, reduce)
    py: str | None = None  # python infix template, used by UOp.render()
    c: str | None = None  # C/CUDA template
    llvm: tuple[str | None, str | None] | None = None  # (integer instruction, float instruction)
    commutative: bool = False
    doc: str = ""
    properties: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_alu(self) -> bool:
        return self.category in (Category.UNARY, Category.BINARY, Category.TERNARY)

    @property
    def egg_name(self) -> str:
        return self.op.name


# ---- shape rules -------------------------------------------------------------------------------


def broadcast_shapes(*shapes: Shape, at: str = "elementwise op") -> Shape:
    """Right-aligned broadcast; each axis must be equal or 1 (E1001 otherwise)."""
    nd = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for i in range(nd):
        sizes = {s[len(s) - nd + i] for s in shapes if len(s) - nd + i >= 0}
        big = sizes - {1}
        if len(big) > 1:
            raise BroadcastMismatch(
                at=at,
                why=f"shapes {' and '.join(map(str, shapes))} differ on axis {i - nd} where neither size is 1",
                suggestion="reshape or expand one side so the sizes agree, or check the order of the operands",
                lhs_shape=shapes[0],
                rhs_shape=shapes[-1],
            )
        out.append(big.pop() if big else 1)
    return tuple(out)


def _same(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    return shapes[0]


def _scalar(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    return ()


def _elementwise_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    return broadcast_shapes(*shapes)


def _where_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    return broadcast_shapes(*shapes, at="WHERE")


def _bad(op: str, why: str, suggestion: str) -> InvalidArgument:
    return InvalidArgument(at=op, why=why, suggestion=suggestion)


def _check_pairs(op: str, shape: Shape, arg: Any) -> None:
    if len(arg) != len(shape):
        raise _bad(
            op,
            f"{op} needs one pair per axis: got {len(arg)} pairs for shape {shape}",
            "give a (before, after) / (start, end) pair for every axis",
        )


def _reshape_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    if math.prod(arg) != math.prod(shapes[0]):
        raise ShapeMismatch(
            at="RESHAPE",
            why=f"cannot reshape {shapes[0]} ({math.prod(shapes[0])} elements) to {tuple(arg)} ({math.prod(arg)} elements)",
            suggestion="keep the number of elements equal",
        )
    return tuple(arg)


def reshape_groups(old: tuple[int, ...], new: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Split a reshape into groups of (new sizes, old sizes) with equal products, smallest first: kept axes
    map one to one, size-1 axes stand alone, and only real merges/splits need div/mod."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(old) or j < len(new):
        if j < len(new) and new[j] == 1:
            groups.append(([1], []))
            j += 1
            continue
        if i < len(old) and old[i] == 1:
            groups.append(([], [1]))
            i += 1
            continue
        nd, od = [new[j]], [old[i]]
        j, i = j + 1, i + 1
        while math.prod(nd) != math.prod(od):
            if math.prod(nd) < math.prod(od):
                nd.append(new[j])
                j += 1
            else:
                od.append(old[i])
                i += 1
        groups.append((nd, od))
    return groups


def _expand_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    old = shapes[0]
    if len(arg) != len(old) or any(o != n and o != 1 for o, n in zip(old, arg)):
        raise BroadcastMismatch(
            at="EXPAND",
            why=f"cannot expand {old} to {tuple(arg)}: only size-1 axes expand and the rank must match",
            suggestion="reshape to insert size-1 axes before expanding",
        )
    return tuple(arg)


def _buffer_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    return tuple(arg[1])


def _permute_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    if sorted(arg) != list(range(len(shapes[0]))):
        raise _bad(
            "PERMUTE",
            f"{tuple(arg)} is not a permutation of the {len(shapes[0])} axes of {shapes[0]}",
            "list every axis exactly once",
        )
    return tuple(shapes[0][i] for i in arg)


def _flip_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    if len(arg) != len(shapes[0]):
        raise _bad("FLIP", f"FLIP needs one flag per axis, got {len(arg)} for shape {shapes[0]}", "give one bool per axis")
    return shapes[0]


def _pad_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    _check_pairs("PAD", shapes[0], arg)
    if any(b < 0 or a < 0 for b, a in arg):
        raise _bad("PAD", f"negative padding {tuple(arg)}", "use SHRINK to remove elements")
    return tuple(s + b + a for s, (b, a) in zip(shapes[0], arg))


def _shrink_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    _check_pairs("SHRINK", shapes[0], arg)
    if any(not (0 <= b <= e <= s) for s, (b, e) in zip(shapes[0], arg)):
        raise _bad("SHRINK", f"shrink {tuple(arg)} is outside shape {shapes[0]}", "keep 0 <= start <= end <= size")
    return tuple(e - b for b, e in arg)


def _reduce_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    if len(shapes) > 1:  # kernel level: reduced over ranges, the value is a scalar
        return shapes[0]
    return tuple(1 if i in arg[1] else s for i, s in enumerate(shapes[0]))


def _index_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    idx = shapes[1:]
    return tuple(d for s in idx for d in s) + shapes[0][len(idx) :]


def _stack_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    return (len(shapes),) + shapes[0]


def _after_shape(shapes: tuple[Shape, ...], arg: Any) -> Shape:
    return shapes[0]


# ---- dtype rules -------------------------------------------------------------------------------


def _dt_src0(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    return dts[0]


def _dt_given(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    if given is None:
        raise DTypeError(at="op construction", why="this op needs an explicit dtype", suggestion="pass dtype=")
    return given


def _dt_bool(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    return dtypes.bool


def _dt_index(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    return dtypes.index


def _dt_void(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    return dtypes.void


def _dt_where(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    return dts[1]


def _dt_same_binary(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    if dts[0] != dts[1]:
        raise DTypeError(
            at="binary op",
            why=f"operands have different dtypes {dts[0].name} and {dts[1].name}",
            suggestion="cast one operand first (the Tensor API promotes automatically)",
        )
    return dts[0]


def _dt_int_or_bool(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    d = _dt_same_binary(dts, arg, given)
    if not (d.is_int or d.is_bool):
        raise DTypeError(
            at="bitwise op",
            why=f"bitwise ops need integer or bool operands, got {d.name}",
            suggestion="cast to an integer dtype first",
        )
    return d


def _same_of(
    kind: str, ok: Callable[[DType], bool], suggestion: str, dts: tuple[DType, ...], arg: Any, given: DType | None
) -> DType:
    """Both operands of one dtype, of the kind `ok` accepts."""
    d = _dt_same_binary(dts, arg, given)
    if not ok(d):
        raise DTypeError(at=f"{kind} op", why=f"this op needs {kind} operands, got {d.name}", suggestion=suggestion)
    return d


def _dt_int(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    return _same_of("integer", lambda d: d.is_int, "cast to an integer dtype first, or use float division", dts, arg, given)


def _dt_float_unary(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    if not dts[0].is_float:
        raise DTypeError(
            at="float op", why=f"this op needs a float operand, got {dts[0].name}", suggestion="cast to a float dtype first"
        )
    return dts[0]


def _dt_float_binary(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    return _same_of("float", lambda d: d.is_float, "cast to a float dtype first (Tensor division does)", dts, arg, given)


def _dt_cmp(dts: tuple[DType, ...], arg: Any, given: DType | None) -> DType:
    _dt_same_binary(dts, arg, given)
    return dtypes.bool


# ---- integer bounds (vmin, vmax) ---------------------------------------------------------------


def _dtype_range(d: DType) -> Bounds:
    return (d.min, d.max)


def _b_dtype(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    return _dtype_range(d)


def _b_src0(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    return bs[0]


def _b_const(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    v = int(arg) if isinstance(arg, bool) else arg
    return (v, v)


def _b_var(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    return (arg[1], arg[2])


def _b_range(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    return (0, bs[0][1] - 1)


def _b_add(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = bs
    return (a + c, b + e)


def _b_mul(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = bs
    prods = [x * y for x in (a, b) for y in (c, e) if not ((math.isinf(x) and y == 0) or (math.isinf(y) and x == 0))]
    return (min(prods), max(prods)) if prods else _dtype_range(d)


def _b_max(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = bs
    return (max(a, c), max(b, e))


def _b_idiv(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = bs
    if c <= 0 <= e or any(math.isinf(x) for x in (a, b, c, e)):
        return _dtype_range(d)
    qs = [x // y for x in (a, b) for y in (c, e)]  # floor division is monotone per argument away from 0
    return (min(qs), max(qs))


def _b_mod(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = bs
    if c <= 0 <= e or any(math.isinf(x) for x in (a, b, c, e)):
        return _dtype_range(d)
    if c == e and a // c == b // c:  # whole numerator range inside one period
        return (a % c, b % c)
    if c > 0:
        return (0, min(e - 1, b) if a >= 0 else e - 1)
    return (c + 1, 0)  # negative divisor: remainder in (divisor, 0]


def _b_cmplt(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = bs
    if b < c:
        return (1, 1)
    if a >= e:
        return (0, 0)
    return (0, 1)


def _b_cmpne(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = bs
    if b < c or e < a:
        return (1, 1)
    if a == b == c == e:
        return (0, 0)
    return (0, 1)


def _b_where(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (p, q), (a, b), (c, e) = bs
    if p >= 1:
        return (a, b)
    if q <= 0:
        return (c, e)
    return (min(a, c), max(b, e))


def _pow2_ceil_mask(x: int | float) -> int:
    return (1 << int(x).bit_length()) - 1


def _int_bounds(bs: tuple[Bounds, ...]) -> tuple[tuple[int, int], ...]:
    """The bounds of integer or bool operands, which `UOp._bounds` keeps as ints (the dtype range included)."""
    return cast("tuple[tuple[int, int], ...]", bs)


def _b_and(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = bs
    if d.is_bool:
        return (min(a, c), min(b, e))
    if a >= 0 and c >= 0 and not math.isinf(b) and not math.isinf(e):
        return (0, min(b, e))
    if c >= 0 and not math.isinf(e):
        return (0, e)
    if a >= 0 and not math.isinf(b):
        return (0, b)
    return _dtype_range(d)


def _b_or(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = bs
    if d.is_bool:
        return (max(a, c), max(b, e))
    if a >= 0 and c >= 0 and not math.isinf(b) and not math.isinf(e):
        return (max(a, c), _pow2_ceil_mask(max(b, e)))
    return _dtype_range(d)


def _b_xor(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = _int_bounds(bs)
    if d.is_bool:
        if a == b and c == e:
            return (a ^ c, a ^ c)
        return (0, 1)
    if a >= 0 and c >= 0 and not math.isinf(b) and not math.isinf(e):
        return (0, _pow2_ceil_mask(max(b, e)))
    return _dtype_range(d)


def _b_shl(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = _int_bounds(bs)
    if c == e and 0 <= c < d.bits and a >= 0 and not math.isinf(b) and (b << c) <= d.max:
        return (a << c, b << c)
    return _dtype_range(d)


def _b_shr(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    (a, b), (c, e) = _int_bounds(bs)
    if c >= 0 and not math.isinf(e) and not math.isinf(a) and not math.isinf(b) and e < d.bits:
        return (min(a >> c, a >> e), max(b >> c, b >> e))
    return _dtype_range(d)


def _b_cast(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    lo, hi = bs[0]
    if d.is_bool:
        if lo > 0 or hi < 0:
            return (1, 1)
        return (0, 0) if lo == hi == 0 else (0, 1)
    if d.is_int:
        if math.isinf(lo) or math.isinf(hi):
            return _dtype_range(d)
        lo, hi = math.floor(lo) if lo >= 0 else math.ceil(lo), math.floor(hi) if hi >= 0 else math.ceil(hi)
        if d.min <= lo and hi <= d.max:
            return (lo, hi)
        return _dtype_range(d)
    return (lo, hi)


def _b_trunc(bs: tuple[Bounds, ...], arg: Any, d: DType) -> Bounds:
    return (
        bs[0]
        if d.is_int
        else (
            math.trunc(bs[0][0]) if not math.isinf(bs[0][0]) else bs[0][0],
            math.trunc(bs[0][1]) if not math.isinf(bs[0][1]) else bs[0][1],
        )
    )


# ---- numpy reference semantics -----------------------------------------------------------------
# Inputs are numpy arrays already in the compute dtype of their UOp; `d` is the result dtype.


def _np_out(x: Any, d: DType) -> np.ndarray:
    return np.asarray(x).astype(compute_np(d), copy=False)


class _NumpyInts:
    """IDIV/MOD's integer operations on numpy arrays (ir/floordiv.py): C's truncating division is np.fmod's."""

    def const(self, v: int) -> Any:
        return v

    def eq(self, x: np.ndarray, v: int) -> np.ndarray:
        return x == v

    def either(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        return p | q

    def select(self, c: np.ndarray, x: Any, y: Any) -> np.ndarray:
        return np.where(c, x, y)

    def tdiv(self, a: np.ndarray, b: np.ndarray, unsigned: bool) -> np.ndarray:
        return a // b if unsigned else (a - np.fmod(a, b)) // b  # an exact quotient: floor is truncation

    def trem(self, a: np.ndarray, b: np.ndarray, unsigned: bool) -> np.ndarray:
        return a % b if unsigned else np.fmod(a, b)

    def needs_floor(self, r: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (r != 0) & ((r ^ b) < 0)

    def dec_if(self, c: np.ndarray, q: np.ndarray) -> np.ndarray:
        return q - c.astype(q.dtype)

    def add_if(self, c: np.ndarray, r: np.ndarray, b: np.ndarray) -> np.ndarray:
        return r + np.where(c, b, 0).astype(r.dtype)

    def neg(self, x: np.ndarray) -> np.ndarray:
        return np.negative(x)


def _ref_floordiv(remainder: bool) -> Callable[..., np.ndarray]:
    def run(a: np.ndarray, b: np.ndarray, d: DType) -> np.ndarray:
        signed = not d.is_unsigned
        a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            out = floor_divide(_NumpyInts(), a, b, DivFacts(signed, True, signed, signed), remainder)
        return _np_out(out, d)

    return run


_ref_idiv, _ref_mod = _ref_floordiv(False), _ref_floordiv(True)


def _ref_shift(fn: Callable[[Any, Any], Any]) -> Callable[..., np.ndarray]:
    def run(a: np.ndarray, b: np.ndarray, d: DType) -> np.ndarray:
        bits = d.bits
        sh = np.clip(b, 0, bits - 1).astype(a.dtype)
        return _np_out(fn(a, sh), d)

    return run


def _ref_binary(fn: Callable[[Any, Any], Any]) -> Callable[..., np.ndarray]:
    def run(a: np.ndarray, b: np.ndarray, d: DType) -> np.ndarray:
        with np.errstate(all="ignore"):
            return _np_out(fn(a, b), d)

    return run


def _ref_unary(fn: Callable[[Any], Any]) -> Callable[..., np.ndarray]:
    def run(a: np.ndarray, d: DType) -> np.ndarray:
        with np.errstate(all="ignore"):
            return _np_out(fn(a), d)

    return run


def _ref_recip(a: np.ndarray, d: DType) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _np_out(np.reciprocal(a.astype(compute_np(d))), d)


def _ref_fdiv(a: np.ndarray, b: np.ndarray, d: DType) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _np_out(np.divide(a.astype(compute_np(d)), b.astype(compute_np(d))), d)


def _ref_cast(a: np.ndarray, d: DType) -> np.ndarray:
    if d.is_bool:
        return a != 0
    if d.is_int and a.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            t = np.trunc(np.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0))
            # out-of-range float->int is undefined in C; the reference wraps like a 64-bit conversion
            return t.astype(np.int64).astype(compute_np(d))
    with np.errstate(over="ignore"):
        return a.astype(compute_np(d))


def _ref_where(c: np.ndarray, a: np.ndarray, b: np.ndarray, d: DType) -> np.ndarray:
    return _np_out(np.where(c, a, b), d)


# movement semantics: (array, arg) -> array


def _mv_permute(x: np.ndarray, arg: Any) -> np.ndarray:
    return np.transpose(x, arg)


def _mv_flip(x: np.ndarray, arg: Any) -> np.ndarray:
    axes = tuple(i for i, f in enumerate(arg) if f)
    return np.flip(x, axes) if axes else x


def _mv_reshape(x: np.ndarray, arg: Any) -> np.ndarray:
    return np.reshape(x, arg)


def _mv_expand(x: np.ndarray, arg: Any) -> np.ndarray:
    return np.broadcast_to(x, arg)


def _mv_pad(x: np.ndarray, arg: Any) -> np.ndarray:
    return np.pad(x, arg)


def _mv_shrink(x: np.ndarray, arg: Any) -> np.ndarray:
    return x[tuple(slice(b, e) for b, e in arg)]


_REDUCE_FNS: dict[Ops, Any] = {Ops.ADD: np.add, Ops.MAX: np.maximum, Ops.MUL: np.multiply}


def _ref_reduce(x: np.ndarray, arg: Any) -> np.ndarray:
    op, axes = arg
    if x.size == 0:
        return np.zeros(tuple(1 if i in axes else s for i, s in enumerate(x.shape)), dtype=x.dtype)
    with np.errstate(over="ignore"):
        return _REDUCE_FNS[op].reduce(x, axis=tuple(axes), keepdims=True, dtype=x.dtype)


# ---- the table ---------------------------------------------------------------------------------


def _alu(
    op: Ops,
    cat: Category,
    ref: Callable[..., np.ndarray],
    dtype_rule: Any,
    bounds: Any = _b_dtype,
    *,
    py: str | None = None,
    c: str | None = None,
    llvm: tuple[str | None, str | None] | None = None,
    commutative: bool = False,
    doc: str = "",
) -> OpSpec:
    n = {Category.UNARY: 1, Category.BINARY: 2, Category.TERNARY: 3}[cat]
    shape = _same if n == 1 else (_where_shape if n == 3 else _elementwise_shape)
    return OpSpec(op, cat, (n, n), ArgKind.NONE, dtype_rule, shape, bounds, ref, py, c, llvm, commutative, doc)


S, M, R, CL, LD, ST, OR, MK, CG = (
    Category.SOURCE,
    Category.MOVEMENT,
    Category.REDUCE,
    Category.CALL,
    Category.LOAD,
    Category.STORE,
    Category.ORDERING,
    Category.MARKER,
    Category.CODEGEN,
)
U, B, T = Category.UNARY, Category.BINARY, Category.TERNARY

OP_TABLE: dict[Ops, OpSpec] = {
    s.op: s
    for s in [
        # source ops
        OpSpec(Ops.PARAM, S, (0, 0), ArgKind.BUFFER, _dt_given, _buffer_shape, _b_dtype, doc="placeholder (slot, shape)"),
        OpSpec(
            Ops.BUFFER,
            S,
            (0, 1),
            ArgKind.BUFFER,
            _dt_given,
            _buffer_shape,
            _b_dtype,
            doc="named buffer (name, shape); optional BINARY source holds its initial data",
        ),
        OpSpec(Ops.CONST, S, (0, 0), ArgKind.VALUE, _dt_given, _scalar, _b_const, doc="scalar constant"),
        OpSpec(Ops.BINARY, S, (0, 0), ArgKind.BLOB, _dt_given, _scalar, _b_dtype, doc="raw data blob"),
        OpSpec(Ops.DEFINE_VAR, S, (0, 0), ArgKind.VAR, _dt_index, _scalar, _b_var, doc="symbolic integer (name, lo, hi)"),
        # movement ops
        OpSpec(Ops.PERMUTE, M, (1, 1), ArgKind.PERM, _dt_src0, _permute_shape, _b_src0, _mv_permute),
        OpSpec(Ops.FLIP, M, (1, 1), ArgKind.FLAGS, _dt_src0, _flip_shape, _b_src0, _mv_flip),
        OpSpec(Ops.RESHAPE, M, (1, 1), ArgKind.SHAPE, _dt_src0, _reshape_shape, _b_src0, _mv_reshape),
        OpSpec(Ops.EXPAND, M, (1, 1), ArgKind.SHAPE, _dt_src0, _expand_shape, _b_src0, _mv_expand),
        OpSpec(Ops.PAD, M, (1, 1), ArgKind.PAIRS, _dt_src0, _pad_shape, _b_src0, _mv_pad, doc="zero-filled padding"),
        OpSpec(Ops.SHRINK, M, (1, 1), ArgKind.PAIRS, _dt_src0, _shrink_shape, _b_src0, _mv_shrink),
        OpSpec(
            Ops.INDEX,
            M,
            (1, None),
            ArgKind.NONE,
            _dt_src0,
            _index_shape,
            _b_src0,
            doc="index from the left; in kernels INDEX(buf, i) addresses one element",
        ),
        OpSpec(Ops.STACK, M, (1, None), ArgKind.NONE, _dt_src0, _stack_shape, _b_dtype),
        OpSpec(Ops.BITCAST, M, (1, 1), ArgKind.NONE, _dt_given, _same, _b_dtype),
        # reduce
        OpSpec(
            Ops.REDUCE,
            R,
            (1, None),
            ArgKind.REDUCE,
            _dt_src0,
            _reduce_shape,
            _b_dtype,
            _ref_reduce,
            doc="(op, axes) at tensor level; REDUCE(value, *ranges) in kernels",
        ),
        # call ops
        OpSpec(Ops.FUNCTION, CL, (1, None), ArgKind.NONE, _dt_src0, _same, _b_dtype),
        OpSpec(Ops.CALL, CL, (1, None), ArgKind.NONE, _dt_src0, _same, _b_dtype),
        OpSpec(Ops.TUPLE, CL, (0, None), ArgKind.NONE, _dt_void, _scalar, _b_dtype),
        OpSpec(Ops.GETTUPLE, CL, (1, 1), ArgKind.INT, _dt_given, _scalar, _b_dtype),
        # memory
        OpSpec(Ops.LOAD, LD, (1, 3), ArgKind.NONE, _dt_src0, _same, _b_dtype, doc="LOAD(ptr, alt?, gate?)"),
        OpSpec(Ops.STORE, ST, (2, 3), ArgKind.NONE, _dt_void, _scalar, doc="STORE(ptr, value, gate?)"),
        # ordering
        OpSpec(Ops.RANGE, OR, (1, 1), ArgKind.RANGE, _dt_index, _scalar, _b_range, doc="loop 0..bound-1"),
        OpSpec(Ops.END, OR, (2, None), ArgKind.NONE, _dt_void, _scalar, doc="END(body, *ranges): close loops"),
        OpSpec(Ops.AFTER, OR, (1, None), ArgKind.NONE, _dt_src0, _after_shape, _b_src0, doc="AFTER(buf, *deps)"),
        OpSpec(Ops.GROUP, OR, (0, None), ArgKind.NONE, _dt_void, _scalar),
        OpSpec(Ops.SINK, OR, (0, None), ArgKind.NONE, _dt_void, _scalar),
        OpSpec(Ops.LINEAR, OR, (0, None), ArgKind.NONE, _dt_void, _scalar),
        # elementwise unary
        _alu(Ops.RECIP, U, _ref_recip, _dt_float_unary, py="(1/{0})", c="(1.0f/{0})", llvm=(None, "fdiv"), doc="1/x"),
        _alu(
            Ops.TRUNC,
            U,
            _ref_unary(np.trunc),
            _dt_src0,
            _b_trunc,
            py="{0}",
            c="trunc({0})",
            llvm=(None, "trunc"),
            doc="round toward zero",
        ),
        _alu(Ops.CAST, U, _ref_cast, _dt_given, _b_cast, doc="convert to the node's dtype"),
        _alu(
            Ops.EXP2,
            U,
            _ref_unary(np.exp2),
            _dt_float_unary,
            c="exp2({0})",
            llvm=(None, "exp2"),
            doc="2**x",
        ),
        _alu(
            Ops.LOG2,
            U,
            _ref_unary(np.log2),
            _dt_float_unary,
            c="log2({0})",
            llvm=(None, "log2"),
            doc="log2(x)",
        ),
        _alu(
            Ops.SIN,
            U,
            _ref_unary(np.sin),
            _dt_float_unary,
            c="sin({0})",
            llvm=(None, "sin"),
            doc="sin(x)",
        ),
        _alu(
            Ops.COS,
            U,
            _ref_unary(np.cos),
            _dt_float_unary,
            c="cos({0})",
            llvm=(None, "cos"),
            doc="cos(x): libm's, accurate over the whole range (sin(pi/2 - x) loses the low bits of a large x)",
        ),
        _alu(
            Ops.SQRT,
            U,
            _ref_unary(np.sqrt),
            _dt_float_unary,
            c="sqrt({0})",
            llvm=(None, "sqrt"),
            doc="sqrt(x)",
        ),
        # elementwise binary
        _alu(
            Ops.ADD,
            B,
            _ref_binary(np.add),
            _dt_same_binary,
            _b_add,
            py="({0}+{1})",
            c="({0}+{1})",
            llvm=("add", "fadd"),
            commutative=True,
        ),
        _alu(
            Ops.MUL,
            B,
            _ref_binary(np.multiply),
            _dt_same_binary,
            _b_mul,
            py="({0}*{1})",
            c="({0}*{1})",
            llvm=("mul", "fmul"),
            commutative=True,
        ),
        _alu(
            Ops.MAX,
            B,
            _ref_binary(np.maximum),
            _dt_same_binary,
            _b_max,
            py="max({0}, {1})",
            c="max({0}, {1})",
            commutative=True,
        ),
        _alu(
            Ops.FDIV,
            B,
            _ref_fdiv,
            _dt_float_binary,
            py="({0}/{1})",
            c="({0}/{1})",
            llvm=(None, "fdiv"),
            doc="a / b of floats, correctly rounded (a * (1/b) is off by an ulp, and inf or NaN when 1/b overflows)",
        ),
        _alu(
            Ops.MOD,
            B,
            _ref_mod,
            _dt_int,
            _b_mod,
            py="({0}%{1})",
            c="({0}%{1})",
            llvm=("srem", None),
            doc="floor remainder (sign of the divisor)",
        ),
        _alu(
            Ops.IDIV, B, _ref_idiv, _dt_int, _b_idiv, py="({0}//{1})", c="({0}/{1})", llvm=("sdiv", None), doc="floor division"
        ),
        _alu(
            Ops.CMPLT, B, _ref_binary(np.less), _dt_cmp, _b_cmplt, py="({0}<{1})", c="({0}<{1})", llvm=("icmp slt", "fcmp olt")
        ),
        _alu(
            Ops.CMPNE,
            B,
            _ref_binary(np.not_equal),
            _dt_cmp,
            _b_cmpne,
            py="({0}!={1})",
            c="({0}!={1})",
            llvm=("icmp ne", "fcmp une"),
            commutative=True,
        ),
        _alu(
            Ops.XOR,
            B,
            _ref_binary(np.bitwise_xor),
            _dt_int_or_bool,
            _b_xor,
            py="({0}^{1})",
            c="({0}^{1})",
            llvm=("xor", None),
            commutative=True,
        ),
        _alu(
            Ops.OR,
            B,
            _ref_binary(np.bitwise_or),
            _dt_int_or_bool,
            _b_or,
            py="({0}|{1})",
            c="({0}|{1})",
            llvm=("or", None),
            commutative=True,
        ),
        _alu(
            Ops.AND,
            B,
            _ref_binary(np.bitwise_and),
            _dt_int_or_bool,
            _b_and,
            py="({0}&{1})",
            c="({0}&{1})",
            llvm=("and", None),
            commutative=True,
        ),
        _alu(Ops.SHR, B, _ref_shift(np.right_shift), _dt_int, _b_shr, py="({0}>>{1})", c="({0}>>{1})", llvm=("ashr", None)),
        _alu(Ops.SHL, B, _ref_shift(np.left_shift), _dt_int, _b_shl, py="({0}<<{1})", c="({0}<<{1})", llvm=("shl", None)),
        # elementwise ternary
        _alu(
            Ops.WHERE,
            T,
            _ref_where,
            _dt_where,
            _b_where,
            py="where({0}, {1}, {2})",
            c="({0}?{1}:{2})",
            llvm=("select", "select"),
        ),
        # markers
        OpSpec(Ops.CONTIGUOUS, MK, (1, 1), ArgKind.NONE, _dt_src0, _same, _b_src0, doc="force a materialized buffer"),
        OpSpec(Ops.CONTIGUOUS_BACKWARD, MK, (1, 1), ArgKind.NONE, _dt_src0, _same, _b_src0),
        OpSpec(Ops.DETACH, MK, (1, 1), ArgKind.NONE, _dt_src0, _same, _b_src0),
        # codegen
        OpSpec(Ops.SPECIAL, CG, (1, 1), ArgKind.NAME, _dt_index, _scalar, _b_range, doc="gpu index (gidx0, lidx1, ...)"),
        OpSpec(Ops.WMMA, CG, (3, 3), ArgKind.ANY, _dt_given, _scalar, doc="warp matrix multiply-accumulate"),
        OpSpec(Ops.BARRIER, CG, (0, None), ArgKind.NONE, _dt_void, _scalar),
        OpSpec(Ops.IF, CG, (1, None), ArgKind.NONE, _dt_void, _scalar),
        OpSpec(Ops.ENDIF, CG, (1, 1), ArgKind.NONE, _dt_void, _scalar),
        OpSpec(Ops.DEFINE_LOCAL, CG, (0, 0), ArgKind.BUFFER, _dt_given, _buffer_shape, doc="shared-memory buffer"),
        OpSpec(Ops.DEFINE_REG, CG, (0, 0), ArgKind.BUFFER, _dt_given, _buffer_shape, doc="register array"),
        OpSpec(Ops.VECTORIZE, CG, (1, None), ArgKind.NONE, _dt_given, _scalar, doc="pack scalars into a vector"),
        OpSpec(Ops.GEP, CG, (1, 1), ArgKind.INT, _dt_given, _scalar, doc="element of a vector"),
    ]
}

assert set(OP_TABLE) == set(Ops), f"ops without a table entry: {set(Ops) - set(OP_TABLE)}"

ELEMENTWISE: frozenset[Ops] = frozenset(o for o, s in OP_TABLE.items() if s.is_alu)
MOVEMENT: frozenset[Ops] = frozenset(o for o, s in OP_TABLE.items() if s.category is Category.MOVEMENT)
COMMUTATIVE: frozenset[Ops] = frozenset(o for o, s in OP_TABLE.items() if s.commutative)
REDUCE_OPS: frozenset[Ops] = frozenset(_REDUCE_FNS)


def spec(op: Ops) -> OpSpec:
    return OP_TABLE[op]


def check_arity(op: Ops, n: int) -> None:
    lo, hi = OP_TABLE[op].arity
    if n < lo or (hi is not None and n > hi):
        want = f"{lo}" if lo == hi else f"{lo}..{'' if hi is None else hi}"
        raise InvalidArgument(
            at=f"{op.name}",
            why=f"{op.name} takes {want} sources, got {n}",
            suggestion="check the op's arity in the op table (egraph_compiler/ir/ops.py)",
        )
