"""ONNX sampling and signal ops for the import (importer.py registers `OPS`): GridSample, AffineGrid, Col2Im,
DFT, STFT, the Hann, Hamming and Blackman windows and MelWeightMatrix.

Everything a node's known inputs fix is computed here in numpy: a DFT's cos/sin matrix, Col2Im's placement
matrices, AffineGrid's base grid, the windows and the mel filter bank (these last are numpy arrays outright).
What depends on run-time values is built with the Tensor API: GridSample turns the grid into interpolation
weights over the input positions of each spatial axis (a dense (locations x positions) matrix per batch entry and
axis, one contraction per axis), with the padding mode applied to the coordinates and to the taps as onnx's
reference implementation does, except cubic with border padding: there the taps alone are clamped (the image
extended by its edges), as PyTorch's grid_sample and onnxruntime do; the reference first clamps the coordinate
itself into the image, which moves the sample (for reflection both ways agree, the cubic kernel being symmetric).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from egraph_compiler.frontend.onnx.values import (
    NP,
    NotSupportedError,
    Value,
    axis_of,
    dtype_of,
    given,
    ints,
    known,
    optional,
    tensor_of,
    text,
)
from egraph_compiler.frontend.tensor import Tensor

CUBIC_A = -0.75  # GridSample's cubic convolution coefficient (Keys), fixed by the spec

# ---- shared -----------------------------------------------------------------------------------------------


def _work_dtype(t: Tensor) -> str:
    """The float type a computation on `t` runs in: float64 stays, everything else is float32."""
    return "float64" if t.dtype.name == "float64" else "float32"


def _np_work(t: Tensor) -> type:
    return np.float64 if t.dtype.name == "float64" else np.float32


def _back(y: Tensor, like: Tensor) -> Tensor:
    return y if y.dtype == like.dtype else y.cast(like.dtype)


def _scalar(v: Value, what: str) -> int:
    a = known(v, what).reshape(-1)
    if a.size != 1:
        raise ValueError(f"{what} must be a scalar, got {a.size} values")
    return int(a[0])


def _out_dtype(at: dict[str, Any], what: str) -> type:
    dt = dtype_of(int(at.get("output_datatype", 1)), what)
    if dt not in NP:
        raise NotSupportedError(f"output_datatype {dt}")
    return NP[dt]


# ---- GridSample -------------------------------------------------------------------------------------------


def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
    """Coordinates reflected at lo and hi until they fall in [lo, hi] (as the reference's _gs_reflect)."""
    span = hi - lo
    if span <= 0:  # a single position with align_corners: everything is that position
        return x * 0 + lo
    below, above = x < lo, x > hi
    dx = below.where(lo - x, x - hi)
    k = (dx / span).trunc()
    r = dx - k * span
    even = (k * 0.5).trunc() == k * 0.5
    from_lo, from_hi = lo + r, hi - r
    return below.where(even.where(from_lo, from_hi), above.where(even.where(from_hi, from_lo), x))


def _cubic_coeffs(t: Tensor) -> list[Tensor]:
    """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 around a fraction t in [0, 1)."""
    a = CUBIC_A

    def near(d: Tensor) -> Tensor:  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: Tensor) -> Tensor:  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _axis_weights(coord: Tensor, size: int, mode: str, padding: str, align: bool) -> Tensor:
    """Interpolation weights (..., size) over one axis's input positions for normalized coordinates (...)."""
    if align:
        x = (coord + 1) * ((size - 1) / 2)
        lo, hi = 0.0, float(size - 1)
    else:
        x = ((coord + 1) * size - 1) * 0.5
        lo, hi = -0.5, size - 0.5
    if mode == "nearest":
        x = x.round()  # half to even, as the reference (np.rint) and PyTorch
    if padding != "zeros" and mode != "cubic":  # a coordinate outside [lo, hi] is clamped or reflected first
        outside = (x < lo) | (x > hi)
        x = outside.where(x.clip(0.0, float(size - 1)) if padding == "border" else _reflect(x, lo, hi), x)
    taps: list[tuple[Tensor, Tensor | None]]  # (position, weight; None: weight 1)
    if mode == "nearest":
        taps = [(x.trunc(), None)]
    else:
        f = x.floor()
        t = x - f
        if mode == "linear":
            taps = [(f, 1 - t), (f + 1, t)]
        else:
            taps = [(f + (k - 1), w) for k, w in enumerate(_cubic_coeffs(t))]
    positions = Tensor(np.arange(size, dtype=_np_work(coord)))
    total = None
    for idx, w in taps:
        if padding == "border":  # a tap beyond the edge reads the edge
            idx = idx.clip(0.0, float(size - 1))
        elif padding == "reflection":  # ... or its mirror image; with zeros it reads nothing (matches no position)
            idx = _reflect(idx, lo, hi).trunc()
        hit = (idx.unsqueeze(-1) == positions).cast(coord.dtype)
        part = hit if w is None else hit * w.unsqueeze(-1)
        total = part if total is None else total + part
    assert total is not None
    return total


def _grid_sample(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = tensor_of(ins[0])
    mode = text(at, "mode", "bilinear" if opset < 20 else "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = text(at, "padding_mode", "zeros")
    align = bool(at.get("align_corners", 0))
    if mode not in ("linear", "nearest", "cubic"):
        raise NotSupportedError(f"mode {mode!r}")
    if padding not in ("zeros", "border", "reflection"):
        raise NotSupportedError(f"padding_mode {padding!r}")
    r = x.ndim - 2
    grid_shape = tuple(ins[1].shape)
    if r < 1 or len(grid_shape) != r + 2 or grid_shape[-1] != r or grid_shape[0] != x.shape[0]:
        raise ValueError(f"grid {grid_shape} does not fit input {x.shape}: expected (N, *out, {r})")
    work = _work_dtype(x)
    n, c, dims = x.shape[0], x.shape[1], x.shape[2:]
    out_dims = grid_shape[1:-1]
    locs = math.prod(out_dims)
    grid = tensor_of(ins[1])
    grid = grid.cast(work) if grid.dtype.name != work else grid
    grid = grid.reshape(n, locs, r)
    xs = x.cast(work) if x.dtype.name != work else x
    # the grid lists coordinates innermost axis first: (x, y[, z]) for (..., [D,] H, W)
    weights = [
        _axis_weights(grid.shrink(((0, n), (0, locs), (r - 1 - i, r - i))).reshape(n, locs), d, mode, padding, align)
        for i, d in enumerate(dims)
    ]  # axis i: (n, locs, dims[i])
    # contract the innermost axis by a batched matmul, then each outer one by a product and a sum
    y = xs.reshape(n, c * math.prod(dims[:-1]), dims[-1]) @ weights[-1].transpose(1, 2)  # (n, c * rest, locs)
    y = y.reshape(n, c, *dims[:-1], locs)
    for i in range(r - 2, -1, -1):
        w = weights[i].transpose(1, 2).reshape(n, 1, *[1] * i, dims[i], locs)  # (n, 1, 1.., dims[i], locs)
        y = (y * w).sum(2 + i)
    return [_back(y.reshape(n, c, *out_dims), x)]


# ---- AffineGrid -------------------------------------------------------------------------------------------


def _base_axis(size: int, align: bool) -> np.ndarray:
    """The normalized coordinates in [-1, 1] of one axis's positions."""
    if align:
        return np.array([-1.0]) if size == 1 else -1.0 + 2.0 * np.arange(size) / (size - 1)
    return -1.0 + (2.0 * np.arange(size) + 1.0) / size


def _affine_grid(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    size = ints(ins[1], "size")
    align = bool(at.get("align_corners", 0))
    r = len(size) - 2
    if r not in (2, 3):
        raise ValueError(f"size {size}: expected (N, C, H, W) or (N, C, D, H, W)")
    spatial = size[2:]
    theta_shape = tuple(ins[0].shape)
    if theta_shape != (size[0], r, r + 1):
        raise ValueError(f"theta {theta_shape} does not fit size {size}: expected ({size[0]}, {r}, {r + 1})")
    axes = np.meshgrid(*[_base_axis(s, align) for s in spatial], indexing="ij")  # D, H, W order
    base = np.stack([*axes[::-1], np.ones(spatial)], axis=-1).reshape(-1, r + 1)  # (x, y[, z], 1) per position
    if not isinstance(ins[0], Tensor):
        theta_np = np.asarray(ins[0])
        out_dt = theta_np.dtype if theta_np.dtype.kind == "f" else np.float32
        grid = np.einsum("pk,nik->npi", base, theta_np.astype(np.float64))
        return [grid.reshape(size[0], *spatial, r).astype(out_dt)]
    theta = ins[0]
    work = _work_dtype(theta)
    tw = theta.cast(work) if theta.dtype.name != work else theta
    grid = Tensor(base.astype(NP[work])) @ tw.transpose(1, 2)  # (N, positions, r)
    return [_back(grid.reshape(size[0], *spatial, r), theta)]


# ---- Col2Im -----------------------------------------------------------------------------------------------


def _col2im(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Blocks summed back into the image: per spatial axis, a known 0/1 matrix from (block offset, block
    position) to the image position it lands on (none when it lands in the padding), applied axis by axis."""
    x = tensor_of(ins[0])
    image, block = ints(ins[1], "image_shape"), ints(ins[2], "block_shape")
    d = len(image)
    if len(block) != d or x.ndim != 3:
        raise ValueError(f"input {x.shape}, image_shape {image}, block_shape {block}: expected (N, C * block, L)")
    dil = list(at.get("dilations") or [1] * d)
    strides = list(at.get("strides") or [1] * d)
    pads = list(at.get("pads") or [0] * (2 * d))
    if len(dil) != d or len(strides) != d or len(pads) != 2 * d:
        raise ValueError(f"dilations {dil}, strides {strides}, pads {pads} do not fit {d} spatial axes")
    counts = [(image[i] + pads[i] + pads[i + d] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(d)]
    kb = math.prod(block)
    if any(n < 1 for n in counts) or x.shape[1] % kb or x.shape[2] != math.prod(counts):
        raise ValueError(
            f"input {x.shape} does not fit image_shape {image}, block_shape {block}: "
            f"expected (N, C * {kb}, {math.prod(counts)}) blocks"
        )
    n, ch = x.shape[0], x.shape[1] // kb
    dt = x.dtype.np if x.dtype.name in NP else np.float32
    # (N, C, b_1..b_d, l_1..l_d) -> (N, C, b_1, l_1, ..., b_d, l_d)
    t = x.reshape(n, ch, *block, *counts)
    t = t.permute(0, 1, *[a for i in range(d) for a in (2 + i, 2 + d + i)])
    for i in range(d):  # the pair (b_i, l_i) is now at axes 2, 3: move it last and map it onto image axis i
        place = np.zeros((block[i], counts[i], image[i]), dt)
        for b in range(block[i]):
            for j in range(counts[i]):
                p = j * strides[i] - pads[i] + b * dil[i]
                if 0 <= p < image[i]:
                    place[b, j, p] = 1
        rest = list(range(4, t.ndim))
        t = t.permute(0, 1, *rest, 2, 3)
        t = t.reshape(*t.shape[:-2], block[i] * counts[i]) @ Tensor(place.reshape(block[i] * counts[i], image[i]))
    return [_back(t, x)]


# ---- DFT / STFT -------------------------------------------------------------------------------------------


def _dft_matrix(rows: int, n: int, c_in: int, inverse: bool, onesided: bool) -> tuple[np.ndarray, int, int]:
    """(matrix (rows * c_in, out * c_out), out, c_out): a transform of length n of `rows` input values along an
    axis (the first `rows` of the signal, or of the one-sided spectrum for an inverse one-sided one), each value
    (re[, im]), as one matmul. Angles from k * t mod n, in float64."""
    if inverse and onesided:  # a one-sided spectrum to a real signal (numpy's irfft)
        j = np.arange(rows)[:, None]
        t = np.arange(n)[None, :]
        ang = 2 * np.pi * ((j * t) % n) / n
        twice = np.where((j == 0) | (2 * j == n), 1.0, 2.0)  # the bins with a conjugate partner count twice
        m = np.zeros((rows, c_in, n, 1))
        m[:, 0, :, 0] = twice * np.cos(ang) / n
        if c_in == 2:
            m[:, 1, :, 0] = -twice * np.sin(ang) / n
        return m.reshape(rows * c_in, n), n, 1
    out = n // 2 + 1 if onesided else n
    t = np.arange(rows)[:, None]
    k = np.arange(out)[None, :]
    ang = 2 * np.pi * ((t * k) % n) / n
    cos, sin = np.cos(ang), np.sin(ang)
    if inverse:
        cos, sin = cos / n, -sin / n  # e^{+i...} / n
    m = np.zeros((rows, c_in, out, 2))
    m[:, 0, :, 0], m[:, 0, :, 1] = cos, -sin  # re * (cos - i sin)
    if c_in == 2:
        m[:, 1, :, 0], m[:, 1, :, 1] = sin, cos  # i im * (cos - i sin)
    return m.reshape(rows * c_in, out * 2), out, 2


def _dft(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = tensor_of(ins[0])
    r = x.ndim
    if r < 2 or x.shape[-1] not in (1, 2):
        raise ValueError(f"input {x.shape}: the last axis holds (re[, im]) and has size 1 or 2")
    if opset >= 20:
        a = _scalar(ins[2], "axis") if given(ins, 2) else -2
    else:
        a = int(at.get("axis", 1))
    a = axis_of(a, r)
    if a == r - 1:
        raise ValueError("the DFT axis cannot be the last one (it holds the real and imaginary parts)")
    inverse, onesided = bool(at.get("inverse", 0)), bool(at.get("onesided", 0))
    if onesided and x.shape[-1] == (1 if inverse else 2):  # as the spec (and onnxruntime): RFFT real, IRFFT complex in
        raise NotSupportedError(f"onesided=1 inverse={int(inverse)} with {'real' if inverse else 'complex'} input")
    have = x.shape[a]
    if given(ins, 1):
        n = _scalar(ins[1], "dft_length")
    else:
        n = 2 * (have - 1) if inverse and onesided else have
    if n < 1:
        raise ValueError(f"dft_length {n}")
    rows = min(have, n // 2 + 1 if inverse and onesided else n)  # the values read: cropped, or zero-padded by the matrix
    c_in = x.shape[-1]
    m, out, c_out = _dft_matrix(rows, n, c_in, inverse, onesided)
    work = _work_dtype(x)
    xs = x.cast(work) if x.dtype.name != work else x
    if rows < have:
        xs = xs.shrink(tuple((0, rows) if i == a else None for i in range(r)))
    order = [i for i in range(r - 1) if i != a] + [a, r - 1]
    moved = xs.permute(*order)  # (..., rows, c_in)
    y = moved.reshape(*moved.shape[:-2], rows * c_in) @ Tensor(m.astype(NP[work]))
    y = y.reshape(*moved.shape[:-2], out, c_out)
    back = [order.index(i) for i in range(r)]
    return [_back(y.permute(*back), x)]


def _stft(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Frames (a windowed view, movement ops only) times the window, each by one DFT matmul (the window folded
    into the matrix when it is known)."""
    x = tensor_of(ins[0])
    if x.ndim != 3 or x.shape[-1] not in (1, 2):
        raise ValueError(f"signal {x.shape}: expected (batch, length, 1 or 2)")
    step = _scalar(ins[1], "frame_step")
    window = optional(ins, 2)
    length = _scalar(ins[3], "frame_length") if given(ins, 3) else None
    if length is None:
        length = window.shape[0] if window is not None else x.shape[1]
    if window is not None and tuple(window.shape) != (length,):
        raise ValueError(f"window {tuple(window.shape)} does not match frame_length {length}")
    if step < 1 or not 1 <= length <= x.shape[1]:
        raise ValueError(f"frame_step {step}, frame_length {length} for a signal of {x.shape[1]} samples")
    onesided = bool(at.get("onesided", 1))
    c_in = x.shape[-1]
    m, out, _ = _dft_matrix(length, length, c_in, False, onesided)
    work = _work_dtype(x)
    xs = x.cast(work) if x.dtype.name != work else x
    frames = xs.unfold(1, length, step).permute(0, 1, 3, 2)  # (batch, frames, length, c_in)
    if window is not None and not isinstance(window, Tensor):
        m = m * np.repeat(np.asarray(window, np.float64), c_in)[:, None]
    elif window is not None:
        w = window.cast(work) if window.dtype.name != work else window
        frames = frames * w.reshape(length, 1)
    b, f = frames.shape[0], frames.shape[1]
    y = frames.reshape(b, f, length * c_in) @ Tensor(m.astype(NP[work]))
    return [_back(y.reshape(b, f, out, 2), x)]


# ---- windows and the mel filter bank (known at import) --------------------------------------------------


def _window(kind: str) -> Callable[[list[Value], dict[str, Any], int], list[Value]]:
    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        size = _scalar(ins[0], "size")
        if size < 0:
            raise ValueError(f"window size {size}")
        dt = _out_dtype(at, f"{kind} output_datatype")
        span = size if at.get("periodic", 1) else size - 1
        with np.errstate(all="ignore"):  # a symmetric window of one value is 0 / 0, NaN, as onnx and onnxruntime
            phase = 2 * np.pi * np.arange(size) / np.float64(span)
        if kind == "hann":
            w = np.sin(phase / 2) ** 2
        elif kind == "hamming":
            w = 25 / 46 - 21 / 46 * np.cos(phase)
        else:
            w = 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase)
        return [w.astype(dt)]

    return op


def _mel_weight_matrix(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Triangular filters (peak 1) between mel-spaced edges, on the bins of a one-sided DFT: (bins, mel bins)."""
    mels = _scalar(ins[0], "num_mel_bins")
    dft_length = _scalar(ins[1], "dft_length")
    rate = _scalar(ins[2], "sample_rate")
    lo_hz = float(known(ins[3], "lower_edge_hertz").reshape(-1)[0])
    hi_hz = float(known(ins[4], "upper_edge_hertz").reshape(-1)[0])
    if mels < 1 or dft_length < 1 or rate < 1:
        raise ValueError(f"num_mel_bins {mels}, dft_length {dft_length}, sample_rate {rate}")
    bins = dft_length // 2 + 1

    def mel(f: float) -> float:
        return 2595 * np.log1p(f / 700) / np.log(10)

    lo_mel, hi_mel = mel(lo_hz), mel(hi_hz)
    # mels + 2 edges, the first at the lower edge, spaced by (high - low) / (mels + 2) as the reference spaces them
    edges_mel = lo_mel + np.arange(mels + 2) * ((hi_mel - lo_mel) / (mels + 2))
    edges_hz = 700 * np.expm1(edges_mel / 2595 * np.log(10))
    edges = np.floor_divide((dft_length + 1) * edges_hz, rate).astype(np.int64)  # the DFT bin of each edge
    if edges.min() < 0 or edges.max() >= bins:
        raise ValueError(f"the mel edges fall on DFT bins {edges.min()}..{edges.max()}, outside 0..{bins - 1}")
    j = np.arange(bins)[:, None].astype(np.float64)
    left, centre, right = edges[:-2][None, :], edges[1:-1][None, :], edges[2:][None, :]
    rise = np.where((j >= left) & (j <= centre), (j - left) / np.maximum(centre - left, 1), 0.0)
    rise = np.where((centre == left) & (j == centre), 1.0, rise)
    fall = np.where((j >= centre) & (j < right), (right - j) / np.maximum(right - centre, 1), 0.0)
    w = np.where((j >= centre) & (j < right), fall, rise)
    return [w.astype(_out_dtype(at, "MelWeightMatrix output_datatype"))]


OPS: dict[str, Callable[[list[Value], dict[str, Any], int], list[Value]]] = {
    "GridSample": _grid_sample,
    "AffineGrid": _affine_grid,
    "Col2Im": _col2im,
    "DFT": _dft,
    "STFT": _stft,
    "HannWindow": _window("hann"),
    "HammingWindow": _window("hamming"),
    "BlackmanWindow": _window("blackman"),
    "MelWeightMatrix": _mel_weight_matrix,
}
