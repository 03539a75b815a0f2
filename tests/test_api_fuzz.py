"""A fuzzer over the Tensor API: random programs mixing its op families, compiled for LLVM and compared with a
numpy model of the same ops.

Each family has its own property tests (test_tensor_properties.py); this one composes them, because fusion,
rangeify and the schedule search see the whole program: a movement op between a reduction and its broadcast,
a padded value read by a matmul, a flip under a softmax. Every step picks an op the current value's shape
admits, applies it to the Tensor and to a numpy array alongside, and the compiled program must agree with the
array. Values stay bounded (exp of a tanh, log of 1 + |x|, division by 1 + |x|), so a difference is an error,
not an overflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from egraph_compiler import Tensor, optimize

Pair = tuple[Tensor, np.ndarray]

UNARY: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = {
    "relu": (lambda t: t.relu(), lambda a: np.maximum(a, 0)),
    "exp": (lambda t: (t.tanh() * 2).exp(), lambda a: np.exp(np.tanh(a) * 2)),
    "log": (lambda t: (t.abs() + 1).log(), lambda a: np.log(np.abs(a) + 1)),
    "sqrt": (lambda t: t.abs().sqrt(), lambda a: np.sqrt(np.abs(a))),
    "sigmoid": (lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a))),
    "tanh": (lambda t: t.tanh(), np.tanh),
    "gelu": (lambda t: t.gelu(), lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))),
    "neg": (lambda t: -t, lambda a: -a),
    "sin": (lambda t: t.sin(), np.sin),
    "square": (lambda t: t.tanh().square(), lambda a: np.tanh(a) ** 2),
}

BINARY: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "add": (lambda p, q: p + q, lambda p, q: p + q),
    "sub": (lambda p, q: p - q, lambda p, q: p - q),
    "mul": (lambda p, q: p * q.tanh(), lambda p, q: p * np.tanh(q)),
    "div": (lambda p, q: p / (q.abs() + 1), lambda p, q: p / (np.abs(q) + 1)),
    "maximum": (lambda p, q: p.maximum(q), np.maximum),
    "where": (lambda p, q: (p > q).where(p, q * 0.5), lambda p, q: np.where(p > q, p, q * 0.5)),
}

REDUCE = {"sum": np.sum, "max": np.max, "mean": np.mean, "min": np.min}


class Program:
    """The Tensor program and its numpy model, built step by step."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.inputs: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng(draw(st.integers(0, 2**16)))
        self.scale = 1.0  # the largest magnitude any value reached: differences are judged against it
        self.trace: list[str] = []  # the ops, in words, for a failing example's report

    def new_input(self, shape: tuple[int, ...]) -> Pair:
        name = f"in{len(self.inputs)}"
        a = self.rng.uniform(-1, 1, shape).astype(np.float32)
        self.inputs[name] = a
        return Tensor.empty(shape, dtype="float32", name=name), a

    def note(self, p: Pair) -> Pair:
        self.trace.append(f"-> {list(p[1].shape)}")
        if p[1].size:
            self.scale = max(self.scale, float(np.abs(p[1]).max()))
        return p

    def axis(self, a: np.ndarray) -> int:
        return self.draw(st.integers(0, a.ndim - 1))

    def step(self, cur: Pair, values: list[Pair]) -> Pair:
        t, a = cur
        kinds = [
            "unary",
            "binary",
            "reduce",
            "permute",
            "reshape",
            "flip",
            "pad",
            "shrink",
            "matmul",
            "softmax",
            "layernorm",
            "cumsum",
            "expand",
            "cat",
            "clamp",
            "sum_all",
            "contiguous",
            "conv2d",
            "attention",
            "gather",
        ]
        kind = self.draw(st.sampled_from(kinds))
        if kind == "unary":
            name = self.draw(st.sampled_from(sorted(UNARY)))
            self.trace.append(name)
            f, g = UNARY[name]
            return f(t), g(a)
        if kind == "binary":
            name = self.draw(st.sampled_from(sorted(BINARY)))
            self.trace.append(name)
            f, g = BINARY[name]
            same = [v for v in values if v[1].shape == a.shape]
            if same and self.draw(st.booleans()):
                ot, oa = self.draw(st.sampled_from(same))
            else:  # a new input, broadcast along some axes
                ot, oa = self.new_input(tuple(1 if self.draw(st.booleans()) else s for s in a.shape))
            self.trace.append(f"with {list(oa.shape)}")
            return (f(t, ot), g(a, oa)) if self.draw(st.booleans()) else (f(ot, t), g(oa, a))
        if kind == "reduce" and a.ndim >= 1:
            op, ax, keep = self.draw(st.sampled_from(sorted(REDUCE))), self.axis(a), self.draw(st.booleans())
            self.trace.append(f"{op}(axis={ax}, keepdim={keep})")
            return getattr(t, op)(ax, keepdim=keep), REDUCE[op](a, axis=ax, keepdims=keep)
        if kind == "permute" and a.ndim >= 2:
            perm = tuple(self.draw(st.permutations(range(a.ndim))))
            self.trace.append(f"permute{perm}")
            return t.permute(perm), np.transpose(a, perm)
        if kind == "reshape" and a.ndim >= 1:
            n = a.size
            d = self.draw(st.sampled_from([k for k in range(1, n + 1) if n % k == 0]))
            shape = (d, n // d) if self.draw(st.booleans()) else (n,)
            self.trace.append(f"reshape{shape}")
            return t.reshape(shape), a.reshape(shape)
        if kind == "flip" and a.ndim >= 1:
            ax = self.axis(a)
            self.trace.append(f"flip({ax})")
            return t.flip(ax), np.flip(a, ax)
        if kind == "pad" and a.ndim >= 1:
            ax = self.axis(a)
            lo, hi = self.draw(st.integers(0, 2)), self.draw(st.integers(0, 2))
            pads = tuple((lo, hi) if i == ax else (0, 0) for i in range(a.ndim))
            self.trace.append(f"pad{pads}")
            return t.pad(pads), np.pad(a, pads)
        if kind == "shrink" and a.ndim >= 1 and max(a.shape) > 1:
            ax = self.draw(st.sampled_from([i for i, s in enumerate(a.shape) if s > 1]))
            lo = self.draw(st.integers(0, a.shape[ax] - 1))
            hi = self.draw(st.integers(lo + 1, a.shape[ax]))
            arg = tuple((lo, hi) if i == ax else (0, s) for i, s in enumerate(a.shape))
            self.trace.append(f"shrink{arg}")
            return t.shrink(arg), a[tuple(slice(b, e) for b, e in arg)]
        if kind == "matmul" and a.ndim in (1, 2):
            wt, wa = self.new_input((a.shape[-1], self.draw(st.integers(1, 6))))
            self.trace.append(f"matmul {list(wa.shape)}")
            return t @ wt, a @ wa
        if kind in ("softmax", "layernorm") and a.ndim >= 1:
            self.trace.append(kind)
        if kind == "softmax" and a.ndim >= 1:
            e = np.exp(a - a.max(-1, keepdims=True))
            return t.softmax(-1), e / e.sum(-1, keepdims=True)
        if kind == "layernorm" and a.ndim >= 1:
            y = a - a.mean(-1, keepdims=True)
            return t.layernorm(-1), y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-5)
        if kind == "cumsum" and a.ndim >= 1:
            ax = self.axis(a)
            self.trace.append(f"cumsum({ax})")
            return t.cumsum(ax), np.cumsum(a, ax)
        if kind == "expand" and a.ndim <= 2:
            k = self.draw(st.integers(1, 3))
            self.trace.append(f"expand to {k}")
            return t.unsqueeze(0).expand((k, *a.shape)), np.broadcast_to(a[None], (k, *a.shape))
        if kind == "cat" and a.ndim >= 1:
            ax = self.axis(a)
            ot, oa = self.new_input(tuple(self.draw(st.integers(1, 3)) if i == ax else s for i, s in enumerate(a.shape)))
            self.trace.append(f"cat {list(oa.shape)} on {ax}")
            return t.cat(ot, dim=ax), np.concatenate([a, oa], axis=ax)
        if kind == "clamp":
            self.trace.append("clamp(-0.5, 0.5)")
            return t.clamp(-0.5, 0.5), np.clip(a, -0.5, 0.5)
        if kind == "sum_all":
            self.trace.append("sum()")
            return t.sum().reshape(1), np.sum(a).reshape(1)
        if kind == "contiguous":
            self.trace.append("contiguous")
            return t.contiguous(), a
        if kind == "conv2d" and a.ndim == 2:  # the value as one channel of an image
            (h, w), co = a.shape, self.draw(st.integers(1, 3))
            kh, kw = self.draw(st.integers(1, min(h + 2, 3))), self.draw(st.integers(1, min(w + 2, 3)))
            pad, stride = self.draw(st.integers(0, 1)), self.draw(st.integers(1, 2))
            if h + 2 * pad < kh or w + 2 * pad < kw:
                pad = 1
            wt, wa = self.new_input((co, 1, kh, kw))
            self.trace.append(f"conv2d {list(wa.shape)} padding={pad} stride={stride}")
            x = np.pad(a, pad)
            win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw))[::stride, ::stride]  # (ho, wo, kh, kw)
            out = np.einsum("hwij,cij->chw", win, wa[:, 0])
            return t.reshape(1, 1, h, w).conv2d(wt, padding=pad, stride=stride).reshape(out.shape), out
        if kind == "attention" and a.ndim == 2:  # the value as queries
            (lq, d), lk, dv = a.shape, self.draw(st.integers(1, 5)), self.draw(st.integers(1, 4))
            causal = self.draw(st.booleans())
            (kt, ka), (vt, va) = self.new_input((lk, d)), self.new_input((lk, dv))
            self.trace.append(f"attention k {list(ka.shape)} v {list(va.shape)} causal={causal}")
            sc = a @ ka.T / math.sqrt(d)
            if causal:
                sc = np.where(np.arange(lq)[:, None] >= np.arange(lk)[None], sc, -np.inf)
            e = np.exp(sc - sc.max(-1, keepdims=True))
            return t.scaled_dot_product_attention(kt, vt, is_causal=causal), (e / e.sum(-1, keepdims=True)) @ va
        if kind == "gather" and a.ndim >= 1:
            ax = self.axis(a)
            shape = tuple(self.draw(st.integers(1, 4)) if i == ax else s for i, s in enumerate(a.shape))
            idx = self.rng.integers(0, a.shape[ax], shape).astype(np.int32)
            name = f"in{len(self.inputs)}"
            self.inputs[name] = idx
            self.trace.append(f"gather({ax}) {list(shape)}")
            return t.gather(ax, Tensor.empty(shape, dtype="int32", name=name)), np.take_along_axis(a, idx, axis=ax)
        self.trace.append("relu")
        f, g = UNARY["relu"]  # the op drawn does not fit this shape
        return f(t), g(a)


@st.composite
def programs(draw: st.DrawFn) -> tuple[Tensor, np.ndarray, dict[str, np.ndarray], float, list[str]]:
    p = Program(draw)
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    cur = p.note(p.new_input(shape))
    p.trace.insert(0, f"input {list(shape)}")
    values = [cur]
    for _ in range(draw(st.integers(1, 6))):
        cur = p.note(p.step(cur, values))
        values.append(cur)
    t, a = cur
    return t, np.asarray(a, dtype=np.float32), p.inputs, p.scale, p.trace


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_tensor_programs_match_numpy(
    case: tuple[Tensor, np.ndarray, dict[str, np.ndarray], float, list[str]],
) -> None:
    t, want, inputs, scale, _ = case
    prog = optimize(t, target="llvm")
    got = prog(**{k: v for k, v in inputs.items() if k in prog.inputs})  # a value can stop depending on one
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale)


def test_the_fuzzer_can_fail() -> None:
    """The comparison sees a wrong value: a program compiled from one op, checked against another's model."""
    x = Tensor.empty((3, 4), dtype="float32", name="in0")
    a = np.random.default_rng(0).uniform(-1, 1, (3, 4)).astype(np.float32)
    got = optimize(x.softmax(-1), target="llvm")(in0=a)
    wrong: Any = np.exp(a) / np.exp(a).sum(0, keepdims=True)  # softmax over the other axis
    assert not np.allclose(got, wrong, rtol=1e-3, atol=1e-4)


def test_a_flip_after_a_reshape_compiles() -> None:
    """Found by the fuzzer: the flipped index came out as (i + 1) + -2*i + 6, which interval arithmetic bounds by
    [-7, 14], and the static access check refused a correct program (E1204). Like terms combined it is 7 - i."""
    x = Tensor.empty((2, 2, 2), dtype="float32", name="in0")
    a = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    np.testing.assert_array_equal(optimize(x.reshape(8).flip(0), target="llvm")(in0=a), a.reshape(8)[::-1])


INT_BINARY: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "add": (lambda p, q: p + q, lambda p, q: p + q),
    "sub": (lambda p, q: p - q, lambda p, q: p - q),
    "mul": (lambda p, q: p * q, lambda p, q: p * q),
    "floordiv": (lambda p, q: p // (q.abs() + 1), lambda p, q: p // (np.abs(q) + 1)),
    "mod": (lambda p, q: p % (q.abs() + 1), lambda p, q: p % (np.abs(q) + 1)),
    "maximum": (lambda p, q: p.maximum(q), np.maximum),
    "where": (lambda p, q: (p < q).where(p, q), lambda p, q: np.where(p < q, p, q)),
}


@st.composite
def int_programs(draw: st.DrawFn) -> tuple[Tensor, np.ndarray, dict[str, np.ndarray], list[str]]:
    """int32 programs: floor division and modulo by positive and negative values, wrapping products, movement."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    inputs: dict[str, np.ndarray] = {}

    def new(shape: tuple[int, ...]) -> Pair:
        a = rng.integers(-60, 60, shape).astype(np.int32)
        inputs[f"in{len(inputs)}"] = a
        return Tensor.empty(shape, dtype="int32", name=f"in{len(inputs) - 1}"), a

    t, a = new(tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))))
    trace = [f"input {list(a.shape)}"]
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["binary", "const", "flip", "permute", "sum", "pad"]))
        if kind == "binary":
            name = draw(st.sampled_from(sorted(INT_BINARY)))
            f, g = INT_BINARY[name]
            ot, oa = new(tuple(1 if draw(st.booleans()) else s for s in a.shape))
            trace.append(f"{name} with {list(oa.shape)}")
            t, a = (f(t, ot), g(a, oa)) if draw(st.booleans()) else (f(ot, t), g(oa, a))
        elif kind == "const":
            k = draw(st.sampled_from([-7, -3, -1, 2, 3, 8, 32]))
            op = draw(st.sampled_from(["//", "%", "*", "+"]))
            trace.append(f"{op} {k}")
            t, a = {"//": (t // k, a // k), "%": (t % k, a % k), "*": (t * k, a * np.int32(k)), "+": (t + k, a + np.int32(k))}[
                op
            ]
        elif kind == "flip":
            ax = draw(st.integers(0, a.ndim - 1))
            trace.append(f"flip({ax})")
            t, a = t.flip(ax), np.flip(a, ax)
        elif kind == "permute" and a.ndim >= 2:
            perm = tuple(draw(st.permutations(range(a.ndim))))
            trace.append(f"permute{perm}")
            t, a = t.permute(perm), np.transpose(a, perm)
        elif kind == "sum":
            ax = draw(st.integers(0, a.ndim - 1))
            trace.append(f"sum({ax})")
            t, a = t.sum(ax, keepdim=True), a.sum(ax, keepdims=True, dtype=np.int32)
        elif kind == "pad":
            ax = draw(st.integers(0, a.ndim - 1))
            pads = tuple((1, 2) if i == ax else (0, 0) for i in range(a.ndim))
            trace.append(f"pad{pads}")
            t, a = t.pad(pads), np.pad(a, pads)
        trace.append(f"-> {list(a.shape)}")
    return t, np.asarray(a), inputs, trace


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(int_programs())
def test_random_integer_programs_match_numpy(case: tuple[Tensor, np.ndarray, dict[str, np.ndarray], list[str]]) -> None:
    """Integer semantics as numpy has them: floor division and its remainder for every sign, int32 wraparound."""
    t, want, inputs, _ = case
    prog = optimize(t, target="llvm")
    got = prog(**{k: v for k, v in inputs.items() if k in prog.inputs})
    assert got.dtype == np.int32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
