"""The real models of the model benchmark, written once for our Tensor API and once for PyTorch.

Each model is a function of named float32 inputs (activations and weights), so both compilers get the same
program on the same arrays. Weights are inputs, not constants: nothing is folded at compile time that PyTorch
has to compute. Sizes follow the issue that asked for the benchmark: an MLP block 512x1024 -> 4096 -> 1024 with
GELU and a residual, a ResNet basic block on 4x64x56x56 (BN folded into a per-channel scale and shift) and the
first block of the next stage (stride 2 to 128 channels, with a 1x1 stride-2 shortcut), a GPT-2 block (T=128,
C=768, 12 heads, causal), and a chain of small dense layers at several depths.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Arrays = dict[str, np.ndarray]
LN_EPS = 1e-5


@dataclass(frozen=True)
class Model:
    name: str
    label: str
    shapes: dict[str, tuple[int, ...]]
    ours: Callable[..., Any]  # (**Tensor) -> Tensor (our API)
    torch: Callable[..., Any]  # (**torch.Tensor) -> torch.Tensor
    rtol: float = 2e-3
    atol: float = 2e-3

    def inputs(self) -> Arrays:
        """float32 inputs seeded by the model's name; weights scaled by 1/sqrt(fan-in) so activations stay O(1)."""
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        out: Arrays = {}
        for k, s in self.shapes.items():
            a = rng.standard_normal(s, dtype=np.float32)
            if k.startswith("w"):
                fan_in = int(np.prod(s[1:])) if len(s) == 4 else s[0]
                a *= np.float32(1 / math.sqrt(fan_in))
            elif k.startswith(("b", "shift")):
                a *= np.float32(0.1)
            elif k.startswith(("scale", "g")):
                a = np.float32(1) + np.float32(0.1) * a
            out[k] = a
        return out


# ---- our Tensor API --------------------------------------------------------------------------------------------------


def _ln(x: Any, g: Any, b: Any) -> Any:
    return x.layernorm(-1, eps=LN_EPS) * g + b


def ours_mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    return x + ((x @ w1 + b1).gelu() @ w2 + b2)


def dense_chain_fn(depth: int) -> Callable[..., Any]:
    """Both APIs agree on every op used here: one function serves our Tensor and torch's."""

    def f(x: Any, **p: Any) -> Any:
        for i in range(depth):
            x = (x @ p[f"w{i}"] + p[f"b{i}"]).relu()
        return x

    return f


def ours_resnet_block(x: Any, w1: Any, scale1: Any, shift1: Any, w2: Any, scale2: Any, shift2: Any) -> Any:
    c = x.shape[1]

    def bn(t: Any, s: Any, h: Any) -> Any:
        return t * s.reshape(1, c, 1, 1) + h.reshape(1, c, 1, 1)

    y = bn(x.conv2d(w1, padding=1), scale1, shift1).relu()
    y = bn(y.conv2d(w2, padding=1), scale2, shift2)
    return (y + x).relu()


def ours_resnet_down_block(
    x: Any, w1: Any, scale1: Any, shift1: Any, w2: Any, scale2: Any, shift2: Any, wd: Any, scaled: Any, shiftd: Any
) -> Any:
    c = w1.shape[0]

    def bn(t: Any, s: Any, h: Any) -> Any:
        return t * s.reshape(1, c, 1, 1) + h.reshape(1, c, 1, 1)

    y = bn(x.conv2d(w1, stride=2, padding=1), scale1, shift1).relu()
    y = bn(y.conv2d(w2, padding=1), scale2, shift2)
    return (y + bn(x.conv2d(wd, stride=2), scaled, shiftd)).relu()


def ours_gpt2_block(heads: int) -> Callable[..., Any]:
    def f(
        x: Any,
        g1: Any,
        bb1: Any,
        w_qkv: Any,
        b_qkv: Any,
        w_proj: Any,
        b_proj: Any,
        g2: Any,
        bb2: Any,
        w_fc: Any,
        b_fc: Any,
        w_out: Any,
        b_out: Any,
    ) -> Any:
        t, c = x.shape
        d = c // heads
        qkv = _ln(x, g1, bb1) @ w_qkv + b_qkv  # (T, 3C)
        q, k, v = (qkv[:, i * c : (i + 1) * c].reshape(t, heads, d).permute(1, 0, 2) for i in range(3))
        a = q.scaled_dot_product_attention(k, v, is_causal=True)  # (H, T, D)
        x = x + (a.permute(1, 0, 2).reshape(t, c) @ w_proj + b_proj)
        return x + ((_ln(x, g2, bb2) @ w_fc + b_fc).gelu() @ w_out + b_out)

    return f


# ---- PyTorch -----------------------------------------------------------------------------------------------------------


def torch_mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    from torch.nn import functional as fn

    return x + (fn.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2)


def torch_resnet_block(x: Any, w1: Any, scale1: Any, shift1: Any, w2: Any, scale2: Any, shift2: Any) -> Any:
    from torch.nn import functional as fn

    c = x.shape[1]
    y = fn.relu(fn.conv2d(x, w1, padding=1) * scale1.reshape(1, c, 1, 1) + shift1.reshape(1, c, 1, 1))
    y = fn.conv2d(y, w2, padding=1) * scale2.reshape(1, c, 1, 1) + shift2.reshape(1, c, 1, 1)
    return fn.relu(y + x)


def torch_resnet_down_block(
    x: Any, w1: Any, scale1: Any, shift1: Any, w2: Any, scale2: Any, shift2: Any, wd: Any, scaled: Any, shiftd: Any
) -> Any:
    from torch.nn import functional as fn

    c = w1.shape[0]

    def bn(t: Any, s: Any, h: Any) -> Any:
        return t * s.reshape(1, c, 1, 1) + h.reshape(1, c, 1, 1)

    y = fn.relu(bn(fn.conv2d(x, w1, stride=2, padding=1), scale1, shift1))
    y = bn(fn.conv2d(y, w2, padding=1), scale2, shift2)
    return fn.relu(y + bn(fn.conv2d(x, wd, stride=2), scaled, shiftd))


def torch_gpt2_block(heads: int) -> Callable[..., Any]:
    def f(
        x: Any,
        g1: Any,
        bb1: Any,
        w_qkv: Any,
        b_qkv: Any,
        w_proj: Any,
        b_proj: Any,
        g2: Any,
        bb2: Any,
        w_fc: Any,
        b_fc: Any,
        w_out: Any,
        b_out: Any,
    ) -> Any:
        from torch.nn import functional as fn

        t, c = x.shape
        d = c // heads
        qkv = fn.layer_norm(x, (c,), g1, bb1, LN_EPS) @ w_qkv + b_qkv
        q, k, v = (qkv[:, i * c : (i + 1) * c].reshape(t, heads, d).permute(1, 0, 2) for i in range(3))
        a = fn.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + (a.permute(1, 0, 2).reshape(t, c) @ w_proj + b_proj)
        h = fn.gelu(fn.layer_norm(x, (c,), g2, bb2, LN_EPS) @ w_fc + b_fc, approximate="tanh")
        return x + (h @ w_out + b_out)

    return f


# ---- the suite ---------------------------------------------------------------------------------------------------------


def mlp(m: int = 512, c: int = 1024, h: int = 4096) -> Model:
    return Model(
        f"mlp_{m}x{c}x{h}",
        f"MLP {m}x{c} -> {h} -> {c}, GELU, residual",
        {"x": (m, c), "w1": (c, h), "b1": (h,), "w2": (h, c), "b2": (c,)},
        ours_mlp,
        torch_mlp,
    )


def dense_chain(depth: int, batch: int = 16, width: int = 32) -> Model:
    shapes: dict[str, tuple[int, ...]] = {"x": (batch, width)}
    for i in range(depth):
        shapes[f"w{i}"], shapes[f"b{i}"] = (width, width), (width,)
    return Model(
        f"dense_chain_{depth}" if (batch, width) == (16, 32) else f"dense_chain_{depth}_{batch}x{width}",
        f"{depth} x relu(x @ W + b), x {batch}x{width}",
        shapes,
        dense_chain_fn(depth),
        dense_chain_fn(depth),
    )


def resnet_block(n: int = 4, c: int = 64, hw: int = 56) -> Model:
    shapes = {
        "x": (n, c, hw, hw),
        "w1": (c, c, 3, 3),
        "scale1": (c,),
        "shift1": (c,),
        "w2": (c, c, 3, 3),
        "scale2": (c,),
        "shift2": (c,),
    }
    return Model(
        f"resnet_block_{n}x{c}x{hw}", f"ResNet basic block {n}x{c}x{hw}x{hw}", shapes, ours_resnet_block, torch_resnet_block
    )


def resnet_down_block(n: int = 4, c: int = 64, hw: int = 56) -> Model:
    """A ResNet stage's first block: 3x3 stride 2 to twice the channels, 3x3, and a 1x1 stride-2 shortcut."""
    co = 2 * c
    shapes = {
        "x": (n, c, hw, hw),
        "w1": (co, c, 3, 3),
        "scale1": (co,),
        "shift1": (co,),
        "w2": (co, co, 3, 3),
        "scale2": (co,),
        "shift2": (co,),
        "wd": (co, c, 1, 1),
        "scaled": (co,),
        "shiftd": (co,),
    }
    return Model(
        f"resnet_down_{n}x{c}x{hw}",
        f"ResNet downsampling block {n}x{c}x{hw}x{hw} -> {co}",
        shapes,
        ours_resnet_down_block,
        torch_resnet_down_block,
    )


def gpt2_block(t: int = 128, c: int = 768, heads: int = 12) -> Model:
    shapes = {
        "x": (t, c),
        "g1": (c,),
        "bb1": (c,),
        "w_qkv": (c, 3 * c),
        "b_qkv": (3 * c,),
        "w_proj": (c, c),
        "b_proj": (c,),
        "g2": (c,),
        "bb2": (c,),
        "w_fc": (c, 4 * c),
        "b_fc": (4 * c,),
        "w_out": (4 * c, c),
        "b_out": (c,),
    }
    return Model(
        f"gpt2_block_T{t}" if (c, heads) == (768, 12) else f"gpt2_block_T{t}_C{c}_H{heads}",
        f"GPT-2 block T={t}, C={c}, {heads} heads, causal",
        shapes,
        ours_gpt2_block(heads),
        torch_gpt2_block(heads),
    )


DENSE_DEPTHS = (1, 2, 4, 8, 16, 32, 48)


def suite(quick: bool = False) -> list[Model]:
    """The models at the issue's sizes; `quick`: small sizes of the same models (a smoke run)."""
    if quick:
        return [
            mlp(64, 128, 256),
            gpt2_block(16, 64, 4),
            resnet_block(1, 8, 12),
            resnet_down_block(1, 8, 12),
            *(dense_chain(d) for d in (1, 2, 4, 8)),
        ]
    return [mlp(), gpt2_block(), resnet_block(), resnet_down_block(), *(dense_chain(d) for d in DENSE_DEPTHS)]


def variants() -> list[Model]:
    """The same kinds of model at other sizes than the suite's (a check that the suite's sizes are not special):
    other widths, batches, sequence lengths, head counts and channel counts, sizes no tile divides (100 rows,
    20x20 images, 96 channels) and a batch of one."""
    return [
        mlp(256, 768, 3072),
        mlp(64, 512, 2048),
        mlp(100, 640, 2560),
        mlp(1, 768, 3072),
        gpt2_block(64, 512, 8),
        gpt2_block(256, 384, 6),
        gpt2_block(100, 640, 10),
        resnet_block(2, 128, 28),
        resnet_block(8, 32, 32),
        resnet_block(1, 96, 20),
        resnet_down_block(2, 128, 28),
        resnet_down_block(1, 96, 20),
        dense_chain(12, 64, 128),
        dense_chain(24, 8, 64),
    ]
