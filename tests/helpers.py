"""Small shared helpers for the tests: numpy comparisons and hypothesis strategies."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from hypothesis import strategies as st

from egraph_compiler import Tensor


def check(got: Any, want: Any, *, rtol: float = 1e-5, atol: float = 1e-5, dtype: Any = None) -> None:
    """Assert equal shapes (and dtype if given); ints/bools exactly, floats within tolerance (NaN == NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), f"dtype {got.dtype} != {np.dtype(dtype)}"
    if got.dtype.kind in "biu" and want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)


def run(t: Tensor) -> np.ndarray:
    out = t.numpy()
    assert isinstance(out, np.ndarray)
    return out


def rand_array(shape: tuple[int, ...], dtype: Any = np.float32, seed: int = 0, lo: int = -8, hi: int = 8) -> np.ndarray:
    r = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return r.standard_normal(shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return r.random(shape) < 0.5
    if np.dtype(dtype).kind == "u":
        lo = 0
    return r.integers(lo, hi, shape).astype(dtype)


# ---- strategies --------------------------------------------------------------------------------


def shapes(min_dims: int = 1, max_dims: int = 3, max_side: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(1, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


@st.composite
def arrays(draw: st.DrawFn, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """Seeded arrays: standard-normal floats, ints in [-8, 8) (unsigned [0, 8)), random bools."""
    seed = draw(st.integers(0, 2**32 - 1))
    return rand_array(shape, dtype, seed)


@st.composite
def broadcastable_pair(draw: st.DrawFn, max_dims: int = 3) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast: a full shape and a copy with dropped leading axes and some axes set to 1."""
    full = draw(shapes(1, max_dims))
    other = list(full[draw(st.integers(0, len(full) - 1)) :])
    other = [1 if draw(st.booleans()) else s for s in other]
    pair = (full, tuple(other))
    return pair if draw(st.booleans()) else pair[::-1]


def conv_ref(x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 0) -> np.ndarray:
    """A direct convolution in float64 (numpy's sliding windows), groups 1: the oracle of the conv2d tests."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwyx,ocyx->nohw", win, w.astype(np.float64), optimize=True)


def examples(fast: int) -> int:
    """Hypothesis examples for a property with its own count: `fast` in the default profile, the profile's count
    under HYPOTHESIS_PROFILE=thorough or nightly (`make fuzz`)."""
    from hypothesis import settings

    return fast if os.environ.get("HYPOTHESIS_PROFILE", "fast") == "fast" else max(fast, settings.default.max_examples)


def gpu_or_skip() -> None:
    """Skip the calling test unless CuPy is installed and sees a CUDA GPU (tests marked `gpu`)."""
    import pytest

    try:
        import cupy
    except ImportError:
        pytest.skip("cupy is not installed (pip install cupy-cuda12x)")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA GPU")
    except Exception as e:  # no driver / no device
        pytest.skip(f"no usable CUDA GPU: {e}")


def tinygrad_cpu_or_skip() -> Any:
    """The tinygrad module, or skip the calling test where it is not installed or its CPU device cannot run here
    (the device compiles each kernel with clang)."""
    import shutil

    import pytest

    tinygrad = pytest.importorskip("tinygrad")
    if shutil.which("clang") is None:
        pytest.skip("tinygrad's CPU device needs clang, which this machine lacks")
    return tinygrad
