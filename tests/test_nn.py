"""tinygrad's nn surface: the creation methods (uniform, normal, randint, linspace, the initialisers), the layers'
functional forms (linear, batchnorm, losses, conv_transpose2d, interpolate, max_unpool2d), egraph_compiler.frontend.nn's
layers and state dicts, and safetensors files. Oracles: numpy, torch (functional ops and layers with copied
weights), tinygrad (default initialisation: names, shapes, dtypes); most values go through the reference
interpreter, the models once through optimize + LLVM."""

from __future__ import annotations

import collections
import json
import math
import struct
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import check, rand_array, run, tinygrad_cpu_or_skip
from hypothesis import given
from hypothesis import strategies as st

from egraph_compiler import Tensor, optimize
from egraph_compiler.frontend import nn
from egraph_compiler.ir.diagnostics import (
    AxisError,
    CompilerError,
    DTypeError,
    InvalidArgument,
    InvalidSize,
    MissingInput,
    ShapeMismatch,
)
from egraph_compiler.ir.dtypes import bf16_round, dtypes
from egraph_compiler.ir.interpret import evaluate

torch = pytest.importorskip("torch")
F = torch.nn.functional


def ref(t: Tensor, **inputs: np.ndarray) -> np.ndarray:
    """The reference interpreter's value of t."""
    return np.asarray(evaluate(t.uop, inputs))


def T(a: np.ndarray) -> Tensor:
    return Tensor(a)


def tt(a: np.ndarray) -> Any:
    return torch.from_numpy(np.array(a))  # a writable copy (0-d arrays stay 0-d)


# ---- creation ------------------------------------------------------------------------------------------------

FLOATS = ["float16", "bfloat16", "float32", "float64"]


@given(
    shape=st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple),
    low=st.floats(-100, 100),
    width=st.sampled_from([0.5, 1.0, 7.0, 1e3]),  # every dtype has values in any such range (bfloat16: 1/2 apart)
    dtype=st.sampled_from(FLOATS),
    seed=st.integers(0, 2**32),
)
def test_uniform_stays_in_its_half_open_range(shape: tuple[int, ...], low: float, width: float, dtype: str, seed: int) -> None:
    high = low + width
    t = Tensor.uniform(*shape, low=low, high=high, dtype=dtype, seed=seed)
    v = ref(t).astype(np.float64)
    assert t.shape == shape and t.dtype.name == dtype and v.shape == shape
    assert (v >= low).all() and (v < high).all(), (v.min(), v.max(), low, high)
    if dtype == "bfloat16":
        np.testing.assert_array_equal(v, bf16_round(v.astype(np.float32)))  # really bfloat16 values
    np.testing.assert_array_equal(ref(Tensor.uniform(*shape, low=low, high=high, dtype=dtype, seed=seed)), v)


def test_uniform_rounding_up_to_high_stays_below_it() -> None:
    # float16 has 11 bits: of 20,000 draws in [0, 1) some round to 1.0, which must become the largest half below 1
    v = ref(Tensor.uniform(20_000, dtype="float16", seed=3))
    assert v.dtype == np.float16 and v.max() == np.float16(1 - 2**-11) and v.min() >= 0
    assert abs(float(v.astype(np.float64).mean()) - 0.5) < 0.02
    b = ref(Tensor.uniform(20_000, low=1.0, high=2.0, dtype="bfloat16", seed=4))
    assert b.max() == np.float32(2 - 2**-7) and b.min() >= 1


@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple),
    low=st.integers(-(2**40), 2**40),
    width=st.integers(1, 2**20),
    dtype=st.sampled_from(["int32", "int64", "int16", "uint8"]),
    seed=st.integers(0, 1000),
)
def test_randint_range_dtype_and_seed(shape: tuple[int, ...], low: int, width: int, dtype: str, seed: int) -> None:
    info = np.iinfo(dtype)
    low = int(np.clip(low, info.min, info.max - 1))
    high = min(low + width, int(info.max) + 1)
    t = Tensor.randint(*shape, low=low, high=high, dtype=dtype, seed=seed)
    v = ref(t)
    assert t.dtype.name == dtype and v.dtype == np.dtype(dtype) and v.shape == shape
    assert (v.astype(object) >= low).all() and (v.astype(object) < high).all()
    np.testing.assert_array_equal(ref(Tensor.randint(*shape, low=low, high=high, dtype=dtype, seed=seed)), v)


def test_randint_defaults_cover_the_range_and_uniform_with_int_dtype() -> None:
    v = ref(Tensor.randint(2000, seed=1))
    assert v.dtype == np.int32 and set(np.unique(v)) == set(range(10))  # tinygrad's low=0, high=10, int32
    u = ref(Tensor.uniform(500, low=-3, high=4, dtype="int64", seed=2))  # an int dtype with int bounds: integers
    assert u.dtype == np.int64 and set(np.unique(u)) == set(range(-3, 4))
    # tinygrad's default dtypes: floats float32, randperm int32
    assert ref(Tensor.randperm(5)).dtype == np.int32 and ref(Tensor.uniform(2)).dtype == np.float32
    assert ref(Tensor.normal(2)).dtype == np.float32 and ref(Tensor.kaiming_normal(2, 3)).dtype == np.float32


@given(
    start=st.floats(-1e4, 1e4) | st.integers(-1000, 1000),
    stop=st.floats(-1e4, 1e4) | st.integers(-1000, 1000),
    steps=st.integers(1, 40),
    dtype=st.sampled_from([None, "float32", "float64", "int32", "int64", "float16"]),
)
def test_linspace_against_numpy(start: float, stop: float, steps: int, dtype: str | None) -> None:
    t = Tensor.linspace(start, stop, steps, dtype=dtype)
    assert t.dtype.name == (dtype or "float32") and t.shape == (steps,)
    want = np.linspace(float(start), float(stop), steps)
    if dtype is not None and "int" in dtype:
        check(ref(t), np.trunc(want).astype(dtype), dtype=dtype)  # a cast truncates (torch and tinygrad too)
    else:
        got = ref(t)
        assert got.dtype == np.dtype(dtype or "float32")
        check(got, want.astype(dtype or "float32"), rtol=1e-3 if dtype == "float16" else 1e-6, atol=1e-6)
        assert got[0] == np.asarray(start, got.dtype) and (steps == 1 or got[-1] == np.asarray(stop, got.dtype))


def test_linspace_matches_torch_and_tinygrad_examples() -> None:
    check(ref(Tensor.linspace(0, 10, 5)), torch.linspace(0, 10, 5).numpy(), dtype=np.float32)
    check(ref(Tensor.linspace(-1, 1, 5)), np.array([-1, -0.5, 0, 0.5, 1]), dtype=np.float32)
    check(ref(Tensor.linspace(-3.5, 2, 4, dtype="int64")), torch.linspace(-3.5, 2, 4, dtype=torch.int64).numpy())
    check(ref(Tensor.linspace(3, 9, 1)), np.array([3.0]), dtype=np.float32)


def test_normal_and_the_initialisers_have_their_spread() -> None:
    n = ref(Tensor.normal(200, 100, mean=3.0, std=2.0, seed=1))
    assert n.dtype == np.float32 and abs(n.mean() - 3) < 0.05 and abs(n.std() - 2) < 0.05
    shape = (300, 40, 3)
    fan_in = 40 * 3
    ku = ref(Tensor.kaiming_uniform(*shape, seed=2))  # tinygrad's a=0.01
    bound = math.sqrt(6 / (1 + 0.01**2) / fan_in)
    assert ku.shape == shape and ku.dtype == np.float32 and -bound <= ku.min() and ku.max() < bound
    assert ku.max() > 0.99 * bound and ku.min() < -0.99 * bound
    kn = ref(Tensor.kaiming_normal(*shape, a=0.2, seed=3))
    assert abs(kn.std() / math.sqrt(2 / (1 + 0.04) / fan_in) - 1) < 0.02
    g = ref(Tensor.glorot_uniform(50, 30, seed=4))
    gb = math.sqrt(6 / (50 + 30))
    assert -gb <= g.min() and g.max() < gb and g.max() > 0.95 * gb
    s = ref(Tensor.scaled_uniform(40, 25, seed=5))
    assert s.max() < 1000**-0.5 and s.min() >= -(1000**-0.5) and s.max() > 0.95 * 1000**-0.5
    assert ref(Tensor.kaiming_uniform(4, 5, dtype="float16", seed=1)).dtype == np.float16


def test_seeds_and_manual_seed_reproduce() -> None:
    assert not np.array_equal(ref(Tensor.uniform(8, seed=1)), ref(Tensor.uniform(8, seed=2)))
    Tensor.manual_seed(7)
    a = [ref(Tensor.normal(5)), ref(Tensor.randperm(9)), ref(Tensor.glorot_uniform(3, 4))]
    Tensor.manual_seed(7)
    b = [ref(Tensor.normal(5)), ref(Tensor.randperm(9)), ref(Tensor.glorot_uniform(3, 4))]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@given(n=st.integers(1, 300), seed=st.integers(0, 99), dtype=st.sampled_from(["int32", "int64", "int16", "float32"]))
def test_randperm_is_a_permutation(n: int, seed: int, dtype: str) -> None:
    v = ref(Tensor.randperm(n, dtype=dtype, seed=seed))
    assert v.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.sort(v), np.arange(n))


def test_like_constructors() -> None:
    h = Tensor(rand_array((3, 4), np.float16))
    r = Tensor.rand_like(h, seed=1)
    assert r.shape == (3, 4) and r.dtype is dtypes.float16 and ((ref(r) >= 0) & (ref(r) < 1)).all()
    n = Tensor.randn_like(h, dtype="float32", seed=1)
    assert n.shape == (3, 4) and n.dtype is dtypes.float32
    e = Tensor(rand_array((2, 5), np.int32)).empty_like(name="w_in")
    assert e.shape == (2, 5) and e.dtype is dtypes.int32
    w = np.arange(10, dtype=np.int32).reshape(2, 5)
    check(ref(e * 2, w_in=w), w * 2, dtype=np.int32)
    with pytest.raises(MissingInput):
        ref(e)
    a, b = Tensor.empty(2, name="q").empty_like(), Tensor.empty(2, name="q").empty_like(dtype="int8")
    assert a.uop.arg[0] != b.uop.arg[0] and b.dtype is dtypes.int8  # fresh names
    with pytest.raises(DTypeError):
        Tensor.rand_like(Tensor([1, 2]))  # rand makes floats (as tinygrad)


def test_creation_through_the_default_backend() -> None:
    check(run(Tensor.randint(2, 3, low=5, high=6, seed=0)), np.full((2, 3), 5), dtype=np.int32)
    check(run(Tensor.linspace(1, 2, 3, dtype="float64") * 2), np.array([2.0, 3.0, 4.0]), dtype=np.float64)


BAD_CREATION: list[tuple[Callable[[], Any], type[CompilerError]]] = [
    (lambda: Tensor.uniform(3, low=1.0, high=1.0), InvalidArgument),
    (lambda: Tensor.uniform(3, low=0.0, high=math.inf), InvalidArgument),
    (lambda: Tensor.uniform(3, low="0", high=1.0), InvalidArgument),
    (lambda: Tensor.uniform(3, 0), InvalidSize),
    (lambda: Tensor.uniform(3, low=0.0, high=1e6, dtype="float16"), DTypeError),  # beyond the dtype's range
    (lambda: Tensor.uniform(3, low=1.0 + 1e-6, high=1.0 + 2e-6, dtype="float16"), InvalidArgument),  # no half in range
    (lambda: Tensor.uniform(3, low=0.5, high=2.5, dtype="int32"), DTypeError),
    (lambda: Tensor.normal(3, std=-1.0), InvalidArgument),
    (lambda: Tensor.normal(3, dtype="int32"), DTypeError),
    (lambda: Tensor.randint(3, low=5, high=5), InvalidArgument),
    (lambda: Tensor.randint(3, low=0.5, high=5), InvalidArgument),
    (lambda: Tensor.randint(3, dtype="float32"), DTypeError),
    (lambda: Tensor.randint(3, low=0, high=300, dtype="uint8"), DTypeError),
    (lambda: Tensor.linspace(0, 1, 0), InvalidSize),
    (lambda: Tensor.linspace(0, math.nan, 3), InvalidArgument),
    (lambda: Tensor.linspace(0, 1, 3, dtype="bool"), DTypeError),
    (lambda: Tensor.linspace(0, 1e6, 3, dtype="int16"), DTypeError),
    (lambda: Tensor.linspace(0, 1e6, 3, dtype="float16"), DTypeError),
    (lambda: Tensor.glorot_uniform(5), ShapeMismatch),
    (lambda: Tensor.kaiming_normal(4, 3, a=math.inf), InvalidArgument),
    (lambda: Tensor.randperm(0), InvalidSize),
    (lambda: Tensor.randperm(300, dtype="int8"), DTypeError),
    (lambda: Tensor.randperm(300, dtype="bfloat16"), DTypeError),  # 257 is not a bfloat16
    (lambda: Tensor.uniform(3, seed=1.5), InvalidArgument),
]


@pytest.mark.parametrize("make,err", BAD_CREATION, ids=[str(i) for i in range(len(BAD_CREATION))])
def test_bad_creation_arguments_are_diagnostics(make: Callable[[], Any], err: type[CompilerError]) -> None:
    with pytest.raises(err):
        make()


# ---- functional forms ------------------------------------------------------------------------------------------


def test_linear_and_dropout() -> None:
    x, w, b = rand_array((3, 4), seed=1), rand_array((4, 5), seed=2), rand_array((5,), seed=3)
    check(ref(T(x).linear(T(w), T(b))), x @ w + b, rtol=1e-5)
    check(ref(T(x).linear(T(w))), x @ w, rtol=1e-5)
    check(ref(T(x).linear(T(w[:, 0]))), x * w[:, 0])  # a 1-d weight scales elementwise (tinygrad)
    check(ref(T(x).linear(T(w), T(b), dtype="float16")), (x @ w + b).astype(np.float16), rtol=1e-2, atol=2e-2)
    with pytest.raises(ShapeMismatch):
        T(x).linear(T(w.T))  # torch's (out, in) layout needs a transpose
    with pytest.raises(InvalidArgument):
        T(x).linear(w)  # type: ignore[arg-type]
    check(ref(T(x).dropout(0.3)), x)  # inference: the identity
    check(ref(T(x).dropout()), x)
    for p in (-0.1, 1.5, "a"):
        with pytest.raises(InvalidArgument):
            T(x).dropout(p)  # type: ignore[arg-type]
    assert not hasattr(Tensor, "training")  # tinygrad 0.14 has a TRAINING context variable, no Tensor.training


def test_batchnorm_against_torch() -> None:
    x = rand_array((2, 3, 4, 5), seed=1)
    mean, var = rand_array((3,), seed=2), rand_array((3,), seed=3) ** 2 + 0.5
    w, b = rand_array((3,), seed=4), rand_array((3,), seed=5)
    want = F.batch_norm(tt(x), tt(mean), tt(var), tt(w), tt(b), eps=1e-5).numpy()
    invstd = (T(var) + 1e-5).rsqrt()
    check(ref(T(x).batchnorm(T(w), T(b), T(mean), invstd)), want, rtol=1e-4, atol=1e-5)
    check(ref(T(x).batchnorm(T(w), T(b), T(mean), invstd.reshape(1, 3, 1, 1))), want, rtol=1e-4, atol=1e-5)
    plain = F.batch_norm(tt(x), tt(mean), tt(var), eps=1e-5).numpy()
    check(ref(T(x).batchnorm(None, None, T(mean), invstd)), plain, rtol=1e-4, atol=1e-5)
    # statistics over two axes (1 and 3)
    m2, s2 = rand_array((3, 5), seed=6), rand_array((3, 5), seed=7)
    check(ref(T(x).batchnorm(None, None, T(m2), T(s2), axis=(1, 3))), (x - m2[:, None]) * s2[:, None], rtol=1e-5)
    with pytest.raises(ShapeMismatch):
        T(x).batchnorm(T(w), T(b), T(rand_array((4,))), invstd)
    with pytest.raises(AxisError):
        T(x).batchnorm(None, None, T(mean), invstd, axis=4)


def _np_log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    m = x - x.max(axis, keepdims=True)
    return m - np.log(np.exp(m).sum(axis, keepdims=True))


@given(
    n=st.integers(1, 4),
    c=st.integers(2, 5),
    spatial=st.sampled_from([(), (3,)]),
    reduction=st.sampled_from(["mean", "sum", "none"]),
    smoothing=st.sampled_from([0.0, 0.1, 0.5]),
    probs=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_cross_entropy_against_torch(
    n: int, c: int, spatial: tuple[int, ...], reduction: str, smoothing: float, probs: bool, seed: int
) -> None:
    logits = rand_array((n, c, *spatial), seed=seed) * 3
    rng = np.random.default_rng(seed)
    if probs:
        target = rng.random((n, c, *spatial)).astype(np.float32)
        target /= target.sum(1, keepdims=True)
    else:
        target = rng.integers(0, c, (n, *spatial)).astype(np.int32)
    want = F.cross_entropy(
        tt(logits), tt(target.astype(np.int64) if not probs else target), reduction=reduction, label_smoothing=smoothing
    ).numpy()
    check(ref(T(logits).cross_entropy(T(target), reduction, smoothing)), want, rtol=1e-5, atol=1e-5)


@given(
    n=st.integers(1, 4),
    c=st.integers(2, 5),
    reduction=st.sampled_from(["mean", "sum", "none"]),
    ignore=st.sampled_from([None, 0, 2, -100]),
    weighted=st.booleans(),
    spatial=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_nll_loss_against_torch(
    n: int, c: int, reduction: str, ignore: int | None, weighted: bool, spatial: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    shp = (n, c, 3) if spatial else (n, c)
    logp = _np_log_softmax(rand_array(shp, seed=seed), 1).astype(np.float32)
    y = rng.integers(0, c, (n, 3) if spatial else (n,)).astype(np.int64)
    if ignore is not None:
        y.flat[0] = ignore
        y.flat[-1] = 0  # at least one label not ignored (all ignored: 0/0, nan in torch and here)
        if ignore == 0:
            y.flat[-1] = 1
    w = rng.random(c).astype(np.float32) + 0.1 if weighted else None
    kw: dict[str, Any] = {"ignore_index": ignore} if ignore is not None else {}
    want = F.nll_loss(tt(logp), tt(y), weight=None if w is None else tt(w), reduction=reduction, **kw).numpy()
    got = T(logp).nll_loss(T(y.astype(np.int32)), None if w is None else T(w), ignore, reduction)
    check(ref(got), want, rtol=1e-5, atol=1e-6)


@given(
    lead=st.sampled_from([(), (2,), (2, 3)]),
    c=st.integers(2, 5),
    reduction=st.sampled_from(["mean", "sum", "none"]),
    ignore=st.sampled_from([-1, 1]),
    smoothing=st.sampled_from([0.0, 0.2]),
    seed=st.integers(0, 1000),
)
def test_sparse_categorical_crossentropy_against_torch(
    lead: tuple[int, ...], c: int, reduction: str, ignore: int, smoothing: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    logits = rand_array((*lead, c), seed=seed) * 2
    y = rng.integers(0, c, lead).astype(np.int64)
    if ignore != -1 and y.size > 1:
        y.flat[0], y.flat[-1] = ignore, (ignore + 1) % c
    got = ref(T(logits).sparse_categorical_crossentropy(T(y), ignore, smoothing, reduction))
    # torch puts classes on axis 1 and reads -100 as "ignore nothing"
    lt, yt = tt(logits.reshape(-1, c)), tt(y.reshape(-1))
    want = F.cross_entropy(
        lt, yt, ignore_index=ignore if ignore != -1 else -100, label_smoothing=smoothing, reduction=reduction
    )
    want_np = want.numpy().reshape(lead) if reduction == "none" else want.numpy()
    check(got, want_np, rtol=1e-5, atol=1e-5)


def test_sparse_categorical_crossentropy_loss_mask_and_tinygrad_example() -> None:
    logits = np.array([[-1, 2, -3], [1, -2, 3]], np.float32)
    want = F.cross_entropy(tt(logits), torch.tensor([1, 2])).numpy()  # tinygrad's documented example
    check(ref(T(logits).sparse_categorical_crossentropy(Tensor([1, 2]))), want, rtol=1e-5)
    x, y = rand_array((4, 5), seed=3), np.array([0, 4, 2, 1], np.int32)
    mask = np.array([True, False, True, True])
    per = -_np_log_softmax(x, -1)[np.arange(4), y]
    got = T(x).sparse_categorical_crossentropy(T(y), loss_mask=T(mask))
    check(ref(got), per[mask].mean(), rtol=1e-5)
    check(ref(T(x).sparse_categorical_crossentropy(T(y), reduction="none", loss_mask=T(mask))), per * mask, rtol=1e-5)
    with pytest.raises(ShapeMismatch):
        T(x).sparse_categorical_crossentropy(T(y), loss_mask=T(mask[:3]))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_crossentropies_against_torch(reduction: str) -> None:
    rng = np.random.default_rng(1)
    p = rng.uniform(0.02, 0.98, (3, 4)).astype(np.float32)
    y = (rng.random((3, 4)) < 0.5).astype(np.float32)
    logits = rand_array((3, 4), seed=2) * 30  # large logits: the stable form must not overflow
    pw = rng.uniform(0.5, 3, 4).astype(np.float32)
    check(
        ref(T(p).binary_crossentropy(T(y), reduction)),
        F.binary_cross_entropy(tt(p), tt(y), reduction=reduction).numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
    check(
        ref(T(logits).binary_crossentropy_logits(T(y), reduction)),
        F.binary_cross_entropy_with_logits(tt(logits), tt(y), reduction=reduction).numpy(),
        rtol=1e-5,
        atol=1e-5,
    )
    check(
        ref(T(logits).binary_crossentropy_logits(T(y), reduction, pos_weight=T(pw))),
        F.binary_cross_entropy_with_logits(tt(logits), tt(y), reduction=reduction, pos_weight=tt(pw)).numpy(),
        rtol=1e-5,
        atol=1e-5,
    )


BAD_LOSSES: list[tuple[Callable[[], Any], type[CompilerError]]] = [
    (lambda: T(rand_array((3, 4))).cross_entropy(Tensor([0, 1, 2]), reduction="avg"), InvalidArgument),
    (lambda: T(rand_array((3, 4))).cross_entropy(Tensor([0, 1]), reduction="mean"), ShapeMismatch),
    (lambda: T(rand_array((3, 4))).cross_entropy(Tensor([0.0, 1.0, 2.0])), DTypeError),
    (lambda: T(rand_array((3, 4))).cross_entropy(Tensor([0, 1, 2]), label_smoothing=1.5), InvalidArgument),
    (lambda: T(rand_array((3, 4))).cross_entropy([0, 1, 2]), InvalidArgument),
    (lambda: T(rand_array((3, 4))).nll_loss(Tensor([0, 1, 2]), weight=Tensor([1.0, 2.0])), ShapeMismatch),
    (lambda: T(rand_array((4,))).nll_loss(Tensor(1)), ShapeMismatch),
    (lambda: T(rand_array((3, 4))).nll_loss(Tensor([0, 1, 2]), ignore_index=1.5), InvalidArgument),
    (lambda: T(rand_array((3, 4))).sparse_categorical_crossentropy(Tensor([[0, 1, 2]])), ShapeMismatch),
    (lambda: T(rand_array((3, 4))).binary_crossentropy(T(rand_array((3, 4))), reduction="max"), InvalidArgument),
]


@pytest.mark.parametrize("make,err", BAD_LOSSES, ids=[str(i) for i in range(len(BAD_LOSSES))])
def test_bad_loss_arguments_are_diagnostics(make: Callable[[], Any], err: type[CompilerError]) -> None:
    with pytest.raises(err):
        make()


CONV_T = [  # groups, stride, dilation, padding, output_padding, kernel
    (1, 1, 1, 0, 0, (3, 3)),
    (2, 2, 1, 1, 1, (3, 2)),
    (1, (2, 3), (1, 2), (1, 0), (1, 2), (2, 3)),
    (2, 3, 2, 2, 0, (3, 3)),
    (1, 2, 1, 3, 0, (2, 2)),  # padding beyond (k-1)*d: the input is cut
]


@pytest.mark.parametrize("groups,stride,dilation,padding,output_padding,kernel", CONV_T)
def test_conv_transpose2d_against_torch(
    groups: int, stride: Any, dilation: Any, padding: Any, output_padding: Any, kernel: tuple[int, int]
) -> None:
    x = rand_array((2, 4, 5, 6), seed=1)
    w = rand_array((4, 3, *kernel), seed=2)
    b = rand_array((3 * groups,), seed=3)
    want = F.conv_transpose2d(
        tt(x), tt(w), tt(b), stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation
    ).numpy()
    got = T(x).conv_transpose2d(T(w), T(b), groups, stride, dilation, padding, output_padding)
    check(ref(got), want, rtol=1e-4, atol=1e-4)


def test_conv_transpose2d_bad_arguments() -> None:
    x, w = T(rand_array((1, 4, 3, 3))), T(rand_array((4, 2, 3, 3)))
    for kwargs, err in [
        ({"groups": 3}, ShapeMismatch),
        ({"groups": 0}, InvalidArgument),
        ({"stride": 0}, InvalidArgument),
        ({"padding": -1}, InvalidArgument),
        ({"padding": 9}, ShapeMismatch),
        ({"bias": T(rand_array((3,)))}, ShapeMismatch),
    ]:
        with pytest.raises(err):
            x.conv_transpose2d(w, **kwargs)
    with pytest.raises(ShapeMismatch):
        T(rand_array((4, 3, 3))).conv_transpose2d(w)


INTERP = [  # input shape, size, mode, align_corners
    ((2, 3, 5, 6), (3, 9), "linear", False),
    ((2, 3, 5, 6), (7, 4), "linear", True),
    ((1, 2, 4, 4), (1, 1), "linear", True),
    ((2, 3, 5, 6), (8, 3), "nearest", False),
    ((2, 3, 5, 6), (9, 4), "nearest-exact", False),
    ((2, 3, 7), (11,), "linear", False),
    ((2, 3, 7), (3,), "nearest", False),
    ((1, 2, 3, 4, 5), (4, 2, 7), "linear", False),
]


@pytest.mark.parametrize("shape,size,mode,align_corners", INTERP)
def test_interpolate_against_torch(shape: tuple[int, ...], size: tuple[int, ...], mode: str, align_corners: bool) -> None:
    x = rand_array(shape, seed=1)
    tmode = {1: "linear", 2: "bilinear", 3: "trilinear"}[len(size)] if mode == "linear" else mode
    kw = {"align_corners": align_corners} if mode == "linear" else {}
    want = F.interpolate(tt(x), size=size, mode=tmode, **kw).numpy()
    check(ref(T(x).interpolate(size, mode, align_corners)), want, rtol=1e-5, atol=1e-5)


def test_interpolate_keeps_the_dtype_and_checks_arguments() -> None:
    xi = np.arange(12, dtype=np.int32).reshape(3, 4)
    check(ref(Tensor(xi).interpolate((5, 2), mode="nearest")), xi[[0, 0, 1, 1, 2]][:, [0, 2]], dtype=np.int32)
    # tinygrad's documented example, linear, truncated back to int (torch's bilinear on floats, truncated)
    a = np.array([[1, 2, 3, 4], [21, 22, 23, 24], [41, 42, 43, 44]], np.int32)
    want = np.trunc(F.interpolate(tt(a.astype(np.float32))[None, None], size=(2, 3), mode="bilinear").numpy()[0, 0])
    check(ref(Tensor(a).interpolate(size=(2, 3), mode="linear")), want.astype(np.int32), dtype=np.int32)
    x = T(rand_array((2, 3, 4)))
    for args, kwargs in [
        (((2, 3, 4, 5),), {}),
        (((0, 3),), {}),
        (((2, 3),), {"mode": "cubic"}),
        (((2, 3),), {"mode": "nearest", "align_corners": True}),
        ((5,), {}),
    ]:
        with pytest.raises(InvalidArgument):
            x.interpolate(*args, **kwargs)


UNPOOL = [  # input shape, kernel, stride, padding, whether the default output plane is the input's
    ((2, 3, 6, 8), 2, None, 0, True),
    ((2, 3, 7, 9), 3, 2, 1, True),
    ((2, 3, 6, 5), (2, 3), (2, 1), (1, 0), True),
    ((2, 3, 7, 9), 2, None, 0, False),  # the pooling drops the last row and column: output_size says where
]


@pytest.mark.parametrize("shape,kernel,stride,padding,default_ok", UNPOOL)
def test_max_unpool2d_against_torch(shape: tuple[int, ...], kernel: Any, stride: Any, padding: Any, default_ok: bool) -> None:
    x = rand_array(shape, seed=5)
    out, idx = F.max_pool2d(tt(x), kernel, stride, padding, return_indices=True)
    o, i = T(out.numpy()), T(idx.numpy())
    if default_ok:
        want = F.max_unpool2d(out, idx, kernel, stride, padding).numpy()
        check(ref(o.max_unpool2d(i, kernel, stride, padding=padding)), want)
    sized = F.max_unpool2d(out, idx, kernel, stride, padding, output_size=shape).numpy()
    check(ref(o.max_unpool2d(i, kernel, stride, padding=padding, output_size=shape)), sized)
    check(ref(o.max_unpool2d(i, output_size=shape[-2:])), sized)  # output_size decides, kernel or not
    with pytest.raises(DTypeError):
        o.max_unpool2d(T(idx.numpy().astype(np.float32)), kernel, stride, padding=padding)
    with pytest.raises(ShapeMismatch):
        o.max_unpool2d(T(idx.numpy()[:1]), kernel, stride, padding=padding)


def test_one_hot_of_a_narrow_index_dtype_does_not_wrap() -> None:
    # 300 classes from a uint8 index: the arange of classes must not wrap at 256 (label 3 is not class 259)
    logp = _np_log_softmax(rand_array((2, 300), seed=1), 1).astype(np.float32)
    y = np.array([3, 255], np.uint8)
    check(ref(T(logp).nll_loss(T(y), reduction="none")), -logp[[0, 1], y.astype(int)], rtol=1e-6)


# ---- layers ----------------------------------------------------------------------------------------------------


def _load_from_torch(ours: Any, theirs: Any) -> None:
    nn.load_state_dict(ours, {k: v.detach().numpy() for k, v in theirs.state_dict().items()})


LAYERS: list[tuple[str, Callable[[], Any], Callable[[], Any], tuple[int, ...], Any]] = [
    ("linear", lambda: nn.Linear(5, 3), lambda: torch.nn.Linear(5, 3), (4, 5), np.float32),
    ("linear_3d", lambda: nn.Linear(5, 3, bias=False), lambda: torch.nn.Linear(5, 3, bias=False), (2, 4, 5), np.float32),
    (
        "conv",
        lambda: nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2),
        lambda: torch.nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2),
        (2, 4, 7, 6),
        np.float32,
    ),
    (
        "conv_same",
        lambda: nn.Conv2d(3, 4, (3, 4), padding="same", dilation=(2, 1)),
        lambda: torch.nn.Conv2d(3, 4, (3, 4), padding="same", dilation=(2, 1)),
        (1, 3, 6, 7),
        np.float32,
    ),
    (
        "conv_transpose",
        lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
        lambda: torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
        (2, 4, 4, 5),
        np.float32,
    ),
    ("layernorm", lambda: nn.LayerNorm((4, 5)), lambda: torch.nn.LayerNorm((4, 5)), (2, 3, 4, 5), np.float32),
    ("groupnorm", lambda: nn.GroupNorm(2, 6), lambda: torch.nn.GroupNorm(2, 6), (2, 6, 3, 4), np.float32),
    (
        "instancenorm",
        lambda: nn.InstanceNorm(3),
        lambda: torch.nn.InstanceNorm2d(3, affine=True),
        (2, 3, 4, 5),
        np.float32,
    ),
    ("rmsnorm", lambda: nn.RMSNorm(5), lambda: torch.nn.RMSNorm(5, eps=1e-6), (3, 5), np.float32),
    ("embedding", lambda: nn.Embedding(7, 4), lambda: torch.nn.Embedding(7, 4), (2, 3), np.int32),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")  # torch's note on its own copy, for conv_same
@pytest.mark.parametrize("name,ours,theirs,shape,dtype", LAYERS, ids=[layer[0] for layer in LAYERS])
def test_layers_with_torchs_weights_match_torch(
    name: str, ours: Callable[[], Any], theirs: Callable[[], Any], shape: tuple[int, ...], dtype: Any
) -> None:
    torch.manual_seed(0)
    tl, ol = theirs().eval(), ours()
    with torch.no_grad():  # torch's norms start at weight 1, bias 0: make them count
        for p in tl.parameters():
            p.copy_(torch.randn_like(p))
    _load_from_torch(ol, tl)
    x = rand_array(shape, dtype, seed=3) if dtype != np.int32 else np.random.default_rng(3).integers(0, 7, shape)
    with torch.no_grad():
        want = tl(torch.from_numpy(x.astype(np.int64) if dtype == np.int32 else x)).numpy()
    check(ref(ol(Tensor(x.astype(dtype)))), want, rtol=1e-4, atol=1e-4)


def test_batchnorm_layer_inference_and_batch_statistics() -> None:
    tl = torch.nn.BatchNorm2d(3).eval()
    with torch.no_grad():
        for buf in (tl.weight, tl.bias, tl.running_mean):
            buf.copy_(torch.randn(3))
        tl.running_var.copy_(torch.rand(3) + 0.5)
    ol = nn.BatchNorm2d(3)
    _load_from_torch(ol, tl)
    assert ol.num_batches_tracked.dtype is dtypes.int64 and ol.num_batches_tracked.shape == ()
    x = rand_array((2, 3, 4, 5), seed=1)
    with torch.no_grad():
        check(ref(ol(T(x))), tl(tt(x)).numpy(), rtol=1e-4, atol=1e-5)
    # no running statistics: the batch's own (torch's training-mode normalisation, biased variance)
    free = nn.BatchNorm(3, affine=False, track_running_stats=False)
    assert not hasattr(free, "running_mean") and free.weight is None
    check(ref(free(T(x))), F.batch_norm(tt(x), None, None, training=True).numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeMismatch):
        ol(T(rand_array((2, 4, 3))))


def test_layers_check_their_inputs() -> None:
    for make, x, err in [
        (lambda: nn.Linear(4, 3), T(rand_array((2, 5))), ShapeMismatch),
        (lambda: nn.LayerNorm(4), T(rand_array((2, 5))), ShapeMismatch),
        (lambda: nn.GroupNorm(2, 4), T(rand_array((2, 6, 3))), ShapeMismatch),
        (lambda: nn.RMSNorm(4), T(rand_array((4, 3))), ShapeMismatch),
        (lambda: nn.Embedding(5, 2), T(rand_array((3,))), DTypeError),
        (lambda: nn.InstanceNorm(3), rand_array((2, 3, 4)), InvalidArgument),
    ]:
        with pytest.raises(err):
            make()(x)
    assert nn.Conv2d(2, 2, (3, 2), stride=(1, 1), padding="same").padding == (0, 1, 1, 1)  # torch's (l, r, t, b)
    for bad in [
        lambda: nn.Linear(0, 3),
        lambda: nn.Conv2d(3, 4, 3, groups=2),
        lambda: nn.Conv2d(4, 4, 3, padding="valid"),
        lambda: nn.Conv2d(4, 4, 3, stride=2, padding="same"),
        lambda: nn.GroupNorm(4, 6),
        lambda: nn.LayerNorm(4, eps=-1.0),
        lambda: nn.Conv2d(4, 4, (3, 3, 3)),
    ]:
        with pytest.raises(InvalidArgument):
            bad()


def test_default_initialisation_and_state_dict_names_match_tinygrad() -> None:
    tg = tinygrad_cpu_or_skip()
    from tinygrad.dtype import _to_np_dtype
    from tinygrad.nn.state import get_state_dict as tg_state_dict

    def model(m: Any) -> Any:
        net = collections.namedtuple("Net", "body head")(
            [m.Conv2d(3, 4, (3, 2)), m.BatchNorm2d(4), m.GroupNorm(2, 4), m.ConvTranspose2d(4, 6, 3, groups=2)],
            {"fc": m.Linear(4, 5), "ln": m.LayerNorm((3, 4)), "emb": m.Embedding(7, 3), "rms": m.RMSNorm(5)},
        )
        return {"net": net, "inorm": m.InstanceNorm(4), "bn_free": m.BatchNorm(3, affine=False, track_running_stats=False)}

    theirs = tg_state_dict(model(tg.nn))
    ours = nn.get_state_dict(model(nn))
    assert list(ours) == list(theirs)
    for k, v in theirs.items():
        assert ours[k].shape == tuple(v.shape), k
        assert ours[k].dtype.np == np.dtype(_to_np_dtype(v.dtype)), k
    # the values are data (not placeholders) in tinygrad's ranges: uniform +-1/sqrt(fan_in), ones/zeros for norms
    bound = 1 / math.sqrt(3 * 3 * 2)
    w = ref(ours["net.body.0.weight"])
    assert np.abs(w).max() < bound and np.abs(w).max() > 0.5 * bound
    assert np.abs(ref(ours["net.head.fc.weight"])).max() < 0.5 and np.abs(ref(ours["net.body.3.weight"])).max() < 1 / 6
    check(ref(ours["net.body.1.running_var"]), np.ones(4), dtype=np.float32)
    check(ref(ours["net.body.1.num_batches_tracked"]), np.array(0), dtype=np.int64)
    check(ref(ours["net.head.ln.bias"]), np.zeros((3, 4)), dtype=np.float32)
    e = ref(ours["net.head.emb.weight"])
    assert np.abs(e).max() < math.sqrt(6 / 10)


def test_get_state_dict_walks_containers_without_looping() -> None:
    class Block:
        def __init__(self) -> None:
            self.lin = nn.Linear(2, 2)
            self.me = self  # a cycle
            self.extra = (Tensor.zeros(1), {"k": [Tensor.ones(2)]})
            self.not_a_tensor = np.zeros(3)
            self.lib = types.ModuleType("lib")  # a module an attribute names is no part of the model
            self.lib.w = Tensor.ones(3)

    sd = nn.get_state_dict([Block(), collections.OrderedDict(b=nn.RMSNorm(3, elementwise_affine=False))])
    assert list(sd) == ["0.lin.weight", "0.lin.bias", "0.extra.0", "0.extra.1.k.0"]
    assert len(nn.get_parameters(Block())) == 4
    solo = Tensor.ones(2)
    d = nn.get_state_dict(solo, prefix="solo.")
    assert list(d) == ["solo"] and d["solo"] is solo


def test_load_state_dict_checks_keys_shapes_and_dtypes() -> None:
    model = [nn.Linear(3, 2), nn.BatchNorm(2)]
    good = {k: ref(v) for k, v in nn.get_state_dict(model).items()}
    w = rand_array((2, 3), seed=9)
    loaded = nn.load_state_dict(model, {**good, "0.weight": w, "1.num_batches_tracked": np.array([5], np.int64)})
    assert len(loaded) == 7 and loaded[0] is model[0].weight
    check(ref(model[0].weight), w, dtype=np.float32)
    check(ref(model[1].num_batches_tracked), np.array(5), dtype=np.int64)  # (1,) loads into () as in tinygrad
    before = ref(model[0].weight)
    cases: list[tuple[dict[str, Any], type[CompilerError], list[str]]] = [
        ({**good, "0.weight": w.T}, ShapeMismatch, ["0.weight", "(2, 3)", "(3, 2)"]),
        ({**good, "0.weight": w.astype(np.float64)}, DTypeError, ["0.weight", "float32", "float64"]),
        ({k: v for k, v in good.items() if k != "1.running_var"}, InvalidArgument, ["1.running_var", "missing"]),
        ({**good, "2.weight": w}, InvalidArgument, ["2.weight", "unexpected"]),
        ({**good, "0.bias": [1.0, 2.0]}, InvalidArgument, ["0.bias"]),
        ({**good, "0.bias": Tensor([1, 2])}, DTypeError, ["0.bias", "int32"]),
    ]
    for sd, err, words in cases:
        with pytest.raises(err) as info:
            nn.load_state_dict(model, sd)
        text = str(info.value)
        assert all(word in text for word in words), text
        check(ref(model[0].weight), before)  # a failed load changes nothing
    # not strict: a missing key keeps its weight, an unexpected one is ignored; a Tensor value is used as given
    nn.load_state_dict(model, {"0.bias": Tensor(np.array([7.0, 8.0], np.float32)), "9.x": w}, strict=False)
    check(ref(model[0].bias), np.array([7.0, 8.0]), dtype=np.float32)
    check(ref(model[0].weight), before)


# ---- safetensors ---------------------------------------------------------------------------------------------


def _safetensors_bytes(entries: dict[str, tuple[str, list[int], bytes]], pad: bool = True) -> bytes:
    """A safetensors file built by hand from its spec: u64 little-endian header size, json header, raw data."""
    header, data = {}, b""
    for k, (code, shape, raw) in entries.items():
        header[k] = {"dtype": code, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    head = json.dumps(header).encode()
    if pad:
        head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + data


def test_safe_load_reads_a_hand_built_file(tmp_path: Path) -> None:
    f32 = np.arange(6, dtype="<f4").reshape(2, 3) / 4
    i64 = np.array([-(2**40), 3], "<i8")
    bf = np.array([1.5, -2.25, 3.0], np.float32)
    bf_bits = (bf.view(np.uint32) >> 16).astype("<u2")
    f16 = np.array([[0.5], [-1.0]], "<f2")
    path = tmp_path / "hand.safetensors"
    path.write_bytes(
        _safetensors_bytes(
            {
                "w": ("F32", [2, 3], f32.tobytes()),
                "i": ("I64", [2], i64.tobytes()),
                "h": ("BF16", [3], bf_bits.tobytes()),
                "f": ("F16", [2, 1], f16.tobytes()),
                "b": ("BOOL", [2], b"\x01\x00"),
                "u": ("U8", [], b"\x07"),
            }
        )
    )
    got = nn.safe_load(path)
    assert list(got) == ["w", "i", "h", "f", "b", "u"]
    check(ref(got["w"]), f32, dtype=np.float32)
    check(ref(got["i"]), i64, dtype=np.int64)
    assert got["h"].dtype is dtypes.bfloat16
    check(ref(got["h"]), bf)
    check(ref(got["f"]), f16, dtype=np.float16)
    check(ref(got["b"]), np.array([True, False]), dtype=np.bool_)
    check(ref(got["u"]), np.array(7), dtype=np.uint8)


def test_safe_save_round_trip_and_layout(tmp_path: Path) -> None:
    tensors = {
        "a": Tensor(rand_array((3, 4), seed=1)),
        "b": Tensor(rand_array((5,), np.int16, seed=2)),
        "c": Tensor(np.array([1.5, 2.3, -7.1], np.float32), "bfloat16"),
        "d": Tensor(rand_array((2, 2), np.float16, seed=3)),
        "e": Tensor.ones(2, 3) * 2,  # a lazy tensor: computed on saving
        "f": rand_array((4,), np.uint64, seed=4),  # numpy arrays save too
    }
    path = tmp_path / "rt.safetensors"
    nn.safe_save(tensors, path, metadata={"format": "pt"})
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0
    header = json.loads(raw[8 : 8 + n])
    assert header["__metadata__"] == {"format": "pt"}
    assert header["c"] == {"dtype": "BF16", "shape": [3], "data_offsets": [48 + 10, 48 + 10 + 6]}
    back = nn.safe_load(path)
    assert list(back) == list(tensors)
    for k, v in tensors.items():
        want = v if isinstance(v, np.ndarray) else ref(v)
        check(ref(back[k]), want, dtype=want.dtype)
    assert back["c"].dtype is dtypes.bfloat16
    check(ref(back["c"]), bf16_round(np.array([1.5, 2.3, -7.1], np.float32)))
    # torch reads it too (the safetensors layout is torch's little-endian raw storage)
    a = torch.frombuffer(bytearray(raw[8 + n : 8 + n + 48]), dtype=torch.float32).reshape(3, 4).numpy()
    check(a, ref(tensors["a"]))
    with pytest.raises(MissingInput):
        nn.safe_save({"x": Tensor.empty(2, name="x")}, tmp_path / "bad.safetensors")


def test_a_model_round_trips_through_safetensors(tmp_path: Path) -> None:
    a, b = [nn.Linear(3, 4), nn.BatchNorm(4)], [nn.Linear(3, 4), nn.BatchNorm(4)]
    nn.safe_save(nn.get_state_dict(a), tmp_path / "m.safetensors")
    nn.load_state_dict(b, nn.safe_load(tmp_path / "m.safetensors"))
    x = T(rand_array((2, 3), seed=1))
    check(ref(b[1](b[0](x))), ref(a[1](a[0](x))))
    assert not np.array_equal(ref(nn.Linear(3, 4)(x)), ref(a[0](x)))  # differently drawn weights differ


MALFORMED: list[tuple[bytes, type[CompilerError], str]] = [
    (b"\x08\x00\x00", InvalidArgument, "shorter"),
    (struct.pack("<Q", 1000) + b"{}", InvalidArgument, "header of 1000"),
    (struct.pack("<Q", 4) + b"{no}", InvalidArgument, "not json"),
    (struct.pack("<Q", 4) + b"[1] ", InvalidArgument, "json object"),
    (_safetensors_bytes({"x": ("F8_E4M3", [1], b"\x00")}), DTypeError, "F8_E4M3"),
    (_safetensors_bytes({"x": ("F32", [3], b"\x00" * 8)}), InvalidArgument, "data_offsets"),
    (_safetensors_bytes({"x": ("F32", [2], b"\x00" * 8)})[:-1], InvalidArgument, "data_offsets"),
    (_safetensors_bytes({"x": ("F32", [-2], b"")}), InvalidArgument, "shape"),
    (_safetensors_bytes({"x": ("F32", [0], b"")}), InvalidSize, "empty"),
    (_safetensors_bytes({"x": ("BOOL", [1], b"\x02")}), InvalidArgument, "bool"),
    (struct.pack("<Q", 24) + b'{"x":{"dtype":"F32"}}   ', InvalidArgument, "lacks"),
]


@pytest.mark.parametrize("raw,err,word", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_malformed_safetensors_are_diagnostics(tmp_path: Path, raw: bytes, err: type[CompilerError], word: str) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw)
    with pytest.raises(err) as info:
        nn.safe_load(path)
    assert word in str(info.value)


def test_overlapping_data_and_missing_files_are_diagnostics(tmp_path: Path) -> None:
    head = json.dumps(
        {"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}, "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}
    ).encode()
    (tmp_path / "o.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"\x01\x02\x03")
    with pytest.raises(InvalidArgument, match="overlap"):
        nn.safe_load(tmp_path / "o.safetensors")
    with pytest.raises(InvalidArgument, match="cannot read"):
        nn.safe_load(tmp_path / "nope.safetensors")
    with pytest.raises(InvalidArgument):
        nn.safe_save({"__metadata__": Tensor.ones(1)}, tmp_path / "x.safetensors")
    with pytest.raises(DTypeError):
        nn.safe_save({"s": np.array(["a"])}, tmp_path / "x.safetensors")


# ---- through the compiler ------------------------------------------------------------------------------------


def test_models_with_torchs_weights_compile_with_llvm() -> None:
    torch.manual_seed(1)
    mlp_t = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    conv_t = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.GroupNorm(2, 4)
    ).eval()
    with torch.no_grad():
        conv_t[1].running_mean.copy_(torch.randn(4))
        conv_t[1].running_var.copy_(torch.rand(4) + 0.5)
        for p in list(conv_t[1].parameters()) + list(conv_t[3].parameters()):
            p.copy_(torch.randn_like(p))
    mlp = [nn.Linear(6, 8), nn.Linear(8, 3)]
    conv = [nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.GroupNorm(2, 4)]
    # torch's Sequential numbers the ReLU too: map its keys onto our list
    nn.load_state_dict(mlp, {k.replace("2.", "1."): v.numpy() for k, v in mlp_t.state_dict().items()})
    nn.load_state_dict(conv, {k.replace("3.", "2."): v.numpy() for k, v in conv_t.state_dict().items()})

    x = Tensor.empty(5, 6, name="x")
    img = Tensor.empty(2, 3, 6, 7, name="img")
    labels = Tensor(np.array([0, 2, 1, 1, 0], np.int32))
    logits = mlp[1](mlp[0](x).relu())
    feats = conv[2](conv[1](conv[0](img)).relu())
    wt = Tensor(rand_array((3, 2, 3, 3), seed=4))
    up = img.conv_transpose2d(wt, stride=2, padding=1, output_padding=1)
    resized = img.interpolate((4, 9))
    prog = optimize([logits, feats, logits.cross_entropy(labels), up, resized], target="llvm")

    xv, iv = rand_array((5, 6), seed=1), rand_array((2, 3, 6, 7), seed=2)
    got = prog(x=xv, img=iv)
    with torch.no_grad():
        want_logits = mlp_t(tt(xv))
        check(got[0], want_logits.numpy(), rtol=1e-4, atol=1e-4)
        check(got[1], conv_t(tt(iv)).numpy(), rtol=1e-4, atol=1e-4)
        check(got[2], F.cross_entropy(want_logits, torch.tensor([0, 2, 1, 1, 0])).numpy(), rtol=1e-4, atol=1e-5)
        check(
            got[3], F.conv_transpose2d(tt(iv), tt(ref(wt)), stride=2, padding=1, output_padding=1).numpy(), rtol=1e-4, atol=1e-4
        )
        check(got[4], F.interpolate(tt(iv), size=(4, 9), mode="bilinear").numpy(), rtol=1e-5, atol=1e-5)
