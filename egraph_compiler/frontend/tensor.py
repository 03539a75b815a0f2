"""The Tensor API: a lazy wrapper that builds UOp graphs with tinygrad's names.

Elementwise UOps always see operands of one shape and one dtype: this layer
broadcasts (RESHAPE + EXPAND) and promotes (CAST) explicitly, numpy style.
Python scalars are weakly typed (NEP 50); lists and scalars default to
int32/float32 as in tinygrad. Bad arguments raise diagnostics.
"""

from __future__ import annotations

import builtins
import itertools
import math
from collections.abc import Sequence
from typing import Any, TypeGuard

import numpy as np

from egraph_compiler.frontend.runtime import realize
from egraph_compiler.frontend.tensor_bits import TensorBits
from egraph_compiler.frontend.tensor_linalg import TensorLinalg
from egraph_compiler.frontend.tensor_math import TensorMath
from egraph_compiler.frontend.tensor_nn import TensorNN, _finite_number, _fits_values, _uniform_values
from egraph_compiler.frontend.tensor_select import TensorSelect, advanced_index
from egraph_compiler.ir.diagnostics import AxisError, BroadcastMismatch, DTypeError, InvalidArgument, InvalidSize, ShapeMismatch
from egraph_compiler.ir.dims import as_variable, placeholder_arg
from egraph_compiler.ir.dtypes import (
    DType,
    bf16_to_bits,
    default_dtype_for,
    dtypes,
    from_numpy,
    promote,
    sum_acc_dtype,
    to_dtype,
    weak_scalar_dtype,
)
from egraph_compiler.ir.ops import Ops, broadcast_shapes
from egraph_compiler.ir.uop import Blob, UOp

Scalar = bool | int | float
# what a Tensor combines with: another Tensor, a python or numpy scalar (weakly typed, as in tinygrad), an array;
# anything else is refused with a diagnostic
type Operand = Tensor | Scalar | np.generic | np.ndarray | list[Any] | tuple[Any, ...]
_name_counter = itertools.count()
_seed_counter = itertools.count()
_MAX_MATERIALIZED = 1 << 31  # constant data built at construction (arange, rand) stays below this many elements


def _is_scalar(x: Any) -> TypeGuard[bool | int | float | np.bool_ | np.integer | np.floating]:
    return isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating))


def _py_scalar(x: Any) -> Scalar:
    return x.item() if isinstance(x, np.generic) else x


def _int_fits(v: int, d: DType) -> bool:
    info = np.iinfo(d.np)
    return int(info.min) <= v <= int(info.max)


def _checked_int_dtype(lo: int, hi: int, d: DType | None, what: str) -> DType:
    """The dtype python ints from lo to hi get: the default int, or int64 where they do not fit (as numpy
    infers), or `d` if given and they fit it; never a silently wrapped value."""
    if d is not None:
        if d.is_int and not (_int_fits(lo, d) and _int_fits(hi, d)):
            raise DTypeError(
                at=what,
                why=f"python integer {hi if not _int_fits(hi, d) else lo} is out of bounds for {d.name}",
                suggestion="use a wider integer dtype (int64) or a value that fits",
            )
        return d
    for cand in (dtypes.default_int, dtypes.int64):
        if _int_fits(lo, cand) and _int_fits(hi, cand):
            return cand
    raise DTypeError(
        at=what,
        why=f"python integer {hi} does not fit any integer dtype (int64 at most)",
        suggestion="use a float, or split the value",
    )


def _as_int(x: Any, what: str) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise InvalidArgument(at=what, why=f"expected an integer, got {x!r}", suggestion="pass a python int")
    return int(x)


def _check_shape(shape: Sequence[Any], what: str) -> tuple[int, ...]:
    out = tuple(_as_int(s, what) for s in shape)
    if any(s <= 0 for s in out):
        raise InvalidSize(
            at=what, why=f"shape {out} has a zero or negative size", suggestion="every dimension must be a positive integer"
        )
    return out


def _flag(reverse: Any) -> bool:
    if not isinstance(reverse, (bool, np.bool_)):
        raise InvalidArgument(at="Tensor operator", why=f"reverse={reverse!r} is not a bool", suggestion="pass True/False")
    return bool(reverse)


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # a python int beyond float range
        return False


def _check_materialized(shape: tuple[int, ...], what: str) -> tuple[int, ...]:
    if math.prod(shape) > _MAX_MATERIALIZED:
        raise InvalidSize(
            at=what,
            why=f"shape {shape} has {math.prod(shape)} elements",
            suggestion=f"{what} is materialized as data: keep it below {_MAX_MATERIALIZED} elements",
        )
    return shape


def _rng(seed: Any, what: str) -> np.random.Generator:
    s = next(_seed_counter) if seed is None else _as_int(seed, what)
    return np.random.default_rng(s % (1 << 64))  # any python int: negative seeds map to distinct streams


_UNSIGNED = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def _argfix(args: tuple[Any, ...], what: str) -> tuple[Any, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def _fan_shape(shape: tuple[Any, ...], what: str) -> tuple[int, ...]:
    """A weight shape for fan-based initialisers: positive sizes, at least 2 dims (fan-in is prod(shape[1:]))."""
    shp = _check_shape(_argfix(shape, what), what)
    if len(shp) < 2:
        raise ShapeMismatch(
            at=what, why=f"shape {shp} has no fan-in (needs at least 2 dims)", suggestion="use (fan_out, fan_in, ...)"
        )
    return shp


def _spelled_out_index(indices: Any, ndim: int) -> tuple[Any, ...]:
    """An index as a tuple with an entry for every axis: '...' (or the missing trailing axes) as full slices."""
    idx = indices if isinstance(indices, tuple) else (indices,)
    if sum(i is Ellipsis for i in idx) > 1:
        raise InvalidArgument(at="getitem", why="more than one Ellipsis", suggestion="use at most one ...")
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if n_real > ndim:
        raise AxisError(
            at="getitem",
            why=f"{n_real} indices for a tensor of rank {ndim}",
            suggestion="index at most one entry per axis",
        )
    if any(i is Ellipsis for i in idx):  # by identity: `in` would compare a Tensor index elementwise
        k = next(j for j, i in enumerate(idx) if i is Ellipsis)
        return idx[:k] + (slice(None),) * (ndim - n_real) + idx[k + 1 :]
    return idx + (slice(None),) * (ndim - n_real)


def _is_array_index(i: Any) -> bool:
    """A tensor index: a Tensor, a numpy array, or a (nested) list of ints."""
    return isinstance(i, (Tensor, np.ndarray, list))


def _int_position(i: int | np.integer, axis: int, size: int) -> int:
    """The position an int index (negative from the end) picks on an axis of `size`."""
    j = int(i) + size if i < 0 else int(i)
    if not 0 <= j < size:
        raise AxisError(
            at="getitem",
            why=f"index {i} is out of bounds for axis {axis} of size {size}",
            suggestion=f"use an index in [{-size}, {size - 1}]",
        )
    return j


def _slice_positions(i: slice, axis: int, size: int) -> range:
    """The positions a slice picks on an axis of `size`: int (or None) bounds, a non-zero step, at least one."""
    int_bounds = all(
        v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) for v in (i.start, i.stop, i.step)
    )
    if not int_bounds or i.step == 0:
        raise InvalidArgument(
            at="getitem",
            why=f"slice {i} needs int (or None) bounds and a non-zero step",
            suggestion="use slices such as 1:5:2",
        )
    r = range(*i.indices(size))
    if len(r) == 0:
        raise InvalidSize(
            at="getitem",
            why=f"slice {i} selects nothing on axis {axis} of size {size}",
            suggestion="select at least one element",
        )
    return r


def _every_nth(x: Tensor, strides: list[int]) -> Tensor:
    """Every strides[k]-th element of x along axis k, from the first: padded to a multiple of the stride, each axis
    split into (groups, stride), the first of each group kept."""
    pads = tuple((0, -sz % st) for sz, st in zip(x.shape, strides))
    out = Tensor(x.uop.pad(pads))
    split = tuple(n for sz, st in zip(out.shape, strides) for n in (sz // st, st))
    out = Tensor(out.uop.reshape(split))
    out = Tensor(out.uop.shrink(tuple(p for sz, st in zip(out.shape[::2], strides) for p in ((0, sz), (0, 1)))))
    return Tensor(out.uop.reshape(tuple(out.shape[::2])))


def _permuted_data(buf: UOp, order: tuple[int, ...]) -> UOp:
    """A constant tensor's data permuted when the graph is built: a weight used transposed (`x @ w.T`, ONNX Gemm's
    transB) is then read along its rows, as the kernels' vectors want, instead of a column at a time."""
    data = buf.src[0].arg.data.reshape(buf.arg[1])
    blob = Blob(np.transpose(data, order))  # the stored form (bfloat16 as its bits) moves as it is
    shape = tuple(buf.arg[1][i] for i in order)
    return UOp(Ops.BUFFER, buf.dtype, (UOp(Ops.BINARY, dtypes.uint8, (), blob),), (f"const_{blob.digest[:12]}", shape))


def data_buffer(arr: np.ndarray, dtype: DType) -> UOp:
    """A constant tensor holding `arr`: BUFFER(name, shape) over a BINARY blob with the data."""
    if arr.size == 0:
        raise InvalidSize(at="Tensor(data)", why="the array is empty", suggestion="tensors need at least one element")
    stored = bf16_to_bits(arr.astype(np.float32)) if dtype is dtypes.bfloat16 else arr.astype(dtype.np)
    blob = Blob(stored)
    return UOp(Ops.BUFFER, dtype, (UOp(Ops.BINARY, dtypes.uint8, (), blob),), (f"const_{blob.digest[:12]}", arr.shape))


class Tensor(TensorNN, TensorMath, TensorSelect, TensorLinalg, TensorBits):
    """A lazily evaluated tensor; `.uop` is its UOp graph."""

    __hash__ = object.__hash__  # == is elementwise, so hash by identity

    def __init__(self, data: Any, dtype: DType | str | None = None) -> None:
        dt = to_dtype(dtype) if dtype is not None else None
        if isinstance(data, UOp):
            self.uop = data if dt is None else data.cast(dt)
            return
        if isinstance(data, Tensor):
            self.uop = data.uop if dt is None else data.uop.cast(dt)
            return
        if _is_scalar(data):
            v = _py_scalar(data)
            if isinstance(v, int) and not isinstance(v, bool) and (dt is None or dt.is_int):
                dt = _checked_int_dtype(v, v, dt, "Tensor(int)")
            self.uop = UOp.const(v, dt or default_dtype_for(v))
            return
        if isinstance(data, (bytes, bytearray)):  # bytes are uint8 values, as tinygrad's Tensor(b"...")
            data = np.frombuffer(bytes(data), np.uint8).copy()
            if not len(data):
                raise InvalidSize(at="Tensor(bytes)", why="no bytes", suggestion="pass at least one byte")
        if isinstance(data, np.ndarray):
            arr = data
            if dt is None:
                dt = from_numpy(arr.dtype)
        elif isinstance(data, (list, tuple)):
            try:
                arr = np.array(data)
            except ValueError as e:
                raise InvalidArgument(
                    at="Tensor(list)",
                    why=f"ragged or invalid nested list: {e}",
                    suggestion="pass a rectangular nested list of numbers",
                ) from None
            if arr.dtype.kind not in "biuf":
                raise InvalidArgument(
                    at="Tensor(list)",
                    why=f"list elements of kind {arr.dtype} are not numbers",
                    suggestion="pass numbers or bools",
                )
            if arr.dtype.kind in "iu" and arr.size and (dt is None or dt.is_int):
                dt = _checked_int_dtype(int(arr.min()), int(arr.max()), dt, "Tensor(list)")
            if dt is None:
                dt = {"b": dtypes.bool, "f": dtypes.default_float}[arr.dtype.kind]
        else:
            raise InvalidArgument(
                at="Tensor(...)",
                why=f"cannot make a tensor from {type(data).__name__}",
                suggestion="pass a numpy array, a nested list, a scalar, a UOp or a Tensor",
            )
        if arr.ndim == 0:
            self.uop = UOp.const(arr.item(), dt)
        else:
            self.uop = data_buffer(arr, dt)

    # ---- creation ------------------------------------------------------------------------------

    @staticmethod
    def empty(*shape: Any, dtype: DType | str | None = "float32", name: str | None = None) -> Tensor:
        """A named placeholder input: supply its value when calling the optimized program. A size may be symbolic,
        bound at each call: a Variable("B", lo, hi), or a name alone ("B", bounds 1 to 1024); the tensor then has
        the largest size in the bounds until the program runs (see egraph_compiler/ir/dims.py)."""
        given = _argfix(shape, "Tensor.empty")
        symbolic = {a: v for a, d in enumerate(given) if (v := as_variable(d, "Tensor.empty")) is not None}
        shp = _check_shape([symbolic[a].trace if a in symbolic else d for a, d in enumerate(given)], "Tensor.empty")
        if name is None:
            name = f"input{next(_name_counter)}"
        if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
            raise InvalidArgument(
                at="Tensor.empty",
                why=f"name {name!r} is not an ASCII identifier (names become e-graph strings and C parameter names)",
                suggestion="use names such as 'a', 'x0', 'weights'",
            )
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        return Tensor(UOp(Ops.BUFFER, dt, (), placeholder_arg(name, shp, symbolic)))

    @staticmethod
    def full(shape: Sequence[int] | int, fill_value: Scalar, dtype: DType | str | None = None) -> Tensor:
        if not isinstance(shape, (int, np.integer, tuple, list)) or isinstance(shape, bool):
            raise InvalidArgument(
                at="Tensor.full",
                why=f"shape {shape!r} is not an int or a sequence of ints",
                suggestion="pass a shape such as (2, 3)",
            )
        shp = _check_shape((shape,) if not isinstance(shape, (tuple, list)) else tuple(shape), "Tensor.full")
        if not _is_scalar(fill_value):
            raise InvalidArgument(
                at="Tensor.full", why=f"fill value {fill_value!r} is not a scalar", suggestion="pass a bool, int or float"
            )
        v = _py_scalar(fill_value)
        dt = to_dtype(dtype) if dtype is not None else default_dtype_for(v)
        exact = (
            not dt.is_int
            or (isinstance(v, (bool, int)) and _int_fits(int(v), dt))
            or (float(v).is_integer() and _int_fits(int(v), dt))
        )
        if not exact:  # as numpy: a value the dtype cannot hold is an error, not a wrap or a truncation
            raise DTypeError(
                at="Tensor.full",
                why=f"{fill_value!r} is not a {dt.name} value",
                suggestion=f"use a value in [{dt.min}, {dt.max}] without a fraction, or another dtype",
            )
        c = Tensor(UOp.const(v, dt))
        return c.reshape((1,) * len(shp)).expand(shp)

    @staticmethod
    def zeros(*shape: Any, dtype: DType | str | None = None) -> Tensor:
        return Tensor.full(_argfix(shape, "Tensor.zeros"), 0.0, dtype or dtypes.default_float)

    @staticmethod
    def ones(*shape: Any, dtype: DType | str | None = None) -> Tensor:
        return Tensor.full(_argfix(shape, "Tensor.ones"), 1.0, dtype or dtypes.default_float)

    @staticmethod
    def invalids(*shape: Any, dtype: DType | str | None = None) -> Tensor:
        """tinygrad's anonymous buffer whose contents are unspecified (to be assigned): any value is allowed, and
        here it holds zeros."""
        return Tensor.zeros(*shape, dtype=dtype)

    def ufix(self, x: Any) -> Tensor:
        """x if it is a Tensor, else x as a tensor beside this one (a python number takes this tensor's dtype kind,
        as in arithmetic with it)."""
        return self._to_tensor(x, "Tensor.ufix")

    def zeros_like(self) -> Tensor:
        return Tensor.full(self.shape, 0, self.dtype)

    def ones_like(self) -> Tensor:
        return Tensor.full(self.shape, 1, self.dtype)

    def full_like(self, fill_value: Scalar) -> Tensor:
        return Tensor.full(self.shape, fill_value, self.dtype)

    @staticmethod
    def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: DType | str | None = None) -> Tensor:
        """Materialized as constant data (the values are known at construction)."""
        if stop is None:
            start, stop = 0, start
        for v, what in ((start, "start"), (stop, "stop"), (step, "step")):
            if not _is_scalar(v) or isinstance(v, bool):
                raise InvalidArgument(at="Tensor.arange", why=f"{what}={v!r} is not a number", suggestion="pass numbers")
        if step == 0 or not all(_finite(v) for v in (start, stop, step)):
            raise InvalidArgument(
                at="Tensor.arange",
                why=f"arange({start}, {stop}, {step}) needs finite values and a non-zero step",
                suggestion="use finite numbers and a non-zero step",
            )
        dt = (
            to_dtype(dtype)
            if dtype is not None
            else (dtypes.default_float if any(isinstance(v, float) for v in (start, stop, step)) else dtypes.default_int)
        )
        n = math.ceil((stop - start) / step)
        if n <= 0:
            raise InvalidSize(
                at="Tensor.arange",
                why=f"arange({start}, {stop}, {step}) is empty",
                suggestion="choose start/stop/step so that at least one value results",
            )
        _check_materialized((n,), "Tensor.arange")
        last = start + (n - 1) * step
        if dt.is_int and not (_int_fits(math.floor(min(start, last)), dt) and _int_fits(math.ceil(max(start, last)), dt)):
            raise DTypeError(
                at="Tensor.arange",
                why=f"arange({start}, {stop}, {step}) runs past the range of {dt.name} (its values would wrap)",
                suggestion="use a wider integer dtype",
            )
        return Tensor(
            (start + np.arange(n, dtype=np.float64) * step).astype(dt.np if dt is not dtypes.bfloat16 else np.float32), dt
        )

    @staticmethod
    def const(value: Scalar, dtype: DType | str | None = None) -> Tensor:
        """A 0-d tensor of `value` (tinygrad's Tensor.const): Tensor(value, dtype)."""
        if not _is_scalar(value):
            raise InvalidArgument(at="Tensor.const", why=f"{value!r} is not a scalar", suggestion="pass a bool, int or float")
        return Tensor(value, dtype)

    @staticmethod
    def eye(n: int, dtype: DType | str | None = None) -> Tensor:
        (m,) = _check_shape((n,), "Tensor.eye")
        return Tensor(np.eye(_check_materialized((m, m), "Tensor.eye")[0]), dtype or dtypes.default_float)

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        global _seed_counter
        _seed_counter = itertools.count(_as_int(seed, "Tensor.manual_seed") * 1_000_003)

    @staticmethod
    def rand(*shape: Any, dtype: DType | str | None = None, seed: int | None = None) -> Tensor:
        """Uniform [0, 1) values, reproducible from `seed` (or Tensor.manual_seed)."""
        shp = _check_materialized(_check_shape(_argfix(shape, "Tensor.rand"), "Tensor.rand"), "Tensor.rand")
        rng = _rng(seed, "Tensor.rand")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dt.is_float:
            raise DTypeError(at="Tensor.rand", why=f"rand makes floats, not {dt.name}", suggestion="use a float dtype")
        return Tensor(rng.random(shp, dtype=np.float32), dt)

    @staticmethod
    def randn(*shape: Any, dtype: DType | str | None = None, seed: int | None = None) -> Tensor:
        shp = _check_materialized(_check_shape(_argfix(shape, "Tensor.randn"), "Tensor.randn"), "Tensor.randn")
        rng = _rng(seed, "Tensor.randn")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dt.is_float:
            raise DTypeError(at="Tensor.randn", why=f"randn makes floats, not {dt.name}", suggestion="use a float dtype")
        return Tensor(rng.standard_normal(shp, dtype=np.float32), dt)

    @staticmethod
    def linspace(start: Scalar, stop: Scalar, steps: int, dtype: DType | str | None = None) -> Tensor:
        """`steps` evenly spaced values from `start` to `stop` inclusive, float32 by default. Computed in float64 (as
        numpy), the last value exactly `stop`; an int dtype truncates toward zero (a cast, as tinygrad's)."""
        lo, hi = _finite_number(start, "Tensor.linspace start"), _finite_number(stop, "Tensor.linspace stop")
        (n,) = _check_materialized(_check_shape((steps,), "Tensor.linspace steps"), "Tensor.linspace")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if dt.is_bool or dt is dtypes.index:
            raise DTypeError(at="Tensor.linspace", why=f"linspace with dtype {dt.name}", suggestion="use a float or int dtype")
        vals = np.full(1, lo) if n == 1 else lo + np.arange(n, dtype=np.float64) * ((hi - lo) / (n - 1))
        if n > 1:
            vals[-1] = hi
        return Tensor(_fits_values(np.trunc(vals) if dt.is_int else vals, dt, "Tensor.linspace"), dt)

    @staticmethod
    def uniform(
        *shape: Any, low: Scalar = 0.0, high: Scalar = 1.0, dtype: DType | str | None = None, seed: int | None = None
    ) -> Tensor:
        """Uniform values in [low, high) (low < high), float32 by default; an int dtype with int bounds draws
        integers (as randint). A value that rounds to `high` in the dtype becomes the dtype's largest value below it."""
        shp = _check_materialized(_check_shape(_argfix(shape, "Tensor.uniform"), "Tensor.uniform"), "Tensor.uniform")
        lo, hi = _finite_number(low, "Tensor.uniform low"), _finite_number(high, "Tensor.uniform high")
        if not lo < hi:
            raise InvalidArgument(
                at="Tensor.uniform", why=f"needs low < high, got low={low}, high={high}", suggestion="swap or widen the range"
            )
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dt.is_float:
            if dt.is_int and all(isinstance(v, (int, np.integer)) for v in (low, high)):
                return Tensor.randint(*shp, low=int(low), high=int(high), dtype=dt, seed=seed)
            raise DTypeError(
                at="Tensor.uniform",
                why=f"dtype {dt.name} with low={low!r}, high={high!r}",
                suggestion="use a float dtype, or integer bounds with an int dtype (Tensor.randint)",
            )
        return Tensor(_uniform_values(_rng(seed, "Tensor.uniform").random(shp), lo, hi, dt, "Tensor.uniform"), dt)

    @staticmethod
    def normal(
        *shape: Any, mean: Scalar = 0.0, std: Scalar = 1.0, dtype: DType | str | None = None, seed: int | None = None
    ) -> Tensor:
        """Normal values with the given mean and standard deviation (std >= 0), float32 by default."""
        shp = _check_materialized(_check_shape(_argfix(shape, "Tensor.normal"), "Tensor.normal"), "Tensor.normal")
        mu, sigma = _finite_number(mean, "Tensor.normal mean"), _finite_number(std, "Tensor.normal std")
        if sigma < 0:
            raise InvalidArgument(at="Tensor.normal", why=f"std={std} is negative", suggestion="use std >= 0")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dt.is_float:
            raise DTypeError(at="Tensor.normal", why=f"normal makes floats, not {dt.name}", suggestion="use a float dtype")
        vals = mu + sigma * _rng(seed, "Tensor.normal").standard_normal(shp)
        return Tensor(_fits_values(vals, dt, "Tensor.normal"), dt)

    @staticmethod
    def randint(
        *shape: Any, low: int = 0, high: int = 10, dtype: DType | str = dtypes.int32, seed: int | None = None
    ) -> Tensor:
        """Uniform integers in [low, high) (low < high), int32 by default."""
        shp = _check_materialized(_check_shape(_argfix(shape, "Tensor.randint"), "Tensor.randint"), "Tensor.randint")
        lo, hi = _as_int(low, "Tensor.randint low"), _as_int(high, "Tensor.randint high")
        dt = to_dtype(dtype)
        if not dt.is_int or dt is dtypes.index:
            raise DTypeError(at="Tensor.randint", why=f"dtype {dt.name} is not an integer dtype", suggestion="use int32")
        if not lo < hi:
            raise InvalidArgument(at="Tensor.randint", why=f"needs low < high, got low={lo}, high={hi}", suggestion="swap them")
        _checked_int_dtype(lo, hi - 1, dt, "Tensor.randint")
        vals = _rng(seed, "Tensor.randint").integers(lo, hi, shp, dtype=np.uint64 if hi - 1 >= 1 << 63 else np.int64)
        return Tensor(np.asarray(vals).astype(dt.np), dt)

    @staticmethod
    def scaled_uniform(*shape: Any, dtype: DType | str | None = None, seed: int | None = None) -> Tensor:
        """Uniform in [-b, b) with b = prod(shape) ** -0.5."""
        shp = _check_shape(_argfix(shape, "Tensor.scaled_uniform"), "Tensor.scaled_uniform")
        b = math.prod(shp) ** -0.5
        return Tensor.uniform(*shp, low=-b, high=b, dtype=dtype, seed=seed)

    @staticmethod
    def glorot_uniform(*shape: Any, dtype: DType | str | None = None, seed: int | None = None) -> Tensor:
        """Uniform in [-b, b) with b = sqrt(6 / (shape[0] + prod(shape[1:]))) (Glorot / Xavier)."""
        shp = _fan_shape(shape, "Tensor.glorot_uniform")
        b = (6 / (shp[0] + math.prod(shp[1:]))) ** 0.5
        return Tensor.uniform(*shp, low=-b, high=b, dtype=dtype, seed=seed)

    @staticmethod
    def kaiming_uniform(*shape: Any, a: float = 0.01, dtype: DType | str | None = None, seed: int | None = None) -> Tensor:
        """Uniform in [-b, b) with b = sqrt(6 / (1 + a**2) / prod(shape[1:])) (torch's kaiming_uniform_, slope a)."""
        shp = _fan_shape(shape, "Tensor.kaiming_uniform")
        b = (6 / (1 + _finite_number(a, "Tensor.kaiming_uniform a") ** 2) / math.prod(shp[1:])) ** 0.5
        return Tensor.uniform(*shp, low=-b, high=b, dtype=dtype, seed=seed)

    @staticmethod
    def kaiming_normal(*shape: Any, a: float = 0.01, dtype: DType | str | None = None, seed: int | None = None) -> Tensor:
        """Normal with std sqrt(2 / (1 + a**2) / prod(shape[1:])) (torch's kaiming_normal_, slope a)."""
        shp = _fan_shape(shape, "Tensor.kaiming_normal")
        std = (2 / (1 + _finite_number(a, "Tensor.kaiming_normal a") ** 2) / math.prod(shp[1:])) ** 0.5
        return Tensor.normal(*shp, mean=0.0, std=std, dtype=dtype, seed=seed)

    @staticmethod
    def randperm(n: int, dtype: DType | str = dtypes.int32, seed: int | None = None) -> Tensor:
        """A random permutation of 0 .. n-1 (int32 by default)."""
        (m,) = _check_materialized(_check_shape((n,), "Tensor.randperm"), "Tensor.randperm")
        dt = to_dtype(dtype)
        if dt.is_bool or dt is dtypes.index:
            raise DTypeError(at="Tensor.randperm", why=f"a permutation as {dt.name}", suggestion="use int32 or int64")
        perm = _rng(seed, "Tensor.randperm").permutation(m)
        return Tensor(_fits_values(perm, dt, "Tensor.randperm"), dt)

    def rand_like(self, dtype: DType | str | None = None, seed: int | None = None) -> Tensor:
        """Uniform [0, 1) values of this shape, in this dtype (a float) unless `dtype` is given."""
        return Tensor.rand(*self.shape, dtype=dtype if dtype is not None else self.dtype, seed=seed)

    def randn_like(self, dtype: DType | str | None = None, seed: int | None = None) -> Tensor:
        """Standard normal values of this shape, in this dtype (a float) unless `dtype` is given."""
        return Tensor.normal(*self.shape, dtype=dtype if dtype is not None else self.dtype, seed=seed)

    def empty_like(self, dtype: DType | str | None = None, name: str | None = None) -> Tensor:
        """A placeholder input of this shape (and this dtype unless `dtype` is given), named `name` or afresh."""
        return Tensor.empty(self.shape, dtype=dtype if dtype is not None else self.dtype, name=name)

    # ---- properties ----------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self.uop.shape

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def max_shape(self) -> tuple[int, ...]:
        """The shape with every symbolic size at its maximum: every size here is known, so the shape itself."""
        return self.shape

    def max_numel(self) -> int:
        """The number of elements of `max_shape`."""
        return math.prod(self.max_shape)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def __repr__(self) -> str:
        return f"<Tensor shape={self.shape} dtype={self.dtype.name} op={self.uop.op.name}>"

    def __len__(self) -> int:
        if not self.shape:
            raise InvalidArgument(at="len(Tensor)", why="a 0-d tensor has no length", suggestion="use .shape")
        return self.shape[0]

    def __iter__(self) -> Any:
        """The sub-tensors along the first axis, lazily (as numpy iterates an array)."""
        if not self.shape:
            raise InvalidArgument(at="iter(Tensor)", why="a 0-d tensor cannot be iterated", suggestion="use .item()")
        return (self[i] for i in range(self.shape[0]))

    def __bool__(self) -> bool:
        raise InvalidArgument(
            at="bool(Tensor)",
            why="a lazy tensor has no truth value until it is computed",
            suggestion="compute it first: t.numpy().any(), t.numpy().all() or t.item()",
        )

    def __float__(self) -> float:
        raise InvalidArgument(
            at="float(Tensor)",
            why="a lazy tensor has no value until it is computed",
            suggestion="compute it first: t.item() (one element) or t.numpy()",
        )

    def __int__(self) -> int:
        raise InvalidArgument(
            at="int(Tensor)",
            why="a lazy tensor has no value until it is computed",
            suggestion="compute it first: int(t.item()) (one element) or t.numpy()",
        )

    def __contains__(self, x: object) -> bool:
        raise InvalidArgument(
            at="x in Tensor",
            why="membership would need the tensor computed",
            suggestion="compute it first: x in t.numpy(), or (t == x).numpy().any()",
        )

    # ---- realization ---------------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """Compute the value (through the default backend) and return it as a numpy array."""
        return realize(self)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """np.asarray(t) and other numpy functions: the tensor computed (as t.numpy(); a placeholder, which has no
        data, is a diagnostic)."""
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Scalar:
        if self.numel() != 1:
            raise InvalidArgument(at="Tensor.item", why=f"tensor has {self.numel()} elements", suggestion="use .numpy()")
        return self.numpy().reshape(()).item()

    def realize(self) -> Tensor:
        return Tensor(self.numpy(), self.dtype)

    def data(self) -> memoryview:
        """The computed values as a memoryview in C order, shaped as the tensor (a 0-d one as one element), as
        tinygrad's `data()`: `np.frombuffer(t.data(), dtype)` reads it back."""
        arr = np.ascontiguousarray(self.numpy())
        return memoryview(arr.reshape(1) if arr.ndim == 0 else arr)

    def replace(self, x: Tensor) -> Tensor:
        """This tensor becomes `x` (its graph: its dtype too); only the shapes must match. Returns self."""
        if not isinstance(x, Tensor):
            raise InvalidArgument(
                at="Tensor.replace", why=f"expected a Tensor, got {type(x).__name__}", suggestion="pass a Tensor"
            )
        if x.shape != self.shape:
            raise ShapeMismatch(
                at="Tensor.replace", why=f"shape {x.shape} for a tensor of shape {self.shape}", suggestion="reshape it first"
            )
        self.uop = x.uop
        return self

    def assign(self, x: Any) -> Tensor:
        """This tensor takes the value of `x` (a Tensor broadcast to its shape, or a python value or array made a
        tensor of its dtype); the dtypes must match. Tensors are values here, so this rebinds what the tensor
        computes: graphs built from it before keep the old value. Returns self."""
        if not isinstance(x, Tensor):
            x = Tensor(x, self.dtype)
        if x.uop is self.uop:
            return self
        if x.dtype is not self.dtype:
            raise DTypeError(
                at="Tensor.assign",
                why=f"assigning {x.dtype.name} to a {self.dtype.name} tensor",
                suggestion=f"cast it first: x.cast('{self.dtype.name}')",
            )
        self.uop = x.expand(*self.shape).uop if x.shape != self.shape else x.uop
        return self

    def contiguous(self) -> Tensor:
        return Tensor(self.uop.contiguous())

    def detach(self) -> Tensor:
        return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)))

    # ---- dtype ---------------------------------------------------------------------------------

    def cast(self, dtype: DType | str) -> Tensor:
        return Tensor(self.uop.cast(to_dtype(dtype)))

    def bitcast(self, dtype: DType | str) -> Tensor:
        """The same bytes read as `dtype` (little-endian, as numpy's view). Between sizes the last axis changes
        length, as tinygrad's: to a smaller dtype each element becomes its pieces in order, to a larger one
        consecutive elements (the last axis must divide) become one."""
        dt = to_dtype(dtype)
        old = self.dtype
        if dt.itemsize == old.itemsize or old.is_bool or dt.is_bool or dt is dtypes.index or old is dtypes.index:
            return Tensor(self.uop.bitcast(dt))  # equal sizes, or the IR's own diagnostic
        if self.ndim == 0:
            raise ShapeMismatch(
                at="Tensor.bitcast",
                why=f"a scalar {old.name} cannot become {dt.name}s: the sizes differ ({old.itemsize} and {dt.itemsize} bytes)",
                suggestion="reshape it to (1,) first",
            )
        small, big = (dt, old) if dt.itemsize < old.itemsize else (old, dt)
        ratio, bits = big.itemsize // small.itemsize, 8 * small.itemsize
        ubig, usmall = _UNSIGNED[big.itemsize], _UNSIGNED[small.itemsize]
        *lead, n = self.shape
        if dt is small:  # each element into `ratio` pieces, lowest first
            u = self.bitcast(ubig)
            pieces = [(u >> (bits * k)).cast(usmall) for k in range(ratio)]
            return Tensor.stack(*pieces, dim=-1).reshape(*lead, n * ratio).bitcast(dt)
        if n % ratio:
            raise ShapeMismatch(
                at="Tensor.bitcast",
                why=f"the last axis ({n} {old.name}s) does not divide into {dt.name}s of {ratio}",
                suggestion=f"pad the last axis to a multiple of {ratio}",
            )
        parts = self.bitcast(usmall).reshape(*lead, n // ratio, ratio).cast(ubig)
        shifts = Tensor(np.array([1 << (bits * k) for k in range(ratio)], dtype=ubig.np))
        return (parts * shifts).sum(-1, dtype=ubig).bitcast(dt)  # the pieces do not overlap: their sum is their OR

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    # ---- broadcasting elementwise machinery ----------------------------------------------------

    def _to_tensor(self, x: Operand, what: str) -> Tensor:
        if isinstance(x, Tensor):
            return x
        if _is_scalar(x):
            v = _py_scalar(x)
            dt = weak_scalar_dtype(v, self.dtype)
            if isinstance(v, int) and not isinstance(v, bool) and dt.is_int and not _int_fits(v, dt):
                # as numpy (NEP 50): a python int out of bounds for the tensor's dtype is an error, not a wrap
                raise DTypeError(
                    at=what,
                    why=f"python integer {v} is out of bounds for {dt.name}",
                    suggestion="cast the tensor first (t.cast('int64')) or use a value that fits",
                )
            return Tensor(UOp.const(v, dt))
        if isinstance(x, (np.ndarray, list, tuple)):
            return Tensor(x)
        raise InvalidArgument(
            at=what,
            why=f"cannot combine a Tensor with {type(x).__name__}",
            suggestion="use a Tensor, numpy array or python number",
        )

    def _broadcast_to(self, shape: tuple[builtins.int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        return Tensor(self.uop.reshape(padded).expand(shape))

    @staticmethod
    def _broadcast(*ts: Tensor, at: str) -> tuple[Tensor, ...]:
        shape = broadcast_shapes(*(t.shape for t in ts), at=at)
        return tuple(t._broadcast_to(shape) for t in ts)

    def _binop(self, op: Ops, x: Any, reverse: builtins.bool = False, dtype: DType | None = None) -> Tensor:
        y = self._to_tensor(x, op.name)
        a, b = (y, self) if _flag(reverse) else (self, y)
        dt = dtype or promote(a.dtype, b.dtype)
        a, b = Tensor._broadcast(a.cast(dt), b.cast(dt), at=f"Tensor {op.name.lower()}")
        return Tensor(UOp.build(op, (a.uop, b.uop)))

    def _unop(self, op: Ops) -> Tensor:
        return Tensor(UOp.build(op, (self.uop,)))

    def _float(self) -> Tensor:
        return self if self.dtype.is_float else self.cast(dtypes.default_float)

    # arithmetic
    def add(self, x: Operand, reverse: builtins.bool = False) -> Tensor:
        return self._binop(Ops.ADD, x, reverse)

    def mul(self, x: Operand, reverse: builtins.bool = False) -> Tensor:
        return self._binop(Ops.MUL, x, reverse)

    def neg(self) -> Tensor:
        # -1 in the tensor's own dtype (all ones for unsigned: negation wraps, as numpy's does)
        return self.logical_not() if self.dtype.is_bool else self * Tensor(UOp.const(-1, self.dtype))

    def sub(self, x: Operand, reverse: builtins.bool = False) -> Tensor:
        a, b = (self._to_tensor(x, "sub"), self) if _flag(reverse) else (self, self._to_tensor(x, "sub"))
        dt = promote(a.dtype, b.dtype)
        if dt.is_bool:
            raise DTypeError(at="Tensor sub", why="subtracting bools", suggestion="use ^ or logical_not()")
        return a.cast(dt) + (-b.cast(dt))  # promote first: negating a bool/unsigned/narrower b would wrap

    def div(self, x: Operand, reverse: builtins.bool = False) -> Tensor:
        a, b = (self._to_tensor(x, "div"), self) if _flag(reverse) else (self, self._to_tensor(x, "div"))
        dt = promote(a.dtype, b.dtype)
        if not dt.is_float:
            dt = dtypes.default_float
        return a._binop(Ops.FDIV, b, dtype=dt)  # true division, as numpy's (not a * (1/b))

    def floordiv(self, x: Operand, reverse: builtins.bool = False) -> Tensor:
        a, b = (self._to_tensor(x, "//"), self) if _flag(reverse) else (self, self._to_tensor(x, "//"))
        dt = promote(a.dtype, b.dtype)
        if dt.is_int:
            return a._binop(Ops.IDIV, b)
        if dt.is_bool:
            raise DTypeError(at="Tensor //", why="floor division of bools", suggestion="cast to int first")
        return (a.cast(dt) / b.cast(dt)).floor()

    def mod(self, x: Operand, reverse: builtins.bool = False) -> Tensor:
        a, b = (self._to_tensor(x, "%"), self) if _flag(reverse) else (self, self._to_tensor(x, "%"))
        dt = promote(a.dtype, b.dtype)
        if dt.is_int:
            return a._binop(Ops.MOD, b)
        if dt.is_bool:
            raise DTypeError(at="Tensor %", why="modulo of bools", suggestion="cast to int first")
        a, b = a.cast(dt), b.cast(dt)
        return a - (a / b).floor() * b

    def pow(self, x: Operand, reverse: builtins.bool = False) -> Tensor:
        if not _flag(reverse) and _is_scalar(x) and not isinstance(x, bool) and (v := float(x)).is_integer() and abs(v) <= 4:
            n = int(v)
            base = self if n >= 0 else self._float().reciprocal()
            out = base.ones_like() if n == 0 else base
            for _ in range(abs(n) - 1):
                out = out * base
            return out
        a, b = (self._to_tensor(x, "pow"), self) if _flag(reverse) else (self, self._to_tensor(x, "pow"))
        dt = promote(a.dtype, b.dtype)
        dt = dt if dt.is_float else dtypes.default_float
        a, b = a.cast(dt), b.cast(dt)
        mag = (a.abs().log2() * b).exp2()  # the spec's Pow: exp2(log2(a) * b), on |a|
        whole = b.trunc() == b
        odd = whole & ((b * 0.5).trunc() != b * 0.5)
        out = (a < 0).where(whole.where(odd.where(-mag, mag), math.nan), mag)  # negative bases need whole exponents
        return ((b == 0) | (a == 1)).where(1.0, out)  # x**0 == 1**y == 1, even for nan and inf (as numpy)

    def maximum(self, x: Operand) -> Tensor:
        return self._binop(Ops.MAX, x)

    def minimum(self, x: Operand) -> Tensor:
        y = self._to_tensor(x, "minimum")
        dt = promote(self.dtype, y.dtype)
        a, b = self.cast(dt), y.cast(dt)
        if dt.is_bool:
            return a & b
        if dt.is_int:  # ~ reverses the order of every int (negation would wrap at the dtype minimum)
            return ~((~a).maximum(~b))
        return -((-a).maximum(-b))

    def where(self, x: Operand, y: Operand) -> Tensor:
        cond = self if self.dtype.is_bool else self.cast(dtypes.bool)
        # a python scalar takes the other branch's dtype when that one is a Tensor (NEP 50), else its own default
        xt = x if isinstance(x, Tensor) else (y if isinstance(y, Tensor) else cond)._to_tensor(x, "where")
        yt = y if isinstance(y, Tensor) else (x if isinstance(x, Tensor) else cond)._to_tensor(y, "where")
        dt = promote(xt.dtype, yt.dtype)
        c, a, b = Tensor._broadcast(cond, xt.cast(dt), yt.cast(dt), at="Tensor.where")
        return Tensor(UOp.build(Ops.WHERE, (c.uop, a.uop, b.uop)))

    # comparisons
    def _cmp(self, op: Ops, x: Any, reverse: builtins.bool = False) -> Tensor:
        y = self._to_tensor(x, op.name)
        a, b = (y, self) if _flag(reverse) else (self, y)
        dt = promote(a.dtype, b.dtype)
        a, b = Tensor._broadcast(a.cast(dt), b.cast(dt), at=f"Tensor {op.name.lower()}")
        return Tensor(UOp.build(op, (a.uop, b.uop)))

    def __lt__(self, x: Operand) -> Tensor:
        return self._cmp(Ops.CMPLT, x)

    def __gt__(self, x: Operand) -> Tensor:
        return self._cmp(Ops.CMPLT, x, reverse=True)

    def __le__(self, x: Operand) -> Tensor:
        return self._at_most(x)

    def __ge__(self, x: Operand) -> Tensor:
        return self._at_most(x, reverse=True)

    def __ne__(self, x: Operand) -> Tensor:  # type: ignore[override]  # elementwise, as numpy's: a Tensor, not a bool
        return self._cmp(Ops.CMPNE, x)

    def __eq__(self, x: Operand) -> Tensor:  # type: ignore[override]  # elementwise, as numpy's: a Tensor, not a bool
        return self._cmp(Ops.CMPNE, x).logical_not()

    def _at_most(self, x: Operand, reverse: builtins.bool = False) -> Tensor:
        """self <= x (x <= self with `reverse`). Floats compare as numpy does: a NaN on either side is False, so
        not `not (x < self)`."""
        y = self._to_tensor(x, "<=")
        a, b = (y, self) if _flag(reverse) else (self, y)
        if promote(a.dtype, b.dtype).is_float:
            return (a < b) | (a == b)
        return (b < a).logical_not()

    def logical_not(self) -> Tensor:
        b = self if self.dtype.is_bool else self.cast(dtypes.bool)
        return b._binop(Ops.CMPNE, True)

    # bitwise
    def _bitop(self, op: Ops, x: Any, reverse: builtins.bool = False) -> Tensor:
        out = self._binop(op, x, reverse)
        if not (out.dtype.is_int or out.dtype.is_bool):
            raise DTypeError(
                at=f"Tensor {op.name.lower()}", why=f"bitwise op on {out.dtype.name}", suggestion="use integer or bool tensors"
            )
        return out

    def __and__(self, x: Operand) -> Tensor:
        return self._bitop(Ops.AND, x)

    def __rand__(self, x: Operand) -> Tensor:
        return self._bitop(Ops.AND, x, True)

    def __or__(self, x: Operand) -> Tensor:
        return self._bitop(Ops.OR, x)

    def __ror__(self, x: Operand) -> Tensor:
        return self._bitop(Ops.OR, x, True)

    def __xor__(self, x: Operand) -> Tensor:
        return self._bitop(Ops.XOR, x)

    def __rxor__(self, x: Operand) -> Tensor:
        return self._bitop(Ops.XOR, x, True)

    def __invert__(self) -> Tensor:
        if self.dtype.is_bool:
            return self.logical_not()
        if not self.dtype.is_int:
            raise DTypeError(at="Tensor ~", why=f"bitwise not of {self.dtype.name}", suggestion="use integer tensors")
        return self ^ -1 if not self.dtype.is_unsigned else self ^ int(self.dtype.max)

    def lshift(self, x: Operand) -> Tensor:
        return self._intshift(Ops.SHL, x)

    def rshift(self, x: Operand) -> Tensor:
        return self._intshift(Ops.SHR, x)

    def _intshift(self, op: Ops, x: Any) -> Tensor:
        if not self.dtype.is_int:
            raise DTypeError(at=f"Tensor {op.name.lower()}", why=f"shift of {self.dtype.name}", suggestion="use ints")
        if self._to_tensor(x, op.name).dtype.is_float:
            raise DTypeError(at=f"Tensor {op.name.lower()}", why="shift by a float amount", suggestion="shift by ints")
        return self._binop(op, x, dtype=self.dtype)

    __lshift__ = lshift
    __rshift__ = rshift
    __add__ = add
    __mul__ = mul
    __sub__ = sub
    __truediv__ = div
    __floordiv__ = floordiv
    __mod__ = mod
    __pow__ = pow
    __neg__ = neg

    def __radd__(self, x: Operand) -> Tensor:
        return self.add(x, True)

    def __rmul__(self, x: Operand) -> Tensor:
        return self.mul(x, True)

    def __rsub__(self, x: Operand) -> Tensor:
        return self.sub(x, True)

    def __rtruediv__(self, x: Operand) -> Tensor:
        return self.div(x, True)

    def __rfloordiv__(self, x: Operand) -> Tensor:
        return self.floordiv(x, True)

    def __rmod__(self, x: Operand) -> Tensor:
        return self.mod(x, True)

    def __rpow__(self, x: Operand) -> Tensor:
        return self.pow(x, True)

    def __matmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x)

    def __rmatmul__(self, x: Tensor) -> Tensor:
        return self._to_tensor(x, "@").matmul(self)

    # unary math (exp/log go through the spec's EXP2/LOG2)
    def reciprocal(self) -> Tensor:
        return self._float()._unop(Ops.RECIP)

    def exp2(self) -> Tensor:
        return self._float()._unop(Ops.EXP2)

    def log2(self) -> Tensor:
        return self._float()._unop(Ops.LOG2)

    def sqrt(self) -> Tensor:
        return self._float()._unop(Ops.SQRT)

    def sin(self) -> Tensor:
        return self._float()._unop(Ops.SIN)

    def exp(self) -> Tensor:
        return (self._float() * (1 / math.log(2))).exp2()

    def log(self) -> Tensor:
        return self.log2() * math.log(2)

    def rsqrt(self) -> Tensor:
        return self.sqrt().reciprocal()

    def cos(self) -> Tensor:
        return self._float()._unop(Ops.COS)

    def tan(self) -> Tensor:
        return self.sin() / self.cos()

    def square(self) -> Tensor:
        return self * self

    def trunc(self) -> Tensor:
        return self if not self.dtype.is_float else self._unop(Ops.TRUNC)

    def floor(self) -> Tensor:
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return (self < t).where(t - 1, t)

    def ceil(self) -> Tensor:
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return (self > t).where(t + 1, t)

    def abs(self) -> Tensor:
        if self.dtype.is_bool or self.dtype.is_unsigned:
            return self
        if self.dtype.is_float:  # the sign bit cleared: abs(-0.0) is 0.0 and NaN keeps its payload, as IEEE fabs
            bits = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[self.dtype.itemsize]
            return (self.bitcast(bits) & ((1 << (8 * self.dtype.itemsize - 1)) - 1)).bitcast(self.dtype)
        return (self < 0).where(-self, self)

    def sign(self) -> Tensor:
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def clip(self, min_: Scalar | None = None, max_: Scalar | None = None) -> Tensor:
        out = self
        if min_ is not None:
            out = out.maximum(min_)
        if max_ is not None:
            out = out.minimum(max_)
        return out

    clamp = clip

    # ---- movement ------------------------------------------------------------------------------

    def _resolve_axis(self, axis: Any, ndim: builtins.int | None = None, what: str = "axis") -> builtins.int:
        n = self.ndim if ndim is None else ndim
        a = _as_int(axis, what)
        if not -max(n, 1) <= a < max(n, 1):
            raise AxisError(
                at=what,
                why=f"axis {a} is out of range for a tensor of rank {n} (shape {self.shape})",
                suggestion=f"use an axis in [{-n}, {n - 1}]",
            )
        return a % max(n, 1)

    def reshape(self, shape: Any, *args: Any) -> Tensor:
        new = list(_argfix((shape, *args), "reshape"))
        new = [_as_int(s, "reshape") for s in new]
        if new.count(-1) > 1:
            raise InvalidArgument(at="reshape", why="more than one -1 in the shape", suggestion="use at most one -1")
        known = math.prod(s for s in new if s != -1)
        if -1 in new:
            if known <= 0 or self.numel() % known:
                raise ShapeMismatch(
                    at="reshape",
                    why=f"cannot infer -1 reshaping {self.shape} to {tuple(new)}",
                    suggestion="make the known sizes divide the number of elements",
                )
            new[new.index(-1)] = self.numel() // known
        shp = _check_shape(new, "reshape")
        if math.prod(shp) != self.numel():
            raise ShapeMismatch(
                at="reshape",
                why=f"cannot reshape {self.shape} ({self.numel()} elements) to {shp}",
                suggestion="keep the number of elements equal",
            )
        return Tensor(self.uop.reshape(shp))

    def view(self, *shape: Any) -> Tensor:
        return self.reshape(*shape)

    def flatten(self, start_dim: builtins.int = 0, end_dim: builtins.int = -1) -> Tensor:
        s = self._resolve_axis(start_dim, what="flatten")
        e = self._resolve_axis(end_dim, what="flatten")
        return self.reshape(self.shape[:s] + (math.prod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def unsqueeze(self, dim: builtins.int) -> Tensor:
        d = self._resolve_axis(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def squeeze(self, dim: builtins.int | None = None) -> Tensor:
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1)) if self.ndim else self  # all ones: 0-d
        d = self._resolve_axis(dim, what="squeeze")
        return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1 :])

    def permute(self, order: Any, *args: Any) -> Tensor:
        o = tuple(self._resolve_axis(a, what="permute") for a in _argfix((order, *args), "permute"))
        if sorted(o) != list(range(self.ndim)):
            raise InvalidArgument(
                at="permute", why=f"{o} is not a permutation of {self.ndim} axes", suggestion="list every axis exactly once"
            )
        if o == tuple(range(self.ndim)):
            return Tensor(self.uop)  # a new tensor all the same: assign/replace on it must not touch self
        if self.uop.op is Ops.BUFFER and self.uop.src and self.uop.src[0].op is Ops.BINARY:
            return Tensor(_permuted_data(self.uop, o))
        return Tensor(self.uop.permute(o))

    def transpose(self, dim0: builtins.int = 1, dim1: builtins.int = 0) -> Tensor:
        a, b = self._resolve_axis(dim0, what="transpose"), self._resolve_axis(dim1, what="transpose")
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    def expand(self, shape: Any, *args: Any) -> Tensor:
        new = [_as_int(s, "expand") for s in _argfix((shape, *args), "expand")]
        if len(new) < self.ndim:
            raise ShapeMismatch(
                at="expand",
                why=f"cannot expand rank {self.ndim} to rank {len(new)}",
                suggestion="give at least as many sizes as the tensor has axes",
            )
        old = (1,) * (len(new) - self.ndim) + self.shape
        new = [o if n == -1 else n for o, n in zip(old, new)]
        shp = _check_shape(new, "expand")
        for o, n in zip(old, shp):
            if o != n and o != 1:
                raise BroadcastMismatch(
                    at="expand",
                    why=f"cannot expand {self.shape} to {shp}: only size-1 axes expand",
                    suggestion="reshape first, or expand only axes of size 1",
                )
        return Tensor(self.uop.reshape(old).expand(shp))

    def _pairs(self, arg: Any, what: str, default: Any) -> tuple[tuple[builtins.int, builtins.int], ...]:
        if not isinstance(arg, (tuple, list)):
            raise InvalidArgument(
                at=what,
                why=f"{what} takes a sequence, got {type(arg).__name__}",
                suggestion="pass ((before, after), ...) with one pair (or None) per axis",
            )
        if all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in arg):
            if what != "pad" or len(arg) % 2 or len(arg) // 2 > self.ndim:
                raise InvalidArgument(
                    at=what,
                    why=f"flat {what} argument {tuple(arg)} does not fit rank {self.ndim}",
                    suggestion="pass one (before, after) pair per axis",
                )
            flat = [int(a) for a in arg]  # torch style: pairs from the last axis backwards
            pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)][::-1]
            arg = [None] * (self.ndim - len(pairs)) + pairs
        if len(arg) != self.ndim:
            raise InvalidArgument(
                at=what,
                why=f"{what} needs {self.ndim} entries (one per axis), got {len(arg)}",
                suggestion="give one pair or None per axis",
            )
        out = []
        for s, p in zip(self.shape, arg):
            if p is None:
                out.append(default(s))
                continue
            if not isinstance(p, (tuple, list)) or len(p) != 2:
                raise InvalidArgument(at=what, why=f"{p!r} is not a pair", suggestion="use (before, after) pairs")
            out.append((_as_int(p[0], what), _as_int(p[1], what)))
        return tuple(out)

    def pad(self, padding: Any, mode: str = "constant", value: Scalar = 0.0) -> Tensor:
        if mode != "constant":
            raise InvalidArgument(at="pad", why=f"pad mode {mode!r} is not supported", suggestion="use mode='constant'")
        pairs = self._pairs(padding, "pad", lambda s: (0, 0))
        if any(b < 0 or a < 0 for b, a in pairs):
            shrink = tuple((max(-b, 0), s - max(-a, 0)) for s, (b, a) in zip(self.shape, pairs))
            return self.shrink(shrink).pad(tuple((max(b, 0), max(a, 0)) for b, a in pairs), value=value)
        out = Tensor(self.uop.pad(pairs))
        if value == 0:
            return out
        inside = Tensor(UOp.const(True, dtypes.bool).reshape((1,) * self.ndim).expand(self.shape).pad(pairs))
        return inside.where(out, value)

    def shrink(self, arg: Any) -> Tensor:
        pairs = self._pairs(arg, "shrink", lambda s: (0, s))
        for s, (b, e) in zip(self.shape, pairs):
            if not 0 <= b < e <= s:
                raise InvalidArgument(
                    at="shrink",
                    why=f"shrink {pairs} does not fit shape {self.shape}",
                    suggestion="use 0 <= start < end <= size on every axis",
                )
        return Tensor(self.uop.shrink(pairs))

    def flip(self, axis: Any, *args: Any) -> Tensor:
        axes = {self._resolve_axis(a, what="flip") for a in _argfix((axis, *args), "flip")}
        return Tensor(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

    def __getitem__(self, indices: Any) -> Tensor:
        """numpy basic indexing: ints (drop the axis), slices (any step), None (a new axis of size 1) and one '...'.
        A shrink to the selected span, a flip for negative steps, a subsampling for steps beyond 1, a reshape.
        Integer tensors (or lists, arrays) index as tinygrad's: the basic indices apply first, then the tensor
        indices pick along their axes (negative from the end, out of range reads 0), broadcast together; their
        axes replace the indexed ones where those are adjacent, else go first (select.advanced_index)."""
        spelled = _spelled_out_index(indices, self.ndim)
        picks: dict[builtins.int, Tensor] = {}  # position in the basic result -> index tensor
        if any(_is_array_index(i) for i in spelled):
            plain, at = [], 0
            for i in spelled:
                if _is_array_index(i):
                    picks[at] = i if isinstance(i, Tensor) else Tensor(np.asarray(i))
                    plain.append(slice(None))
                else:
                    plain.append(i)
                if i is None or isinstance(i, slice) or _is_array_index(i):
                    at += 1
            return advanced_index(self[tuple(plain)], picks)
        shrink, flips, strides, final_shape = [], [], [], []
        axis = 0
        for i in spelled:
            if i is None:
                final_shape.append(1)
                continue
            if axis >= self.ndim:
                break
            size = self.shape[axis]
            if isinstance(i, (int, np.integer)) and not isinstance(i, bool):
                j = _int_position(i, axis, size)
                shrink.append((j, j + 1))
                flips.append(False)
                strides.append(1)
            elif isinstance(i, slice):
                r = _slice_positions(i, axis, size)
                shrink.append((min(r[0], r[-1]), max(r[0], r[-1]) + 1))
                flips.append(r.step < 0)
                strides.append(abs(r.step))
                final_shape.append(len(r))
            else:
                raise InvalidArgument(
                    at="getitem",
                    why=f"unsupported index {i!r}",
                    suggestion="use ints, slices, None or ...; use gather() for tensor indices",
                )
            axis += 1
        out = self.shrink(tuple(shrink)) if shrink else self
        if any(flips):
            out = Tensor(out.uop.flip(tuple(flips)))
        if any(s != 1 for s in strides):
            out = _every_nth(out, strides)
        return out.reshape(tuple(final_shape))

    def cat(self, *args: Tensor, dim: builtins.int = 0) -> Tensor:
        ts = (self, *args)
        if self.ndim == 0:
            raise ShapeMismatch(at="cat", why="0-d tensors cannot be concatenated", suggestion="use stack, or reshape to (1,)")
        d = self._resolve_axis(dim, what="cat")
        for t in ts:
            if not isinstance(t, Tensor):
                raise InvalidArgument(at="cat", why=f"cannot concatenate {type(t).__name__}", suggestion="pass Tensors")
            if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
                raise ShapeMismatch(
                    at="cat",
                    why=f"shapes {self.shape} and {t.shape} differ off axis {d}",
                    suggestion="all tensors must match except along the concatenation axis",
                )
        dt = ts[0].dtype
        for t in ts[1:]:
            dt = promote(dt, t.dtype)
        total = sum(t.shape[d] for t in ts)
        out: Tensor | None = None
        offset = 0
        for t in ts:
            pads = tuple((offset, total - offset - t.shape[d]) if i == d else (0, 0) for i in range(self.ndim))
            piece = Tensor(t.cast(dt).uop.pad(pads))
            out = piece if out is None else out + piece
            offset += t.shape[d]
        assert out is not None
        return out

    def stack(self, *args: Tensor, dim: builtins.int = 0) -> Tensor:
        ts = (self, *args)
        d = self._resolve_axis(dim, self.ndim + 1, "stack")
        return ts[0].unsqueeze(d).cat(*(t.unsqueeze(d) if isinstance(t, Tensor) else t for t in ts[1:]), dim=d)

    def repeat(self, *repeats: Any) -> Tensor:
        reps = _check_shape(_argfix(repeats, "repeat"), "repeat")
        if len(reps) < self.ndim:
            raise InvalidArgument(at="repeat", why="fewer repeats than axes", suggestion="give one count per axis")
        base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        inter = tuple(x for s in base.shape for x in (1, s))
        expanded = tuple(x for r, s in zip(reps, base.shape) for x in (r, s))
        return base.reshape(inter).expand(expanded).reshape(tuple(r * s for r, s in zip(reps, base.shape)))

    # ---- reductions ----------------------------------------------------------------------------

    def _axes(self, axis: Any) -> tuple[builtins.int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        if isinstance(axis, (tuple, list)):
            axes = tuple(self._resolve_axis(a) for a in axis)
            if len(set(axes)) != len(axes):
                raise AxisError(at="reduce", why=f"repeated axis in {tuple(axis)}", suggestion="list each axis once")
            return axes
        return (self._resolve_axis(axis),)

    def _reduce(self, op: Ops, axis: Any, keepdim: builtins.bool) -> Tensor:
        axes = self._axes(axis)
        if not isinstance(keepdim, (bool, np.bool_)):
            raise InvalidArgument(at="reduce", why=f"keepdim={keepdim!r} is not a bool", suggestion="pass True/False")
        out = Tensor(self.uop.reduce(op, axes)) if self.ndim else self
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: Any = None, keepdim: builtins.bool = False, dtype: DType | str | None = None) -> Tensor:
        acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        if acc.is_float and acc.itemsize < 4:  # halves accumulate in float32, results come back as halves
            return self.cast(dtypes.float32)._reduce(Ops.ADD, axis, keepdim).cast(acc)
        return self.cast(acc)._reduce(Ops.ADD, axis, keepdim)

    def prod(self, axis: Any = None, keepdim: builtins.bool = False) -> Tensor:
        return self.cast(sum_acc_dtype(self.dtype))._reduce(Ops.MUL, axis, keepdim)

    def max(self, axis: Any = None, keepdim: builtins.bool = False) -> Tensor:
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: Any = None, keepdim: builtins.bool = False) -> Tensor:
        if self.dtype.is_bool:
            return self.logical_not().max(axis, keepdim).logical_not()
        if self.dtype.is_int:  # ~ reverses the order of every int (negation would wrap at the dtype minimum)
            return ~((~self).max(axis, keepdim))
        return -((-self).max(axis, keepdim))

    def mean(self, axis: Any = None, keepdim: builtins.bool = False) -> Tensor:
        x = self._float()
        n = math.prod(self.shape[a] for a in self._axes(axis)) if self.ndim else 1
        return x.sum(axis, keepdim) * (1.0 / n)

    def var(self, axis: Any = None, keepdim: builtins.bool = False, correction: builtins.int = 1) -> Tensor:
        x = self._float()
        n = math.prod(self.shape[a] for a in self._axes(axis))
        d = x - x.mean(axis, keepdim=True)
        # as numpy and tinygrad: no degrees of freedom left divides by zero (NaN, or inf), never by a made-up 1
        return (d * d).sum(axis, keepdim) / float(max(n - correction, 0))

    def std(self, axis: Any = None, keepdim: builtins.bool = False, correction: builtins.int = 1) -> Tensor:
        return self.var(axis, keepdim, correction).sqrt()

    # ---- matmul --------------------------------------------------------------------------------

    def usum(self, *others: Any) -> Tensor:
        """self + others[0] + ... (a logical or of bools), left to right."""
        out = self
        for o in _argfix(others, "Tensor.usum"):
            out = out | o if self.dtype.is_bool else out + o
        return out

    def uprod(self, *others: Any) -> Tensor:
        """self * others[0] * ... (a logical and of bools), left to right."""
        out = self
        for o in _argfix(others, "Tensor.uprod"):
            out = out & o if self.dtype.is_bool else out * o
        return out

    def image_dot(self, w: Tensor, dtype: DType | str | None = None) -> Tensor:
        """tinygrad's dot through image (texture) layouts for GPUs that have them; the same values as `dot`."""
        return self.dot(w, dtype=dtype)

    def image_conv2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: builtins.int = 1,
        stride: Any = 1,
        dilation: Any = 1,
        padding: Any = 0,
        dtype: DType | str | None = None,
    ) -> Tensor:
        """tinygrad's conv2d through image (texture) layouts; the same values as `conv2d` (in `dtype` if given)."""
        if dtype is not None:
            return self.cast(dtype).conv2d(
                weight.cast(dtype), None if bias is None else bias.cast(dtype), groups, stride, dilation, padding
            )
        return self.conv2d(weight, bias, groups, stride, dilation, padding)

    def dot(self, w: Tensor, dtype: DType | str | None = None) -> Tensor:
        return self.matmul(w, dtype=dtype)

    def matmul(self, x: Tensor, reverse: builtins.bool = False, dtype: DType | str | None = None) -> Tensor:
        """The spec's gemm composition: (A.reshape(M,K,1) * B.reshape(1,K,N)).sum(K axis), with batching. As in
        tinygrad, the products are summed in their accumulator dtype (int32 for small integers, float32 for
        halves) and the result has the operands' dtype (int8 @ int8 is int8, as in numpy), or `dtype`."""
        y = x if isinstance(x, Tensor) else self._to_tensor(x, "matmul")
        a, b = (y, self) if _flag(reverse) else (self, y)
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeMismatch(at="matmul", why="matmul of a 0-d tensor", suggestion="use * for scalars")
        a2 = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
        b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
        if a2.shape[-1] != b2.shape[-2]:
            raise ShapeMismatch(
                at="matmul",
                why=f"inner dimensions differ: {a.shape} @ {b.shape}",
                suggestion="the last axis of the left operand must equal the second-to-last of the right",
            )
        m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
        prod = a2.reshape(*a2.shape[:-2], m, k, 1) * b2.reshape(*b2.shape[:-2], 1, k, n)
        out = prod.sum(-2, dtype=dtype)
        if dtype is None and out.dtype is not prod.dtype:
            out = out.cast(prod.dtype)
        if a.ndim == 1:
            out = out.squeeze(-2)
        if b.ndim == 1:
            out = out.squeeze(-1)
        return out
