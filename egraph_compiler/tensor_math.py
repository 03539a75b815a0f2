"""Elementwise math, activations and dtype helpers of the Tensor API (tinygrad's names), composed from the
primitive Tensor ops; `self` is a Tensor."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from egraph_compiler.tensor import Tensor  # noqa: F401


class TensorMath:
    """Elementwise math, activations and dtype helpers."""
