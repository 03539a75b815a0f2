"""UOp: hash-consing, immutability, the symbolic API, bounds (vmin/vmax) and render().

The property tests build each random expression twice: as a UOp and as a
plain Python function (the oracle), so neither render() nor the interpreter
is compared with itself.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from egraph_compiler import AxisType, Ops, UOp
from egraph_compiler.ir.diagnostics import CompilerError, DTypeError, InvalidArgument, ShapeMismatch
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.ir.interpret import evaluate

Env = dict[str, int]
Expr = tuple[UOp, Callable[[Env], Any]]

VARS = {"a": (-9, 9), "b": (1, 6), "c": (-6, -1), "d": (0, 12)}
V = {n: UOp.variable(n, lo, hi) for n, (lo, hi) in VARS.items()}


def py_where(c: Any, a: Any, b: Any) -> Any:
    return a if c else b


RENDER_ENV = {"where": py_where, "max": max}


def render_eval(u: UOp, env: Env) -> Any:
    return eval(u.render(), dict(RENDER_ENV), dict(env))


# ---- hash-consing and immutability -------------------------------------------------------------


def test_structurally_equal_uops_are_the_same_object() -> None:
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    assert UOp.variable("x", 0, 10) is x
    assert (x + y) * 3 is (x + y) * 3
    assert UOp.const(3, dtypes.int32) is UOp.const(3, dtypes.int32)
    assert UOp.range(8, "k", AxisType.REDUCE) is UOp.range(8, "k", AxisType.REDUCE)


def test_different_structure_gives_different_objects() -> None:
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    assert x + y is not y + x
    assert UOp.variable("x", 0, 11) is not x
    assert UOp.const(3, dtypes.int32) is not UOp.const(3, dtypes.int64)
    assert UOp.const(0.0, dtypes.float32) is not UOp.const(-0.0, dtypes.float32)
    assert UOp.const(1, dtypes.int32) is not UOp.const(True, dtypes.bool)
    assert UOp.range(8, 0, AxisType.LOOP) is not UOp.range(8, 0, AxisType.REDUCE)


def test_uops_are_immutable() -> None:
    x = UOp.variable("x", 0, 10)
    for name, value in (("op", Ops.CONST), ("arg", 1), ("src", ()), ("dtype", dtypes.int8), ("new", 1)):
        with pytest.raises(AttributeError):
            setattr(x, name, value)
    assert x.arg == ("x", 0, 10)


def test_pickle_round_trip_preserves_identity() -> None:
    e = (UOp.variable("x", 0, 10) * 4 + 1) // 3
    assert pickle.loads(pickle.dumps(e)) is e


def test_properties_op_src_arg_dtype() -> None:
    x, y = UOp.variable("x", -3, 5), UOp.variable("y", 1, 4)
    s = x + y
    assert (s.op, s.src, s.arg, s.dtype) == (Ops.ADD, (x, y), None, dtypes.index)
    assert x.op is Ops.DEFINE_VAR and x.arg == ("x", -3, 5) and x.src == ()
    c = UOp.const(2.5, dtypes.float32)
    assert (c.op, c.arg, c.dtype) == (Ops.CONST, 2.5, dtypes.float32)
    assert (x < y).dtype is dtypes.bool
    assert x.cast(dtypes.int32).dtype is dtypes.int32


# ---- symbolic API: each operator against Python ------------------------------------------------

OPERATORS: list[tuple[str, Callable[[UOp, UOp], UOp], Callable[[int, int], Any]]] = [
    ("add", lambda p, q: p + q, lambda p, q: p + q),
    ("sub", lambda p, q: p - q, lambda p, q: p - q),
    ("mul", lambda p, q: p * q, lambda p, q: p * q),
    ("floordiv", lambda p, q: p // q, lambda p, q: p // q),
    ("mod", lambda p, q: p % q, lambda p, q: p % q),
    ("lt", lambda p, q: p < q, lambda p, q: p < q),
    ("gt", lambda p, q: p > q, lambda p, q: p > q),
    ("le", lambda p, q: p <= q, lambda p, q: p <= q),
    ("ge", lambda p, q: p >= q, lambda p, q: p >= q),
    ("ne", lambda p, q: p.ne(q), lambda p, q: p != q),
    ("eq", lambda p, q: p.eq(q), lambda p, q: p == q),
    ("and", lambda p, q: p & q, lambda p, q: p & q),
    ("or", lambda p, q: p | q, lambda p, q: p | q),
    ("xor", lambda p, q: p ^ q, lambda p, q: p ^ q),
    ("shl", lambda p, q: p << (q % 4), lambda p, q: p << (q % 4)),
    ("shr", lambda p, q: p >> (q % 4), lambda p, q: p >> (q % 4)),
    ("maximum", lambda p, q: p.maximum(q), max),
    ("minimum", lambda p, q: p.minimum(q), min),
    ("where", lambda p, q: (p < q).where(p, q), lambda p, q: p if p < q else q),
    ("neg", lambda p, q: -p, lambda p, q: -p),
    ("rsub", lambda p, q: 7 - p, lambda p, q: 7 - p),
    ("rfloordiv", lambda p, q: 17 // q, lambda p, q: 17 // q),
    ("rmod", lambda p, q: 17 % q, lambda p, q: 17 % q),
]
SAMPLES = [(-7, 2), (7, -2), (-7, -2), (7, 2), (0, 3), (-1, 5), (5, -1), (-8, 4), (9, 9), (-3, 7)]


@pytest.mark.parametrize(("name", "build", "oracle"), OPERATORS, ids=[o[0] for o in OPERATORS])
def test_operator_render_evaluate_and_bounds_agree_with_python(name: str, build: Callable, oracle: Callable) -> None:
    p, q = UOp.variable("p", -9, 9), UOp.variable("q", -9, 9)
    e = build(p, q)
    for pv, qv in SAMPLES:
        want = oracle(pv, qv)
        assert render_eval(e, {"p": pv, "q": qv}) == want, (e.render(), pv, qv)
        assert evaluate(e, var_values={"p": pv, "q": qv}).item() == want
        assert e.vmin <= want <= e.vmax


def test_idiv_and_mod_are_floor_division_and_floor_remainder() -> None:
    x, y = UOp.variable("x", -20, 20), UOp.variable("y", -5, 5)
    q, r = x // y, x % y
    for xv in range(-20, 21):
        for yv in (-5, -3, -1, 1, 2, 5):
            env = {"x": xv, "y": yv}
            assert evaluate(q, var_values=env).item() == xv // yv
            assert evaluate(r, var_values=env).item() == xv % yv
    assert "//" in q.render() and "%" in r.render()


def test_render_spells_ops_in_python() -> None:
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 1, 10)
    assert (x // y).render() == "(x//y)"
    assert (x % y).render() == "(x%y)"
    assert (x < y).render() == "(x<y)"
    assert x.ne(y).render() == "(x!=y)"
    assert (x < y).where(x, y).render() == "where((x<y), x, y)"
    assert x.maximum(y).render() == "max(x, y)"
    assert UOp.variable("n_1", 0, 3).render() == "n_1"


def test_trunc_reciprocal_and_cast() -> None:
    f = UOp.const(-2.75, dtypes.float32)
    assert evaluate(f.trunc()).item() == -2.0
    assert evaluate(UOp.const(4.0, dtypes.float32).reciprocal()).item() == 0.25
    assert evaluate(f.cast(dtypes.int32)).item() == -2
    x = UOp.variable("x", -5, 5)
    assert render_eval(x.trunc(), {"x": -3}) == -3
    assert render_eval(x.cast(dtypes.int32), {"x": -3}) == -3
    assert render_eval(x.cast(dtypes.bool), {"x": 0}) is False
    assert eval(UOp.const(4.0, dtypes.float32).reciprocal().render()) == 0.25


def test_const_bounds_and_range_bounds() -> None:
    assert (UOp.const(7).vmin, UOp.const(7).vmax) == (7, 7)
    r = UOp.range(16, 0)
    assert (r.vmin, r.vmax) == (0, 15)
    assert ((r * 4 + 3).vmin, (r * 4 + 3).vmax) == (3, 63)
    assert ((r // 4).vmin, (r // 4).vmax) == (0, 3)
    assert ((r % 4).vmin, (r % 4).vmax) == (0, 3)
    assert ((r < 16).vmin, (r < 16).vmax) == (1, 1)


def test_constructors_reject_bad_arguments_with_diagnostics() -> None:
    with pytest.raises(InvalidArgument):
        UOp.variable("x", 5, 1)
    with pytest.raises(InvalidArgument):
        UOp.variable("not a name", 0, 1)
    with pytest.raises(InvalidArgument):
        UOp.variable("x", 0.5, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        UOp.const("3")  # type: ignore[arg-type]
    with pytest.raises(CompilerError):
        UOp.const(1, "nope")
    with pytest.raises(InvalidArgument):
        UOp.variable("x", 0, 3) + "a"  # type: ignore[operator]
    with pytest.raises(DTypeError):
        UOp.variable("x", 0, 3) / 2
    with pytest.raises(DTypeError):
        UOp.const(1, dtypes.int32) + UOp.const(1, dtypes.int64)
    with pytest.raises(InvalidArgument):
        UOp(Ops.ADD, dtypes.index, (UOp.const(1),))  # wrong arity


def test_movement_uops_check_shapes_at_construction() -> None:
    b = UOp(Ops.BUFFER, dtypes.float32, (), ("buf", (2, 3)))
    assert b.reshape((3, 2)).shape == (3, 2)
    assert b.permute((1, 0)).shape == (3, 2)
    assert b.pad(((1, 0), (0, 2))).shape == (3, 5)
    assert b.shrink(((0, 1), (1, 3))).shape == (1, 2)
    with pytest.raises(ShapeMismatch):
        b.reshape((4, 2))
    with pytest.raises(CompilerError):
        b.expand((4, 3))
    with pytest.raises(CompilerError):
        b.permute((0, 0))
    with pytest.raises(CompilerError):
        b.shrink(((0, 3), (0, 3)))
    with pytest.raises(CompilerError):
        b.pad(((-1, 0), (0, 0)))


# ---- random integer expressions ----------------------------------------------------------------


def _leaf() -> st.SearchStrategy[Expr]:
    var = st.sampled_from(sorted(VARS)).map(lambda n: (V[n], lambda env, n=n: env[n]))
    const = st.integers(-12, 12).map(lambda c: (UOp.const(c), lambda env, c=c: c))
    return st.one_of(var, var, const)


def _binary(ints: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    ops: list[tuple[Callable[[UOp, UOp], UOp], Callable[[Any, Any], Any]]] = [
        (lambda p, q: p + q, lambda p, q: p + q),
        (lambda p, q: p - q, lambda p, q: p - q),
        (lambda p, q: p * q, lambda p, q: p * q),
        (lambda p, q: p // q, lambda p, q: p // q),
        (lambda p, q: p % q, lambda p, q: p % q),
        (lambda p, q: p.maximum(q), max),
        (lambda p, q: p.minimum(q), min),
        (lambda p, q: p & q, lambda p, q: p & q),
        (lambda p, q: p | q, lambda p, q: p | q),
        (lambda p, q: p ^ q, lambda p, q: p ^ q),
    ]

    def combine(op: tuple[Callable, Callable], a: Expr, b: Expr) -> Expr:
        (ua, fa), (ub, fb) = a, b
        return op[0](ua, ub), lambda env: op[1](fa(env), fb(env))

    return st.builds(combine, st.sampled_from(ops), ints, ints)


def _unary(ints: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    def neg(a: Expr) -> Expr:
        return -a[0], lambda env: -a[1](env)

    def shift(a: Expr, k: int, left: bool) -> Expr:
        if left:
            return a[0] << k, lambda env: a[1](env) << k
        return a[0] >> k, lambda env: a[1](env) >> k

    return st.one_of(st.builds(neg, ints), st.builds(shift, ints, st.integers(0, 3), st.booleans()))


def _bools(ints: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    def cmp(kind: str, a: Expr, b: Expr) -> Expr:
        (ua, fa), (ub, fb) = a, b
        if kind == "lt":
            return ua < ub, lambda env: fa(env) < fb(env)
        if kind == "ne":
            return ua.ne(ub), lambda env: fa(env) != fb(env)
        if kind == "eq":
            return ua.eq(ub), lambda env: fa(env) == fb(env)
        return ua >= ub, lambda env: fa(env) >= fb(env)

    base = st.builds(cmp, st.sampled_from(["lt", "ne", "eq", "ge"]), ints, ints)

    def logic(kind: str, a: Expr, b: Expr) -> Expr:
        (ua, fa), (ub, fb) = a, b
        if kind == "and":  # both sides evaluated (no short circuit), as the rendered & does
            return ua & ub, lambda env: bool(fa(env)) & bool(fb(env))
        if kind == "or":
            return ua | ub, lambda env: bool(fa(env)) | bool(fb(env))
        if kind == "xor":
            return ua ^ ub, lambda env: fa(env) != fb(env)
        return -ua, lambda env: not fa(env)

    return st.one_of(base, st.builds(logic, st.sampled_from(["and", "or", "xor", "not"]), base, base))


def _where(ints: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    def build(c: Expr, a: Expr, b: Expr) -> Expr:
        def f(env: Env) -> Any:
            va, vb = a[1](env), b[1](env)  # both branches evaluated, as the rendered where() call does
            return va if c[1](env) else vb

        return c[0].where(a[0], b[0]), f

    return st.builds(build, _bools(ints), ints, ints)


int_exprs: st.SearchStrategy[Expr] = st.recursive(
    _leaf(), lambda ints: st.one_of(_binary(ints), _unary(ints), _where(ints)), max_leaves=8
)
assignments = st.fixed_dictionaries({n: st.integers(lo, hi) for n, (lo, hi) in VARS.items()})


def _oracle(f: Callable[[Env], Any], env: Env) -> Any:
    try:
        return f(env)
    except ZeroDivisionError:
        assume(False)


@given(int_exprs, st.lists(assignments, min_size=1, max_size=4))
def test_random_expressions_stay_within_vmin_vmax(e: Expr, envs: list[Env]) -> None:
    u, f = e
    for env in envs:
        try:
            want = f(env)
        except ZeroDivisionError:
            continue
        assert u.vmin <= want <= u.vmax, (u.render(), env, want, u.vmin, u.vmax)


@given(int_exprs, assignments)
def test_random_expressions_render_to_python_that_matches_the_oracle(e: Expr, env: Env) -> None:
    u, f = e
    want = _oracle(f, env)
    assert render_eval(u, env) == want, u.render()


@given(int_exprs, assignments)
def test_random_expressions_evaluate_in_the_reference_like_the_oracle(e: Expr, env: Env) -> None:
    u, f = e
    want = _oracle(f, env)
    assert int(evaluate(u, var_values=env)) == int(want), u.render()


@given(_bools(int_exprs), assignments)
def test_random_boolean_expressions_render_and_bound(e: Expr, env: Env) -> None:
    u, f = e
    want = _oracle(f, env)
    assert u.dtype is dtypes.bool
    assert render_eval(u, env) == want
    assert u.vmin <= int(want) <= u.vmax


def test_deep_expressions_do_not_recurse() -> None:
    x = UOp.variable("x", 0, 3)
    e = x
    for i in range(5000):
        e = e + (i % 3)
    assert evaluate(e, var_values={"x": 2}).item() == 2 + sum(i % 3 for i in range(5000))
    assert len(e.toposort()) > 5000
    assert e.vmax == 3 + sum(i % 3 for i in range(5000))
    assert e.device is None and "ADD" in repr(e)
