"""Composite tensor operations, built only from the primitive Tensor methods.

Activations, softmax/layernorm, conv2d (pad + movement + mul + reduce),
attention, and the spec's compositions (cumsum by the sliding-window prefix
sum, gather and scatter_add by one-hot masks). Mixed into `Tensor`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast, overload

import numpy as np

from egraph_compiler.ir.diagnostics import AxisError, DTypeError, InvalidArgument, ShapeMismatch
from egraph_compiler.ir.dtypes import DType, bf16_round, dtypes

if TYPE_CHECKING:
    from egraph_compiler.frontend.tensor import Tensor


IM2COL_BELOW_WIDTH = 5  # conv2d outputs narrower than this become an im2col copy and a GEMM


def _pair(x: Any, what: str) -> tuple[int, int]:
    if isinstance(x, (tuple, list)):
        if len(x) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in x):
            raise InvalidArgument(at=what, why=f"{x!r} is not an int or a pair of ints", suggestion="pass 1 or (1, 1)")
        return int(x[0]), int(x[1])
    if not isinstance(x, int) or isinstance(x, bool):
        raise InvalidArgument(at=what, why=f"{x!r} is not an int", suggestion="pass an int or a pair of ints")
    return x, x


def _windows(x: Tensor, axis: int, k: int, stride: int, dilation: int) -> Tensor:
    """View axis `axis` (size n) as two axes (out, k) with out[o, i] = x[o*stride + i*dilation].

    Movement ops only: tile the axis, re-read it with a row length that is
    congruent to the dilation modulo n, and keep every stride-th column.
    """
    n = x.shape[axis]
    out = (n - dilation * (k - 1) - 1) // stride + 1
    reps = 1
    row = dilation + n  # row length congruent to dilation (mod n)
    while row < out * stride:
        row += n
    reps = -(-(k * row) // n)
    t = x.unsqueeze(axis).expand(*x.shape[:axis], reps, *x.shape[axis:])
    t = t.reshape(*x.shape[:axis], reps * n, *x.shape[axis + 1 :])
    t = t.shrink(tuple((0, k * row) if i == axis else None for i in range(t.ndim)))
    t = t.reshape(*x.shape[:axis], k, row, *x.shape[axis + 1 :])
    t = t.shrink(tuple((0, out * stride) if i == axis + 1 else None for i in range(t.ndim)))
    t = t.reshape(*x.shape[:axis], k, out, stride, *x.shape[axis + 1 :])
    t = t.shrink(tuple((0, 1) if i == axis + 2 else None for i in range(t.ndim)))
    t = t.reshape(*x.shape[:axis], k, out, *x.shape[axis + 1 :])
    return t.transpose(axis, axis + 1)  # (..., out, k, ...)


def _pads(padding: Any, what: str) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) from an int, a pair (height, width) or torch's (left, right, top, bottom)."""
    if isinstance(padding, (tuple, list)) and len(padding) == 4:
        pl, pr = _pair(tuple(padding[:2]), what)
        pt, pb = _pair(tuple(padding[2:]), what)
        return pt, pb, pl, pr
    pt, pl = _pair(padding, what)
    return pt, pt, pl, pl


def _pool_windows(x: Tensor, kernel: Any, stride: Any, padding: Any, dilation: Any, what: str, fill: float) -> Tensor:
    """The (n, c, ho, kh, wo, kw) windows of a pooling, the input padded with `fill`."""
    if x.ndim != 4:
        raise ShapeMismatch(at=what, why=f"expects a 4-d NCHW input, got {x.shape}", suggestion="reshape to (N, C, H, W)")
    (kh, kw), (dh, dw) = _pair(kernel, f"{what} kernel_size"), _pair(dilation, f"{what} dilation")
    sh, sw = _pair(stride if stride is not None else kernel, f"{what} stride")
    pt, pb, pl, pr = _pads(padding, f"{what} padding")
    if min(kh, kw, sh, sw, dh, dw) <= 0 or min(pt, pb, pl, pr) < 0:
        raise InvalidArgument(
            at=what, why="kernel, stride and dilation must be positive, padding non-negative", suggestion="check them"
        )
    xp = x.pad(((0, 0), (0, 0), (pt, pb), (pl, pr)), value=fill)
    if xp.shape[2] < dh * (kh - 1) + 1 or xp.shape[3] < dw * (kw - 1) + 1:
        raise ShapeMismatch(
            at=what, why=f"padded input {xp.shape[2:]} is smaller than the window", suggestion="use a smaller kernel"
        )
    return _windows(_windows(xp, 2, kh, sh, dh), 4, kw, sw, dw)


def _check_matrix(t: Tensor, what: str) -> None:
    if t.ndim < 2:
        raise ShapeMismatch(
            at=what, why=f"{what} needs at least 2 dims, got shape {t.shape}", suggestion="use a (..., rows, cols) tensor"
        )


# ---- creation helpers (Tensor.uniform, normal, linspace, ... in tensor.py) ---------------------------------


def _finite_number(v: Any, what: str) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise InvalidArgument(at=what, why=f"{v!r} is not a number", suggestion="pass a finite int or float")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise InvalidArgument(at=what, why=f"{v!r} is not finite", suggestion="pass a finite int or float")
    return f


def _as_dtype_value(x: float, dt: DType) -> float:
    """x rounded to the nearest value of float dtype dt (inf beyond its range)."""
    with np.errstate(over="ignore"):
        if dt is dtypes.bfloat16:
            return float(bf16_round(np.float32(x)).reshape(()))
        return float(dt.np.type(x))


def _dtype_step(c: float, dt: DType, up: bool) -> float:
    """The next value of float dtype dt after c, upwards or downwards."""
    if dt is not dtypes.bfloat16:
        return float(np.nextafter(dt.np.type(c), dt.np.type(math.inf if up else -math.inf)))
    if c == 0:
        return 2.0**-133 if up else -(2.0**-133)  # the smallest bfloat16 subnormal
    bits = int(np.float32(c).view(np.uint32))
    bits += 0x10000 if (c > 0) == up else -0x10000  # bfloat16 is float32's upper half
    return float(np.uint32(bits).view(np.float32))


def _fits_values(vals: np.ndarray, dt: DType, what: str) -> np.ndarray:
    """`vals` (float64 or int) as the array a Tensor of dtype dt is built from; a value the dtype cannot hold
    (out of its range, or an integer a float rounds) is a diagnostic, not a wrapped or rounded number."""
    if dt.is_int:
        lo, hi = int(vals.min()), int(vals.max())
        if lo < dt.min or hi > dt.max:
            raise DTypeError(at=what, why=f"values {lo}..{hi} do not fit {dt.name}", suggestion="use a wider dtype")
        return vals.astype(dt.np)
    with np.errstate(over="ignore"):
        out = vals.astype(np.float32 if dt is dtypes.bfloat16 else dt.np)
    rounded = bf16_round(out) if dt is dtypes.bfloat16 else out
    if not np.isfinite(rounded).all():
        raise DTypeError(at=what, why=f"values beyond the range of {dt.name}", suggestion="use a wider float dtype")
    if vals.dtype.kind in "iu" and not np.array_equal(rounded.astype(np.float64), vals):
        raise DTypeError(at=what, why=f"integers {vals.min()}..{vals.max()} are not exact in {dt.name}", suggestion="use int32")
    return out


def _uniform_values(u: np.ndarray, lo: float, hi: float, dt: DType, what: str) -> np.ndarray:
    """lo + (hi - lo) * u for u in [0, 1), kept inside [lo, hi) after rounding to float dtype dt."""
    top, bot = _as_dtype_value(hi, dt), _as_dtype_value(lo, dt)
    if not (math.isfinite(top) and math.isfinite(bot)):
        raise DTypeError(at=what, why=f"[{lo}, {hi}) is beyond the range of {dt.name}", suggestion="use a wider dtype")
    while top >= hi:
        top = _dtype_step(top, dt, up=False)
    while bot < lo:
        bot = _dtype_step(bot, dt, up=True)
    if bot > top:
        raise InvalidArgument(
            at=what, why=f"no {dt.name} value lies in [{lo}, {hi})", suggestion="widen the range or use a wider dtype"
        )
    out = _fits_values(lo + (hi - lo) * u, dt, what)
    if dt is dtypes.bfloat16:
        out = bf16_round(out)
    return np.clip(out, out.dtype.type(bot), out.dtype.type(top))


# ---- shared checks of the layers' functional forms ----------------------------------------------------------

_REDUCTIONS = ("none", "sum", "mean")


def _check_reduction(reduction: Any, what: str) -> str:
    if reduction not in _REDUCTIONS:
        raise InvalidArgument(at=what, why=f"reduction={reduction!r}", suggestion="use 'none', 'sum' or 'mean'")
    return str(reduction)


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def _check_tensor(x: Any, what: str, name: str) -> Tensor:
    if not isinstance(x, TensorNN):
        raise InvalidArgument(at=what, why=f"{name} is a {type(x).__name__}, not a Tensor", suggestion=f"wrap {name} in Tensor")
    return cast("Tensor", x)  # Tensor is the class that mixes TensorNN in (imported here only for typing)


def _check_labels(y: Any, shape: tuple[int, ...], what: str) -> Tensor:
    """Integer class labels of the given shape."""
    t = _check_tensor(y, what, "the target")
    if not t.dtype.is_int:
        raise DTypeError(at=what, why=f"class labels of dtype {t.dtype.name}", suggestion="pass integer labels (int32)")
    if t.shape != shape:
        raise ShapeMismatch(at=what, why=f"labels of shape {t.shape}, expected {shape}", suggestion="one label per sample")
    return t


def _smoothing(label_smoothing: Any, what: str) -> float:
    ls = _finite_number(label_smoothing, f"{what} label_smoothing")
    if not 0.0 <= ls <= 1.0:
        raise InvalidArgument(at=what, why=f"label_smoothing={label_smoothing} is outside [0, 1]", suggestion="use 0 to 1")
    return ls


def _one_hot_at(y: Tensor, n: int, dim: int) -> Tensor:
    """Integer labels y -> a bool one-hot mask with a new axis of n classes at position `dim` of the result."""
    hot = y.unsqueeze(-1)._one_hot(n)  # y.shape + (n,)
    d = dim % hot.ndim
    order = list(range(y.ndim))
    order.insert(d, y.ndim)
    return hot.permute(order) if order != list(range(hot.ndim)) else hot


def _logsigmoid(x: Tensor) -> Tensor:
    """log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)): no overflow for large |x|."""
    return x.minimum(0) - (1 + (-x.abs()).exp()).log()


def _ints(x: Any, n: int, what: str) -> tuple[int, ...]:
    """An int (repeated) or a sequence of n ints."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return (int(x),) * n
    if (
        isinstance(x, (tuple, list))
        and len(x) == n
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in x)
    ):
        return tuple(int(v) for v in x)
    raise InvalidArgument(at=what, why=f"{x!r} is not an int or {n} ints", suggestion=f"pass an int or a tuple of {n} ints")


class TensorNN:
    """Composite ops; `self` is a Tensor."""

    # mypy refuses `self: Tensor` in a mixin that Tensor subclasses (the self type must be a supertype of the
    # class): hence the `type: ignore[misc]` on each method

    # ---- activations ---------------------------------------------------------------------------

    def relu(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self.maximum(0)

    def sigmoid(self: Tensor) -> Tensor:  # type: ignore[misc]
        return (1 + (-self._float()).exp()).reciprocal()

    def tanh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Within a few ulp over the float range: 1 - 2 / (e^2x + 1) loses every digit near 0 (tanh(1e-8) came
        out 0), so below |x| = 1/4 its Taylor series (terms to x^11, the next one under 1e-9 relative) is used."""
        x = self._float()
        x2 = x * x
        series = x + x * x2 * (-1 / 3 + x2 * (2 / 15 + x2 * (-17 / 315 + x2 * (62 / 2835 + x2 * (-1382 / 155925)))))
        return (x.abs() < 0.25).where(series, x._tanh_by_exp())

    def _tanh_by_exp(self: Tensor) -> Tensor:  # type: ignore[misc]
        """tanh as 2 sigmoid(2x) - 1: accurate in absolute terms only (enough inside gelu, which adds it to 1)."""
        return 2.0 * (2.0 * self._float()).sigmoid() - 1.0

    def gelu(self: Tensor) -> Tensor:  # type: ignore[misc]
        """tanh approximation (as tinygrad): 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x**3)))."""
        x = self._float()
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x))._tanh_by_exp())

    def silu(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self * self.sigmoid()

    def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor:  # type: ignore[misc]
        return (self < 0).where(self * neg_slope, self)

    # ---- normalizations ------------------------------------------------------------------------

    def softmax(self: Tensor, axis: int = -1) -> Tensor:  # type: ignore[misc]
        x = self._float()
        e = (x - x.max(axis, keepdim=True)).exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self: Tensor, axis: int = -1) -> Tensor:  # type: ignore[misc]
        x = self._float()
        m = x - x.max(axis, keepdim=True)
        return m - m.exp().sum(axis, keepdim=True).log()

    def logsumexp(self: Tensor, axis: int = -1, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        x = self._float()
        m = x.max(axis, keepdim=True)
        out = (x - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out.squeeze(axis)

    def layernorm(self: Tensor, axis: int | tuple[int, ...] = -1, eps: float = 1e-5) -> Tensor:  # type: ignore[misc]
        x = self._float()
        y = x - x.mean(axis, keepdim=True)
        return y * ((y * y).mean(axis, keepdim=True) + eps).rsqrt()

    # ---- convolution ---------------------------------------------------------------------------

    def conv2d(  # type: ignore[misc]
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: Any = 1,
        dilation: Any = 1,
        padding: Any = 0,
    ) -> Tensor:
        """NCHW input, (Cout, Cin/groups, kh, kw) weight; built from pad + movement + mul + reduce. The arguments in
        tinygrad's order (groups, stride, dilation, padding)."""
        cls = type(self)
        if not isinstance(weight, cls) or (bias is not None and not isinstance(bias, cls)):
            raise InvalidArgument(at="conv2d", why="weight and bias must be Tensors", suggestion="wrap them in Tensor")
        if self.ndim != 4 or weight.ndim != 4:
            raise ShapeMismatch(
                at="conv2d",
                why=f"expects 4-d input and weight, got {self.shape} and {weight.shape}",
                suggestion="use NCHW input and (Cout, Cin/groups, kh, kw) weight",
            )
        if not isinstance(groups, int) or isinstance(groups, bool) or groups <= 0:
            raise InvalidArgument(at="conv2d", why=f"groups={groups!r}", suggestion="groups is a positive int")
        (sh, sw), (dh, dw) = _pair(stride, "conv2d stride"), _pair(dilation, "conv2d dilation")
        pt, pb, pl, pr = _pads(padding, "conv2d padding")
        if min(sh, sw, dh, dw) <= 0 or min(pt, pb, pl, pr) < 0:
            raise InvalidArgument(
                at="conv2d",
                why="stride/dilation must be positive and padding non-negative",
                suggestion="check stride, padding and dilation",
            )
        n, cin, _, _ = self.shape
        cout, cin_g, kh, kw = weight.shape
        if cin != cin_g * groups or cout % groups:
            raise ShapeMismatch(
                at="conv2d",
                why=f"input channels {cin} != weight channels {cin_g} x groups {groups}"
                f" (or {cout} output channels not divisible by groups)",
                suggestion="weight must be (Cout, Cin/groups, kh, kw)",
            )
        if bias is not None and bias.shape != (cout,):
            raise ShapeMismatch(at="conv2d", why=f"bias shape {bias.shape} != ({cout},)", suggestion="one bias per channel")
        x = self.pad(((0, 0), (0, 0), (pt, pb), (pl, pr)))
        hp, wp = x.shape[2], x.shape[3]
        if hp < dh * (kh - 1) + 1 or wp < dw * (kw - 1) + 1:
            raise ShapeMismatch(
                at="conv2d",
                why=f"padded input {hp}x{wp} is smaller than the dilated kernel",
                suggestion="use a smaller kernel or more padding",
            )
        xw = _windows(_windows(x, 2, kh, sh, dh), 4, kw, sw, dw)  # (n, cin, ho, kh, wo, kw)
        ho, wo = xw.shape[2], xw.shape[4]
        g = groups
        if g == 1 and wo < IM2COL_BELOW_WIDTH and ho * wo > 1:
            # rows of 4 pixels or fewer, which a padded tile of 8 would more than double: the windows copied once
            # into columns, then one product with every output pixel along a row. (Rows of 5 to 7, ResNet's 7x7
            # stage, pad to a tile of 8: 3x3, 512 channels at 7x7 ran 2.0 ms this way, 1.6 directly.) The copy
            # keeps its six axes (flattened, its loads would divide by wo for every pixel: 0.58 -> 0.09 ms at 7x7),
            # and the product reads it flattened: a contiguous buffer reshapes for free
            cols = xw.permute(0, 1, 3, 5, 2, 4).contiguous().reshape(n, cin * kh * kw, ho * wo)
            out = (weight.reshape(cout, cin * kh * kw) @ cols).reshape(n, cout, ho, wo)
            return out if bias is None else out + bias.reshape(1, cout, 1, 1)
        xw = xw.reshape(n, g, 1, cin_g, ho, kh, wo, kw)
        wt = weight.reshape(1, g, cout // g, cin_g, 1, kh, 1, kw)
        out = (xw * wt).sum((3, 5, 7)).reshape(n, cout, ho, wo)
        return out if bias is None else out + bias.reshape(1, cout, 1, 1)

    # ---- pooling -------------------------------------------------------------------------------

    def max_pool2d(  # type: ignore[misc]
        self: Tensor,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
    ) -> Tensor:
        """NCHW max pooling; padding as for conv2d (an int, a pair, or torch's (left, right, top, bottom))."""
        xw = _pool_windows(self, kernel_size, stride, padding, dilation, "max_pool2d", -math.inf)
        return xw.max((3, 5))

    def avg_pool2d(  # type: ignore[misc]
        self: Tensor,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        count_include_pad: bool = True,
    ) -> Tensor:
        """NCHW average pooling; `count_include_pad=False` divides by the window's elements inside the input."""
        kh, kw = _pair(kernel_size, "avg_pool2d kernel_size")
        total = _pool_windows(self, kernel_size, stride, padding, dilation, "avg_pool2d", 0.0).sum((3, 5))
        if count_include_pad:
            return total / float(kh * kw)
        ones = type(self).ones(1, 1, *self.shape[2:], dtype=self.dtype)
        count = _pool_windows(ones, kernel_size, stride, padding, dilation, "avg_pool2d", 0.0).sum((3, 5))
        return total / count

    # ---- attention -----------------------------------------------------------------------------

    def scaled_dot_product_attention(  # type: ignore[misc]
        self: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        cls = type(self)
        if not all(isinstance(t, cls) for t in (key, value)) or not isinstance(attn_mask, (cls, type(None))):
            raise InvalidArgument(
                at="scaled_dot_product_attention",
                why="key, value and attn_mask must be Tensors",
                suggestion="wrap them in Tensor",
            )
        if self.ndim < 2 or key.ndim < 2 or value.ndim < 2:
            raise ShapeMismatch(
                at="scaled_dot_product_attention",
                why="query/key/value need at least 2 dims",
                suggestion="use (..., seq, dim) tensors",
            )
        if is_causal and attn_mask is not None:
            raise InvalidArgument(
                at="scaled_dot_product_attention", why="both attn_mask and is_causal given", suggestion="pass one of them"
            )
        qk = self.matmul(key.transpose(-2, -1)) * (1.0 / math.sqrt(self.shape[-1]))
        if is_causal:
            lq, lk = qk.shape[-2], qk.shape[-1]
            attn_mask = cls.arange(lq).reshape(lq, 1) >= cls.arange(lk).reshape(1, lk)
        if attn_mask is not None:
            qk = attn_mask.where(qk, -math.inf) if attn_mask.dtype.is_bool else qk + attn_mask
        return qk.softmax(-1).cast(value.dtype).matmul(value)

    # ---- the spec's compositions ---------------------------------------------------------------

    def cumsum(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
        """Prefix sum by the spec's window trick: pad, tile, re-read rows of 2n, sum each window."""
        ax = self._resolve_axis(axis, what="cumsum")
        if self.ndim == 0:
            return self.reshape(1).cumsum(0).reshape(())
        x = self.transpose(ax, -1) if ax != self.ndim - 1 else self
        n = x.shape[-1]
        lead = x.shape[:-1]
        p = x.pad(tuple([None] * (x.ndim - 1) + [(n - 1, 0)]))  # (..., 2n-1)
        t = p.unsqueeze(-2).expand(*lead, n + 1, 2 * n - 1).reshape(*lead, (n + 1) * (2 * n - 1))
        t = t.shrink(tuple([None] * len(lead) + [(0, 2 * n * n)])).reshape(*lead, n, 2 * n)
        t = t.shrink(tuple([None] * len(lead) + [None, (0, n)]))  # (..., n, n) windows
        out = t.sum(-1, dtype=self.dtype if self.dtype.is_float else None)
        return out.transpose(ax, -1) if ax != self.ndim - 1 else out

    def _one_hot(self: Tensor, n: int) -> Tensor:  # type: ignore[misc]
        """(..., 1) integer tensor -> (..., n) bool mask: mask[..., k] = (self == k)."""
        # an index dtype too narrow for n-1 (uint8 and 300 classes) compares as int64: arange must not wrap
        idx = self if self.dtype.is_int and n - 1 <= self.dtype.max else self.cast(dtypes.int64)
        return idx == type(self).arange(n, dtype=idx.dtype)

    def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:  # type: ignore[misc]
        """out[..., i, ...] = self[..., index[..., i, ...], ...] along `dim` (torch/tinygrad semantics)."""
        if not isinstance(index, type(self)) or not index.dtype.is_int:
            raise DTypeError(at="gather", why="index must be an integer Tensor", suggestion="cast the index to int32")
        d = self._resolve_axis(dim, what="gather")
        if index.ndim != self.ndim or any(i > s for k, (i, s) in enumerate(zip(index.shape, self.shape)) if k != d):
            raise ShapeMismatch(
                at="gather",
                why=f"index shape {index.shape} does not fit {self.shape} on dim {d}",
                suggestion="index must have the same rank and no larger sizes off `dim`",
            )
        x = self.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(index.shape)))
        x = x.unsqueeze(-1).transpose(-1, d)  # dim d -> 1, its values along a new last axis
        mask = index.unsqueeze(-1)._one_hot(self.shape[d])  # index.shape + (n,)
        return mask.where(x, 0).sum(-1, dtype=self.dtype)

    def scatter_add(self: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:  # type: ignore[misc]
        """out = self; out[..., index[..., i, ...], ...] += src[..., i, ...] along `dim`."""
        cls = type(self)
        if not isinstance(index, cls) or not index.dtype.is_int or not isinstance(src, cls):
            raise DTypeError(
                at="scatter_add", why="index must be an integer Tensor and src a Tensor", suggestion="cast the index to int32"
            )
        d = self._resolve_axis(dim, what="scatter_add")
        if (
            index.ndim != self.ndim
            or src.ndim != self.ndim
            or any(i > s for k, (i, s) in enumerate(zip(index.shape, src.shape)))
            or any(i > s for k, (i, s) in enumerate(zip(index.shape, self.shape)) if k != d)
        ):
            raise ShapeMismatch(
                at="scatter_add",
                why=f"index {index.shape}, src {src.shape}, self {self.shape} do not fit",
                suggestion="index must be no larger than src, and than self off `dim`",
            )
        n = self.shape[d]
        s = src.shrink(tuple((0, i) for i in index.shape)).cast(self.dtype)
        contrib = index.unsqueeze(-1)._one_hot(n).where(s.unsqueeze(-1), 0)  # index.shape + (n,)
        summed = contrib.sum(d, keepdim=True, dtype=self.dtype)  # dim d -> 1
        placed = summed.transpose(d, -1).squeeze(-1)  # dim d -> n
        pads = tuple((0, 0) if k == d else (0, self.shape[k] - placed.shape[k]) for k in range(self.ndim))
        return self + placed.pad(pads)

    def tril(self: Tensor, diagonal: int = 0) -> Tensor:  # type: ignore[misc]
        cls = type(self)
        _check_matrix(self, "tril")
        r, c = self.shape[-2], self.shape[-1]
        keep = cls.arange(r).reshape(r, 1) + diagonal >= cls.arange(c).reshape(1, c)
        return keep.where(self, 0)

    def triu(self: Tensor, diagonal: int = 0) -> Tensor:  # type: ignore[misc]
        cls = type(self)
        _check_matrix(self, "triu")
        r, c = self.shape[-2], self.shape[-1]
        keep = cls.arange(r).reshape(r, 1) + diagonal <= cls.arange(c).reshape(1, c)
        return keep.where(self, 0)

    # ---- layers' functional forms ---------------------------------------------------------------

    def sequential(self: Tensor, layers: Any) -> Tensor:  # type: ignore[misc]
        """Each callable of `layers` applied in turn: layers[-1](...(layers[0](self)))."""
        out = self
        for i, f in enumerate(layers):
            if not callable(f):
                raise InvalidArgument(
                    at=f"Tensor.sequential layer {i}", why=f"{f!r} is not callable", suggestion="pass functions or layers"
                )
            out = f(out)
        return out

    def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:  # type: ignore[misc]
        """self @ weight + bias, with tinygrad's weight layout (in_features, out_features); a 1-d weight scales
        elementwise. `dtype`: cast all three first."""
        w = _check_tensor(weight, "linear", "weight")
        b = None if bias is None else _check_tensor(bias, "linear", "bias")
        if dtype is not None:
            return self.cast(dtype).linear(w.cast(dtype), None if b is None else b.cast(dtype))
        if w.ndim == 1:
            out = self * w
        else:
            if self.ndim == 0 or self.shape[-1] != w.shape[-2]:
                raise ShapeMismatch(
                    at="linear",
                    why=f"input {self.shape} does not match weight {w.shape} (in_features, out_features)",
                    suggestion="the input's last axis must equal the weight's first (transpose a torch weight)",
                )
            out = self.matmul(w)
        return out if b is None else out + b

    def batchnorm(  # type: ignore[misc]
        self: Tensor,
        weight: Tensor | None,
        bias: Tensor | None,
        mean: Tensor,
        invstd: Tensor,
        axis: int | tuple[int, ...] = 1,
    ) -> Tensor:
        """(self - mean) * weight * invstd + bias, the statistics along `axis` (the channels, 1 by default) and
        broadcast over the other axes; an `invstd` of another rank than len(axis) is broadcast as it is."""
        axes_in = axis if isinstance(axis, (tuple, list)) else (axis,)
        axes = tuple(self._resolve_axis(a, what="batchnorm axis") for a in axes_in)
        if len(set(axes)) != len(axes):
            raise AxisError(at="batchnorm", why=f"repeated axis in {axis}", suggestion="list each axis once")
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
        stats = tuple(self.shape[a] for a in sorted(axes))

        @overload
        def fit(t: Tensor, name: str) -> Tensor: ...
        @overload
        def fit(t: None, name: str) -> None: ...
        def fit(t: Tensor | None, name: str) -> Tensor | None:
            if t is None:
                return None
            _check_tensor(t, "batchnorm", name)
            if t.numel() != math.prod(shape):
                raise ShapeMismatch(
                    at="batchnorm",
                    why=f"{name} has shape {t.shape}, the input {self.shape} has {stats} along axis {axis}",
                    suggestion=f"pass one value per channel: shape {stats}",
                )
            return t.reshape(shape)

        if mean is None or invstd is None:
            raise InvalidArgument(at="batchnorm", why="mean and invstd are required", suggestion="pass both statistics")
        _check_tensor(invstd, "batchnorm", "invstd")
        x = self - fit(mean, "mean")
        w = fit(weight, "weight")
        if w is not None:
            x = x * w
        out = x * (fit(invstd, "invstd") if invstd.ndim == len(axes) else invstd)
        b = fit(bias, "bias")
        return out if b is None else out + b

    def dropout(self: Tensor, p: float = 0.5) -> Tensor:  # type: ignore[misc]
        """Inference only: the identity (p is checked to lie in [0, 1]). tinygrad drops values only under its
        TRAINING context variable; this compiler builds inference graphs and has no training mode."""
        q = _finite_number(p, "dropout p")
        if not 0.0 <= q <= 1.0:
            raise InvalidArgument(at="dropout", why=f"p={p} is outside [0, 1]", suggestion="use a probability in [0, 1]")
        return self

    # ---- losses --------------------------------------------------------------------------------

    def cross_entropy(  # type: ignore[misc]
        self: Tensor,
        Y: Tensor,  # noqa: N803 - tinygrad's name
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> Tensor:
        """Softmax cross entropy of logits `self` (classes on axis 1, or 0 for a 1-d input) against integer labels
        (the input's shape without the class axis) or class probabilities (the input's shape)."""
        red, ls = _check_reduction(reduction, "cross_entropy"), _smoothing(label_smoothing, "cross_entropy")
        y = _check_tensor(Y, "cross_entropy", "Y")
        if self.ndim == 0:
            raise ShapeMismatch(at="cross_entropy", why="0-d logits", suggestion="pass (N, C, ...) or (C,) logits")
        cdim = 0 if self.ndim == 1 else 1
        n = self.shape[cdim]
        x = self._float()
        if y.shape == self.shape:
            probs = y.cast(x.dtype)
        else:
            probs = _one_hot_at(_check_labels(y, self.shape[:cdim] + self.shape[cdim + 1 :], "cross_entropy"), n, cdim)
            probs = probs.cast(x.dtype)
        if ls:
            probs = (1 - ls) * probs + ls / n
        return _reduce_loss(-(x.log_softmax(cdim) * probs).sum(cdim), red)

    def sparse_categorical_crossentropy(  # type: ignore[misc]
        self: Tensor,
        Y: Tensor,  # noqa: N803 - tinygrad's name
        ignore_index: int = -1,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
        *,
        loss_mask: Tensor | None = None,
    ) -> Tensor:
        """Softmax cross entropy of logits `self` (classes on the LAST axis) against integer labels of shape
        self.shape[:-1]. Labels equal to `ignore_index` (unless it is -1, tinygrad's "none") and, an extension of
        tinygrad's signature, positions where the bool `loss_mask` is False count neither in the loss nor in the mean."""
        red = _check_reduction(reduction, "sparse_categorical_crossentropy")
        ls = _smoothing(label_smoothing, "sparse_categorical_crossentropy")
        if self.ndim == 0:
            raise ShapeMismatch(at="sparse_categorical_crossentropy", why="0-d logits", suggestion="pass (..., C) logits")
        y = _check_labels(Y, self.shape[:-1], "sparse_categorical_crossentropy")
        if not isinstance(ignore_index, (int, np.integer)) or isinstance(ignore_index, (bool, np.bool_)):
            raise InvalidArgument(
                at="sparse_categorical_crossentropy", why=f"ignore_index={ignore_index!r}", suggestion="pass an int"
            )
        mask = (y != int(ignore_index)) if ignore_index != -1 else type(self).full(y.shape, True)
        if loss_mask is not None:
            m = _check_tensor(loss_mask, "sparse_categorical_crossentropy", "loss_mask")
            if m.shape != y.shape:
                raise ShapeMismatch(
                    at="sparse_categorical_crossentropy",
                    why=f"loss_mask of shape {m.shape}, labels of shape {y.shape}",
                    suggestion="one mask value per label",
                )
            mask = mask & m.cast(dtypes.bool)
        logp = self.log_softmax(-1)
        picked = (_one_hot_at(y, self.shape[-1], -1) & mask.unsqueeze(-1)).where(logp, 0).sum(-1)
        loss = -((1 - ls) * picked + ls * mask.where(logp.mean(-1), 0))
        return loss.sum() / mask.sum().cast(loss.dtype) if red == "mean" else _reduce_loss(loss, red)

    def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:  # type: ignore[misc]  # noqa: N803
        """-(Y log p + (1 - Y) log(1 - p)) of probabilities p = self."""
        red = _check_reduction(reduction, "binary_crossentropy")
        y = _check_tensor(Y, "binary_crossentropy", "Y")
        p = self._float()
        return _reduce_loss(-y * p.log() - (1 - y) * (1 - p).log(), red)

    def binary_crossentropy_logits(  # type: ignore[misc]
        self: Tensor,
        Y: Tensor,  # noqa: N803 - tinygrad's name
        reduction: str = "mean",
        pos_weight: Tensor | None = None,
    ) -> Tensor:
        """binary_crossentropy of sigmoid(self), computed stably from the logits; `pos_weight` scales the positive
        term (as torch's BCEWithLogitsLoss)."""
        red = _check_reduction(reduction, "binary_crossentropy_logits")
        y = _check_tensor(Y, "binary_crossentropy_logits", "Y")
        x = self._float()
        pos = y * _logsigmoid(x)
        if pos_weight is not None:
            pos = _check_tensor(pos_weight, "binary_crossentropy_logits", "pos_weight") * pos
        return _reduce_loss(-(pos + (1 - y) * _logsigmoid(-x)), red)

    def nll_loss(  # type: ignore[misc]
        self: Tensor,
        Y: Tensor,  # noqa: N803 - tinygrad's name
        weight: Tensor | None = None,
        ignore_index: int | None = None,
        reduction: str = "mean",
    ) -> Tensor:
        """Negative log likelihood of log-probabilities `self` (N, C, d...) at integer labels Y (N, d...); `weight`
        (C,) weighs each class, and "mean" divides by the summed weights of the labels not ignored."""
        red = _check_reduction(reduction, "nll_loss")
        if self.ndim < 2:
            raise ShapeMismatch(
                at="nll_loss", why=f"log-probabilities of shape {self.shape}", suggestion="pass (N, C, ...): unsqueeze(0)"
            )
        y = _check_labels(Y, self.shape[:1] + self.shape[2:], "nll_loss")
        x = self._float()
        picked = x.gather(1, y.unsqueeze(1)).squeeze(1)
        if weight is None:
            w = picked.ones_like()
        else:
            wt = _check_tensor(weight, "nll_loss", "weight")
            if wt.shape != (self.shape[1],):
                raise ShapeMismatch(
                    at="nll_loss", why=f"weight of shape {wt.shape}", suggestion=f"one weight per class: ({self.shape[1]},)"
                )
            w = wt.cast(x.dtype).gather(0, y.flatten()).reshape(y.shape)
        if ignore_index is not None:
            if not isinstance(ignore_index, (int, np.integer)) or isinstance(ignore_index, (bool, np.bool_)):
                raise InvalidArgument(at="nll_loss", why=f"ignore_index={ignore_index!r}", suggestion="pass an int or None")
            w = (y != int(ignore_index)).where(w, 0)
        loss = -picked * w
        return loss.sum() / w.sum() if red == "mean" else _reduce_loss(loss, red)

    # ---- transposed convolution, resampling, unpooling -----------------------------------------

    def conv_transpose2d(  # type: ignore[misc]
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: Any = 1,
        dilation: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
    ) -> Tensor:
        """The transpose of conv2d (tinygrad's argument order): NCHW input, (Cin, Cout/groups, kh, kw) weight. The
        input is spread by the stride (zeros between its pixels) and padded by dilation*(k-1) - padding (plus
        output_padding after), then convolved with the flipped, transposed weight. padding: an int, (h, w), or
        torch's (left, right, top, bottom)."""
        w = _check_tensor(weight, "conv_transpose2d", "weight")
        if self.ndim != 4 or w.ndim != 4:
            raise ShapeMismatch(
                at="conv_transpose2d",
                why=f"expects 4-d input and weight, got {self.shape} and {w.shape}",
                suggestion="use NCHW input and a (Cin, Cout/groups, kh, kw) weight",
            )
        if not isinstance(groups, (int, np.integer)) or isinstance(groups, (bool, np.bool_)) or groups <= 0:
            raise InvalidArgument(at="conv_transpose2d", why=f"groups={groups!r}", suggestion="groups is a positive int")
        g = int(groups)
        (sh, sw), (dh, dw) = _pair(stride, "conv_transpose2d stride"), _pair(dilation, "conv_transpose2d dilation")
        oph, opw = _pair(output_padding, "conv_transpose2d output_padding")
        pt, pb, pl, pr = _pads(padding, "conv_transpose2d padding")
        if min(sh, sw, dh, dw) <= 0 or min(pt, pb, pl, pr, oph, opw) < 0:
            raise InvalidArgument(
                at="conv_transpose2d",
                why="stride and dilation must be positive, padding and output_padding non-negative",
                suggestion="check stride, dilation, padding and output_padding",
            )
        n, cin, h, wd = self.shape
        cin_w, cout_g, kh, kw = w.shape
        if cin != cin_w or cin % g:
            raise ShapeMismatch(
                at="conv_transpose2d",
                why=f"input channels {cin} != weight's {cin_w} (or not divisible by groups {g})",
                suggestion="the weight is (Cin, Cout/groups, kh, kw)",
            )
        if bias is not None and _check_tensor(bias, "conv_transpose2d", "bias").shape != (cout_g * g,):
            raise ShapeMismatch(
                at="conv_transpose2d", why=f"bias shape {bias.shape} != ({cout_g * g},)", suggestion="one bias per channel"
            )
        ho = (h - 1) * sh - pt - pb + dh * (kh - 1) + oph + 1
        wo = (wd - 1) * sw - pl - pr + dw * (kw - 1) + opw + 1
        if ho <= 0 or wo <= 0:
            raise ShapeMismatch(
                at="conv_transpose2d", why=f"the output would be {ho}x{wo}", suggestion="use less padding or a larger input"
            )
        x = self
        if sh > 1 or sw > 1:  # stride-1 zeros after each pixel, the trailing ones cut
            x = x.reshape(n, cin, h, 1, wd, 1).pad(((0, 0), (0, 0), (0, 0), (0, sh - 1), (0, 0), (0, sw - 1)))
            x = x.reshape(n, cin, h * sh, wd * sw).shrink((None, None, (0, (h - 1) * sh + 1), (0, (wd - 1) * sw + 1)))
        eh, ew = dh * (kh - 1), dw * (kw - 1)
        x = x.pad(((0, 0), (0, 0), (eh - pt, eh - pb + oph), (ew - pl, ew - pr + opw)))  # negative: cut
        wt = w.reshape(g, cin // g, cout_g, kh, kw).transpose(1, 2).flip(3, 4).reshape(g * cout_g, cin // g, kh, kw)
        return x.conv2d(wt, bias, stride=1, padding=0, dilation=(dh, dw), groups=g)

    def interpolate(self: Tensor, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:  # type: ignore[misc]
        """Resample the last len(size) axes to `size` (any leading batch axes): "linear" (bilinear, trilinear, ...
        by the size's length), "nearest" or "nearest-exact", as tinygrad and torch (half-pixel centres unless
        `align_corners`); the result keeps the input's dtype."""
        cls = type(self)
        if not isinstance(size, (tuple, list)) or not 0 < len(size) <= self.ndim:
            raise InvalidArgument(
                at="interpolate",
                why=f"size={size!r} for an input of shape {self.shape}",
                suggestion="pass a tuple of output sizes for the last axes",
            )
        sizes = _ints(tuple(size), len(size), "interpolate size")
        if min(sizes) <= 0:
            raise InvalidArgument(at="interpolate", why=f"size={size!r}", suggestion="output sizes must be positive")
        if mode not in ("linear", "nearest", "nearest-exact"):
            raise InvalidArgument(
                at="interpolate", why=f"mode={mode!r}", suggestion="use 'linear', 'nearest' or 'nearest-exact'"
            )
        if not isinstance(align_corners, (bool, np.bool_)) or (align_corners and mode != "linear"):
            raise InvalidArgument(
                at="interpolate",
                why=f"align_corners={align_corners!r} with mode {mode!r}",
                suggestion="align_corners is a bool, and True only with mode='linear'",
            )
        x, cur = self, list(self.shape)
        for k in range(1, len(sizes) + 1):
            ax, out, n = self.ndim - k, sizes[-k], self.shape[-k]
            cur[ax] = out
            view = [out if i == ax else 1 for i in range(self.ndim)]

            def index(v: np.ndarray, cur: list[int] = cur, view: list[int] = view) -> Tensor:
                return cls(v.astype(np.int32)).reshape(view).expand(cur)

            if mode == "linear":
                arr = np.arange(out, dtype=np.int64)
                if align_corners:
                    num, den = arr * (n - 1), max(out - 1, 1)
                else:
                    num, den = (2 * arr + 1) * n - out, 2 * out
                num = np.clip(num, 0, (n - 1) * den)
                frac = cls((num % den).astype(np.float32) / np.float32(den)).reshape(view)
                lo, hi = x.gather(ax, index(num // den)), x.gather(ax, index(-(-num // den)))
                x = lo + (hi - lo) * frac
            else:
                pos = np.arange(out, dtype=np.float32) + (np.float32(0.5) if mode == "nearest-exact" else np.float32(0))
                x = x.gather(ax, index(np.minimum((np.float32(n / out) * pos).astype(np.int64), n - 1)))
        return x.cast(self.dtype)

    def max_unpool2d(  # type: ignore[misc]
        self: Tensor,
        indices: Tensor,
        kernel_size: Any = (2, 2),
        stride: Any = None,
        dilation: Any = 1,
        padding: Any = 0,
        output_size: Sequence[int] | None = None,
    ) -> Tensor:
        """The partial inverse of max_pool2d: each value of self (N, C, H, W) lands at its flat index (into the
        output's H*W plane) from `indices`, zeros elsewhere; an index that several windows share (overlapping
        windows) holds the value once, as torch's (tinygrad 0.14 adds the copies up). The output plane is
        `output_size` (its last 2 entries) or what the pooling's kernel, stride, dilation and padding imply."""
        ix = _check_tensor(indices, "max_unpool2d", "indices")
        if self.ndim != 4:
            raise ShapeMismatch(at="max_unpool2d", why=f"expects a 4-d NCHW input, got {self.shape}", suggestion="use NCHW")
        if not ix.dtype.is_int:
            raise DTypeError(at="max_unpool2d", why=f"indices of dtype {ix.dtype.name}", suggestion="pass integer indices")
        if ix.shape != self.shape:
            raise ShapeMismatch(
                at="max_unpool2d", why=f"indices {ix.shape} != input {self.shape}", suggestion="use max_pool2d's indices"
            )
        n, c, h, w = self.shape
        if output_size is None:
            (kh, kw), (dh, dw) = _pair(kernel_size, "max_unpool2d kernel_size"), _pair(dilation, "max_unpool2d dilation")
            sh, sw = _pair(stride if stride is not None else kernel_size, "max_unpool2d stride")
            pt, pb, pl, pr = _pads(padding, "max_unpool2d padding")
            oh, ow = (h - 1) * sh - (pt + pb) + dh * (kh - 1) + 1, (w - 1) * sw - (pl + pr) + dw * (kw - 1) + 1
        else:
            if not isinstance(output_size, (tuple, list)) or len(output_size) < 2:
                raise InvalidArgument(
                    at="max_unpool2d", why=f"output_size={output_size!r}", suggestion="pass (H, W) or (N, C, H, W)"
                )
            oh, ow = _ints(tuple(output_size[-2:]), 2, "max_unpool2d output_size")
        if oh <= 0 or ow <= 0:
            raise ShapeMismatch(at="max_unpool2d", why=f"the output would be {oh}x{ow}", suggestion="check the pooling")
        hot = ix.reshape(n, c, h * w, 1)._one_hot(oh * ow)  # (n, c, h*w, oh*ow)
        vals = self.reshape(n, c, h * w, 1)
        if self.dtype.is_bool:
            return (hot & vals).sum(2).reshape(n, c, oh, ow) > 0
        # an index named by several (overlapping) windows holds its value once, as torch's (tinygrad 0.14 sums them)
        fill = -math.inf if self.dtype.is_float else self.dtype.min
        picked = hot.where(vals, fill).max(2)
        return (hot.sum(2) > 0).where(picked, 0).cast(self.dtype).reshape(n, c, oh, ow)
