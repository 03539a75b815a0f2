"""Bad inputs always raise a CompilerError diagnostic, never a bare Python exception from inside.

Two kinds of tests: inputs that are certainly wrong must raise a CompilerError;
random junk arguments may be accepted, but then the result must evaluate, and
any failure must still be a CompilerError.
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import shapes
from hypothesis import given
from hypothesis import strategies as st

from egraph_compiler import Tensor, UOp
from egraph_compiler.frontend.frontend_ir import load_frontend_ir
from egraph_compiler.ir.diagnostics import ALL_DIAGNOSTICS, CompilerError
from egraph_compiler.ir.dtypes import to_dtype

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.json"))


def raises_diagnostic(fn: Callable[[], Any]) -> CompilerError:
    with pytest.raises(CompilerError) as info:
        res = fn()
        if isinstance(res, Tensor):  # construction may be lazy: the error may come when evaluating
            res.numpy()
    assert info.value.code and info.value.why and info.value.suggestion
    return info.value


def accepted_or_diagnosed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Anything goes except an exception that is not a CompilerError (and results must evaluate).

    A call that does not fit the signature (Python's own TypeError before the body runs) is skipped.
    """
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return
    except ValueError:  # no signature available
        pass
    try:
        res = fn(*args, **kwargs)
        if isinstance(res, Tensor):
            res.numpy()
    except CompilerError:
        pass


def tensors(max_dims: int = 3) -> st.SearchStrategy[Tensor]:
    dts = st.sampled_from([np.float32, np.int32, np.bool_, np.float16, np.uint8])
    return st.builds(lambda s, d: Tensor(np.ones(s, d)), shapes(0, max_dims, 3), dts)


# Junk argument values: wrong types, odd numbers, sequences, tensors.
junk = st.recursive(
    st.one_of(
        st.integers(-4, 6),
        st.floats(allow_nan=True, allow_infinity=True),
        st.none(),
        st.booleans(),
        st.text(max_size=4),
        st.sampled_from(
            ["float32", "int8", "nope", ..., slice(None, None, -1), slice(1, None), slice("a"), object(), np.int64(2)]
        ),
        tensors(2),
        st.builds(lambda s: np.zeros(s), shapes(0, 2, 3)),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple)),
    max_leaves=6,
)

METHODS: list[str] = [
    "reshape",
    "permute",
    "expand",
    "pad",
    "shrink",
    "flip",
    "__getitem__",
    "sum",
    "max",
    "min",
    "mean",
    "prod",
    "softmax",
    "log_softmax",
    "layernorm",
    "cumsum",
    "transpose",
    "cat",
    "stack",
    "matmul",
    "gather",
    "scatter_add",
    "conv2d",
    "scaled_dot_product_attention",
    "cast",
    "where",
    "maximum",
    "minimum",
    "__add__",
    "__sub__",
    "__mul__",
    "__truediv__",
    "__floordiv__",
    "__mod__",
    "__lt__",
    "__eq__",
    "__pow__",
    "__and__",
    "__lshift__",
    "unsqueeze",
    "squeeze",
    "flatten",
    "repeat",
    "__matmul__",
    "dot",
    "relu",
    "exp",
    "abs",
    "clip",
    "tril",
]


@given(tensors(), st.sampled_from(METHODS), st.lists(junk, max_size=3))
def test_tensor_methods_with_junk_arguments_raise_only_diagnostics(t: Tensor, method: str, args: list[Any]) -> None:
    accepted_or_diagnosed(getattr(t, method), *args)


@given(
    tensors(),
    st.sampled_from(["sum", "max", "mean", "softmax", "cumsum", "conv2d", "pad", "gather"]),
    st.dictionaries(
        st.sampled_from(
            ["axis", "keepdim", "dim", "stride", "padding", "dilation", "groups", "value", "mode", "bias", "index", "eps"]
        ),
        junk,
        max_size=3,
    ),
)
def test_tensor_methods_with_junk_keywords_raise_only_diagnostics(t: Tensor, method: str, kw: dict[str, Any]) -> None:
    accepted_or_diagnosed(getattr(t, method), **kw)


CONSTRUCTORS: dict[str, Callable[..., Any]] = {
    "Tensor": Tensor,
    "empty": Tensor.empty,
    "zeros": Tensor.zeros,
    "ones": Tensor.ones,
    "full": Tensor.full,
    "arange": Tensor.arange,
    "rand": Tensor.rand,
    "randn": Tensor.randn,
    "eye": Tensor.eye,
    "const": UOp.const,
    "variable": UOp.variable,
    "range": UOp.range,
    "to_dtype": to_dtype,
}


@given(st.sampled_from(sorted(CONSTRUCTORS)), st.lists(junk, max_size=3))
def test_constructors_with_junk_arguments_raise_only_diagnostics(name: str, args: list[Any]) -> None:
    accepted_or_diagnosed(CONSTRUCTORS[name], *args)


# ---- certainly wrong inputs --------------------------------------------------------------------


@given(shapes(1, 3), st.integers(1, 30))
def test_reshape_to_a_different_size_raises(shape: tuple[int, ...], n: int) -> None:
    t = Tensor.ones(*shape)
    if n != t.numel():
        raises_diagnostic(lambda: t.reshape(n))
        raises_diagnostic(
            lambda: (
                t.reshape(n, -1)
                if t.numel() % n
                else t.reshape(n, 7, -1)
                if t.numel() % (7 * n)
                else t.reshape(n + 1, -1, 2 * n)
            )
        )


@given(shapes(1, 3), st.integers(1, 2))
def test_axes_out_of_range_raise(shape: tuple[int, ...], beyond: int) -> None:
    t, idx = Tensor.ones(*shape), Tensor(np.zeros(shape, np.int32))
    nd = len(shape)
    for ax in (nd - 1 + beyond, -nd - beyond):
        new_ax = ax + 1 if ax > 0 else ax - 1  # out of range for unsqueeze too
        calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
            (t.sum, (ax,)),
            (t.max, (ax,)),
            (t.mean, ((0, ax),)),
            (t.softmax, (ax,)),
            (t.log_softmax, (ax,)),
            (t.layernorm, (ax,)),
            (t.flip, (ax,)),
            (t.cumsum, (ax,)),
            (t.transpose, (0, ax)),
            (t.squeeze, (ax,)),
            (t.unsqueeze, (new_ax,)),
            (t.min, (ax,)),
            (t.prod, (ax,)),
            (t.gather, (ax, idx)),
            (t.permute, ((ax,) * nd,)),
        ]
        for fn, args in calls:
            raises_diagnostic(lambda fn=fn, args=args: fn(*args))
        raises_diagnostic(lambda ax=ax: t.cat(t, dim=ax))


@given(shapes(1, 3), st.integers(-3, 0))
def test_zero_or_negative_sizes_raise(shape: tuple[int, ...], bad: int) -> None:
    bad_shape = (*shape[:-1], bad)
    for fn in (
        lambda: Tensor.empty(*bad_shape),
        lambda: Tensor.zeros(*bad_shape),
        lambda: Tensor.ones(bad_shape),
        lambda: Tensor.full(bad_shape, 1.0),
        lambda: Tensor.rand(*bad_shape),
        lambda: Tensor(np.zeros((*shape[:-1], 0))),
    ):
        raises_diagnostic(fn)
    if bad != -1:  # -1 means "infer" / "keep" here
        raises_diagnostic(lambda: Tensor.ones(*shape).reshape(*bad_shape))
        raises_diagnostic(lambda: Tensor.ones(*shape).expand(*bad_shape))


@given(broadcast_fail=st.tuples(st.integers(2, 4), st.integers(2, 4)).filter(lambda p: p[0] != p[1]))
def test_wrong_shapes_raise(broadcast_fail: tuple[int, int]) -> None:
    n, m = broadcast_fail
    a, b = Tensor.ones(3, n), Tensor.ones(3, m)
    for fn in (
        lambda: a + b,
        lambda: a.maximum(b),
        lambda: (a < 1).where(a, b),
        lambda: a @ Tensor.ones(m, 2),
        lambda: a.cat(Tensor.ones(n + 1, m), dim=0),
        lambda: a.stack(b),
        lambda: a.expand(3, n, m),
        lambda: Tensor.ones(1, n, 5, 5).conv2d(Tensor.ones(2, m, 3, 3)),
        lambda: Tensor.ones(1, 2, 5, 5).conv2d(Tensor.ones(2, 2, 3, 3), bias=Tensor.ones(n + 2)),
        lambda: a.scaled_dot_product_attention(b, b),
        lambda: a.shrink(((0, 3), (0, n + 1))),
    ):
        raises_diagnostic(fn)


@given(st.text(max_size=8).filter(lambda s: s.strip().lower().removeprefix("dtypes.") not in _known_dtype_names()))
def test_unknown_dtype_names_raise(name: str) -> None:
    raises_diagnostic(lambda: to_dtype(name))
    raises_diagnostic(lambda: Tensor.ones(2).cast(name))
    raises_diagnostic(lambda: Tensor.empty(2, dtype=name))


def _known_dtype_names() -> set[str]:
    from egraph_compiler.ir.dtypes import _ALIASES

    return set(_ALIASES)


def test_wrong_dtypes_raise() -> None:
    f, i = Tensor.ones(2, 3), Tensor.ones(2, 3, dtype="int32")
    for fn in (
        lambda: f & f,
        lambda: f | 1,
        lambda: ~f,
        lambda: f << 1,
        lambda: i << 1.5,
        lambda: f.gather(0, f),
        lambda: f.scatter_add(0, f, f),
        lambda: Tensor.rand(2, dtype="int32"),
        lambda: Tensor.ones(3).bitcast("float64"),  # 3 float32s do not make whole float64s (tinygrad's rule)
        lambda: Tensor(1.0).bitcast("int8"),  # a scalar has no last axis to grow
        lambda: f.bitcast("bool"),
        lambda: Tensor([True]) - Tensor([False]),
        lambda: f.cast(None),
    ):
        raises_diagnostic(fn)


@given(
    st.one_of(
        st.text(max_size=3), st.floats(), st.none(), st.lists(st.text(max_size=2), min_size=1, max_size=2), st.just(object())
    )
)
def test_wrong_argument_types_raise(bad: Any) -> None:
    t = Tensor.ones(2, 3)
    calls = [
        lambda: t.reshape(bad, 3),
        lambda: t.permute(bad, 0),
        lambda: t.sum((0, bad)),
        lambda: t.flip(bad),
        lambda: t.expand(bad, 3),
        lambda: t.transpose(bad, 0),
        lambda: Tensor.zeros(bad),
        lambda: t.pad(((0, bad), (0, 0))),
        lambda: t.shrink(((0, bad), (0, 3))),
        lambda: t.max(0, bad),
        lambda: t.gather(0, bad),
        lambda: t.unsqueeze(bad),
        lambda: t.cat(bad),
        lambda: UOp.variable("x", 0, bad),
        lambda: Tensor.ones(1, 1, 4, 4).conv2d(Tensor.ones(1, 1, 3, 3), stride=bad),
    ]
    if not isinstance(bad, float):  # floats are fine operands and constants
        calls += [lambda: t + bad, lambda: UOp.const(bad), lambda: Tensor.arange(bad)]
    if bad is not None:  # None is a new axis, or "pick a name"
        calls.append(lambda: t[bad])
        if not (isinstance(bad, str) and bad.isidentifier()):
            calls.append(lambda: Tensor.empty(2, name=bad))
    for fn in calls:
        raises_diagnostic(fn)


def test_every_diagnostic_has_a_code_kind_and_dict_form() -> None:
    codes = [d.code for d in ALL_DIAGNOSTICS]
    assert len(codes) == len(set(codes))
    for d in ALL_DIAGNOSTICS:
        e = d(at="here", why="because", suggestion="do this", extra=(1, 2))
        assert isinstance(e, CompilerError)
        assert e.to_dict()["code"] == d.code and e.to_dict()["extra"] == [1, 2]
        assert d.code in str(e) and "do this" in str(e)


# ---- malformed Frontend-IR documents -----------------------------------------------------------


@given(st.text(max_size=40))
def test_random_text_is_rejected_as_malformed(text: str) -> None:
    raises_diagnostic(lambda: load_frontend_ir("{" + text))


@given(st.one_of(st.binary(max_size=20), st.integers(), st.lists(st.integers(), max_size=3), st.none()))
def test_non_document_sources_are_rejected(src: Any) -> None:
    raises_diagnostic(lambda: load_frontend_ir(src))


json_junk = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 300),
        st.floats(allow_nan=False),
        st.text(max_size=5),
        st.sampled_from(["fp32", "fp16", "A", "B", "C0", "GEMM", "Elementwise", "add", "M", "K"]),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=5,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@given(st.sampled_from(EXAMPLES), st.data())
def test_mutated_example_documents_raise_only_diagnostics(path: Path, data: st.DataObject) -> None:
    doc = json.loads(path.read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(_paths(doc)[1:]))
        parent = doc
        for k in where[:-1]:
            parent = parent[k]
        if data.draw(st.booleans()):
            parent[where[-1]] = data.draw(json_junk)
        elif isinstance(parent, dict):
            del parent[where[-1]]
        else:
            parent.pop(where[-1])
    try:
        g = load_frontend_ir(copy.deepcopy(doc))
    except CompilerError:
        return
    from egraph_compiler.ir.interpret import evaluate

    inputs = g.random_inputs(0)
    for t in g.outputs.values():
        accepted_or_diagnosed(evaluate, t.uop, inputs)


@pytest.mark.parametrize("name", ["é", "x\u00b2", "πr"])
def test_non_ascii_names_are_diagnosed(name: str) -> None:
    """Names become egglog strings and C parameter names: a non-ASCII one is a clear diagnostic, not a crash deep in
    the e-graph (or two buffers with one C name)."""
    raises_diagnostic(lambda: Tensor.empty(4, name=name))
    raises_diagnostic(lambda: UOp.variable(name, 0, 4))


@pytest.mark.parametrize("shape", [(2**62, 4), (2**40, 2**40), (2**31, 2**31, 2)])
def test_sizes_beyond_64_bit_offsets_are_diagnosed(shape: tuple[int, ...]) -> None:
    """A tensor whose bytes exceed 2**62 is E1005 when it is made (it reached egglog as an i64 overflow)."""
    with pytest.raises(CompilerError) as info:
        Tensor.empty(*shape, name="x")
    assert info.value.code == "E1005"
    with pytest.raises(CompilerError):
        Tensor.empty(2**31, name="x").reshape(2**31, 1).expand(2**31, 2**31)


def test_buffers_too_big_to_allocate_are_diagnosed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program whose intermediates or outputs cannot be allocated is E1502, not a raw MemoryError (numpy's
    refusal is simulated: with memory overcommitted, a real 4 TiB buffer could be granted and then fault)."""
    from egraph_compiler import optimize

    x = Tensor.empty(1, name="x")
    prog = optimize(x.expand(2**20, 2**20) * 2, target="llvm")  # a 4 TiB output

    def refuse(*_: Any) -> Any:
        raise MemoryError("Unable to allocate 4.00 TiB")

    monkeypatch.setattr(prog.backend, "alloc", refuse)
    with pytest.raises(CompilerError) as info:
        prog(x=np.ones(1, np.float32))
    assert info.value.code == "E1502"


@pytest.mark.parametrize("target", ["llvm", "reference"])
@pytest.mark.parametrize(
    "value,why",
    [
        (None, "got None"),
        ([[1.0, 2.0], [3.0]], "not an array"),
        ("abcd", "not numeric"),
        ({"x": 1}, "not numeric"),
        (np.array([["a", "b"], ["c", "d"]]), "not numeric"),
        (object(), "not numeric"),
        (np.ones(4, np.float32), "expected shape"),
    ],
    ids=["none", "ragged", "str", "dict", "strings", "object", "flat"],
)
def test_program_inputs_that_are_not_arrays_say_what_was_expected(target: str, value: Any, why: str) -> None:
    from egraph_compiler import optimize

    prog = optimize(Tensor.empty(2, 2, name="a") * 2.0, target=target)
    with pytest.raises(CompilerError, match=why) as info:
        prog(a=value)
    assert info.value.code == "E1404"
    assert "shape (2, 2)" in str(info.value)


@pytest.mark.parametrize("convert", [float, int], ids=["float", "int"])
def test_a_lazy_tensor_as_a_python_number_is_diagnosed(convert: Callable[[Any], Any]) -> None:
    err = raises_diagnostic(lambda: convert(Tensor([1.0])))
    assert err.code == "E1006" and "item()" in err.suggestion


def test_positional_program_inputs_follow_prog_inputs_and_misuse_is_diagnosed() -> None:
    """prog(a, b) binds by prog.inputs' order (a, b given as a Python TypeError before); too many, or one given
    both ways, is a diagnostic."""
    from egraph_compiler import optimize

    x, w = Tensor.empty(2, 3, name="x"), Tensor.empty(3, 2, name="w")
    prog = optimize(x @ w)
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(6, dtype=np.float32).reshape(3, 2) - 2
    assert prog.inputs == ["x", "w"]
    np.testing.assert_allclose(prog(a, b), a @ b)
    np.testing.assert_allclose(prog(a, w=b), a @ b)
    assert "3 positional inputs" in raises_diagnostic(lambda: prog(a, b, a)).why
    assert "both by position and by name" in raises_diagnostic(lambda: prog(a, x=a)).why


def test_a_program_that_ran_pickles_and_runs_again_after() -> None:
    """Pickling keeps the program, not its compiled code (ctypes pointers raised ValueError)."""
    import pickle

    from egraph_compiler import optimize

    prog = optimize(Tensor.empty(4, name="x").exp() + 1.0)
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    want = np.exp(x) + 1.0
    np.testing.assert_allclose(prog(x=x), want, rtol=1e-6)
    again = pickle.loads(pickle.dumps(prog))
    np.testing.assert_allclose(again(x=x), want, rtol=1e-6)
    np.testing.assert_allclose(prog(x=x), want, rtol=1e-6)


def test_a_directory_given_as_the_document_says_so(tmp_path: Path) -> None:
    err = raises_diagnostic(lambda: load_frontend_ir(tmp_path))
    assert err.code == "E1401" and "is a directory" in err.why
    assert "file not found" in raises_diagnostic(lambda: load_frontend_ir(tmp_path / "none.json")).why
