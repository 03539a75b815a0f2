"""The com.microsoft ops that exported transformers commonly carry (onnxruntime's contrib ops), where they are
compositions of the Tensor API: FusedMatMul, the GELU variants, QuickGelu, BiasAdd, and the skip / simplified
layer normalizations. `OPS` is merged into the importer's table for the com.microsoft domain; `erf_gelu` and
`normalized` serve the standard domain's Gelu, LayerNormalization and RMSNormalization too."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from egraph_compiler.frontend.onnx.values import NotSupportedError, Value, given, tensor_of
from egraph_compiler.frontend.tensor import Tensor


def _tensor_if_given(ins: list[Value], i: int) -> Tensor | None:
    return tensor_of(ins[i]) if given(ins, i) else None


def erf_gelu(x: Tensor) -> Tensor:
    """GELU with the exact erf (ONNX Gelu's default, com.microsoft Gelu)."""
    return x * 0.5 * (1.0 + (x * (1 / math.sqrt(2))).erf())


def _fused_matmul(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """alpha * op(A) @ op(B), op a transpose of the last two axes where transA / transB say."""
    if at.get("transBatchA", 0) or at.get("transBatchB", 0):
        raise NotSupportedError("FusedMatMul with transBatchA/transBatchB")
    a, b = tensor_of(ins[0]), tensor_of(ins[1])
    a = a.transpose(-1, -2) if at.get("transA", 0) else a
    b = b.transpose(-1, -2) if at.get("transB", 0) else b
    alpha = float(at.get("alpha", 1.0))
    y = a @ b
    return [y * alpha if alpha != 1.0 else y]


def _fast_gelu(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """The tanh approximation of GELU, of X (+ bias)."""
    x, bias = tensor_of(ins[0]), _tensor_if_given(ins, 1)
    x = x + bias if bias is not None else x
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
    return [0.5 * x * (1.0 + inner.tanh())]


def _skip_norm(simplified: bool) -> Callable[..., list[Value]]:
    """(Simplified) layer normalization of input + skip (+ bias) over the last axis, times gamma (+ beta); the
    outputs: the result, the mean and the inverse standard deviation (the mean is 0 where simplified), and the sum."""

    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        x, skip, gamma = tensor_of(ins[0]), tensor_of(ins[1]), tensor_of(ins[2])
        beta, bias = (None, _tensor_if_given(ins, 3)) if simplified else (_tensor_if_given(ins, 3), _tensor_if_given(ins, 4))
        s = x + skip + bias if bias is not None else x + skip
        y, mean, inv = normalized(s, simplified, float(at.get("epsilon", 1e-12 if not simplified else 1e-6)), -1)
        y = y * gamma
        return [y + beta if beta is not None else y, mean, inv, s]

    return op


def normalized(x: Tensor, simplified: bool, eps: float, axis: int, in_float32: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """(normalized x, mean, 1/std) over the axes from `axis` on, in float32 (else in x's dtype, where
    `in_float32` is False: LayerNormalization's stash_type), the result in x's dtype; `simplified`: RMS
    normalization, no mean subtracted (the mean output is 0)."""
    xf = x.cast("float32") if in_float32 and x.dtype.name != "float32" else x
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = xf.mean(axes, keepdim=True) if not simplified else xf.zeros_like().sum(axes, keepdim=True)
    centered = xf - mean if not simplified else xf
    inv = ((centered * centered).mean(axes, keepdim=True) + eps).rsqrt()
    return (centered * inv).cast(x.dtype), mean, inv


def _simplified_layernorm(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """x / sqrt(mean(x**2) + eps) * scale over the axes from `axis` on (RMSNorm); outputs the result and 1/rms."""
    x, scale = tensor_of(ins[0]), tensor_of(ins[1])
    y, _, inv = normalized(x, True, float(at.get("epsilon", 1e-5)), int(at.get("axis", -1)))
    return [y * scale, inv]


OPS: dict[str, Callable[..., list[Value]]] = {
    "FusedMatMul": _fused_matmul,
    "Gelu": lambda ins, at, opset: [erf_gelu(tensor_of(ins[0]))],
    "BiasGelu": lambda ins, at, opset: [erf_gelu(tensor_of(ins[0]) + tensor_of(ins[1]))],
    "FastGelu": _fast_gelu,
    "QuickGelu": lambda ins, at, opset: [tensor_of(ins[0]) * (float(at.get("alpha", 1.702)) * tensor_of(ins[0])).sigmoid()],
    "BiasAdd": lambda ins, at, opset: [tensor_of(ins[0]) + tensor_of(ins[1]) + tensor_of(ins[2])],
    "SkipLayerNormalization": _skip_norm(simplified=False),
    "SkipSimplifiedLayerNormalization": _skip_norm(simplified=True),
    "SimplifiedLayerNormalization": _simplified_layernorm,
}
