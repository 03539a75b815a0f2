"""Composite tensor operations, built only from the primitive Tensor methods.

Activations, softmax/layernorm, conv2d (pad + movement + mul + reduce),
attention, and the spec's compositions (cumsum by the sliding-window prefix
sum, gather and scatter_add by one-hot masks). Mixed into `Tensor`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from egraph_compiler.diagnostics import DTypeError, InvalidArgument, ShapeMismatch

if TYPE_CHECKING:
    from egraph_compiler.tensor import Tensor


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


class TensorNN:
    """Composite ops; `self` is a Tensor."""

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

    def conv2d(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: Any = 1,  # type: ignore[misc]
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
    ) -> Tensor:
        """NCHW input, (Cout, Cin/groups, kh, kw) weight; built from pad + movement + mul + reduce."""
        from egraph_compiler.tensor import Tensor

        if not isinstance(weight, Tensor) or (bias is not None and not isinstance(bias, Tensor)):
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

    def max_pool2d(
        self: Tensor,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,  # type: ignore[misc]
    ) -> Tensor:
        """NCHW max pooling; padding as for conv2d (an int, a pair, or torch's (left, right, top, bottom))."""
        xw = _pool_windows(self, kernel_size, stride, padding, dilation, "max_pool2d", -math.inf)
        return xw.max((3, 5))

    def avg_pool2d(
        self: Tensor,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        count_include_pad: bool = True,  # type: ignore[misc]
    ) -> Tensor:
        """NCHW average pooling; `count_include_pad=False` divides by the window's elements inside the input."""
        from egraph_compiler.tensor import Tensor

        kh, kw = _pair(kernel_size, "avg_pool2d kernel_size")
        total = _pool_windows(self, kernel_size, stride, padding, dilation, "avg_pool2d", 0.0).sum((3, 5))
        if count_include_pad:
            return total / float(kh * kw)
        ones = Tensor.ones(1, 1, *self.shape[2:], dtype=self.dtype)
        count = _pool_windows(ones, kernel_size, stride, padding, dilation, "avg_pool2d", 0.0).sum((3, 5))
        return total / count

    # ---- attention -----------------------------------------------------------------------------

    def scaled_dot_product_attention(
        self: Tensor,
        key: Tensor,
        value: Tensor,  # type: ignore[misc]
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        from egraph_compiler.tensor import Tensor

        if not all(isinstance(t, Tensor) for t in (key, value)) or not isinstance(attn_mask, (Tensor, type(None))):
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
            attn_mask = Tensor.arange(lq).reshape(lq, 1) >= Tensor.arange(lk).reshape(1, lk)
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
        from egraph_compiler.tensor import Tensor

        return self == Tensor.arange(n, dtype=self.dtype)

    def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:  # type: ignore[misc]
        """out[..., i, ...] = self[..., index[..., i, ...], ...] along `dim` (torch/tinygrad semantics)."""
        from egraph_compiler.tensor import Tensor

        if not isinstance(index, Tensor) or not index.dtype.is_int:
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
        from egraph_compiler.tensor import Tensor

        if not isinstance(index, Tensor) or not index.dtype.is_int or not isinstance(src, Tensor):
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
        from egraph_compiler.tensor import Tensor

        _check_matrix(self, "tril")
        r, c = self.shape[-2], self.shape[-1]
        keep = Tensor.arange(r).reshape(r, 1) + diagonal >= Tensor.arange(c).reshape(1, c)
        return keep.where(self, 0)

    def triu(self: Tensor, diagonal: int = 0) -> Tensor:  # type: ignore[misc]
        from egraph_compiler.tensor import Tensor

        _check_matrix(self, "triu")
        r, c = self.shape[-2], self.shape[-1]
        keep = Tensor.arange(r).reshape(r, 1) + diagonal <= Tensor.arange(c).reshape(1, c)
        return keep.where(self, 0)
