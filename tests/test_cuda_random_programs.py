"""Random tensor programs through the whole CUDA target: optimize(target="cuda"), nvcc for sm_80 and sm_90, and the
generated kernels run on the host emulation of CUDA (tests/test_cuda_backend.py), compared with the tensor-level
reference interpreter.

Programs mix dtypes (float32/16, bfloat16, float64, int32, int8, uint8, bool), broadcasting, casts, comparisons and
where, floor division and remainder, reductions over one or several axes, movement ops, matmuls (float16 ones cast to
float32: tensor cores) and softmax/layernorm, at sizes where the GPU cost model picks GPU schedules (block ranges,
upcasts, group and block-shared reductions). No GPU is needed; nvcc, g++ and the CUDA headers are (skipped without).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from helpers import examples, gpu_or_skip
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from test_cuda_backend import Case, EmulatedCUDABackend, emulation_library

from egraph_compiler import Tensor, optimize
from egraph_compiler.backends.cuda_toolchain import compile_ptx, find_nvcc
from egraph_compiler.ir.interpret import evaluate
from egraph_compiler.kernel.program import Program

SHAPES: list[tuple[int, ...]] = [
    (64, 300),
    (33, 65),
    (1000,),
    (4097,),
    (7, 1, 33),
    (1, 257),
    (2, 3, 64),
    (16, 16),
    (1,),
    (128, 128),
    (5, 1),
]
DTYPES = ["float32", "float32", "float32", "float16", "bfloat16", "float64", "int32", "int8", "uint8", "bool"]
FLOATS = ("float32", "float16", "bfloat16", "float64")
MAX_NUMEL = 70_000  # per tensor: keeps the host emulation quick
MAX_BARRIER_THREADS = 60_000  # kernels with barriers run one std::thread per GPU thread in the emulation
TOL = {"float16": 2e-2, "bfloat16": 5e-2, "float64": 1e-8}


@dataclass
class RandomProgram:
    outputs: list[Tensor]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    desc: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return "RandomProgram(" + "; ".join(self.desc) + ")"


def _data(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rs = np.random.default_rng(seed)
    if dtype == "bool":
        return rs.random(shape) < 0.5
    if dtype in FLOATS:
        return rs.standard_normal(shape).astype(np.float32 if dtype == "bfloat16" else dtype)
    lo = 0 if dtype.startswith("u") else -8
    return rs.integers(lo, 8, shape).astype(dtype)


def _binary(a: Tensor, b: Tensor, fn: str) -> Tensor:
    if fn == "+":
        return a + b
    if fn == "*":
        return a * b
    if fn == "-":
        return a - b
    return a.maximum(b) if fn == "maximum" else a.minimum(b)


def _unary(t: Tensor, fn: str) -> Tensor:
    if fn == "exp":
        return t.exp()
    if fn == "relu":
        return t.relu()
    if fn == "sqrt_abs":
        return t.abs().sqrt()
    if fn == "sigmoid":
        return t.sigmoid()
    if fn == "recip":
        return (t * t + 1).reciprocal()
    return t.floor()


@st.composite
def random_programs(draw: st.DrawFn) -> RandomProgram:
    prog = RandomProgram([])

    def new_input(shape: tuple[int, ...], dtype: str) -> Tensor:
        name = f"x{len(prog.inputs)}"
        prog.inputs[name] = _data(shape, dtype, draw(st.integers(0, 2**31 - 1)))
        prog.desc.append(f"{name} = E({shape}, {dtype!r})")
        return Tensor.empty(*shape, dtype=dtype, name=name)

    def bshape(shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts to `shape`: leading axes dropped, some axes 1."""
        tail = shape[draw(st.integers(0, len(shape) - 1)) :]
        return tuple(1 if draw(st.booleans()) and draw(st.booleans()) else s for s in tail)

    t = new_input(draw(st.sampled_from(SHAPES)), draw(st.sampled_from(DTYPES)))
    ops = ["binary", "binary", "unary", "where", "cast", "divmod", "reduce", "reduce", "movement", "matmul", "norm"]
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(ops))
        d, is_float = t.dtype.name, t.dtype.is_float
        if op == "binary":
            other = new_input(bshape(t.shape), d if draw(st.booleans()) else draw(st.sampled_from(DTYPES)))
            fn = draw(st.sampled_from(["+", "*", "maximum", "minimum", "-"]))
            if fn == "-" and (t.dtype.is_bool or other.dtype.is_bool):
                fn = "maximum"
            t = _binary(t, other, fn)
            prog.desc.append(f"t = t {fn} x{len(prog.inputs) - 1}")
        elif op == "unary":
            if is_float:
                fn = draw(st.sampled_from(["exp", "relu", "sqrt_abs", "sigmoid", "recip", "floor"]))
                t = _unary(t, fn)
            elif t.dtype.is_bool:
                fn, t = "logical_not", t.logical_not()
            else:
                fn, t = "neg_abs", (-t).abs()
            prog.desc.append(f"t = {fn}(t)")
        elif op == "where":
            other = new_input(bshape(t.shape), d)
            cmp = draw(st.sampled_from(["<", "==", "!="]))
            cond = t < other if cmp == "<" else t == other if cmp == "==" else t != other
            t = cond.where(t, other) if draw(st.booleans()) else cond
            prog.desc.append(f"t = (t {cmp} x{len(prog.inputs) - 1}) [where]")
        elif op == "cast":
            to = draw(st.sampled_from(["float32", "float16", "bfloat16", "float64", "int32", "int8", "uint8", "bool"]))
            if is_float and to in ("int32", "int8", "uint8"):  # in range: out-of-range float->int casts are C UB
                t = (t * 10).clip(0 if to == "uint8" else -100, 100)
            t = t.cast(to)
            prog.desc.append(f"t = t.cast({to!r})")
        elif op == "divmod" and t.dtype.is_int:
            c = draw(st.sampled_from([-3, 2, 5, 7]))
            fn = draw(st.sampled_from(["//", "%"]))
            t = t // c if fn == "//" else t % c
            prog.desc.append(f"t = t {fn} {c}")
        elif op == "reduce":
            fn = draw(st.sampled_from(["sum", "max", "min", "mean"]))
            axes = draw(st.lists(st.integers(0, t.ndim - 1), min_size=1, max_size=t.ndim, unique=True))
            axis: Any = axes[0] if len(axes) == 1 else tuple(sorted(axes))
            keep = draw(st.booleans())
            t = getattr(t, fn)(axis, keepdim=keep)
            prog.desc.append(f"t = t.{fn}({axis}, keepdim={keep})")
        elif op == "movement" and t.ndim >= 1:
            fn = draw(st.sampled_from(["permute", "flip", "pad", "shrink", "reshape"]))
            if fn == "permute":
                order = draw(st.permutations(range(t.ndim)))
                t = t.permute(*order)
                prog.desc.append(f"t = t.permute{tuple(order)}")
            elif fn == "flip":
                t = t.flip(t.ndim - 1)
                prog.desc.append("t = t.flip(-1)")
            elif fn == "pad":
                pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in t.shape)
                t = t.pad(pads)
                prog.desc.append(f"t = t.pad({pads})")
            elif fn == "shrink":
                arg = tuple((s // 3, s) for s in t.shape)
                t = t.shrink(arg)
                prog.desc.append(f"t = t.shrink({arg})")
            else:
                t = t.reshape(t.numel())
                prog.desc.append("t = t.reshape(-1)")
        elif op == "matmul" and is_float and t.ndim >= 1:
            n = draw(st.sampled_from([1, 16, 33]))
            w = new_input((t.shape[-1], n), d)
            t = t.cast("float32") @ w.cast("float32") if d in ("float16", "bfloat16") else t @ w
            prog.desc.append(f"t = t @ x{len(prog.inputs) - 1}")
        elif op == "norm" and is_float and t.ndim >= 1:
            fn = draw(st.sampled_from(["softmax", "layernorm"]))
            t = getattr(t, fn)(-1)
            prog.desc.append(f"t = t.{fn}(-1)")
        if t.ndim == 0:
            t = t.reshape(1)
            prog.desc.append("t = t.reshape(1)")
        if t.numel() > MAX_NUMEL:
            t = t.reshape(t.numel())[:MAX_NUMEL]
            prog.desc.append(f"t = t.reshape(-1)[:{MAX_NUMEL}]")
    prog.outputs = [t]
    return prog


def _tolerance(t: Tensor) -> float:
    """The relative tolerance of t's least precise float computation (a float64 output of a float32 sum is as
    close as float32 sums in some order are: numpy's pairwise one is not the kernel's)."""
    floats = {u.dtype.name for u in t.uop.toposort() if u.dtype.is_float}
    return max((TOL.get(d, 2e-4) for d in floats), default=TOL.get(t.dtype.name, 2e-4))


def _compare(got: np.ndarray, want: np.ndarray, tol: float) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    fin = np.isfinite(w)
    scale = max(1.0, float(np.abs(w[fin]).max())) if fin.any() else 1.0
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, equal_nan=True)


def _barrier_threads(prog: Program) -> int:
    """GPU threads the emulation runs as std::threads (kernels with barriers or shuffles)."""
    total = 0
    for k in prog.kernels:
        plan = prog.backend.plan(k)
        if any(b in plan.source for b in ("__syncthreads", "__syncwarp", "__shfl")):
            total += sum(math.prod(lc.grid) * math.prod(lc.block) for lc in plan.launches)
    return total


_counter = iter(range(10**9))


def check_on_cuda(program: RandomProgram, log: Callable[[str], None] = print, time_limit: float = 3.0) -> None:
    """optimize for cuda, nvcc for sm_80 and sm_90, the emulated run against the reference interpreter."""
    outs = program.outputs
    want = evaluate([t.uop for t in outs], program.inputs)
    prog = optimize(outs[0] if len(outs) == 1 else outs, target="cuda", time_limit=time_limit, cache=False)
    log("schedules: " + ", ".join(str(k.get("schedule")) for k in prog.report.extra.get("kernels", [])))
    src = prog.source
    if find_nvcc() is not None:
        for arch in ("sm_80", "sm_90"):
            assert ".entry" in compile_ptx(src, arch), arch
    if _barrier_threads(prog) > MAX_BARRIER_THREADS:
        log("emulation skipped: too many threads with barriers")
        return
    tag = f"rp{next(_counter)}"  # kernel names unique to this example's emulation library
    prog.kernels = [type(k).from_ast(f"{tag}_{k.name}", k.ast) for k in prog.kernels]
    with emulation_library([Case(k.name, k.ast) for k in prog.kernels]) as lib:
        prog.backend, prog._compiled = EmulatedCUDABackend(lib), None
        got = prog(**{n: v for n, v in program.inputs.items() if n in prog.inputs})
    got = got if isinstance(got, tuple) else (got,)
    for g, w, t in zip(got, want, outs):
        _compare(g, w, _tolerance(t))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(random_programs())
def test_random_programs_on_cuda(program: RandomProgram) -> None:
    check_on_cuda(program, note)


SIZED = [
    "softmax_rows",
    "sum_4097",
    "f16_tensor_cores",
    "int8_divmod",
    "bool_any",
    "f16_floordiv_const",
    "bf16_floordiv_const",
    "group_reduce_in_padded_reduce",
]


def sized_program(name: str) -> RandomProgram:
    """A few fixed programs at sizes where the cost model picks GPU schedules (the random ones stay smaller).

    f16/bf16_floordiv_const: `x / c` folds to `x * (1/c)` with the constant not rounded to the half dtype, so the
    CUDA kernel multiplies by a float32 constant where the reference (and LLVM) use the half one; the floor turns
    the last-bit difference into an integer one. group_reduce_in_padded_reduce: a GROUP_REDUCE nested in a REDUCE
    under the pad's WHERE (the cost model's pick for a small outer reduce of a large inner one)."""
    rs = np.random.default_rng(7)
    if name == "softmax_rows":
        x = Tensor.empty(64, 300, name="x")
        outs, inputs = [x.softmax(-1)], {"x": rs.standard_normal((64, 300)).astype(np.float32)}
    elif name == "sum_4097":
        x = Tensor.empty(4097, name="x")
        outs, inputs = [x.sum(), x.max()], {"x": rs.standard_normal(4097).astype(np.float32)}
    elif name == "f16_tensor_cores":
        a, b = Tensor.empty(64, 64, dtype="float16", name="a"), Tensor.empty(64, 64, dtype="float16", name="b")
        outs = [a.cast("float32") @ b.cast("float32")]
        inputs = {n: rs.standard_normal((64, 64)).astype(np.float16) for n in "ab"}
    elif name == "int8_divmod":
        a, b = Tensor.empty(4097, dtype="int8", name="a"), Tensor.empty(4097, dtype="int8", name="b")
        outs = [(a // b) * 3 + a % b]
        inputs = {n: rs.integers(-128, 128, 4097).astype(np.int8) for n in "ab"}
    elif name in ("f16_floordiv_const", "bf16_floordiv_const"):
        dt = "float16" if name.startswith("f16") else "bfloat16"
        x = Tensor.empty(4097, dtype=dt, name="x")
        outs = [(x // 0.75).cast("int32"), (x // 0.3).cast("int32")]
        inputs = {"x": np.linspace(-30, 30, 4097).astype(np.float32 if dt == "bfloat16" else np.float16)}
    elif name == "group_reduce_in_padded_reduce":
        x, y = Tensor.empty(8, 4097, name="x"), Tensor.empty(8, 3, name="y")
        outs = [(y * x.sum(1, keepdim=True)).sum(1).pad(((1, 1),))]
        inputs = {"x": rs.standard_normal((8, 4097)).astype(np.float32), "y": rs.standard_normal((8, 3)).astype(np.float32)}
    else:
        x = Tensor.empty(256, 257, dtype="bool", name="x")
        outs, inputs = [x.max(1), x.sum(0)], {"x": rs.random((256, 257)) < 0.01}
    return RandomProgram(outs, inputs, [name])


@pytest.mark.parametrize("name", SIZED)
def test_gpu_sized_programs_on_cuda(name: str) -> None:
    check_on_cuda(sized_program(name))


# ---- on a real GPU (marked gpu: skipped without CuPy and a device) ---------------------------------------------


def check_on_gpu(program: RandomProgram, log: Callable[[str], None] = print) -> None:
    """optimize for cuda and run on the GPU twice: numpy inputs (numpy outputs back), then the same inputs as
    CuPy arrays (read in place; CuPy outputs back), both against the reference interpreter."""
    import cupy

    outs = program.outputs
    want = evaluate([t.uop for t in outs], program.inputs)
    prog = optimize(outs[0] if len(outs) == 1 else outs, target="cuda", time_limit=3.0)
    log("schedules: " + ", ".join(str(k.get("schedule")) for k in prog.report.extra.get("kernels", [])))
    inputs = {n: v for n, v in program.inputs.items() if n in prog.inputs}
    for device in (False, True):
        given = {n: cupy.asarray(v) for n, v in inputs.items()} if device else inputs
        got = prog(**given)
        got = got if isinstance(got, tuple) else (got,)
        for g, w, t in zip(got, want, outs):
            assert isinstance(g, cupy.ndarray if device and given else np.ndarray), type(g)
            _compare(cupy.asnumpy(g) if device else g, w, _tolerance(t))


@pytest.mark.gpu
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(random_programs())
def test_random_programs_on_gpu(program: RandomProgram) -> None:
    gpu_or_skip()
    check_on_gpu(program, note)


@pytest.mark.gpu
@pytest.mark.parametrize("name", SIZED)
def test_gpu_sized_programs_on_gpu(name: str) -> None:
    gpu_or_skip()
    check_on_gpu(sized_program(name))
