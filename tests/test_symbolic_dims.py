"""Symbolic dimensions: one program over every size in the bounds, checked against numpy at many sizes.

A placeholder with a symbolic size (Variable or a name) makes optimize return a SymbolicProgram: the graph is
checked to index independent rows along the variable, each call pads its inputs to a bucket of the variable's
ShapeSet and returns the first rows. Every result here is compared with numpy's on the same inputs.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

import numpy as np
import pytest
from helpers import check
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler import CompilerError, Tensor, Variable, optimize
from egraph_compiler.ir.dims import DEFAULT_BOUNDS
from egraph_compiler.shape_sets import SymbolicProgram

HI = 12
B = Variable("B", 1, HI)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _ln(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps)


@cache
def mlp() -> SymbolicProgram:
    x = Tensor.empty((B, 24), name="x")
    w1, b1, w2 = Tensor.empty(24, 40, name="w1"), Tensor.empty(40, name="b1"), Tensor.empty(40, 8, name="w2")
    prog = optimize((x @ w1 + b1).gelu() @ w2, target="llvm")
    assert isinstance(prog, SymbolicProgram)
    return prog


def mlp_ref(x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    return _gelu(x @ w1 + b1) @ w2


@cache
def attention() -> Any:
    """Batched self-attention with the batch merged into the rows of the projections ((B*T, C) @ W) and split
    into heads: reshapes that carry the batch's rows in blocks."""
    t, c, h = 6, 16, 2
    x = Tensor.empty((B, t, c), name="x")
    wqkv = Tensor.empty(c, 3 * c, name="wqkv")
    qkv = (x.reshape(-1, c) @ wqkv).reshape(-1, t, 3, h, c // h).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    att = ((q @ k.transpose(-1, -2)) * (1 / np.sqrt(c // h))).softmax(-1)
    y = (att @ v).permute(0, 2, 1, 3).reshape(-1, t, c)
    return optimize(y.layernorm(), target="llvm")


def attention_ref(x: np.ndarray, wqkv: np.ndarray) -> np.ndarray:
    n, t, c = x.shape
    h = 2
    qkv = (x.reshape(-1, c) @ wqkv).reshape(n, t, 3, h, c // h).transpose(2, 0, 3, 1, 4)
    att = _softmax(qkv[0] @ qkv[1].transpose(0, 1, 3, 2) / np.sqrt(c // h))
    return _ln((att @ qkv[2]).transpose(0, 2, 1, 3).reshape(n, t, c))


@cache
def conv() -> Any:
    x = Tensor.empty((B, 3, 8, 8), name="x")
    w = Tensor.empty(4, 3, 3, 3, name="w")
    return optimize(x.conv2d(w, padding=1).relu().max_pool2d(2).flatten(1), target="llvm")


def conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, 4, 8, 8), np.float32)
    for ky in range(3):
        for kx in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, ky : ky + 8, kx : kx + 8], w[:, :, ky, kx])
    out = np.maximum(out, 0).reshape(n, 4, 4, 2, 4, 2).max((3, 5))
    return out.reshape(n, -1)


def arrays(rng: np.random.Generator, **shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, HI), seed=st.integers(0, 2**16))
def test_mlp_every_size(n: int, seed: int) -> None:
    a = arrays(np.random.default_rng(seed), x=(n, 24), w1=(24, 40), b1=(40,), w2=(40, 8))
    check(mlp()(**a), mlp_ref(**a), rtol=1e-4, atol=1e-4)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, HI), seed=st.integers(0, 2**16))
def test_attention_every_size(n: int, seed: int) -> None:
    a = arrays(np.random.default_rng(seed), x=(n, 6, 16), wqkv=(16, 48))
    check(attention()(**a), attention_ref(**a), rtol=1e-3, atol=1e-3)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, HI), seed=st.integers(0, 2**16))
def test_conv_every_size(n: int, seed: int) -> None:
    a = arrays(np.random.default_rng(seed), x=(n, 3, 8, 8), w=(4, 3, 3, 3))
    check(conv()(**a), conv_ref(**a), rtol=1e-4, atol=1e-4)


def test_buckets_and_one_program_for_all() -> None:
    """The default ShapeSet is the powers of two and the bound; a single bucket serves every size from one
    program (compiled by optimize: no call compiles)."""
    assert B.buckets == (1, 2, 4, 8, 12)
    assert Variable("S", 3, 40).buckets == (4, 8, 16, 32, 40)
    one = Variable("N", 1, 16, buckets=(16,))
    x = Tensor.empty((one, 5), name="x")
    prog = optimize((x * 3 + 1).exp(), target="llvm")
    assert isinstance(prog, SymbolicProgram)
    rng = np.random.default_rng(1)
    for n in (1, 7, 16, 3):
        a = rng.standard_normal((n, 5)).astype(np.float32)
        check(prog(x=a), np.exp(a * 3 + 1), rtol=1e-5)
    assert prog.buckets == [{"N": 16}] and "1 bucket" in repr(prog)


def test_names_two_variables_and_outputs_without_rows() -> None:
    """A dimension named by a string gets the default bounds; two variables in one program; an output that does
    not depend on the rows comes back whole."""
    x = Tensor.empty(("R", 4), name="x")
    y = Tensor.empty((Variable("C", 1, 5), 4), name="y")
    w = Tensor.empty(4, 4, name="w")
    prog = optimize([x @ w, (y @ w).relu().reshape(-1), w.sum(0)], target="llvm")  # rows of 4 in a flat output
    assert isinstance(prog, SymbolicProgram)
    assert prog.variables["R"] == Variable("R", *DEFAULT_BOUNDS)
    rng = np.random.default_rng(2)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (5, 4), (4, 4)))
    got = prog(x=a, y=b, w=c)
    for g, want in zip(got, (a @ c, np.maximum(b @ c, 0).reshape(-1), c.sum(0))):
        check(g, want, rtol=1e-5, atol=1e-5)


def test_out_arrays() -> None:
    rng = np.random.default_rng(3)
    a = arrays(rng, x=(5, 24), w1=(24, 40), b1=(40,), w2=(40, 8))
    out = np.empty((5, 8), np.float32)
    assert mlp()(out=out, **a) is out
    check(out, mlp_ref(**a), rtol=1e-4, atol=1e-4)
    with pytest.raises(CompilerError, match="E1006"):
        mlp()(out=np.empty((6, 8), np.float32), **a)


@pytest.mark.parametrize(
    ("build", "word"),
    [
        (lambda x: x.sum(0), "reduced over"),
        (lambda x: x.softmax(0), "reduced over"),
        (lambda x: x[1:], "padded or sliced"),
        (lambda x: x.pad(((1, 0), (0, 0))), "padded or sliced"),
        (lambda x: x.flip(0), "flipped"),
        (lambda x: x.cat(x, dim=0), "padded or sliced"),
        (lambda x: x.reshape(2, -1), "split across axes"),
        (lambda x: x + Tensor.empty(HI, 4, name="fixed"), "fixed size"),
    ],
)
def test_graphs_that_mix_rows_are_refused(build: Any, word: str) -> None:
    x = Tensor.empty((B, 4), name="x")
    with pytest.raises(CompilerError, match="E1007") as e:
        optimize(build(x), target="llvm")
    assert "'B'" in str(e.value) and word in str(e.value)


def test_bounds_and_disagreeing_sizes_are_diagnostics() -> None:
    a = arrays(np.random.default_rng(4), w1=(24, 40), b1=(40,), w2=(40, 8))
    for n in (0, HI + 1):
        with pytest.raises(CompilerError, match="E1007") as e:
            mlp()(x=np.zeros((n, 24), np.float32), **a)
        assert "'B'" in str(e.value) and f"is {n}" in str(e.value)
    x, y = Tensor.empty((B, 3), name="x"), Tensor.empty((B, 3), name="y")
    prog = optimize(x * y, target="llvm")
    with pytest.raises(CompilerError, match="E1007") as e:
        prog(x=np.zeros((2, 3), np.float32), y=np.zeros((3, 3), np.float32))
    assert "'B'" in str(e.value)
    with pytest.raises(CompilerError, match="E1007"):  # one name, two bounds
        optimize([Tensor.empty((Variable("D", 1, 4), 2), name="p") * 2, Tensor.empty((Variable("D", 1, 8), 2), name="q")])
    for bad in ((0, 4), (5, 4), ("x", 4)):
        with pytest.raises(CompilerError, match="E1006"):
            Variable("E", *bad)


def test_prepare_and_threads() -> None:
    """prepare() compiles every bucket up front; calls from several threads at once get their own results."""
    n = Variable("T", 1, 8)
    x = Tensor.empty((n, 6), name="x")
    prog = optimize((x * x).sum(1), target="llvm")
    assert isinstance(prog, SymbolicProgram)
    prog.prepare()
    assert "4 bucket" in repr(prog)
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((1 + i % 8, 6)).astype(np.float32) for i in range(16)]
    results: list[Any] = [None] * len(inputs)

    def work(i: int) -> None:
        results[i] = prog(x=inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, r in zip(inputs, results):
        check(r, (a * a).sum(1), rtol=1e-5)


def test_a_fixed_placeholder_of_the_same_name_and_shape_stays_fixed() -> None:
    """The symbolic axes are part of the placeholder: one declared with the bound's size and the same name is
    another node, and its program takes that size alone."""
    sym = Tensor.empty((Variable("F", 1, 16), 3), name="f")
    fixed = Tensor.empty((16, 3), name="f")
    assert sym.uop is not fixed.uop and sym.shape == fixed.shape
    prog = optimize(fixed * 2, target="llvm")
    assert not isinstance(prog, SymbolicProgram)
    with pytest.raises(CompilerError):
        prog(f=np.zeros((5, 3), np.float32))
    assert isinstance(optimize(sym * 2, target="llvm"), SymbolicProgram)
    with pytest.raises(CompilerError):  # a placeholder has no value to compute with
        (sym * 2).numpy()


UNARY = [lambda t: t.relu(), lambda t: t.exp() * 0.1, lambda t: t.tanh(), lambda t: (t * t + 1).sqrt()]


@settings(max_examples=8, deadline=None)
@given(
    ops=st.lists(st.integers(0, 5), min_size=1, max_size=5),
    sizes=st.lists(st.integers(1, 6), min_size=2, max_size=2),
    seed=st.integers(0, 2**16),
)
def test_random_batch_programs_match_the_reference(ops: list[int], sizes: list[int], seed: int) -> None:
    """Random chains of batch-separable steps (elementwise ops, a matmul with a weight, a reduction and a softmax
    over the features, the batch merged into the rows and split back) over x (B, 4, 8): the symbolic program at two
    drawn sizes against the reference interpreter on the same graph built at each size."""
    from egraph_compiler.ir.interpret import evaluate

    def build(x: Tensor, w: Tensor) -> Tensor:
        t = x
        for op in ops:
            if op < len(UNARY):
                t = UNARY[op](t)
            elif op == 4:
                t = (t.reshape(-1, 8) @ w).reshape(-1, 4, 8)  # rows of the batch merged with the 4, then split
            else:
                t = t.softmax(-1) + t.sum(-1, keepdim=True) * 0.01
        return t

    n_var = Variable("N", 1, 6)
    prog = optimize(build(Tensor.empty((n_var, 4, 8), name="x"), Tensor.empty(8, 8, name="w")), target="llvm")
    rng = np.random.default_rng(seed)
    wv = (rng.standard_normal((8, 8)) * 0.3).astype(np.float32)
    for n in sizes:
        xv = rng.standard_normal((n, 4, 8)).astype(np.float32)
        fixed = build(Tensor.empty(n, 4, 8, name="x"), Tensor.empty(8, 8, name="w"))
        given = {"x": xv, "w": wv}
        got = prog(**{k: given[k] for k in prog.inputs})  # w is an input only where a step uses it
        check(got, evaluate(fixed.uop, given), rtol=1e-4, atol=1e-4)
