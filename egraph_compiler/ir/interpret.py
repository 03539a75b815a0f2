"""The numpy interpreter of tensor graphs: the semantics every compiled program is checked against.

Movement, reduce and elementwise ops map to numpy through the op table's reference semantics. Integers and bools
are exact at their dtype's width; floats follow IEEE in the dtype's numpy type (bfloat16 computes in float32 and
rounds per op). FUNCTION/CALL nodes are inlined. Kernel-level graphs (ranges, loads, stores) are the reference
backend's (backends/reference.py), which evaluates node by node with these same functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from egraph_compiler.ir.diagnostics import MissingInput, UnsupportedOp
from egraph_compiler.ir.dtypes import DType, bf16_from_bits, bf16_round, compute_np, dtypes
from egraph_compiler.ir.ops import OP_TABLE, Category, Ops, OpSpec
from egraph_compiler.ir.uop import UOp, check_placeholder_names, toposort

Env = dict[str, np.ndarray]


def fix_dtype(x: np.ndarray, d: DType) -> np.ndarray:
    """Bring a computed array into the compute dtype of d (rounding bfloat16)."""
    x = np.asarray(x)
    if d is dtypes.bfloat16:
        return bf16_round(x.astype(np.float32, copy=False))
    want = compute_np(d)
    return x if x.dtype == want else x.astype(want)


def buffer_value(u: UOp, inputs: Env) -> np.ndarray:
    """The value of a BUFFER node: its embedded data, or the input of that name (checked)."""
    name, shape = u.arg[:2]
    if u.src:
        data = u.src[0].arg.data
        arr = bf16_from_bits(data) if u.dtype is dtypes.bfloat16 else data
        return arr.reshape(shape)
    if name not in inputs:
        raise MissingInput(
            at=f"input {name!r}",
            why=f"no value was given for placeholder {name!r}",
            suggestion=f"pass {name}=<array of shape {shape}> when running the program",
            expected_shape=shape,
        )
    return coerce_input(name, inputs[name], shape, u.dtype)


def coerce_input(name: str, value: Any, shape: tuple[int, ...], dtype: DType, xp: Any = np) -> Any:
    """An input as the placeholder declares it. Its shape must match, and its values survive the conversion to
    the placeholder's dtype exactly (numpy's safe casts, or values that convert and back unchanged: int64 5 into
    int32, 1.5 into float32, but not 2**40 into int32 or 0.1 into float32); anything else is refused with the
    conversion to make, never changed silently. `xp`: the array module that holds it (numpy, or CuPy for an
    array on a GPU: checked and converted there)."""
    want = f"a {dtype.name} array of shape {tuple(shape)}"
    if value is None:
        raise MissingInput(at=f"input {name!r}", why="got None", suggestion=f"pass {want}")
    try:
        arr = xp.asarray(value)
    except (ValueError, TypeError) as e:  # a ragged nested list, an object numpy cannot read
        raise MissingInput(
            at=f"input {name!r}",
            why=f"a {type(value).__name__} that is not an array ({str(e).splitlines()[0][:120]})",
            suggestion=f"pass {want} (nested lists must be rectangular)",
        ) from None
    if arr.dtype.kind == "V" and arr.dtype.name.startswith(("bfloat16", "float8", "float6", "float4")):
        arr = arr.astype(np.float32)  # ml_dtypes' narrow floats (bfloat16 from torch, jax, onnx): float32 holds them exactly
    if arr.dtype.kind not in "biuf":
        got = f"a {type(value).__name__}" + (f" of dtype {arr.dtype}" if hasattr(value, "dtype") else "")
        raise MissingInput(at=f"input {name!r}", why=f"{got}, which is not numeric", suggestion=f"pass {want}")
    if arr.shape != tuple(shape):
        raise MissingInput(
            at=f"input {name!r}",
            why=f"expected shape {tuple(shape)}, got {arr.shape}",
            suggestion=f"pass an array of shape {tuple(shape)}"
            + (f" (x.reshape{tuple(shape)})" if arr.size == math.prod(shape) else ""),
        )
    target = np.dtype(np.float32) if dtype is dtypes.bfloat16 else np.dtype(compute_np(dtype))
    if arr.dtype != target and not np.can_cast(arr.dtype, target, "safe"):
        with np.errstate(all="ignore"):
            back = arr.astype(target).astype(arr.dtype)
        if not bool(xp.array_equal(back, arr, equal_nan=arr.dtype.kind == "f")):
            raise MissingInput(
                at=f"input {name!r}",
                why=f"its {arr.dtype} values do not all convert to {dtype.name} exactly",
                suggestion=f"convert it yourself if the rounding is meant: np.asarray(x, dtype=np.{target.name})",
            )
    if dtype is dtypes.bfloat16:
        return bf16_round(arr.astype(np.float32), xp)
    return arr.astype(compute_np(dtype), copy=False)


def _ref(sp: OpSpec) -> Callable[..., np.ndarray]:
    """The op's numpy semantics: every ALU, movement and REDUCE op has them in the op table."""
    assert sp.ref is not None, f"{sp.op.name} has no numpy semantics in the op table"
    return sp.ref


def eval_node(u: UOp, vals: list[Any], inputs: Env, var_values: dict[str, int]) -> Any:
    sp = OP_TABLE[u.op]
    if u.op is Ops.CONST:
        return fix_dtype(np.array(u.arg), u.dtype)
    if u.op is Ops.BUFFER:
        return buffer_value(u, inputs)
    if u.op is Ops.DEFINE_VAR:
        if u.arg[0] not in var_values:
            raise MissingInput(
                at=f"variable {u.arg[0]!r}",
                why="no value for a symbolic variable",
                suggestion=f"pass {u.arg[0]}=<int in [{u.arg[1]}, {u.arg[2]}]>",
            )
        return np.array(var_values[u.arg[0]], dtype=np.int64)
    if u.op is Ops.BINARY:
        return u.arg.data
    if u.op is Ops.CAST:
        return fix_dtype(_ref(sp)(vals[0], u.dtype), u.dtype)
    if u.op is Ops.BITCAST:
        src = u.src[0].dtype
        raw = (
            vals[0].astype(src.np)
            if src is not dtypes.bfloat16
            else ((vals[0].astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
        )
        out = raw.view(u.dtype.np)
        return bf16_from_bits(out) if u.dtype is dtypes.bfloat16 else out
    if sp.is_alu:
        return fix_dtype(_ref(sp)(*vals, u.dtype), u.dtype)
    if sp.category is Category.MOVEMENT and sp.ref is not None:
        return sp.ref(vals[0], u.arg)
    if u.op is Ops.REDUCE and len(u.src) == 1:
        return fix_dtype(_ref(sp)(vals[0], u.arg), u.dtype)
    if u.op is Ops.STACK:
        return np.stack(vals)
    if u.op is Ops.INDEX:
        return vals[0][tuple(np.asarray(v, dtype=np.int64) for v in vals[1:])]
    if sp.category is Category.MARKER or u.op is Ops.AFTER:
        return vals[0]
    if u.op is Ops.TUPLE:
        return tuple(vals)
    if u.op is Ops.GETTUPLE:
        return vals[0][u.arg]
    raise UnsupportedOp(
        at=u.op.name,
        why=f"{u.op.name} has no tensor-level meaning in the interpreter",
        suggestion="evaluate kernel programs with run_kernel()",
    )


def evaluate(roots: UOp | Sequence[UOp], inputs: Env | None = None, var_values: dict[str, int] | None = None) -> Any:
    """Evaluate tensor-level UOp graph(s); returns an array (or a tuple for several roots)."""
    single = isinstance(roots, UOp)
    root_list = [roots] if isinstance(roots, UOp) else list(roots)
    inputs = inputs or {}
    var_values = var_values or {}
    vals: dict[UOp, Any] = {}
    check_placeholder_names(root_list)
    for u in toposort(inline_functions(root_list)):
        vals[u] = eval_node(u, [vals[s] for s in u.src], inputs, var_values)
    outs = [vals[r] if not isinstance(vals[r], np.ndarray) else external(vals[r], r.dtype) for r in inline_functions(root_list)]
    return outs[0] if single else tuple(outs)


def external(x: np.ndarray, d: DType) -> np.ndarray:
    """What a user sees: numpy dtype of d (bfloat16 shown as float32 values)."""
    out = x.astype(np.float32 if d is dtypes.bfloat16 else d.np, copy=False)
    return out if out.flags.c_contiguous else out.copy()  # (ascontiguousarray would turn 0-d into 1-d)


def inline_functions(roots: list[UOp]) -> list[UOp]:
    """Resolve FUNCTION/CALL nodes by substituting their PARAMs (spec: Function semantics)."""
    if not any(u.op in (Ops.FUNCTION, Ops.CALL) for u in toposort(roots)):
        return roots
    memo: dict[UOp, UOp] = {}
    for u in toposort(roots):
        src = tuple(memo[s] for s in u.src)
        if u.op in (Ops.FUNCTION, Ops.CALL):
            body, args = src[0], src[1:]
            params = {p: args[p.arg[0]] for p in toposort([body]) if p.op is Ops.PARAM}
            memo[u] = body.substitute(params)
        else:
            memo[u] = u if src == u.src else UOp(u.op, u.dtype, src, u.arg)
    return [memo[r] for r in roots]
