"""Realizing tensors: `Tensor.numpy()` lands here."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from egraph_compiler.tensor import Tensor


def realize(t: Tensor) -> np.ndarray:
    from egraph_compiler.backends.reference import evaluate

    return evaluate(t.uop)
