"""Layers and state dicts with tinygrad's names (tinygrad.nn and tinygrad.nn.state), for inference graphs.

Each layer holds data-backed weight Tensors (drawn with Tensor.uniform / glorot_uniform from a seed or
Tensor.manual_seed, so they are real data, not placeholders) under tinygrad's attribute names, and is called
as `layer(x) -> Tensor`. `get_state_dict` names the weights with tinygrad's dotted paths (which are torch's for
these layers), `load_state_dict` replaces them by the arrays of a state dict (torch's included), and
`safe_load`/`safe_save` read and write safetensors files with numpy and the json header.

There is no training mode: BatchNorm normalises with its running statistics (batch statistics only when it
keeps none, as tinygrad), and dropout is the identity.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import types
from collections import OrderedDict
from typing import Any

import numpy as np

from egraph_compiler.frontend.tensor import Tensor
from egraph_compiler.ir.diagnostics import DTypeError, InvalidArgument, InvalidSize, ShapeMismatch
from egraph_compiler.ir.dtypes import DType, bf16_from_bits, bf16_to_bits, dtypes, from_numpy
from egraph_compiler.ir.interpret import evaluate

__all__ = [
    "BatchNorm",
    "BatchNorm2d",
    "BatchNorm3d",
    "Conv2d",
    "ConvTranspose2d",
    "Embedding",
    "GroupNorm",
    "InstanceNorm",
    "LayerNorm",
    "Linear",
    "RMSNorm",
    "get_parameters",
    "get_state_dict",
    "load_state_dict",
    "safe_load",
    "safe_save",
]


def _count(v: Any, what: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise InvalidArgument(at=what, why=f"{v!r} is not a positive int", suggestion="pass a positive integer")
    return int(v)


def _eps(v: Any, what: str) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) or not v >= 0:
        raise InvalidArgument(at=what, why=f"eps={v!r}", suggestion="pass a non-negative float")
    return float(v)


def _kernel(k: Any, what: str) -> tuple[int, int]:
    ks = (k, k) if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)) else k
    if not isinstance(ks, (tuple, list)) or len(ks) != 2:
        raise InvalidArgument(at=what, why=f"kernel_size={k!r}", suggestion="pass an int or a pair (kh, kw)")
    return _count(ks[0], what), _count(ks[1], what)


def _data(arr: np.ndarray, dtype: DType = dtypes.float32) -> Tensor:
    return Tensor(arr, dtype)


def _channels(x: Tensor, n: int, what: str) -> None:
    if not isinstance(x, Tensor):
        raise InvalidArgument(at=what, why=f"input is a {type(x).__name__}", suggestion="pass a Tensor")
    if x.ndim < 2 or x.shape[1] != n:
        raise ShapeMismatch(
            at=what, why=f"input of shape {x.shape}, expected {n} channels on axis 1", suggestion="pass (N, C, ...) input"
        )


def _affine(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """x * weight + bias per channel (axis 1), when the layer has both."""
    if weight is None or bias is None:
        return x
    shape = (1, -1, *[1] * (x.ndim - 2))
    return x * weight.reshape(shape) + bias.reshape(shape)


# ---- layers -----------------------------------------------------------------------------------------------


class Linear:
    """y = x @ weight.T + bias; weight (out_features, in_features), both uniform in +-1/sqrt(in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        fin, fout = _count(in_features, "Linear in_features"), _count(out_features, "Linear out_features")
        bound = 1 / math.sqrt(fin)
        self.weight: Tensor = Tensor.uniform(fout, fin, low=-bound, high=bound)
        self.bias: Tensor | None = Tensor.uniform(fout, low=-bound, high=bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.ndim == 0 or x.shape[-1] != self.weight.shape[1]:
            raise ShapeMismatch(
                at="Linear",
                why=f"input {getattr(x, 'shape', type(x).__name__)} for {self.weight.shape[1]} in_features",
                suggestion=f"pass a Tensor whose last axis is {self.weight.shape[1]}",
            )
        return x.linear(self.weight.transpose(), self.bias)


class Conv2d:
    """NCHW convolution; weight (out, in/groups, kh, kw) and bias (out,) uniform in +-1/sqrt(in*kh*kw).
    padding: an int, (h, w), torch's (left, right, top, bottom), or 'same' (stride 1)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, ...],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, ...] | str = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        cin, cout = _count(in_channels, "Conv2d in_channels"), _count(out_channels, "Conv2d out_channels")
        g = _count(groups, "Conv2d groups")
        if cin % g or cout % g:
            raise InvalidArgument(
                at="Conv2d",
                why=f"{cin} input and {cout} output channels are not both divisible by groups={g}",
                suggestion="choose groups dividing both channel counts",
            )
        self.kernel_size: tuple[int, int] = _kernel(kernel_size, "Conv2d kernel_size")
        if isinstance(padding, str):
            if padding.lower() != "same":
                raise InvalidArgument(at="Conv2d", why=f"padding={padding!r}", suggestion="the only string is 'same'")
            if stride not in (1, (1, 1), [1, 1]):
                raise InvalidArgument(at="Conv2d", why="padding='same' with a stride", suggestion="use stride=1")
            dil = (dilation, dilation) if isinstance(dilation, int) else tuple(dilation)
            # torch's order: (left, right, top, bottom), the odd pixel after
            tot = [d * (k - 1) for d, k in zip(dil[::-1], self.kernel_size[::-1])]
            padding = tuple(p for t in tot for p in (t // 2, t - t // 2))
        self.stride, self.dilation, self.groups, self.padding = stride, dilation, g, padding
        scale = 1 / math.sqrt(cin * math.prod(self.kernel_size))
        self.weight: Tensor = Tensor.uniform(cout, cin // g, *self.kernel_size, low=-scale, high=scale)
        self.bias: Tensor | None = Tensor.uniform(cout, low=-scale, high=scale) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise InvalidArgument(at=type(self).__name__, why=f"input is a {type(x).__name__}", suggestion="pass a Tensor")
        return x.conv2d(
            self.weight, self.bias, stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups
        )


class ConvTranspose2d(Conv2d):
    """NCHW transposed convolution; weight (in, out/groups, kh, kw), uniform in +-1/sqrt(in*kh*kw)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, ...],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, ...] = 0,
        output_padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
        scale = 1 / math.sqrt(in_channels * math.prod(self.kernel_size))
        self.weight = Tensor.uniform(in_channels, out_channels // self.groups, *self.kernel_size, low=-scale, high=scale)
        self.output_padding = output_padding

    def __call__(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise InvalidArgument(at="ConvTranspose2d", why=f"input is a {type(x).__name__}", suggestion="pass a Tensor")
        return x.conv_transpose2d(
            self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding, self.output_padding
        )


class BatchNorm:
    """Batch normalisation over axis 1 for inference: (x - running_mean) / sqrt(running_var + eps) * weight + bias.
    Without running statistics (track_running_stats=False) the batch's own mean and variance are used."""

    def __init__(
        self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1
    ) -> None:
        n = _count(sz, "BatchNorm sz")
        self.eps, self.track_running_stats, self.momentum = _eps(eps, "BatchNorm"), bool(track_running_stats), momentum
        self.weight: Tensor | None = _data(np.ones(n, np.float32)) if affine else None
        self.bias: Tensor | None = _data(np.zeros(n, np.float32)) if affine else None
        self.num_batches_tracked: Tensor = _data(np.zeros((), np.int64), dtypes.int64)
        if track_running_stats:
            self.running_mean: Tensor = _data(np.zeros(n, np.float32))
            self.running_var: Tensor = _data(np.ones(n, np.float32))
        self._size = n

    def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean and variance used: the running ones, or the batch's (over every axis but 1)."""
        if self.track_running_stats:
            return self.running_mean, self.running_var
        axes = tuple(a for a in range(x.ndim) if a != 1)
        mean = x.mean(axes)
        d = x - mean.reshape(1, -1, *[1] * (x.ndim - 2))
        return mean, (d * d).mean(axes)

    def __call__(self, x: Tensor) -> Tensor:
        _channels(x, self._size, "BatchNorm")
        mean, var = self.calc_stats(x)
        return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())


BatchNorm2d = BatchNorm3d = BatchNorm


class LayerNorm:
    """Normalise over the last len(normalized_shape) axes, then * weight + bias (ones and zeros)."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True) -> None:
        shp = (normalized_shape,) if not isinstance(normalized_shape, (tuple, list)) else tuple(normalized_shape)
        self.normalized_shape: tuple[int, ...] = tuple(_count(s, "LayerNorm normalized_shape") for s in shp)
        self.axis, self.eps = tuple(-1 - i for i in range(len(self.normalized_shape))), _eps(eps, "LayerNorm")
        self.weight: Tensor | None = _data(np.ones(self.normalized_shape, np.float32)) if elementwise_affine else None
        self.bias: Tensor | None = _data(np.zeros(self.normalized_shape, np.float32)) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        k = len(self.normalized_shape)
        if not isinstance(x, Tensor) or x.shape[-k:] != self.normalized_shape or x.ndim < k:
            raise ShapeMismatch(
                at="LayerNorm",
                why=f"the last axes of {getattr(x, 'shape', type(x).__name__)} are not {self.normalized_shape}",
                suggestion="pass a Tensor ending in normalized_shape",
            )
        y = x.layernorm(eps=self.eps, axis=self.axis)
        return y if self.weight is None or self.bias is None else y * self.weight + self.bias


class GroupNorm:
    """Normalise each of num_groups channel groups (with their spatial axes), then per-channel weight and bias."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        g, c = _count(num_groups, "GroupNorm num_groups"), _count(num_channels, "GroupNorm num_channels")
        if c % g:
            raise InvalidArgument(
                at="GroupNorm", why=f"{c} channels in {g} groups", suggestion="num_groups must divide num_channels"
            )
        self.num_groups, self.num_channels, self.eps = g, c, _eps(eps, "GroupNorm")
        self.weight: Tensor | None = _data(np.ones(c, np.float32)) if affine else None
        self.bias: Tensor | None = _data(np.zeros(c, np.float32)) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        return _grouped_norm(x, self.num_groups, self.num_channels, self.eps, self.weight, self.bias, "GroupNorm")


def _grouped_norm(
    x: Tensor, groups: int, channels: int, eps: float, weight: Tensor | None, bias: Tensor | None, what: str
) -> Tensor:
    """Each sample's channels in `groups` groups, each normalised over its channels and spatial axes."""
    _channels(x, channels, what)
    y = x.reshape(x.shape[0], groups, -1).layernorm(eps=eps).reshape(x.shape)
    return _affine(y, weight, bias)


class InstanceNorm:
    """Normalise each channel of each sample over its spatial axes, then per-channel weight and bias."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True) -> None:
        self.num_features, self.eps = _count(num_features, "InstanceNorm num_features"), _eps(eps, "InstanceNorm")
        self.weight: Tensor | None = _data(np.ones(self.num_features, np.float32)) if affine else None
        self.bias: Tensor | None = _data(np.zeros(self.num_features, np.float32)) if affine else None

    def __call__(self, x: Tensor) -> Tensor:  # a group per channel
        return _grouped_norm(x, self.num_features, self.num_features, self.eps, self.weight, self.bias, "InstanceNorm")


class RMSNorm:
    """x / sqrt(mean(x**2 over the last axis) + eps) * weight, computed in float32, in x's dtype."""

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True) -> None:
        self.eps = _eps(eps, "RMSNorm")
        n = _count(dim, "RMSNorm dim")
        self.weight: Tensor | None = _data(np.ones(n, np.float32)) if elementwise_affine else None
        self._dim = n

    def _norm(self, x: Tensor) -> Tensor:
        return x * ((x * x).mean(-1, keepdim=True) + self.eps).rsqrt()

    def __call__(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.ndim == 0 or x.shape[-1] != self._dim:
            raise ShapeMismatch(
                at="RMSNorm",
                why=f"input {getattr(x, 'shape', type(x).__name__)} for dim {self._dim}",
                suggestion=f"pass a Tensor whose last axis is {self._dim}",
            )
        y = self._norm(x.float()).cast(x.dtype)
        return y if self.weight is None else y * self.weight


class Embedding:
    """A lookup table (vocab_size, embed_size), glorot-uniform; integer indices of any shape -> shape + (embed,).
    An index outside [0, vocab_size) gives a row of zeros (a one-hot sum, as tinygrad)."""

    def __init__(self, vocab_size: int, embed_size: int) -> None:
        self.vocab_sz, self.embed_sz = _count(vocab_size, "Embedding vocab_size"), _count(embed_size, "Embedding embed_size")
        self.weight: Tensor = Tensor.glorot_uniform(self.vocab_sz, self.embed_sz)

    def __call__(self, idx: Tensor) -> Tensor:
        if not isinstance(idx, Tensor) or not idx.dtype.is_int:
            raise DTypeError(
                at="Embedding",
                why=f"indices of {getattr(idx, 'dtype', type(idx).__name__)}",
                suggestion="pass an integer Tensor (int32)",
            )
        vocab = self.weight.shape[0]
        hot = idx.unsqueeze(-1)._one_hot(vocab).unsqueeze(-1)  # idx.shape + (vocab, 1)
        return hot.where(self.weight, 0).sum(-2, dtype=self.weight.dtype)


# ---- state dicts ------------------------------------------------------------------------------------------


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from obj through attributes, lists, tuples, dicts and namedtuples, under its dotted
    path ("layers.0.weight"), in attribute order (tinygrad's walk; attributes with a leading underscore too).
    Modules and classes an attribute names are not walked, nor an object met again on its own path (a cycle)."""
    out: dict[str, Tensor] = {}
    _walk(obj, prefix, out, set())
    return out


def _walk(obj: Any, prefix: str, out: dict[str, Tensor], seen: set[int]) -> None:
    if isinstance(obj, Tensor):
        out[prefix.strip(".")] = obj
        return
    if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None), np.ndarray, type, types.ModuleType)):
        return  # (a module or class an attribute names is not part of the model)
    seen = seen | {id(obj)}
    if hasattr(obj, "_asdict"):  # namedtuple
        _walk(obj._asdict(), prefix, out, seen)
    elif isinstance(obj, OrderedDict):
        _walk(dict(obj), prefix, out, seen)
    elif isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            _walk(x, f"{prefix}{i}.", out, seen)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _walk(v, f"{prefix}{k}.", out, seen)
    elif hasattr(obj, "__dict__"):
        _walk(obj.__dict__, prefix, out, seen)


def get_parameters(obj: Any) -> list[Tensor]:
    """The Tensors of get_state_dict(obj), in its order."""
    return list(get_state_dict(obj).values())


def _as_array_or_tensor(v: Any, key: str) -> Tensor | np.ndarray:
    if isinstance(v, Tensor):
        return v
    if isinstance(v, (np.ndarray, np.generic)):
        return np.asarray(v)
    if hasattr(v, "__array__"):  # a torch CPU tensor, for one
        try:
            return np.asarray(v)
        except Exception as e:  # whatever the array-like's own conversion raises
            raise InvalidArgument(
                at=f"load_state_dict[{key!r}]",
                why=f"{type(v).__name__} does not convert to a numpy array: {e}",
                suggestion="pass numpy arrays (torch: t.detach().cpu().numpy()) or Tensors",
            ) from None
    raise InvalidArgument(
        at=f"load_state_dict[{key!r}]",
        why=f"the value is a {type(v).__name__}",
        suggestion="pass numpy arrays or Tensors",
    )


def load_state_dict(model: Any, state_dict: dict[str, Any], strict: bool = True) -> list[Tensor]:
    """Replace the model's Tensors (named as get_state_dict names them) by the state dict's numpy arrays (as
    data-backed Tensors) or Tensors. Shapes must agree (() and (1,) stand for each other, as in tinygrad) and
    dtypes must be equal: nothing is converted silently. strict: a key missing from the state dict or one the
    model does not have is a diagnostic; otherwise missing keys keep their weights and extra keys are ignored.
    The model's Tensor objects are updated in place, so every reference to them sees the loaded weights.
    Returns the loaded Tensors."""
    if not isinstance(state_dict, dict) or not all(isinstance(k, str) for k in state_dict):
        raise InvalidArgument(
            at="load_state_dict", why=f"state_dict is a {type(state_dict).__name__}", suggestion="pass a dict of str keys"
        )
    own = get_state_dict(model)
    if strict:
        missing = sorted(set(own) - set(state_dict))
        extra = sorted(set(state_dict) - set(own))
        if missing or extra:
            raise InvalidArgument(
                at="load_state_dict",
                why=(f"missing keys {missing}" if missing else "")
                + ("; " if missing and extra else "")
                + (f"unexpected keys {extra}" if extra else ""),
                suggestion="give exactly the model's keys (get_state_dict(model).keys()), or pass strict=False",
            )
    updates: list[tuple[Tensor, Tensor]] = []
    for key, t in own.items():
        if key not in state_dict:
            continue
        v = _as_array_or_tensor(state_dict[key], key)
        if isinstance(v, np.ndarray):
            if v.dtype.kind not in "biuf":
                raise DTypeError(
                    at=f"load_state_dict[{key!r}]",
                    why=f"expected {t.dtype.name}, got numpy {v.dtype}",
                    suggestion="pass a numeric array",
                )
            got = from_numpy(v.dtype)
        else:
            got = v.dtype
        if got is not t.dtype:
            hint = " (pass Tensor(arr, 'bfloat16'))" if t.dtype is dtypes.bfloat16 else ""
            raise DTypeError(
                at=f"load_state_dict[{key!r}]",
                why=f"dtype mismatch: expected {t.dtype.name}, got {got.name}",
                suggestion=f"cast the value to {t.dtype.name} first{hint}",
            )
        if tuple(v.shape) != t.shape:
            if {tuple(v.shape), t.shape} == {(), (1,)}:
                v = v.reshape(t.shape)
            else:
                raise ShapeMismatch(
                    at=f"load_state_dict[{key!r}]",
                    why=f"shape mismatch: expected {t.shape}, got {tuple(v.shape)}",
                    suggestion="load the state dict of a model with the same layer sizes",
                )
        if isinstance(v, np.ndarray) and v.size == 0:
            raise InvalidSize(at=f"load_state_dict[{key!r}]", why="an empty array", suggestion="tensors hold data")
        updates.append((t, v if isinstance(v, Tensor) else Tensor(np.array(v, order="C"), got)))
    for t, new in updates:  # only once every key checked: a bad one leaves the model as it was
        t.uop = new.uop
    return [t for t, _ in updates]


# ---- safetensors ------------------------------------------------------------------------------------------

_SAFE_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool,
    "I8": dtypes.int8,
    "U8": dtypes.uint8,
    "I16": dtypes.int16,
    "U16": dtypes.uint16,
    "I32": dtypes.int32,
    "U32": dtypes.uint32,
    "I64": dtypes.int64,
    "U64": dtypes.uint64,
    "F16": dtypes.float16,
    "BF16": dtypes.bfloat16,
    "F32": dtypes.float32,
    "F64": dtypes.float64,
}
_SAFE_NAMES = {v.name: k for k, v in _SAFE_DTYPES.items()}
_MAX_HEADER = 100_000_000  # the safetensors format's own limit on the header's length


def _bytes_of(t: Any, key: str) -> tuple[str, tuple[int, ...], bytes]:
    """(safetensors dtype, shape, little-endian bytes) of a Tensor (computed by the reference interpreter: a
    placeholder is a diagnostic) or a numpy array."""
    if isinstance(t, Tensor):
        dt, arr = t.dtype, np.asarray(evaluate(t.uop))
        data = bf16_to_bits(arr.astype(np.float32)) if dt is dtypes.bfloat16 else arr.astype(dt.np)
    elif isinstance(t, np.ndarray):
        if t.dtype.kind not in "biuf":
            raise DTypeError(at=f"safe_save[{key!r}]", why=f"numpy dtype {t.dtype}", suggestion="pass numeric arrays")
        dt, data = from_numpy(t.dtype), t
    else:
        raise InvalidArgument(at=f"safe_save[{key!r}]", why=f"a {type(t).__name__}", suggestion="pass Tensors or arrays")
    if dt.name not in _SAFE_NAMES:
        raise DTypeError(at=f"safe_save[{key!r}]", why=f"dtype {dt.name}", suggestion="safetensors stores no such dtype")
    return _SAFE_NAMES[dt.name], tuple(data.shape), np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<")).tobytes()


def safe_save(tensors: dict[str, Any], fn: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """Write Tensors (or numpy arrays) to a safetensors file: an 8-byte little-endian header length, a json header
    {name: {dtype, shape, data_offsets}} padded with spaces to 8 bytes, then the raw little-endian data."""
    if not isinstance(tensors, dict) or not all(isinstance(k, str) and k != "__metadata__" for k in tensors):
        raise InvalidArgument(
            at="safe_save", why="tensors must be a dict with str keys (not '__metadata__')", suggestion="pass {name: Tensor}"
        )
    if metadata is not None and (
        not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise InvalidArgument(at="safe_save", why="metadata must map str to str", suggestion="pass {str: str} or None")
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    blobs, offset = [], 0
    for k, t in tensors.items():
        code, shape, raw = _bytes_of(t, k)
        header[k] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    try:
        with open(fn, "wb") as f:
            f.write(len(head).to_bytes(8, "little"))
            f.write(head)
            for raw in blobs:
                f.write(raw)
    except OSError as e:
        raise InvalidArgument(at=f"safe_save {fn}", why=f"cannot write the file: {e}", suggestion="check the path") from None


def _malformed(fn: Any, why: str) -> InvalidArgument:
    return InvalidArgument(at=f"safe_load {fn}", why=f"not a valid safetensors file: {why}", suggestion="check the file")


def _safe_header(fn: Any, raw: bytes) -> tuple[dict[str, Any], memoryview]:
    """A safetensors file's json header (8 bytes of little-endian length, then the json) and the data after it."""
    if len(raw) < 8:
        raise _malformed(fn, f"{len(raw)} bytes, shorter than the 8-byte header length")
    n = int.from_bytes(raw[:8], "little")
    if n > _MAX_HEADER or 8 + n > len(raw):
        raise _malformed(fn, f"a header of {n} bytes in a file of {len(raw)}")
    try:
        header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _malformed(fn, f"the header is not json: {err}") from None
    if not isinstance(header, dict):
        raise _malformed(fn, "the header is not a json object")
    return header, memoryview(raw)[8 + n :]


def _safe_entry(fn: Any, k: str, v: Any, n_data: int) -> tuple[DType, list[int], int, int]:
    """One header entry checked: (dtype, shape, begin, end) of a non-empty tensor within the n_data data bytes."""
    if not isinstance(v, dict) or not {"dtype", "shape", "data_offsets"} <= set(v):
        raise _malformed(fn, f"entry {k!r} lacks dtype, shape or data_offsets")
    code, shape, offs = v["dtype"], v["shape"], v["data_offsets"]
    if code not in _SAFE_DTYPES:
        raise DTypeError(
            at=f"safe_load {fn} [{k!r}]",
            why=f"dtype {code!r} is not supported",
            suggestion=f"use one of {', '.join(_SAFE_DTYPES)}",
        )
    ints_ok = isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
    offs_ok = isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
    if not ints_ok or not offs_ok:
        raise _malformed(fn, f"entry {k!r} has shape {shape!r} and data_offsets {offs!r}")
    dt = _SAFE_DTYPES[code]
    b, e = offs
    if not 0 <= b <= e <= n_data or e - b != math.prod(shape) * dt.itemsize:
        raise _malformed(
            fn,
            f"entry {k!r} ({code} {shape}) has data_offsets [{b}, {e}] for {math.prod(shape) * dt.itemsize} bytes of {n_data}",
        )
    if math.prod(shape) == 0:
        raise InvalidSize(at=f"safe_load {fn} [{k!r}]", why=f"an empty tensor {shape}", suggestion="tensors hold data")
    return dt, shape, b, e


def _safe_tensor(fn: Any, k: str, dt: DType, shape: list[int], data: memoryview) -> Tensor:
    """An entry's little-endian bytes as a data-backed Tensor (bfloat16 from its bits; bools must be 0 or 1)."""
    store = np.dtype(np.uint16 if dt is dtypes.bfloat16 else dt.np).newbyteorder("<")
    arr = np.frombuffer(data, dtype=store).reshape(shape).astype(store.newbyteorder("="))
    if dt is dtypes.bfloat16:
        arr = bf16_from_bits(arr)
    elif dt is dtypes.bool and arr.view(np.uint8).max() > 1:
        raise _malformed(fn, f"entry {k!r} holds bool bytes other than 0 and 1")
    return Tensor(arr, dt)


def safe_load(fn: str | os.PathLike[str]) -> dict[str, Tensor]:
    """Read a safetensors file into {name: data-backed Tensor} (bool, int8..uint64, float16, bfloat16, float32,
    float64). A truncated file, a bad header, an unknown dtype or data offsets that do not fit is a diagnostic."""
    try:
        with open(fn, "rb") as f:
            raw = f.read()
    except OSError as err:
        raise InvalidArgument(at=f"safe_load {fn}", why=f"cannot read the file: {err}", suggestion="check the path") from None
    header, data = _safe_header(fn, raw)
    out: dict[str, Tensor] = {}
    spans = []
    for k, v in header.items():
        if k == "__metadata__":
            continue
        dt, shape, b, e = _safe_entry(fn, k, v, len(data))
        spans.append((b, e, k))
        out[k] = _safe_tensor(fn, k, dt, shape, data[b:e])
    spans.sort()
    for (_, e1, k1), (b2, _, k2) in itertools.pairwise(spans):
        if b2 < e1:
            raise _malformed(fn, f"the data of {k1!r} and {k2!r} overlap")
    return out
