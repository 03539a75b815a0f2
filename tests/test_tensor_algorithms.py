"""The rest of tinygrad's Tensor API that makes sense without autograd: matrix algorithms (qr, svd,
newton_schulz, normalize), counter-based random bits (threefry, random_bits), multinomial sampling, Keccak
hashing, bitcasts between sizes, integer-tensor indexing and the small helpers. Oracles: numpy, hashlib, a
pure-Python Threefry checked on the Random123 known answers, and tinygrad itself where it is installed."""

from __future__ import annotations

import hashlib
import shutil
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler import Tensor
from egraph_compiler.ir.diagnostics import CompilerError

try:
    import tinygrad
except ImportError:  # pragma: no cover - an optional oracle
    tinygrad = None

needs_tinygrad = pytest.mark.skipif(
    tinygrad is None or shutil.which("clang") is None, reason="tinygrad is not installed, or its CPU device lacks clang"
)
RNG = np.random.default_rng(0)


# ---- matrix algorithms ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (3, 3), (2, 3, 2)])
def test_qr_is_numpys(shape: tuple[int, ...]) -> None:
    """Q (..., m, m) and R (..., m, n) as numpy's mode='complete' (LAPACK's Householder signs), Q orthogonal."""
    a = RNG.standard_normal(shape).astype(np.float32)
    q, r = (t.numpy() for t in Tensor(a).qr())
    want_q, want_r = np.linalg.qr(a.astype(np.float64), mode="complete")
    np.testing.assert_allclose(q, want_q, atol=2e-5)
    np.testing.assert_allclose(r, want_r, atol=2e-5)
    np.testing.assert_allclose(q @ r, a, atol=2e-5)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(shape[-2]), q.shape), atol=2e-5)


@pytest.mark.parametrize("shape", [(3, 2), (2, 3)])
def test_svd_factors_the_matrix(shape: tuple[int, int]) -> None:
    """S descending and equal to numpy's singular values; U @ diag(S) @ Vh is the matrix; U and V orthogonal;
    full_matrices=False keeps min(m, n) columns of U."""
    a = RNG.standard_normal(shape).astype(np.float32)
    u, s, vh = (t.numpy() for t in Tensor(a).svd())
    k = min(shape)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), atol=1e-5)
    np.testing.assert_allclose((u[:, :k] * s) @ vh[:k], a, atol=2e-5)
    np.testing.assert_allclose(u.T @ u, np.eye(shape[0]), atol=2e-5)
    np.testing.assert_allclose(vh @ vh.T, np.eye(shape[1]), atol=2e-5)
    assert Tensor(a).svd(full_matrices=False)[0].shape == (shape[0], k)


def test_newton_schulz_is_its_polynomial() -> None:
    """Muon's quintic iteration against the same polynomial in numpy (a tall matrix goes through transposed)."""
    a = RNG.standard_normal((5, 3)).astype(np.float32)
    params = (3.4445, -4.7750, 2.0315)
    g = a.T / (np.linalg.norm(a) + 1e-7)
    for _ in range(4):
        gram = g @ g.T
        g = params[0] * g + params[1] * (gram @ g) + params[2] * (gram @ gram @ g)
    np.testing.assert_allclose(Tensor(a).newton_schulz(4, params).numpy(), g.T, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("p", "dim"), [(2.0, 1), (1.0, 0), (float("inf"), -1), (3.0, 1)])
def test_normalize_is_torchs(p: float, dim: int) -> None:
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    a[1] = 0.0  # a zero row: divided by eps, stays zero
    norm = (
        (np.abs(a) ** 3).sum(dim, keepdims=True) ** (1 / 3) if p == 3.0 else np.linalg.norm(a, ord=p, axis=dim, keepdims=True)
    )
    np.testing.assert_allclose(Tensor(a).normalize(p, dim).numpy(), a / np.maximum(norm, 1e-12), rtol=1e-5, atol=1e-6)


@needs_tinygrad
def test_matrix_algorithms_agree_with_tinygrad() -> None:
    from tinygrad import Tensor as TinyTensor

    a = RNG.standard_normal((3, 3)).astype(np.float32)
    s_ours, s_tg = Tensor(a).svd()[1].numpy(), TinyTensor(a).svd()[1].numpy()
    np.testing.assert_allclose(s_ours, s_tg, atol=1e-5)
    ns = (2.0, -1.5, 0.5)
    np.testing.assert_allclose(Tensor(a).newton_schulz(3, ns).numpy(), TinyTensor(a).newton_schulz(3, ns).numpy(), atol=1e-5)
    np.testing.assert_allclose(Tensor(a).normalize().numpy(), TinyTensor(a).normalize().numpy(), atol=1e-6)


def test_matrix_algorithms_refuse_what_they_cannot_factor() -> None:
    with pytest.raises(CompilerError, match="two or more dimensions"):
        Tensor(np.ones(3, np.float32)).qr()
    with pytest.raises(CompilerError, match="int32"):
        Tensor(np.ones((2, 2), np.int32)).svd()
    with pytest.raises(CompilerError, match="params"):
        Tensor(np.ones((2, 2), np.float32)).newton_schulz(2, ())
    with pytest.raises(CompilerError, match="positive"):
        Tensor(np.ones((2, 2), np.float32)).normalize(p=0)


# ---- counter-based random bits -------------------------------------------------------------------

M32 = 0xFFFFFFFF


def _threefry_py(c0: int, c1: int, k0: int, k1: int) -> tuple[int, int]:
    """Threefry-2x32-20 in plain Python (Random123's reference), checked against its known answers below."""
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = (c0 + ks[0]) & M32, (c1 + ks[1]) & M32
    for i in range(5):
        for r in rot[i % 2]:
            x0 = (x0 + x1) & M32
            x1 = (((x1 << r) | (x1 >> (32 - r))) & M32) ^ x0
        x0, x1 = (x0 + ks[(i + 1) % 3]) & M32, (x1 + ks[(i + 2) % 3] + i + 1) & M32
    return x0, x1


KNOWN = [  # Random123 kat_vectors, threefry2x32 20 rounds: counter, key -> output
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((M32, M32), (M32, M32), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]


def test_threefry_gives_the_known_answers() -> None:
    for (c0, c1), (k0, k1), out in KNOWN:
        assert _threefry_py(c0, c1, k0, k1) == out
    x = np.array([(c1 << 32) | c0 for (c0, c1), _, _ in KNOWN], np.uint64)
    k = np.array([(k1 << 32) | k0 for _, (k0, k1), _ in KNOWN], np.uint64)
    got = Tensor(x).threefry(Tensor(k)).numpy()
    assert [(int(v) & M32, int(v) >> 32) for v in got] == [out for _, _, out in KNOWN]


@settings(max_examples=3, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=6), st.integers(0, 2**64 - 1))
def test_threefry_is_the_reference_for_any_counter(counters: list[int], key: int) -> None:
    got = Tensor(np.array(counters, np.uint64)).threefry(Tensor(np.array([key], np.uint64))).numpy()
    want = [_threefry_py(c & M32, c >> 32, key & M32, key >> 32) for c in counters]
    assert [(int(v) & M32, int(v) >> 32) for v in got] == want


def _random_bits_py(key: tuple[int, int], counter: tuple[int, int], num: int) -> list[int]:
    """tinygrad's random_bits: the counter's block picks a key; blocks i and i + half give the words."""
    k = _threefry_py(counter[0], counter[1], key[0], key[1])
    half = -(-num // 2)
    blocks = [_threefry_py(i, i + half, k[0], k[1]) for i in range(half)]
    return ([b[0] for b in blocks] + [b[1] for b in blocks])[:num]


@pytest.mark.parametrize("num", [1, 7, 10])
def test_random_bits_follow_tinygrads_construction(num: int) -> None:
    key, ctr = (7, 9), (3, 1)
    got = Tensor.random_bits(Tensor(np.array(key, np.uint32)), Tensor(np.array(ctr, np.uint32)), num).numpy()
    assert got.dtype == np.uint32 and got.tolist() == _random_bits_py(key, ctr, num)


@needs_tinygrad
def test_random_bits_are_tinygrads() -> None:
    from tinygrad import Tensor as TinyTensor
    from tinygrad import dtypes

    key, ctr = [11, 2**31 + 5], [2**32 - 1, 4]
    ours = Tensor.random_bits(Tensor(np.array(key, np.uint32)), Tensor(np.array(ctr, np.uint32)), 9).numpy()
    theirs = TinyTensor.random_bits(TinyTensor(key, dtype=dtypes.uint32), TinyTensor(ctr, dtype=dtypes.uint32), 9).numpy()
    assert ours.tolist() == theirs.tolist()


def test_random_bits_check_their_arguments() -> None:
    with pytest.raises(CompilerError, match="uint32 tensor of 2 words"):
        Tensor.random_bits(Tensor(np.array([1, 2], np.int32)), Tensor(np.array([1, 2], np.uint32)), 4)
    with pytest.raises(CompilerError, match="uint64"):
        Tensor(np.array([1], np.uint32)).threefry(Tensor(np.array([1], np.uint64)))


# ---- multinomial ---------------------------------------------------------------------------------


def test_multinomial_with_replacement_follows_the_weights() -> None:
    Tensor.manual_seed(3)
    w = np.array([1.0, 0.0, 3.0, 6.0], np.float32)
    s = Tensor(w).multinomial(4000, replacement=True).numpy()
    assert s.dtype == np.int32 and s.shape == (4000,)
    freq = np.bincount(s, minlength=4) / 4000
    assert freq[1] == 0  # a zero weight is never drawn
    np.testing.assert_allclose(freq, w / w.sum(), atol=0.03)


def test_multinomial_without_replacement_draws_distinct_categories() -> None:
    Tensor.manual_seed(4)
    w = np.array([[1.0, 2, 3, 4, 0], [5, 1, 0, 0, 1]], np.float32)
    s = Tensor(w).multinomial(3).numpy()
    assert s.shape == (2, 3)
    for row, picks in zip(w, s):
        assert len(set(picks)) == 3 and all(row[p] > 0 for p in picks)  # 3 positive weights a row: all of them
    with pytest.raises(CompilerError, match="without replacement"):
        Tensor(w).multinomial(6)
    with pytest.raises(CompilerError, match="1-d or 2-d"):
        Tensor(np.ones((2, 2, 2), np.float32)).multinomial()


# ---- Keccak --------------------------------------------------------------------------------------


def test_keccak_is_sha3_256_at_a_one_byte_pad() -> None:
    """135 bytes leave one byte of the 136-byte rate: the domain bits and the final bit share it."""
    msgs = RNG.integers(0, 256, (2, 135), dtype=np.uint8)
    out = Tensor(msgs).keccak().numpy()
    assert out.shape == (2, 32) and out.dtype == np.uint8
    assert [bytes(r).hex() for r in out] == [hashlib.sha3_256(bytes(m)).hexdigest() for m in msgs]


def test_keccak_shake_128_over_two_blocks_keeps_leading_axes() -> None:
    msgs = RNG.integers(0, 256, (1, 2, 170), dtype=np.uint8)
    out = Tensor(msgs).keccak("shake_128").numpy()
    assert out.shape == (1, 2, 16)
    assert [bytes(r) for r in out[0]] == [hashlib.shake_128(bytes(m)).digest(16) for m in msgs[0]]


def test_keccak_is_sha3_224() -> None:
    assert bytes(Tensor(b"abc").keccak("sha3_224").numpy()).hex() == hashlib.sha3_224(b"abc").hexdigest()


def test_keccak_refuses_an_unknown_configuration() -> None:
    with pytest.raises(CompilerError, match="unknown configuration"):
        Tensor(b"abc").keccak("md5")


# ---- bitcast, indexing, helpers ------------------------------------------------------------------

WIDTHS = ["uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32", "uint64", "int64", "float64"]


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(WIDTHS), st.sampled_from(WIDTHS), st.integers(1, 3))
def test_bitcast_between_sizes_is_numpys_view(src: str, dst: str, rows: int) -> None:
    """The same bytes: to a smaller dtype the last axis grows, to a larger one it shrinks (numpy's .view)."""
    width = 8 // np.dtype(src).itemsize  # a row of 8 bytes divides into every dtype here
    raw = RNG.integers(0, 256, (rows, 8), dtype=np.uint8)
    if np.dtype(src).kind == "f" or np.dtype(dst).kind == "f":  # NaN payloads may not survive: finite values only
        raw = np.abs(RNG.standard_normal((rows, 2))).astype(np.float32).view(np.uint8)
    a = raw.view(src).reshape(rows, width)
    got = Tensor(a).bitcast(dst).numpy()
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(got.view(np.uint8), a.view(dst).view(np.uint8))


def test_bitcast_that_does_not_divide_is_a_diagnostic() -> None:
    with pytest.raises(CompilerError, match="does not divide"):
        Tensor(np.ones(3, np.uint8)).bitcast("uint32")


CASES: list[Any] = [
    lambda x, i: x[:, i(np.array([[0, 2], [1, 1]]))],
    lambda x, i: x[:, i(np.array([[0, 2], [1, 1]])), i(np.array([3, 0]))],
    lambda x, i: x[i(np.array([[1, 0], [1, 1]])), :, i(np.array([3, 0]))],
    lambda x, i: x[0, i(np.array([2, -1]))],
    lambda x, i: x[..., i(np.array([3, 0]))],
    lambda x, i: x[1:, i(np.array([2, 0])), ::2],
    lambda x, i: x[None, i(np.array([-1]))],
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_integer_tensor_indexing_is_numpys(case: int) -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for index in (lambda v: Tensor(v.astype(np.int32)), lambda v: v, lambda v: v.tolist()):
        got = CASES[case](Tensor(a), index).numpy()
        want = CASES[case](a, lambda v: v)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@needs_tinygrad
def test_integer_tensor_indexing_is_tinygrads_where_numpy_differs() -> None:
    """tinygrad applies int indices first (numpy counts them as advanced indices); out of range reads 0."""
    from tinygrad import Tensor as TinyTensor

    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    j = np.array([3, 0], np.int32)
    assert Tensor(a)[0, :, Tensor(j)].numpy().tolist() == TinyTensor(a)[0, :, TinyTensor(j)].numpy().tolist()
    far = np.array([5, 1], np.int32)
    assert Tensor(a)[Tensor(far)].numpy().tolist() == TinyTensor(a)[TinyTensor(far)].numpy().tolist()


def test_wide_and_narrow_index_dtypes_never_wrap() -> None:
    """An int64 index past int32's range is out of range (reads 0), not its low 32 bits; an int8 index may reach
    from the end of an axis longer than int8 holds; a bool tensor is indexed too."""
    a = np.arange(300, dtype=np.float32)
    assert Tensor(a)[Tensor(np.array([2**33 + 1, 7], np.int64))].numpy().tolist() == [0.0, 7.0]
    assert Tensor(a)[Tensor(np.array([-1, -128], np.int8))].numpy().tolist() == [299.0, 172.0]
    assert Tensor(a)[Tensor(np.array([299, 300], np.uint16))].numpy().tolist() == [299.0, 0.0]
    b = np.array([True, False, True])
    assert Tensor(b)[Tensor(np.array([2, 1], np.int32))].numpy().tolist() == [True, False]


def test_a_float_index_is_a_diagnostic() -> None:
    with pytest.raises(CompilerError, match="integer tensors"):
        Tensor(np.ones(3, np.float32))[Tensor(np.array([0.0], np.float32))]


def test_small_helpers() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = Tensor(a)
    assert np.frombuffer(t.data(), np.int32).tolist() == a.ravel().tolist() and t.data().shape == (2, 3)
    assert t.max_shape == (2, 3) and t.max_numel() == 6
    assert Tensor.const(2.5).numpy() == 2.5 and Tensor.const(3, "int8").dtype.name == "int8"
    assert t.usum(t, 1).numpy().tolist() == (a + a + 1).tolist()
    assert t.uprod(t).numpy().tolist() == (a * a).tolist()
    b = Tensor(np.array([True, False]))
    assert b.usum(Tensor(np.array([False, False]))).numpy().tolist() == [True, False]
    assert t.sequential([lambda x: x * 2, lambda x: x + 1]).numpy().tolist() == (a * 2 + 1).tolist()
    assert Tensor(b"hi").numpy().tolist() == [104, 105]
    assert Tensor.invalids(2, 2, dtype="int32").assign(Tensor(a[:, :2])).numpy().tolist() == a[:, :2].tolist()
    assert t.ufix(2).dtype.name == "int32" and t.ufix(2.5).dtype.is_float and t.ufix(t) is t
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(Tensor(x).image_dot(Tensor(w)).numpy(), x @ w, rtol=1e-5, atol=1e-6)
    img, k = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32), RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(
        Tensor(img).image_conv2d(Tensor(k), padding=1).numpy(), Tensor(img).conv2d(Tensor(k), padding=1).numpy(), atol=1e-6
    )


def test_replace_and_assign_rebind_the_tensor() -> None:
    t = Tensor(np.zeros(3, np.float32))
    before = t * 2  # built from the old value: keeps it
    assert t.assign(Tensor(np.array([1.0, 2.0, 3.0], np.float32))) is t
    assert t.numpy().tolist() == [1.0, 2.0, 3.0] and before.numpy().tolist() == [0.0, 0.0, 0.0]
    t.assign(5.0)  # a python value becomes a tensor of t's dtype, broadcast
    assert t.numpy().tolist() == [5.0, 5.0, 5.0]
    with pytest.raises(CompilerError, match="int32"):
        t.assign(Tensor(np.ones(3, np.int32)))
    t.replace(Tensor(np.arange(3, dtype=np.int32)))  # replace takes the other's dtype too
    assert t.dtype.name == "int32" and t.numpy().tolist() == [0, 1, 2]
    with pytest.raises(CompilerError, match="shape"):
        t.replace(Tensor(np.ones(4, np.int32)))


def test_a_constant_permuted_is_folded_into_its_data() -> None:
    """A data-backed tensor permuted (a weight used as `w.T`, ONNX Gemm's transB) becomes a constant with the
    permuted data, so kernels read it along rows; placeholders keep a PERMUTE; values as numpy's."""
    from egraph_compiler.ir.ops import Ops

    w = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    folded = Tensor(w).permute(2, 0, 1)
    assert folded.uop.op is Ops.BUFFER and folded.shape == (5, 3, 4)
    np.testing.assert_array_equal(folded.numpy(), np.transpose(w, (2, 0, 1)))
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    m = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose((Tensor(x) @ Tensor(m).T).numpy(), x @ m.T, rtol=1e-5, atol=1e-5)
    bf = Tensor(m, "bfloat16").T  # stored as bits: moved as they are
    np.testing.assert_array_equal(bf.float().numpy(), Tensor(m, "bfloat16").float().numpy().T)
    assert Tensor.empty(3, 4, name="p").T.uop.op is Ops.PERMUTE
    t = Tensor(m)
    same = t.permute(0, 1)
    assert same is not t and same.uop is t.uop  # a new tensor: assigning to it leaves t alone
