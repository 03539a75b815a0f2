"""ONNX models in: `from_onnx(path or ModelProto)` gives placeholder Tensors for the graph inputs and Tensors for
its outputs, built with the Tensor API, so `optimize(model.outputs, inputs=model.inputs)` compiles the whole graph
(`inputs=` keeps a graph input that no output reads in the program's signature: it is checked, then ignored).

Weights (initializers) become data-backed tensors: buffers bound to the program, passed by nobody. A value the
import knows (an initializer, a Constant, a Shape, and arithmetic on those) stays a numpy array while it is only
used as a shape, an axis list or an index, and becomes a data-backed tensor where a computation reads it. Inputs
given in `static` are bound the same way (a shape or index input of a graph whose shapes must be known here).

Shapes are static: every graph input needs a fixed shape (or a `static` value). An op, attribute or dtype the
import does not support is a diagnostic naming the node, the op and what is missing; never a traceback and
never a silently different result. onnx is an optional dependency (`pip install egraph-compiler[onnx]`).

Control flow (If, Loop, Scan) is resolved at import and sequences and optionals are values of the import (a list,
None): control.py. A subgraph is imported by the same node loop (`_run_nodes`), the names of the scopes around it
visible.
"""

from __future__ import annotations

import collections
import functools
import math
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from egraph_compiler.frontend.onnx import control as onnx_control
from egraph_compiler.frontend.onnx import microsoft as onnx_microsoft
from egraph_compiler.frontend.onnx import recurrent as onnx_recurrent
from egraph_compiler.frontend.onnx import spatial as onnx_spatial
from egraph_compiler.frontend.onnx.values import (
    NP,
    NotSupportedError,
    Value,
    axis_of,
    dtype_of,
    given,
    ints,
    known,
    optional,
    shape_of,
    tensor_of,
    text,
)
from egraph_compiler.frontend.tensor import Tensor
from egraph_compiler.ir.diagnostics import InvalidArgument, UnsupportedOp


@dataclass
class OnnxModel:
    """An imported graph: `inputs` (name -> placeholder, graph order, without the `static` ones; a sequence input
    `s` is its elements s_0, s_1, ...) and `outputs` (graph order; `output_names` beside them; a sequence output `s`
    is its elements, named s_0, s_1, ...). `output_structure` has one entry per graph output: the index of its
    Tensor in `outputs`, a list of such entries (a sequence) or None (an empty optional)."""

    inputs: dict[str, Tensor]
    outputs: list[Tensor]
    output_names: list[str]
    opset: int
    notes: list[str] = field(default_factory=list)
    output_structure: list[Any] = field(default_factory=list)


def from_onnx(model: Any, static: dict[str, Any] | None = None, shapes: dict[str, Any] | None = None) -> OnnxModel:
    """Import an ONNX model (a path or a ModelProto). `static`: graph inputs bound to these values at import;
    `shapes`: fixed shapes for graph inputs whose declared shape has free dimensions (a batch size).

    Sequence and optional inputs: a sequence input `s` (ONNX seq(tensor)) needs its length and element shapes,
    `shapes={"s": [shape0, shape1, ...]}` (`[]`: an empty sequence), and becomes the placeholders s_0, s_1, ... in
    `inputs`; or its value in `static` as a list of arrays. An optional input is its element (a tensor or a sequence,
    given as above), or empty with `static={"o": None}` (or `shapes={"o": None}`)."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise UnsupportedOp(
            at="from_onnx", why="the onnx package is not installed", suggestion="pip install egraph-compiler[onnx]"
        ) from None
    if isinstance(model, (str, Path)):
        try:
            model = onnx.load(str(model))
        except Exception as e:
            raise InvalidArgument(
                at=f"from_onnx({str(model)!r})", why=f"not a readable ONNX file ({e})", suggestion="check the path"
            ) from None
    if not isinstance(model, onnx.ModelProto):
        raise InvalidArgument(at="from_onnx", why=f"got {type(model).__name__}", suggestion="pass a path or an onnx.ModelProto")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    static = dict(static or {})
    shapes = dict(shapes or {})
    g = model.graph
    env: dict[str, Value] = {"": None}
    for init in g.initializer:
        env[init.name] = numpy_helper.to_array(init)
    inputs: dict[str, Tensor] = {}
    for vi in g.input:
        if vi.name in env:  # an initializer listed as an input too: its value
            continue
        if vi.name in static:
            env[vi.name] = _static_value(static[vi.name])
            continue
        env[vi.name] = _input_value(vi.name, vi.type, shapes, inputs)
    _run_nodes(g.node, env, opset, "")
    outputs: list[Tensor] = []
    names: list[str] = []
    structure: list[Any] = []
    for vo in g.output:
        v = env.get(vo.name)
        if vo.name not in env or (v is None and vo.type.WhichOneof("value") != "optional_type"):
            raise UnsupportedOp(at=f"output {vo.name!r}", why="no node produces it", suggestion="check the graph")
        try:
            structure.append(_output_value(vo.name, v, outputs, names))
        except NotSupportedError as e:
            raise UnsupportedOp(at=f"output {vo.name!r}", why=str(e), suggestion="see docs/ONNX.md") from None
    return OnnxModel(inputs, outputs, names, opset, output_structure=structure)


def _static_value(v: Any) -> Value:
    """A `static` input's value: an array, a sequence (a list of arrays) or an empty optional (None)."""
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return [_static_value(e) for e in v]
    return np.asarray(v)


def _input_value(name: str, tp: Any, shapes: dict[str, Any], inputs: dict[str, Tensor]) -> Value:
    """A graph input's placeholder: a Tensor, a list of them (a sequence) or None (an empty optional)."""
    kind = tp.WhichOneof("value")
    if kind == "optional_type":
        if name in shapes and shapes[name] is None:
            return None
        return _input_value(name, tp.optional_type.elem_type, shapes, inputs)
    if kind == "sequence_type":
        elem = tp.sequence_type.elem_type
        if elem.WhichOneof("value") != "tensor_type":
            raise UnsupportedOp(
                at=f"input {name!r}", why="a sequence of non-tensors is not supported", suggestion="use a sequence of tensors"
            )
        given = shapes.get(name)
        if not isinstance(given, (list, tuple)) or not all(isinstance(s, (list, tuple)) for s in given):
            raise UnsupportedOp(
                at=f"input {name!r}",
                why="a sequence input needs its length and the shape of each element",
                suggestion=f"pass shapes={{{name!r}: [shape0, shape1, ...]}} (or its value, a list of arrays, in static=)",
            )
        return [_tensor_input(f"{name}_{i}", elem.tensor_type, s, inputs, name) for i, s in enumerate(given)]
    if kind not in (None, "tensor_type"):
        raise UnsupportedOp(at=f"input {name!r}", why=f"a {kind} input is not supported", suggestion="use tensor inputs")
    return _tensor_input(name, tp.tensor_type, shapes.get(name), inputs, name)


def _tensor_input(name: str, tt: Any, fixed: Any, inputs: dict[str, Tensor], given_as: str) -> Value:
    """A tensor input's placeholder (`fixed`: its shape from `shapes`, or None); `given_as`: its key in shapes."""
    dt = dtype_of(tt.elem_type, f"input {name!r}")
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if fixed is not None:
        fixed = [int(d) for d in fixed]
        declared = tt.HasField("shape")  # a graph may leave an input's rank unknown too
        if declared and (len(fixed) != len(dims) or any(d is not None and d != f for d, f in zip(dims, fixed))):
            raise InvalidArgument(
                at=f"shapes[{given_as!r}]",
                why=f"{fixed} does not fit the declared shape {[d if d else '?' for d in dims]}",
                suggestion="give every dimension, equal to the declared ones where they are fixed",
            )
        dims = fixed
    if all(d is not None for d in dims) and 0 in dims:  # an empty input has one value: known here
        return np.zeros(dims, np.dtype(dt) if dt != "bfloat16" else np.float32)
    if any(d is None or d <= 0 for d in dims):
        raise UnsupportedOp(
            at=f"input {name!r}",
            why=f"its shape {[d if d else '?' for d in dims]} is not fixed",
            suggestion=f"pass shapes={{{given_as!r}: (...)}} (or the input's value in static=)",
        )
    if name in inputs:
        raise InvalidArgument(
            at=f"input {name!r}", why="two graph inputs give this placeholder name", suggestion="rename one of the inputs"
        )
    inputs[name] = Tensor.empty(*dims, dtype=dt, name=name)
    return inputs[name]


def _output_value(name: str, v: Value, outputs: list[Tensor], names: list[str]) -> Any:
    """A graph output's Tensors appended to `outputs`; its entry of output_structure returned."""
    if v is None:
        return None
    if isinstance(v, list):
        return [_output_value(f"{name}_{i}", e, outputs, names) for i, e in enumerate(v)]
    outputs.append(tensor_of(v))
    names.append(name)
    return len(outputs) - 1


def _run_nodes(nodes: Any, env: MutableMapping[str, Value], opset: int, prefix: str) -> None:
    """Import `nodes` in order, their outputs added to `env` (which holds their inputs: the graph's values and, in a
    subgraph, those of the scopes around it). `prefix` names the node that holds a subgraph in diagnostics."""
    import onnx

    for i, node in enumerate(nodes):
        where = f"{prefix}node {i} ({node.name or next(iter(node.output), '')!r}, {node.op_type})"
        table = DOMAINS.get(node.domain)
        if table is None:
            raise UnsupportedOp(
                at=where,
                why=f"domain {node.domain!r} is not supported",
                suggestion="export with the standard ONNX domain (com.microsoft's common transformer ops are supported)",
            )
        fn = table.get(node.op_type)
        if fn is None:
            raise UnsupportedOp(
                at=where, why=f"the op {node.op_type} is not supported", suggestion="see docs/ONNX.md for the supported ops"
            )
        try:
            missing = [n for n in node.input if n not in env]
            if missing:
                raise NotSupportedError(f"input {missing[0]!r} is not produced by any earlier node")
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            attrs["_outputs"] = len(node.output)
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                attrs["_run_graph"] = functools.partial(_run_graph, outer=env, opset=opset, where=where)
            ins = [env[n] for n in node.input]
            takes_lists = node.op_type in onnx_control.OPS or node.op_type == "Identity"
            if not takes_lists and any(isinstance(v, list) for v in ins):
                raise NotSupportedError(f"a sequence input (the op {node.op_type} takes tensors)")
            folds = not takes_lists and any(isinstance(v, np.ndarray) and v.size == 0 for v in ins)
            if folds and not any(isinstance(v, Tensor) for v in ins):
                outs = _fold_empty(node, ins, opset)  # a tensor without elements has no Tensor form
            else:
                outs = fn(ins, attrs, opset)
        except NotSupportedError as e:
            raise UnsupportedOp(at=where, why=str(e), suggestion="see docs/ONNX.md for what each op supports") from None
        except (ValueError, TypeError, IndexError, KeyError) as e:  # malformed attributes or shapes
            raise InvalidArgument(
                at=where, why=f"{type(e).__name__}: {e}", suggestion="check the node's inputs and attributes"
            ) from None
        for name, v in zip(node.output, outs):
            if name:
                env[name] = v


def _run_graph(
    graph: Any, values: list[Value], label: str, *, outer: MutableMapping[str, Value], opset: int, where: str
) -> list[Value]:
    """A subgraph (If's branches, Loop's and Scan's body) imported with its inputs bound to `values` (in order) and
    the names of the scopes around it visible: its outputs. Control-flow ops get it as at["_run_graph"](graph,
    values, label), `label` naming the subgraph (and the iteration) in diagnostics."""
    from onnx import numpy_helper

    if len(values) != len(graph.input):
        raise ValueError(f"{label} takes {len(graph.input)} inputs, given {len(values)}")
    env: MutableMapping[str, Value] = collections.ChainMap({}, outer)
    for init in graph.initializer:
        env[init.name] = numpy_helper.to_array(init)
    for vi, v in zip(graph.input, values):
        env[vi.name] = v
    _run_nodes(graph.node, env, opset, f"{where} {label}: ")
    missing = [vo.name for vo in graph.output if vo.name not in env]
    if missing:
        raise NotSupportedError(f"the output {missing[0]!r} of its {label} is not produced by any node")
    return [env[vo.name] for vo in graph.output]


def _fold_empty(node: Any, ins: list[Value], opset: int) -> list[Value]:
    """A node whose inputs are known and some empty, computed at import by onnx's reference implementation."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if v is not None else "" for i, v in enumerate(ins)]
    one = onnx.helper.make_node(node.op_type, names, list(node.output), domain=node.domain)
    one.attribute.extend(node.attribute)
    graph = onnx.helper.make_graph(
        [one],
        "fold",
        [
            onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.shape(v))
            for n, v in zip(names, ins)
            if n
        ],
        [onnx.helper.make_empty_tensor_value_info(o) for o in node.output if o],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(node.domain or "", opset)])
    try:
        got = ReferenceEvaluator(model).run(None, {n: np.asarray(v) for n, v in zip(names, ins) if n})
    except Exception as e:  # the reference's own refusal of these inputs
        raise NotSupportedError(f"folding it at import: {type(e).__name__}: {e}") from None
    return [np.asarray(g) for g in got]


# ---- values --------------------------------------------------------------------------------------------


def _both(np_fn: Callable[..., Any], t_fn: Callable[..., Tensor]) -> Callable[..., list[Value]]:
    """An elementwise op: folded with numpy when every input is known, else on Tensors."""

    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        if all(not isinstance(v, Tensor) for v in ins):
            with np.errstate(all="ignore"):
                return [np.asarray(np_fn(*ins))]
        return [t_fn(*[tensor_of(v) for v in ins])]

    return op


def _unary(t_fn: Callable[[Tensor], Tensor], np_fn: Callable[[np.ndarray], Any] | None = None) -> Callable[..., list[Value]]:
    """A one-input op on a Tensor; with `np_fn`, folded with numpy when the input is known."""

    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        if np_fn is not None and not isinstance(ins[0], Tensor):
            with np.errstate(all="ignore"):
                return [np.asarray(np_fn(np.asarray(ins[0]))).astype(np.asarray(ins[0]).dtype)]
        return [t_fn(tensor_of(ins[0]))]

    return op


# ---- elementwise -----------------------------------------------------------------------------------------


def _int_div(a: Tensor, b: Tensor) -> Tensor:
    """C division (toward zero) of integers."""
    q = a.abs() // b.abs()
    return ((a < 0) ^ (b < 0)).where(-q, q).cast(a.dtype)


def _div(a: Tensor, b: Tensor) -> Tensor:
    return _int_div(a, b) if a.dtype.is_int else a / b


def _np_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.asarray(a).dtype.kind in "iu":
        return (np.trunc(np.asarray(a, np.float64) / b)).astype(np.asarray(a).dtype)
    return a / b


def _mod(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    if not isinstance(ins[0], Tensor) and not isinstance(ins[1], Tensor):
        with np.errstate(all="ignore"):
            return [np.asarray((np.fmod if at.get("fmod", 0) else np.mod)(ins[0], ins[1]))]
    a, b = tensor_of(ins[0]), tensor_of(ins[1])
    if a.dtype.is_int:
        return [a - _div(a, b) * b if at.get("fmod", 0) else a % b]
    # C fmod (the sign of the dividend), exact for an infinite divisor; the Python mod moves a remainder whose sign
    # differs from the divisor's by one divisor (numpy's np.mod)
    r = (b.abs() == math.inf).where(a + 0 * a, a - (a / b).trunc() * b)  # 0 * a: NaN stays NaN, inf/inf is NaN
    if at.get("fmod", 0):
        return [r]
    return [((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)]


def _pow_op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Pow; a known single exponent of a float base is a Python number (x**3 is x*x*x, not exp2(3*log2|x|) with
    the checks a negative base needs: transformers' tanh GELU has one)."""
    a, b = ins
    if isinstance(a, Tensor) and not isinstance(b, Tensor) and a.dtype.is_float:
        e = np.asarray(b)
        if e.size == 1 and e.ndim <= len(a.shape) and e.dtype.kind == "f":
            return [a ** float(e.reshape(()))]
    return _both(np.power, _pow)(ins, at, opset)


def _pow(a: Tensor, b: Tensor) -> Tensor:
    if b.dtype != a.dtype:
        b = b.cast(a.dtype) if a.dtype.is_float else b
    return (a.cast("float32") ** b.cast("float32")).cast(a.dtype) if a.dtype.is_int else a**b


def _variadic(
    t_fn: Callable[[Tensor, Tensor], Tensor], mean: bool = False, np_fn: Callable[..., Any] | None = None
) -> Callable[..., list[Value]]:
    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        if np_fn is not None and all(not isinstance(v, Tensor) for v in ins):
            return [np.asarray(functools.reduce(np_fn, [np.asarray(v) for v in ins]))]
        out = tensor_of(ins[0])
        for v in ins[1:]:
            out = t_fn(out, tensor_of(v))
        return [out / len(ins) if mean else out]

    return op


def _clip(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = tensor_of(ins[0])
    lo = ins[1] if given(ins, 1) else at.get("min")
    hi = ins[2] if given(ins, 2) else at.get("max")
    if lo is not None:
        x = x.maximum(tensor_of(np.asarray(lo, x.dtype.np)) if not isinstance(lo, Tensor) else lo)
    if hi is not None:
        x = x.minimum(tensor_of(np.asarray(hi, x.dtype.np)) if not isinstance(hi, Tensor) else hi)
    return [x]


def _cast_to(v: Value, dt: str) -> Value:
    if not isinstance(v, Tensor) and dt != "bfloat16":
        return np.asarray(v).astype(NP[dt])
    return tensor_of(v).cast(dt)


def _cast(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    return [_cast_to(ins[0], dtype_of(at["to"], "Cast to"))]


def _bitcast(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    dt = dtype_of(at["to"], "BitCast to")
    if not isinstance(ins[0], Tensor) and dt != "bfloat16":
        return [np.ascontiguousarray(ins[0]).view(NP[dt])]
    return [tensor_of(ins[0]).bitcast(dt)]


def _cast_like(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    like = ins[1]  # only its type is read: it may be an empty array
    dt = like.dtype.name if isinstance(like, Tensor) else np.asarray(like).dtype.name
    if dt not in NP and dt != "bfloat16":
        raise NotSupportedError(f"CastLike to {dt}")
    return [_cast_to(ins[0], dt)]


def _where(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    if all(not isinstance(v, Tensor) for v in ins):
        return [np.where(*ins)]
    c, a, b = (tensor_of(v) for v in ins)
    return [c.cast("bool").where(a, b)]


# ---- shapes ------------------------------------------------------------------------------------------------


def _reshape(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, shape = ins[0], ints(ins[1], "shape")
    if not at.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        shape = [math.prod(x.shape) // rest if s == -1 else s for s in shape]
    return [np.reshape(x, shape) if not isinstance(x, Tensor) else x.reshape(*shape) if shape else x.reshape(())]


def _transpose(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = ins[0]
    perm = at.get("perm") or list(range(len(x.shape)))[::-1]
    return [np.transpose(x, perm) if not isinstance(x, Tensor) else x.permute(*perm) if perm else x]


def _flatten(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = ins[0]
    nd = len(x.shape)
    a = at.get("axis", 1)
    a = a + nd if a < 0 else a
    shape = (math.prod(x.shape[:a]), math.prod(x.shape[a:]))
    return [np.reshape(x, shape) if not isinstance(x, Tensor) else x.reshape(*shape)]


def _axes_of(ins: list[Value], at: dict[str, Any], idx: int = 1) -> list[int] | None:
    if given(ins, idx):
        return ints(ins[idx], "axes")
    return list(at["axes"]) if "axes" in at else None


def _squeeze(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = ins[0]
    axes = _axes_of(ins, at)
    nd = len(x.shape)
    axes = [axis_of(a, nd) for a in axes] if axes is not None else [i for i, s in enumerate(x.shape) if s == 1]
    shape = [s for i, s in enumerate(x.shape) if i not in axes]
    return [np.reshape(x, shape) if not isinstance(x, Tensor) else x.reshape(*shape) if shape else x.reshape(())]


def _unsqueeze(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = ins[0]
    axes = _axes_of(ins, at) or []
    nd = len(x.shape) + len(axes)
    shape = list(x.shape)
    for a in sorted(axis_of(a, nd) for a in axes):
        shape.insert(a, 1)
    return [np.reshape(x, shape) if not isinstance(x, Tensor) else x.reshape(*shape)]


def _concat(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    vals = [v for v in ins if v is not None and math.prod(v.shape) > 0] or [ins[0]]
    a = axis_of(at["axis"], len(vals[0].shape))
    if all(not isinstance(v, Tensor) for v in vals):
        return [np.concatenate(vals, axis=a)]
    ts = [tensor_of(v) for v in vals]
    return [ts[0].cat(*ts[1:], dim=a) if len(ts) > 1 else ts[0]]


def _split(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    n_out = at["_outputs"]
    x = ins[0] if isinstance(ins[0], Tensor) else np.asarray(ins[0])  # a known input splits into known parts
    a = axis_of(at.get("axis", 0), x.ndim)
    if given(ins, 1):
        sizes = ints(ins[1], "split")
    elif "split" in at:
        sizes = list(at["split"])
    else:
        n = at.get("num_outputs", n_out)
        each = -(-x.shape[a] // n)
        sizes = [min(each, x.shape[a] - i * each) for i in range(n)]
    outs: list[Value] = []
    start = 0
    for s in sizes:  # an empty part has one value: known here
        if not isinstance(x, Tensor):
            outs.append(x[(slice(None),) * a + (slice(start, start + s),)])
            start += s
            continue
        empty: np.ndarray = np.zeros([0 if i == a else n for i, n in enumerate(x.shape)], NP.get(x.dtype.name, np.float32))
        outs.append(x.shrink(tuple((start, start + s) if i == a else None for i in range(x.ndim))) if s else empty)
        start += s
    return outs


def _slice(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = ins[0]
    if opset < 10:
        starts, ends, axes, steps = list(at["starts"]), list(at["ends"]), at.get("axes"), None
    else:
        starts, ends = ints(ins[1], "starts"), ints(ins[2], "ends")
        axes = ints(ins[3], "axes") if given(ins, 3) else None
        steps = ints(ins[4], "steps") if given(ins, 4) else None
    nd = len(x.shape)
    axes = [axis_of(a, nd) for a in (axes if axes is not None else range(len(starts)))]
    steps = steps or [1] * len(axes)
    index: list[Any] = [slice(None)] * nd
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise ValueError("slice step 0")
        index[a] = slice(*slice(s, e, st).indices(x.shape[a]))
    if not isinstance(x, Tensor):
        return [np.asarray(x)[tuple(index)]]
    shape = [len(range(*sl.indices(n))) for sl, n in zip(index, x.shape)]
    if 0 in shape:  # an empty slice has one value: known here (a Concat drops it)
        return [np.zeros(shape, NP.get(x.dtype.name, np.float32))]
    t = x
    for a, sl in enumerate(index):
        start, stop, st = sl.indices(t.shape[a]) if isinstance(sl, slice) else (0, t.shape[a], 1)
        if st == 1:
            t = t.shrink(tuple((start, max(start, stop)) if i == a else None for i in range(t.ndim)))
        else:
            idx = np.arange(start, stop, st, dtype=np.int64)
            t = _take(t, idx, a)
    return [t]


TAKE_BY_SLICES = 16  # up to this many known scattered indices are taken as slices; more as a one-hot selection


def _take(t: Tensor, idx: np.ndarray, axis: int) -> Tensor:
    """t indexed by known indices along `axis` (any shape of indices)."""
    n = t.shape[axis]
    flat = np.where(idx < 0, idx + n, idx).reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= n):
        raise ValueError(f"index out of range for axis of size {n}")
    if flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):  # a contiguous range: a shrink
        out = t.shrink(tuple((int(flat[0]), int(flat[0]) + flat.size) if i == axis else None for i in range(t.ndim)))
    elif flat.size > TAKE_BY_SLICES:  # many scattered indices: a one-hot selection, not one slice each
        return _gather([t, Tensor(np.ascontiguousarray(idx.astype(np.int32)))], {"axis": axis}, 0)[0]
    else:
        parts = [t.shrink(tuple((int(j), int(j) + 1) if i == axis else None for i in range(t.ndim))) for j in flat]
        out = parts[0].cat(*parts[1:], dim=axis) if len(parts) > 1 else parts[0]
    return out.reshape(*t.shape[:axis], *idx.shape, *t.shape[axis + 1 :])


def _gather(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, idx = ins
    a = axis_of(at.get("axis", 0), len(x.shape))
    if not isinstance(x, Tensor) and not isinstance(idx, Tensor):
        return [np.take(x, np.asarray(idx), axis=a)]
    if not isinstance(idx, Tensor):
        return [_take(tensor_of(x), np.asarray(idx, np.int64), a)]
    xt, it = tensor_of(x), idx.cast("int32")
    n = xt.shape[a]
    it = (it < 0).where(it + n, it)
    # one-hot selection along the axis: out[..., i, ...] = sum_j x[..., j, ...] * (idx[i] == j)
    flat = it.reshape(-1)
    k = flat.shape[0]
    hot = flat.reshape(k, 1) == Tensor.arange(n).reshape(1, n)  # (k, n)
    moved = xt.permute(*[i for i in range(xt.ndim) if i != a], a)  # (..., n)
    picked = (moved.unsqueeze(-2) * hot.cast(xt.dtype)).sum(-1).cast(xt.dtype)  # (..., k)
    picked = picked.reshape(*moved.shape[:-1], *idx.shape)
    nd_rest = xt.ndim - 1
    order = [*range(a), *range(nd_rest, nd_rest + idx.ndim), *range(a, nd_rest)]
    return [picked.permute(*order) if order != list(range(len(order))) else picked]


def _gather_nd(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """data[b..., idx[b..., m..., :], ...]: the k index components become one position in the data's next k axes
    flattened, gathered along it."""
    x, idx = tensor_of(ins[0]), ins[1]
    nb = int(at.get("batch_dims", 0))
    it = tensor_of(idx).cast("int32")
    k = it.shape[-1]
    lead, keys, rest = x.shape[:nb], x.shape[nb : nb + k], x.shape[nb + k :]
    flat = None
    for j in range(k):
        part = _wrapped(it[..., j], keys[j]) * math.prod(keys[j + 1 :])
        flat = part if flat is None else flat + part
    b, m = math.prod(lead), math.prod(it.shape[nb:-1])
    table = x.reshape(b, math.prod(keys), *rest)
    where = (flat if flat is not None else Tensor.zeros(*it.shape[:-1], dtype="int32")).reshape(b, m, *([1] * len(rest)))
    out = table.gather(1, where.expand(b, m, *rest))
    return [out.reshape(*lead, *it.shape[nb:-1], *rest)]


def _rotary_embedding(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Pairs of a head's features rotated by the cached cos/sin of each position: the two halves of the first
    rotary_embedding_dim features, or (interleaved) each even feature with the next."""
    x, cos, sin = tensor_of(ins[0]), tensor_of(ins[1]), tensor_of(ins[2])
    pos = optional(ins, 3)
    if x.ndim == 4:  # (batch, heads, seq, head size) -> (batch, seq, heads, head size)
        xt = x.permute(0, 2, 1, 3)
    else:
        heads = int(at.get("num_heads", 0))
        if heads <= 0:
            raise NotSupportedError("a 3-D input without num_heads")
        xt = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
    b, s, h, d = xt.shape
    r = int(at.get("rotary_embedding_dim", 0)) or d
    half = r // 2
    if pos is not None:
        cos, sin = (_gather([c, pos], {"axis": 0}, opset)[0] for c in (cos, sin))
    cos, sin = tensor_of(cos).unsqueeze(2), tensor_of(sin).unsqueeze(2)  # (batch, seq, 1, half)
    rot = _span(xt, 3, 0, r)
    if at.get("interleaved", 0):
        pairs = rot.reshape(b, s, h, half, 2)
        x1, x2 = pairs[..., 0], pairs[..., 1]
    else:
        x1, x2 = _span(rot, 3, 0, half), _span(rot, 3, half, r)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    rot = real.stack(imag, dim=-1).reshape(b, s, h, r) if at.get("interleaved", 0) else real.cat(imag, dim=3)
    out = rot.cat(_span(xt, 3, r, d), dim=3) if r < d else rot
    return [out.permute(0, 2, 1, 3) if x.ndim == 4 else out.reshape(*x.shape)]


def _gather_elements(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, idx = tensor_of(ins[0]), tensor_of(ins[1])
    a = axis_of(at.get("axis", 0), x.ndim)
    idx = idx.cast("int32")
    return [x.gather(a, (idx < 0).where(idx + x.shape[a], idx))]


def _scan(kind: str) -> Callable[..., list[Value]]:
    """CumSum / CumProd: `exclusive` shifts the input by one step first (the identity comes in), `reverse` runs
    from the end."""

    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        x = tensor_of(ins[0])
        a = axis_of(ints(ins[1], "axis")[0], x.ndim)
        if at.get("reverse", 0):
            x = x.flip(a)
        if at.get("exclusive", 0):
            n = x.shape[a]
            x = x.pad(tuple((1, 0) if i == a else None for i in range(x.ndim)), value=0 if kind == "sum" else 1)
            x = _span(x, a, 0, n)
        out = x.cumsum(a) if kind == "sum" else x.cumprod(a)
        return [out.flip(a) if at.get("reverse", 0) else out]

    return op


def _topk(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, k = tensor_of(ins[0]), ints(ins[1], "K")[0]
    values, indices = x.topk(k, dim=at.get("axis", -1), largest=bool(at.get("largest", 1)))
    return [values, indices.cast("int64")]


def _wrapped(index: Tensor, n: int) -> Tensor:
    """Indices in [-n, n) as positions: a negative one counts from the end."""
    return (index < 0).where(index + n, index)


def _scatter_elements(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, index, updates = tensor_of(ins[0]), tensor_of(ins[1]), tensor_of(ins[2])
    a = axis_of(at.get("axis", 0), x.ndim)
    reduction = text(at, "reduction", "none")
    index = _wrapped(index, x.shape[a])
    if reduction == "none":
        return [x.scatter(a, index, updates)]
    how = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}.get(reduction)
    if how is None:
        raise NotSupportedError(f"reduction {reduction!r}")
    return [x.scatter_reduce(a, index, updates, how)]


def _scatter_nd(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Rows of the data's first k axes (k = the indices' last axis) replaced or reduced: the k indices become one
    position in those axes flattened, and the rows are scattered along it."""
    x, index, updates = tensor_of(ins[0]), tensor_of(ins[1]), tensor_of(ins[2])
    k = index.shape[-1]
    lead, rest = x.shape[:k], x.shape[k:]
    flat = None
    for j in range(k):
        part = _wrapped(index[..., j], lead[j]) * math.prod(lead[j + 1 :])
        flat = part if flat is None else flat + part
    assert flat is not None
    m = math.prod(index.shape[:-1])
    rows = updates.reshape(m, *rest)
    where = flat.reshape(m, *([1] * len(rest))).expand(m, *rest)
    table = x.reshape(math.prod(lead), *rest)
    reduction = text(at, "reduction", "none")
    if reduction == "none":
        out = table.scatter(0, where, rows)
    elif reduction in ("add", "mul", "max", "min"):
        out = table.scatter_reduce(0, where, rows, {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction])
    else:
        raise NotSupportedError(f"reduction {reduction!r}")
    return [out.reshape(*x.shape)]


def _one_hot_op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    index, depth = tensor_of(ins[0]), int(np.asarray(known(ins[1], "depth")).reshape(-1)[0])
    off_on = tensor_of(ins[2])
    hot = _wrapped(index.cast("int32") if index.dtype.is_float else index, depth).one_hot(depth)
    out = (hot != 0).where(off_on[1], off_on[0])
    a = axis_of(at.get("axis", -1), out.ndim)
    return [out if a == out.ndim - 1 else out.permute(*range(a), out.ndim - 1, *range(a, out.ndim - 1))]


def _expand(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, shape = ins[0], ints(ins[1], "shape")
    out = np.broadcast_shapes(tuple(x.shape), tuple(shape))
    if not isinstance(x, Tensor):
        return [np.broadcast_to(x, out).copy()]
    t = x.reshape(*([1] * (len(out) - x.ndim)), *x.shape) if len(out) > x.ndim else x
    return [t.expand(*out)]


def _tile(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, reps = tensor_of(ins[0]), ints(ins[1], "repeats")
    return [x.repeat(*reps)]


def _shape_op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    s = np.array(ins[0].shape, np.int64)
    return [s[at.get("start", 0) : at.get("end", len(s))]]


def _constant(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    from onnx import numpy_helper

    if "value" in at:
        return [numpy_helper.to_array(at["value"])]
    for k, dt in (("value_float", np.float32), ("value_int", np.int64), ("value_floats", np.float32), ("value_ints", np.int64)):
        if k in at:
            return [np.asarray(at[k], dt)]
    raise NotSupportedError(f"Constant with {sorted(at)}")


def _constant_of_shape(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    from onnx import numpy_helper

    shape = ints(ins[0], "shape")
    v = numpy_helper.to_array(at["value"]).reshape(-1) if "value" in at else np.zeros(1, np.float32)
    return [np.full(shape, v[0], v.dtype)]


def _range(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    # one-element 1-D values too (AffineGrid's function body passes them)
    s, e, d = (known(v, "start, limit and delta").reshape(()) for v in ins)
    return [np.arange(s, e, d, dtype=np.asarray(s).dtype)]  # type: ignore[call-overload]  # numpy's stubs take no 0-d arrays


def _resize_coeffs(mode: str, at: dict[str, Any], ratio: float, scale: float) -> np.ndarray:
    """Interpolation weights of the taps around a source coordinate whose fraction past its left tap is
    `ratio` (in (0, 1]), for Resize's modes (antialias widens the taps when downsampling)."""
    a = float(at.get("cubic_coeff_a", -0.75))
    if mode == "nearest":
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        rule = text(at, "nearest_mode", "round_prefer_floor")
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False, "ceil": True}
        if rule not in up:
            raise NotSupportedError(f"nearest_mode {rule!r}")
        return np.array([0.0, 1.0]) if up[rule] else np.array([1.0, 0.0])

    def cubic(x: np.ndarray) -> np.ndarray:
        x = np.abs(x)
        near = ((a + 2) * x - (a + 3)) * x * x + 1
        far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
        return np.where(x <= 1, near, np.where(x < 2, far, 0.0))

    if at.get("antialias", 0) and scale < 1:  # the kernel stretched by 1 / scale, normalized
        reach = 2 if mode == "cubic" else 1
        first = int(np.floor(-reach / scale) + 1)
        taps = (np.arange(first, 2 - first if mode == "cubic" else first + 2 - 2 * first) - ratio) * scale
        w = cubic(taps) if mode == "cubic" else np.clip(1 - np.abs(taps), 0, 1)
        return w / w.sum()
    if mode == "cubic":
        return cubic(np.array([ratio + 1, ratio, 1 - ratio, 2 - ratio]))
    return np.array([1 - ratio, ratio])


def _resize_axis(n_in: int, n_out: int, scale: float, mode: str, at: dict[str, Any], roi: tuple[float, float] | None):
    """(weights (n_out, n_in), extrapolated rows or None) of one resized axis, per Resize's coordinate modes."""
    how = text(at, "coordinate_transformation_mode", "half_pixel")
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    outside = None
    if how == "align_corners":
        x = np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    elif how == "asymmetric":
        x = y / scale
    elif how == "tf_crop_and_resize":
        lo, hi = roi if roi is not None else (0.0, 1.0)
        x = np.full(n_out, (hi - lo) * (n_in - 1) / 2) if width == 1 else y * (hi - lo) * (n_in - 1) / (width - 1)
        x = x + lo * (n_in - 1)
        outside = (x < 0) | (x > n_in - 1)
    elif how == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif how == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif how == "half_pixel_symmetric":
        x = n_in / 2 * (1 - n_out / width) + (y + 0.5) / scale - 0.5
    else:
        raise NotSupportedError(f"coordinate_transformation_mode {how!r}")
    w = np.zeros((n_out, n_in))
    for j, xj in enumerate(x):
        left = math.floor(xj)
        ratio = 1.0 if xj == left else xj - left  # an exact coordinate takes its left neighbour's right tap
        c = _resize_coeffs(mode, at, ratio, scale)
        n = len(c)
        # the n taps nearest xj, smaller ones first on ties
        start = left - n // 2 + (0 if xj == left else 1) if n % 2 == 0 else left - (n - 1) // 2 + (xj - left > 0.5)
        taps = start + np.arange(n)
        if at.get("exclude_outside", 0):
            c = np.where((taps < 0) | (taps >= n_in), 0.0, c)
            c = c / (c.sum() or 1.0)
        np.add.at(w[j], np.clip(taps, 0, n_in - 1), c)  # edge values beyond the ends
    return w, outside


def _resize_inputs(ins: list[Value], opset: int) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """Resize's roi, scales and sizes, None where absent or empty (before opset 11 the second input is the scales)."""
    given = [None if v is None or (not isinstance(v, Tensor) and np.size(v) == 0) else known(v, "scales") for v in ins[1:4]]
    roi_v, scales_v, sizes_v = (given + [None, None])[:3] if opset >= 11 else (None, given[0], None)
    if scales_v is None and sizes_v is None:
        raise NotSupportedError("Resize without scales or sizes")
    return roi_v, scales_v, sizes_v


def _resize_targets(
    shape: tuple[int, ...], axes: list[int], scales_v: np.ndarray | None, sizes_v: np.ndarray | None, at: dict[str, Any]
) -> tuple[list[float], list[int]]:
    """Each resized axis's scale and output size: from the sizes (under keep_aspect_ratio_policy) or the scales."""
    if sizes_v is not None:
        sizes = [int(v) for v in sizes_v]
        scales = [sizes[i] / shape[a] for i, a in enumerate(axes)]
        policy = text(at, "keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":  # one scale for every axis, the smaller or the larger; sizes rounded half up
            one = min(scales) if policy == "not_larger" else max(scales)
            scales, sizes = [one] * len(axes), [int(one * shape[a] + 0.5) for a in axes]
        return scales, sizes
    assert scales_v is not None  # scales or sizes is given (checked by _resize_inputs)
    scales = [float(v) for v in scales_v]
    return scales, [math.floor(shape[a] * scales[i]) for i, a in enumerate(axes)]


def _resize_along(x: Tensor, axis: int, w: np.ndarray, outside: np.ndarray | None, mode: str, at: dict[str, Any]) -> Tensor:
    """x resized along `axis` by the (n_out, n_in) weights w: a gather where each output takes one source element,
    a matmul otherwise; extrapolation_value where `outside` marks an output outside the input."""
    moved = x.transpose(axis, -1)
    if mode == "nearest" and np.isin(w, (0.0, 1.0)).all():  # one source element each: a gather
        moved = _take(moved, w.argmax(1), moved.ndim - 1)
    else:
        moved = moved @ Tensor(w.T.astype(np.float32))
    if outside is not None and outside.any():
        moved = Tensor(outside).where(float(at.get("extrapolation_value", 0.0)), moved)
    return moved.transpose(axis, -1)


def _resize(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """ONNX Resize: each resized axis in turn, by the weights of its nearest, linear or cubic interpolation."""
    x = tensor_of(ins[0])
    mode = text(at, "mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise NotSupportedError(f"mode {mode!r}")
    axes = [axis_of(a, x.ndim) for a in at.get("axes", range(x.ndim))]
    roi_v, scales_v, sizes_v = _resize_inputs(ins, opset)
    scales, sizes = _resize_targets(x.shape, axes, scales_v, sizes_v, at)
    roi = [float(v) for v in roi_v] if roi_v is not None else None
    out = x.cast("float32") if x.dtype != "float32" else x
    n = len(axes)
    for i, a in enumerate(axes):
        r = (roi[i], roi[n + i]) if roi is not None and len(roi) == 2 * n else None
        if math.isclose(scales[i], 1.0) and sizes[i] == x.shape[a] and r in (None, (0.0, 1.0)):
            continue  # an axis left as it is
        w, outside = _resize_axis(x.shape[a], sizes[i], scales[i], mode, at, r)
        out = _resize_along(out, a, w, outside, mode, at)
    if x.dtype.is_int:  # rounded half to even and saturated, as the reference casts
        out = out.clip(float(x.dtype.min), float(x.dtype.max)).round()
    return [out.cast(x.dtype) if out.dtype != x.dtype else out]


def _span(x: Tensor, axis: int, lo: int, hi: int) -> Tensor:
    return x.shrink(tuple((lo, hi) if i == axis else None for i in range(x.ndim)))


def _pad_from_values(x: Tensor, axis: int, lo: int, hi: int, mode: str) -> Tensor:
    """x padded along `axis` with its own values: repeated edges, a reflection (the edge not repeated) or a wrap."""
    n = x.shape[axis]
    if (mode == "reflect" and (lo >= n or hi >= n)) or (mode == "wrap" and (lo > n or hi > n)):
        raise NotSupportedError(f"{mode} padding wider than the axis ({n})")
    if mode == "edge":
        left = _span(x, axis, 0, 1).expand(*[lo if i == axis else s for i, s in enumerate(x.shape)]) if lo else None
        right = _span(x, axis, n - 1, n).expand(*[hi if i == axis else s for i, s in enumerate(x.shape)]) if hi else None
    elif mode == "reflect":
        left = _span(x, axis, 1, lo + 1).flip(axis) if lo else None
        right = _span(x, axis, n - hi - 1, n - 1).flip(axis) if hi else None
    else:
        left = _span(x, axis, n - lo, n) if lo else None
        right = _span(x, axis, 0, hi) if hi else None
    parts = [p for p in (left, x, right) if p is not None]
    return parts[0].cat(*parts[1:], dim=axis)


def _depth_to_space(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, b = tensor_of(ins[0]), int(at["blocksize"])
    n, c, h, w = x.shape
    if text(at, "mode", "DCR") == "DCR":  # depth, column, row: the blocks outermost in the channels
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return [y.reshape(n, c // (b * b), h * b, w * b)]


def _space_to_depth(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, b = tensor_of(ins[0]), int(at["blocksize"])
    n, c, h, w = x.shape
    order = (
        (0, 3, 5, 1, 2, 4) if text(at, "mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    )  # blocks outside the channels, or inside
    return [x.reshape(n, c, h // b, b, w // b, b).permute(*order).reshape(n, c * b * b, h // b, w // b)]


def _center_crop_pad(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Each listed axis cropped (the larger half of an odd excess dropped at the end) or zero-padded (the larger
    half added at the end) to its new size, around the centre."""
    x = tensor_of(ins[0])
    sizes = ints(ins[1], "shape")
    axes = [axis_of(a, x.ndim) for a in at.get("axes", range(x.ndim))]
    for a, want in zip(axes, sizes):
        have = x.shape[a]
        if want < have:
            x = _span(x, a, (have - want) // 2, (have - want) // 2 + want)
        elif want > have:
            x = x.pad(tuple(((want - have) // 2, want - have - (want - have) // 2) if i == a else None for i in range(x.ndim)))
    return [x]


def _reverse_sequence(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Each batch entry's first seq_lens[b] time steps reversed, the rest kept: a gather by known positions."""
    x, lens = tensor_of(ins[0]), ints(ins[1], "sequence_lens")
    t_axis, b_axis = at.get("time_axis", 0), at.get("batch_axis", 1)
    steps = x.shape[t_axis]
    rows = [
        _take(_span(x, b_axis, b, b + 1), np.r_[np.arange(n)[::-1], np.arange(n, steps)], t_axis) for b, n in enumerate(lens)
    ]
    return [rows[0].cat(*rows[1:], dim=b_axis) if len(rows) > 1 else rows[0]]


def _upsample(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """The deprecated Upsample: Resize with the asymmetric coordinates and the floor of nearest."""
    scales = at["scales"] if "scales" in at else known(ins[1], "scales")
    attrs = {**at, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    return _resize([ins[0], None, np.asarray(scales, np.float32)], attrs, max(opset, 11))


def _pad(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = tensor_of(ins[0])
    mode = text(at, "mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise NotSupportedError(f"Pad mode {mode!r}")
    pads = ints(ins[1], "pads") if opset >= 11 else list(at["pads"])
    fill = optional(ins, 2)
    value = (
        at.get("value", 0.0) if fill is None else 0.0 if isinstance(fill, Tensor) else float(np.asarray(fill).reshape(-1)[0])
    )
    nd = x.ndim
    axes = [axis_of(a, nd) for a in ints(ins[3], "axes")] if given(ins, 3) else list(range(nd))
    k = len(axes)
    widths = [(0, 0)] * nd
    for j, a in enumerate(axes):
        widths[a] = (pads[j], pads[j + k])
    if any(lo < 0 or hi < 0 for lo, hi in widths):  # negative pads crop
        x = x.shrink(tuple((max(0, -lo), x.shape[i] - max(0, -hi)) for i, (lo, hi) in enumerate(widths)))
        widths = [(max(0, lo), max(0, hi)) for lo, hi in widths]
    if mode != "constant":
        for a, (lo, hi) in enumerate(widths):
            x = _pad_from_values(x, a, lo, hi, mode) if lo or hi else x
        return [x]
    out = x.pad(tuple(widths), value=value)
    if isinstance(fill, Tensor):  # a padding value computed at run time: filled in where the mask says padding
        inside = Tensor.ones(*x.shape, dtype="bool").pad(tuple(widths), value=False)
        out = inside.where(out, fill.reshape(()).cast(x.dtype) if fill.ndim else fill.cast(x.dtype))
    return [out]


def _trilu(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = tensor_of(ins[0])
    k = ints(ins[1], "k")[0] if given(ins, 1) else 0
    return [x.triu(k) if at.get("upper", 1) else x.tril(k)]


# ---- reductions ----------------------------------------------------------------------------------------------


def _reduce(kind: str) -> Callable[..., list[Value]]:
    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        x = tensor_of(ins[0])
        axes = _axes_of(ins, at)
        if axes is None or (not axes and len(ins) > 1):
            if at.get("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(x.ndim))
        axes = sorted({axis_of(a, x.ndim) for a in axes})
        keep = bool(at.get("keepdims", 1))
        ax = tuple(axes)
        if x.ndim == 0:
            return [x]
        if kind == "sum":
            out = x.sum(ax, keepdim=keep)
        elif kind == "mean":
            out = x.mean(ax, keepdim=keep)
        elif kind == "max":
            out = x.max(ax, keepdim=keep)
        elif kind == "min":
            out = x.min(ax, keepdim=keep)
        elif kind == "prod":
            out = x.prod(ax, keepdim=keep)
        elif kind == "sumsquare":
            out = (x * x).sum(ax, keepdim=keep)
        elif kind == "l1":
            out = x.abs().sum(ax, keepdim=keep)
        elif kind == "l2":
            out = (x * x).sum(ax, keepdim=keep).sqrt()
        elif kind == "logsum":
            out = x.sum(ax, keepdim=keep).log()
        elif kind == "logsumexp":
            m = x.max(ax, keepdim=True)
            out = (x - m).exp().sum(ax, keepdim=True).log() + m
            out = out if keep else out.reshape(*[s for i, s in enumerate(out.shape) if i not in axes])
        else:  # pragma: no cover
            raise NotSupportedError(kind)
        return [out.cast(x.dtype) if out.dtype != x.dtype and x.dtype.is_int else out]

    return op


def _positions(n: int, a: int, ndim: int) -> Tensor:
    """0 .. n-1 along axis `a` of a rank-`ndim` tensor (size 1 elsewhere)."""
    return Tensor.arange(n).reshape(*[n if i == a else 1 for i in range(ndim)])


def _position(hit: Tensor, a: int, last: bool, keep: bool) -> Tensor:
    """The first (or last) position along axis `a` where `hit` is true."""
    n = hit.shape[a]
    pos = _positions(n, a, hit.ndim)
    return hit.where(pos, -1).max(a, keepdim=keep) if last else hit.where(pos, n).min(a, keepdim=keep)


def _arg(kind: str) -> Callable[..., list[Value]]:
    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        x = tensor_of(ins[0])
        a = axis_of(at.get("axis", 0), x.ndim)
        keep = bool(at.get("keepdims", 1))
        best = x.max(a, keepdim=True) if kind == "max" else x.min(a, keepdim=True)
        return [_position(x == best, a, bool(at.get("select_last_index", 0)), keep).cast("int64")]

    return op


# ---- neural network ops --------------------------------------------------------------------------------------


def _matmul(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    a, b = tensor_of(ins[0]), tensor_of(ins[1])
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("MatMul of a scalar")
    return [a @ b]


def _gemm(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    a, b = tensor_of(ins[0]), tensor_of(ins[1])
    a = a.T if at.get("transA", 0) else a
    b = b.T if at.get("transB", 0) else b
    out = a @ b
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    if alpha != 1.0:
        out = out * alpha
    if given(ins, 2):
        c = tensor_of(ins[2])
        out = out + (c * beta if beta != 1.0 else c)
    return [out]


def _spatial(
    at: dict[str, Any], x: Tensor, kernel: tuple[int, ...], what: str, most: int = 2
) -> tuple[list[int], list[int], list[int]]:
    """(strides, dilations, pads as [begin..., end...]) of a window op over up to `most` axes, auto_pad resolved."""
    nd = len(kernel)
    if nd > most:
        raise NotSupportedError(f"{what} over {nd} spatial dimensions (at most {most})")
    strides = list(at.get("strides", [1] * nd))
    dil = list(at.get("dilations", [1] * nd))
    pads = list(at.get("pads", [0] * (2 * nd)))
    auto = text(at, "auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for i in range(nd):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size)
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads[i], pads[i + nd] = lo, total - lo
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    elif auto not in ("NOTSET", ""):
        raise NotSupportedError(f"auto_pad {auto!r}")
    return strides, dil, pads


def _torch_pads(p: list[int]) -> tuple[int, int, int, int]:
    """ONNX 2-D pads [top, left, bottom, right] in the Tensor API's (torch's) order: left, right, top, bottom."""
    return p[1], p[3], p[0], p[2]


def _conv(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, w = tensor_of(ins[0]), tensor_of(ins[1])
    b = tensor_of(ins[2]) if given(ins, 2) else None
    kernel = tuple(at.get("kernel_shape", w.shape[2:]))
    x, at, kernel, squeeze = _as_2d(x, at, kernel)
    if squeeze:
        w = w.unsqueeze(2)
    s, d, p = _spatial(at, x, kernel, "Conv")
    out = x.conv2d(w, b, stride=tuple(s), padding=_torch_pads(p), dilation=tuple(d), groups=at.get("group", 1))
    return [out.squeeze(2) if squeeze else out]


def _conv_transpose(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """ConvTranspose in 1-D or 2-D; output_shape (or SAME auto_pad) sets the padding, the excess going to the end
    for SAME_UPPER and to the beginning otherwise."""
    x, w = tensor_of(ins[0]), tensor_of(ins[1])
    b = tensor_of(ins[2]) if given(ins, 2) else None
    kernel = tuple(at.get("kernel_shape", w.shape[2:]))
    squeeze = x.ndim == 3
    if squeeze:  # 1-D as 2-D over a height of 1
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        kernel = (1, *kernel)
        at = {
            **at,
            **{k: [1 if k != "output_padding" else 0, *at[k]] for k in ("strides", "dilations", "output_padding") if k in at},
        }
        if "pads" in at:
            at["pads"] = [0, at["pads"][0], 0, at["pads"][1]]
        if "output_shape" in at:
            at["output_shape"] = [1, *at["output_shape"]]
    nd = len(kernel)
    if nd != 2:
        raise NotSupportedError(f"ConvTranspose over {nd} spatial dimensions (1 or 2)")
    strides, dil = list(at.get("strides", [1] * nd)), list(at.get("dilations", [1] * nd))
    outpad = list(at.get("output_padding", [0] * nd))
    pads = list(at.get("pads", [0] * (2 * nd)))
    auto = text(at, "auto_pad", "NOTSET")
    wanted = list(at["output_shape"])[-nd:] if "output_shape" in at else None
    if wanted is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        wanted = [x.shape[2 + i] * strides[i] for i in range(nd)]
    if wanted is not None:
        for i in range(nd):
            total = strides[i] * (x.shape[2 + i] - 1) + outpad[i] + (kernel[i] - 1) * dil[i] + 1 - wanted[i]
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads[i], pads[i + nd] = lo, total - lo
            if total < 0:  # the output grows past the transposed convolution: output padding at the end
                pads[i], pads[i + nd], outpad[i] = 0, 0, outpad[i] - total
    out = x.conv_transpose2d(
        w,
        b,
        groups=at.get("group", 1),
        stride=tuple(strides),
        dilation=tuple(dil),
        padding=_torch_pads(pads),
        output_padding=tuple(outpad),
    )
    return [out.squeeze(2) if squeeze else out]


def _per_axis(v: Tensor, shape: tuple[int, ...], axis: int, block: int) -> Tensor:
    """A quantization scale or zero point shaped to broadcast over `shape`: one value, one per slice along `axis`,
    or one per block of `block` slices along it."""
    if v.ndim == 0 or (v.numel() == 1 and not block):
        return v.reshape(())
    if block:
        v = v.repeat_interleave(block, dim=axis)
        return v.shrink(tuple((0, shape[axis]) if i == axis else None for i in range(v.ndim)))
    return v.reshape(*[shape[axis] if i == axis else 1 for i in range(len(shape))])


def _quantized(x: Tensor, scale: Tensor, zero: Tensor | None, dt: str) -> Tensor:
    """x / scale rounded half to even, plus the zero point, saturated to the integer dtype `dt`."""
    q = (x.cast("float32") / scale.cast("float32")).round()
    if zero is not None:
        q = q + zero.cast("float32")
    info = np.iinfo(NP[dt])
    return q.clip(float(info.min), float(info.max)).cast(dt)


def _quantize_linear(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, scale = tensor_of(ins[0]), tensor_of(ins[1])
    zero = tensor_of(ins[2]) if given(ins, 2) else None
    dt = zero.dtype.name if zero is not None else dtype_of(at.get("output_dtype", 2) or 2, "QuantizeLinear output")
    if dt not in ("uint8", "int8", "uint16", "int16"):
        raise NotSupportedError(f"quantizing to {dt}")
    a, block = axis_of(at.get("axis", 1), x.ndim) if scale.numel() > 1 else 0, int(at.get("block_size", 0))
    zero_b = _per_axis(zero, x.shape, a, block) if zero is not None else None
    return [_quantized(x, _per_axis(scale, x.shape, a, block), zero_b, dt)]


def _dequantize_linear(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, scale = tensor_of(ins[0]), tensor_of(ins[1])
    zero = tensor_of(ins[2]) if given(ins, 2) else None
    if x.dtype.name not in ("uint8", "int8", "uint16", "int16", "int32"):
        raise NotSupportedError(f"dequantizing {x.dtype.name}")
    a, block = axis_of(at.get("axis", 1), x.ndim) if scale.numel() > 1 else 0, int(at.get("block_size", 0))
    y = x.cast("float32")
    if zero is not None:
        y = y - _per_axis(zero, x.shape, a, block).cast("float32")
    out = y * _per_axis(scale, x.shape, a, block).cast("float32")
    to = dtype_of(at["output_dtype"], "DequantizeLinear output") if at.get("output_dtype") else scale.dtype.name
    return [out.cast(to)]


def _dynamic_quantize_linear(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """uint8 with the scale and zero point that map [min(x, 0), max(x, 0)] onto [0, 255]."""
    x = tensor_of(ins[0]).cast("float32")
    hi, lo = x.max().maximum(0.0), x.min().minimum(0.0)
    scale = (hi == lo).where(1.0, hi - lo) / 255.0
    zero = (0.0 - lo / scale).clip(0.0, 255.0).round()
    return [_quantized(x, scale, zero, "uint8"), scale.cast(tensor_of(ins[0]).dtype), zero.cast("uint8")]


def _qlinear_matmul(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Integer products of the zero-point-shifted operands, scaled by a_scale * b_scale / y_scale into y's type."""
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (tensor_of(v) if v is not None else None for v in ins[:8])
    assert a is not None and b is not None and a_scale is not None and b_scale is not None and y_scale is not None
    ai = a.cast("int32") - (a_zero.cast("int32") if a_zero is not None else 0)
    bi = b.cast("int32") - (b_zero.cast("int32") if b_zero is not None else 0)
    scale = a_scale.cast("float32") * b_scale.cast("float32") / y_scale.cast("float32")
    d = (ai @ bi).cast("float32") * scale
    return [_quantized(d, Tensor(np.float32(1.0)), y_zero, (y_zero if y_zero is not None else a).dtype.name)]


def _as_2d(x: Tensor, at: dict[str, Any], kernel: tuple[int, ...]) -> tuple[Tensor, dict[str, Any], tuple[int, ...], bool]:
    """A 1-D window op (N, C, W) as a 2-D one over a height of 1: the input, attributes and kernel, and True."""
    if x.ndim != 3:
        return x, at, kernel, False
    at = {**at, **{k: [1, *at[k]] for k in ("strides", "dilations") if k in at}}
    if "pads" in at:
        at["pads"] = [0, at["pads"][0], 0, at["pads"][1]]
    return x.unsqueeze(2), at, (1, *kernel), True


def _pool(kind: str) -> Callable[..., list[Value]]:
    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        if at["_outputs"] > 1:
            raise NotSupportedError("the Indices output")
        x, at, kernel, one_d = _as_2d(tensor_of(ins[0]), at, tuple(at["kernel_shape"]))
        s, d, p = _spatial(at, x, kernel, f"{kind.title()}Pool", most=3)
        nd = len(kernel)
        given = list(p)
        if at.get("ceil_mode", 0):  # windows rounded up: more padding at the end, never a window starting past it
            for i in range(nd):
                size = x.shape[2 + i] + p[i] + p[i + nd]
                span = d[i] * (kernel[i] - 1) + 1
                out = -(-(size - span) // s[i]) + 1
                if (out - 1) * s[i] >= x.shape[2 + i] + p[i]:
                    out -= 1
                p[i + nd] += max(0, (out - 1) * s[i] + span - size)
        include = bool(at.get("count_include_pad", 0))

        def pool2d(t: Tensor, k: tuple[int, ...], st: list[int], dl: list[int], pads: list[int]) -> Tensor:
            if kind == "max":
                return t.max_pool2d(k, stride=tuple(st), padding=_torch_pads(pads), dilation=tuple(dl))
            return t.avg_pool2d(k, stride=tuple(st), padding=_torch_pads(pads), dilation=tuple(dl), count_include_pad=include)

        def pool(t: Tensor, pads: list[int]) -> Tensor:
            if nd == 2:
                return pool2d(t, kernel, s, d, pads)
            # a box is separable, for the max and for both means: (h, w) per depth slice, then the depth
            n, c, depth, h, w = t.shape
            y = pool2d(t.reshape(n, c * depth, h, w), kernel[1:], s[1:], d[1:], [pads[1], pads[2], pads[4], pads[5]])
            ho, wo = y.shape[2:]
            y = pool2d(y.reshape(n, c, depth, ho * wo), (kernel[0], 1), [s[0], 1], [d[0], 1], [pads[0], 0, pads[3], 0])
            return y.reshape(n, c, y.shape[2], ho, wo)

        if kind == "avg" and include and p != given:  # the given padding counts, the ceil's extra padding does not
            inner = tuple((0, 0) if i < 2 else (given[i - 2], given[i - 2 + nd]) for i in range(x.ndim))
            extra = [b - a for a, b in zip(given, p)]
            ones = Tensor.ones(*x.shape, dtype=x.dtype).pad(inner, value=1.0)
            y = pool(x.pad(inner), extra) / pool(ones, extra)
        else:
            y = pool(x, p)
        return [y.squeeze(2) if one_d else y]

    return op


def _lppool(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """(sum of |x|**p over each window, zero padding)**(1/p)."""
    x, at, kernel, one_d = _as_2d(tensor_of(ins[0]), at, tuple(at["kernel_shape"]))
    s, d, p = _spatial(at, x, kernel, "LpPool")
    power = float(at.get("p", 2))
    total = (x.abs() ** power).avg_pool2d(
        kernel, stride=tuple(s), padding=_torch_pads(p), dilation=tuple(d), count_include_pad=True
    ) * float(math.prod(kernel))
    y = total ** (1.0 / power)
    return [y.squeeze(2) if one_d else y]


def _global(kind: str) -> Callable[..., list[Value]]:
    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        x = tensor_of(ins[0])
        ax = tuple(range(2, x.ndim))
        return [x.mean(ax, keepdim=True) if kind == "avg" else x.max(ax, keepdim=True)]

    return op


def _batchnorm(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, scale, bias, mean, var = (tensor_of(v) for v in ins[:5])
    if at.get("training_mode", 0):
        raise NotSupportedError("training_mode=1")
    shape = (1, -1, *([1] * (x.ndim - 2)))
    inv = (var.reshape(*shape) + at.get("epsilon", 1e-5)).rsqrt()
    return [(x - mean.reshape(*shape)) * inv * scale.reshape(*shape) + bias.reshape(*shape)]


def _layernorm(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = tensor_of(ins[0])
    eps, stash = float(at.get("epsilon", 1e-5)), at.get("stash_type", 1) == 1
    y, mean, inv = onnx_microsoft.normalized(x, False, eps, axis_of(at.get("axis", -1), x.ndim), in_float32=stash)
    if given(ins, 1):
        y = y * tensor_of(ins[1])
    if given(ins, 2):
        y = y + tensor_of(ins[2])
    return [y, mean, inv]  # the optional outputs Mean and InvStdDev (stash type, reduced axes kept)


def _group_norm(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """GroupNormalization (and InstanceNormalization, a group per channel): each sample's channels in groups, each
    normalised over its channels and spatial axes in float32; scale and bias per channel (per group before
    opset 21, expanded to the group's channels)."""
    x, scale, bias = tensor_of(ins[0]), tensor_of(ins[1]), tensor_of(ins[2])
    n, c = x.shape[0], x.shape[1]
    groups = int(at["num_groups"]) if "num_groups" in at else c
    xf = x.cast("float32").reshape(n, groups, -1)
    mean = xf.mean(-1, keepdim=True)
    centered = xf - mean
    y = (centered * ((centered * centered).mean(-1, keepdim=True) + float(at.get("epsilon", 1e-5))).rsqrt()).reshape(*x.shape)
    if scale.shape[0] != c:  # per group: each group's value for its channels
        scale, bias = (t.repeat_interleave(c // groups, dim=0) for t in (scale, bias))
    per_channel = (1, c, *([1] * (x.ndim - 2)))
    return [(y * scale.cast("float32").reshape(*per_channel) + bias.cast("float32").reshape(*per_channel)).cast(x.dtype)]


def _rmsnorm(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = tensor_of(ins[0])
    y, _, _ = onnx_microsoft.normalized(x, True, float(at.get("epsilon", 1e-5)), axis_of(at.get("axis", -1), x.ndim))
    return [y * tensor_of(ins[1]) if given(ins, 1) else y]


def _hardmax(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = tensor_of(ins[0])
    a = axis_of(at.get("axis", -1), x.ndim)
    first = _position(x == x.max(a, keepdim=True), a, last=False, keep=True)  # the first maximum
    return [(_positions(x.shape[a], a, x.ndim) == first).cast(x.dtype)]


def _lpnorm(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = tensor_of(ins[0])
    a = axis_of(at.get("axis", -1), x.ndim)
    p = at.get("p", 2)
    if p not in (1, 2):
        raise NotSupportedError(f"p={p} (1 or 2)")
    norm = x.abs().sum(a, keepdim=True) if p == 1 else (x * x).sum(a, keepdim=True).sqrt()
    return [(norm == 0).where(0.0, x / norm)]  # an all-zero slice stays zero


def _nll(logp: Tensor, target: Value, weight: Value, at: dict[str, Any]) -> Tensor:
    """The negative log-likelihood of `target` classes under log-probabilities (N, C, d...), as ONNX defines it."""
    c = logp.shape[1]
    tgt = tensor_of(target).cast("int32")
    classes = _positions(c, 1, logp.ndim)
    hot = (tgt.unsqueeze(1) == classes).cast(logp.dtype)  # (N, C, d...)
    w = hot if weight is None else hot * tensor_of(weight).reshape(1, c, *([1] * (logp.ndim - 2)))
    ignore = at.get("ignore_index")
    if ignore is not None:
        w = w * (tgt.unsqueeze(1) != ignore).cast(logp.dtype)
    loss = -(logp * w).sum(1)
    reduction = text(at, "reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


def _nll_loss(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    return [_nll(tensor_of(ins[0]), ins[1], optional(ins, 2), at)]


def _softmax_ce(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    logp = tensor_of(ins[0]).log_softmax(1)
    return [_nll(logp, ins[1], optional(ins, 2), at), logp]


def _attention(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """ONNX Attention (opset 23+): 3-D or 4-D Q, K, V, grouped K/V heads, a boolean or additive mask (padded to the
    key length), causal masking aligned bottom-right (after a past cache, or per batch after nonpad_kv_seqlen),
    sliding windows, the keys past each batch's nonpad_kv_seqlen masked, softcap, softmax_precision, past/present
    key and value, the QK output. Masks become one additive bias of 0 and -inf, as the reference builds it."""
    ins = ins + [None] * (7 - len(ins))
    q, k, v = tensor_of(ins[0]), tensor_of(ins[1]), tensor_of(ins[2])
    mask, past_k, past_v, nonpad = ins[3], ins[4], ins[5], ins[6]
    three_d = q.ndim == 3
    if three_d:  # (B, S, heads * size) -> (B, heads, S, size)
        qh, kh = at["q_num_heads"], at["kv_num_heads"]
        b, sq = q.shape[0], q.shape[1]
        q = q.reshape(b, sq, qh, q.shape[2] // qh).permute(0, 2, 1, 3)
        k = k.reshape(b, k.shape[1], kh, k.shape[2] // kh).permute(0, 2, 1, 3)
        v = v.reshape(b, v.shape[1], kh, v.shape[2] // kh).permute(0, 2, 1, 3)
    if past_k is not None:
        k = tensor_of(past_k).cat(k, dim=2)
        v = tensor_of(past_v).cat(v, dim=2)
    present_k, present_v = k, v
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk:  # grouped-query attention: each K/V head serves hq // hk query heads
        k = k.unsqueeze(2).expand(k.shape[0], hk, hq // hk, *k.shape[2:]).reshape(k.shape[0], hq, *k.shape[2:])
        v = v.unsqueeze(2).expand(v.shape[0], hk, hq // hk, *v.shape[2:]).reshape(v.shape[0], hq, *v.shape[2:])
    root = math.sqrt(at.get("scale", 1.0 / math.sqrt(q.shape[-1])))  # on both sides, as the reference rounds it
    qk = (q * root) @ (k * root).transpose(-1, -2)
    outs_qk = [qk]
    softcap = at.get("softcap", 0.0)
    if softcap:
        qk = (qk * (1.0 / softcap)).tanh() * softcap
    outs_qk.append(qk)
    sq, skv = qk.shape[-2], qk.shape[-1]
    i, j = Tensor.arange(sq).reshape(sq, 1), Tensor.arange(skv).reshape(1, skv)
    if nonpad is not None:
        lens = tensor_of(nonpad).cast("int32").reshape(-1, 1, 1, 1)
        offset: Any = lens - sq  # per batch: where this batch's queries sit in its keys
    else:
        offset = 0 if past_k is None else tensor_of(past_k).shape[2]
    blocked = None  # bool: key j is masked for query i

    def block(b: Tensor) -> None:
        nonlocal blocked
        blocked = b if blocked is None else blocked | b

    bias = None
    if mask is not None:
        m = tensor_of(mask)
        if m.shape[-1] < skv:  # a short mask: the keys past it are masked
            m = m.pad(
                tuple([(0, 0)] * (m.ndim - 1) + [(0, skv - m.shape[-1])]), value=False if m.dtype.name == "bool" else -math.inf
            )
        if m.dtype.name == "bool":
            block(m.logical_not())
        else:
            bias = m.cast(qk.dtype)
    if at.get("is_causal", 0):
        block(j > i + offset)
    left, right = at.get("left_window_size", -1), at.get("right_window_size", -1)
    if left >= 0:
        block(i + offset - j > left)
    if right >= 0:
        block(j - (i + offset) > right)
    if nonpad is not None:
        block(j >= lens)
    if blocked is not None:
        wall = blocked.where(-math.inf, 0.0).cast(qk.dtype)
        bias = wall if bias is None else bias + wall
    if bias is not None:
        qk = qk + bias
    outs_qk.append(qk)
    logits = qk.cast(dtype_of(at["softmax_precision"], "softmax_precision")) if "softmax_precision" in at else qk
    p = logits.softmax(-1)
    if bias is not None:  # a fully masked row gives zeros, not NaN
        p = (bias.max(-1, keepdim=True) == -math.inf).where(0.0, p)
    p = p.cast(q.dtype)
    outs_qk.append(p)
    y = p.cast(v.dtype) @ v
    if three_d:
        y = y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], y.shape[1] * y.shape[3])
    return [y, present_k, present_v, outs_qk[at.get("qk_matmul_output_mode", 0)]]


def _softmax(log: bool) -> Callable[..., list[Value]]:
    def op(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
        x = tensor_of(ins[0])
        if opset < 13:  # the input as 2-D: [0, axis) x [axis, n)
            a = axis_of(at.get("axis", 1), x.ndim)
            flat = x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))
            y = flat.log_softmax(1) if log else flat.softmax(1)
            return [y.reshape(*x.shape)]
        a = axis_of(at.get("axis", -1), x.ndim)
        return [x.log_softmax(a) if log else x.softmax(a)]

    return op


def _leaky(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    return [tensor_of(ins[0]).leaky_relu(at.get("alpha", 0.01))]


def _gelu(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = tensor_of(ins[0])
    approx = text(at, "approximate", "none")
    if approx == "tanh":
        return [x.gelu()]
    return [onnx_microsoft.erf_gelu(x)]


def _prelu(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x, slope = tensor_of(ins[0]), tensor_of(ins[1])
    return [(x < 0).where(x * slope, x)]


def _dropout(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = ins[0]
    return [x, tensor_of(np.ones(shape_of(x), np.bool_))]


def _identity(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    return [ins[0]]


def _size(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    return [np.asarray(math.prod(ins[0].shape), np.int64)]


def _bit_shift(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Amounts outside [0, bit width) shift every bit out: 0, or -1 for a right shift of a negative value."""
    direction = text(at, "direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise NotSupportedError(f"direction {direction!r} (LEFT or RIGHT)")
    left = direction == "LEFT"

    def folded(a: np.ndarray, n: np.ndarray) -> np.ndarray:
        k = np.clip(n, 0, a.dtype.itemsize * 8 - 1)
        moved = np.left_shift(a, k) if left else np.right_shift(a, k)
        return np.where((n >= 0) & (n < a.dtype.itemsize * 8), moved, 0 if left else np.where(a < 0, -1, 0)).astype(a.dtype)

    def lazy(a: Tensor, n: Tensor) -> Tensor:
        n = n.cast(a.dtype)
        k = n.clip(0, a.dtype.bits - 1)
        spilled = 0 if left else (a < 0).where(-1, 0).cast(a.dtype)
        return ((n >= 0) & (n < a.dtype.bits)).where(a.lshift(k) if left else a.rshift(k), spilled).cast(a.dtype)

    return _both(folded, lazy)(ins, at, opset)


def _bool_op(fn: Callable[[Tensor, Tensor], Tensor], np_fn: Callable[..., Any]) -> Callable[..., list[Value]]:
    return _both(np_fn, lambda a, b: fn(a.cast("bool"), b.cast("bool")))


OPS: dict[str, Callable[..., list[Value]]] = {
    # elementwise
    "Add": _both(np.add, lambda a, b: a + b),
    "Sub": _both(np.subtract, lambda a, b: a - b),
    "Mul": _both(np.multiply, lambda a, b: a * b),
    "Div": _both(_np_div, _div),
    "Pow": _pow_op,
    "Mod": _mod,
    "Max": _variadic(lambda a, b: a.maximum(b), np_fn=np.maximum),
    "Min": _variadic(lambda a, b: a.minimum(b), np_fn=np.minimum),
    "Sum": _variadic(lambda a, b: a + b),
    "Mean": _variadic(lambda a, b: a + b, mean=True),
    "Equal": _both(np.equal, lambda a, b: a == b),
    "Less": _both(np.less, lambda a, b: a < b),
    "Greater": _both(np.greater, lambda a, b: a > b),
    "LessOrEqual": _both(np.less_equal, lambda a, b: a <= b),
    "GreaterOrEqual": _both(np.greater_equal, lambda a, b: a >= b),
    "And": _bool_op(lambda a, b: a & b, np.logical_and),
    "Or": _bool_op(lambda a, b: a | b, np.logical_or),
    "Xor": _bool_op(lambda a, b: a ^ b, np.logical_xor),
    "BitShift": _bit_shift,
    "BitwiseAnd": _both(np.bitwise_and, lambda a, b: a & b),
    "BitwiseOr": _both(np.bitwise_or, lambda a, b: a | b),
    "BitwiseXor": _both(np.bitwise_xor, lambda a, b: a ^ b),
    "BitwiseNot": _unary(lambda x: ~x, np.invert),
    "Not": _unary(lambda x: x.cast("bool").logical_not(), np.logical_not),
    "Where": _where,
    "Abs": _unary(lambda x: x.abs(), np.abs),
    "Neg": _both(np.negative, lambda x: -x),
    "Exp": _unary(lambda x: x.exp(), np.exp),
    "Log": _unary(lambda x: x.log(), np.log),
    "Sqrt": _unary(lambda x: x.sqrt(), np.sqrt),
    "Reciprocal": _unary(lambda x: x.reciprocal(), np.reciprocal),
    "Sigmoid": _unary(lambda x: x.sigmoid()),
    "Tanh": _unary(lambda x: x.tanh()),
    "Relu": _unary(lambda x: x.relu(), lambda a: np.maximum(a, 0)),
    "Floor": _unary(lambda x: x.floor(), np.floor),
    "Ceil": _unary(lambda x: x.ceil(), np.ceil),
    "Sin": _unary(lambda x: x.sin(), np.sin),
    "Cos": _unary(lambda x: x.cos(), np.cos),
    "Tan": _unary(lambda x: x.tan()),
    "Sign": _unary(lambda x: x.sign(), np.sign),
    "Erf": _unary(lambda x: x.erf()),
    "Softplus": _unary(lambda x: x.softplus()),
    "Softsign": _unary(lambda x: x.softsign()),
    "HardSwish": _unary(lambda x: x.hardswish()),
    "Mish": _unary(lambda x: x.mish()),
    "IsNaN": _unary(lambda x: x.isnan()),
    "IsInf": lambda ins, at, opset: [
        tensor_of(ins[0]).isinf(bool(at.get("detect_positive", 1)), bool(at.get("detect_negative", 1)))
    ],
    "Round": _unary(lambda x: x.round(), np.round),
    "Acos": _unary(lambda x: x.acos()),
    "Acosh": _unary(lambda x: x.acosh()),
    "Asin": _unary(lambda x: x.asin()),
    "Asinh": _unary(lambda x: x.asinh()),
    "Atan": _unary(lambda x: x.atan()),
    "Atanh": _unary(lambda x: x.atanh()),
    "Cosh": _unary(lambda x: x.cosh()),
    "Sinh": _unary(lambda x: x.sinh()),
    "Celu": lambda ins, at, opset: [tensor_of(ins[0]).celu(at.get("alpha", 1.0))],
    "LeakyRelu": _leaky,
    "ThresholdedRelu": lambda ins, at, opset: [(tensor_of(ins[0]) > at.get("alpha", 1.0)).where(tensor_of(ins[0]), 0.0)],
    "Swish": lambda ins, at, opset: [tensor_of(ins[0]) * (at.get("alpha", 1.0) * tensor_of(ins[0])).sigmoid()],
    "Elu": lambda ins, at, opset: [tensor_of(ins[0]).elu(at.get("alpha", 1.0))],
    "Selu": lambda ins, at, opset: [
        tensor_of(ins[0]).selu(at.get("alpha", 1.6732632423543772), at.get("gamma", 1.0507009873554805))
    ],
    "HardSigmoid": lambda ins, at, opset: [tensor_of(ins[0]).hardsigmoid(at.get("alpha", 0.2), at.get("beta", 0.5))],
    "Gelu": _gelu,
    "PRelu": _prelu,
    "Clip": _clip,
    "Cast": _cast,
    "CastLike": _cast_like,
    "BitCast": _bitcast,
    "Identity": _identity,
    "Dropout": _dropout,
    # shapes
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "RotaryEmbedding": _rotary_embedding,
    "SwiGLU": lambda ins, at, opset: [
        tensor_of(ins[0]) * (at.get("alpha", 1.0) * tensor_of(ins[0])).sigmoid() * tensor_of(ins[1])
    ],
    "EyeLike": lambda ins, at, opset: [
        np.eye(  # type: ignore[call-overload]  # mypy cannot tell that *shape fills only N and M
            *ins[0].shape,
            k=int(at.get("k", 0)),
            dtype=NP[dtype_of(at["dtype"], "EyeLike") if "dtype" in at else ins[0].dtype.name],
        )
    ],
    "CumSum": _scan("sum"),
    "CumProd": _scan("prod"),
    "TopK": _topk,
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,
    "ScatterND": _scatter_nd,
    "OneHot": _one_hot_op,
    "Einsum": lambda ins, at, opset: [Tensor.einsum(text(at, "equation", ""), *[tensor_of(v) for v in ins])],
    "Expand": _expand,
    "Tile": _tile,
    "Shape": _shape_op,
    "Size": _size,
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Pad": _pad,
    "Resize": _resize,
    "Upsample": _upsample,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "CenterCropPad": _center_crop_pad,
    "ReverseSequence": _reverse_sequence,
    "Trilu": _trilu,
    # reductions
    "ReduceSum": _reduce("sum"),
    "ReduceMean": _reduce("mean"),
    "ReduceMax": _reduce("max"),
    "ReduceMin": _reduce("min"),
    "ReduceProd": _reduce("prod"),
    "ReduceSumSquare": _reduce("sumsquare"),
    "ReduceL1": _reduce("l1"),
    "ReduceL2": _reduce("l2"),
    "ReduceLogSum": _reduce("logsum"),
    "ReduceLogSumExp": _reduce("logsumexp"),
    "ArgMax": _arg("max"),
    "ArgMin": _arg("min"),
    # neural network
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Conv": _conv,
    "QuantizeLinear": _quantize_linear,
    "DequantizeLinear": _dequantize_linear,
    "DynamicQuantizeLinear": _dynamic_quantize_linear,
    "QLinearMatMul": _qlinear_matmul,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "LpPool": _lppool,
    "GlobalAveragePool": _global("avg"),
    "GlobalMaxPool": _global("max"),
    "BatchNormalization": _batchnorm,
    "LayerNormalization": _layernorm,
    "RMSNormalization": _rmsnorm,
    "GroupNormalization": _group_norm,
    "InstanceNormalization": _group_norm,
    "Hardmax": _hardmax,
    "LpNormalization": _lpnorm,
    "Attention": _attention,
    "NegativeLogLikelihoodLoss": _nll_loss,
    "SoftmaxCrossEntropyLoss": _softmax_ce,
    "Softmax": _softmax(False),
    "LogSoftmax": _softmax(True),
    **onnx_recurrent.OPS,  # RNN, GRU, LSTM
    **onnx_spatial.OPS,  # GridSample, AffineGrid, Col2Im, DFT, STFT, windows, MelWeightMatrix
    **onnx_control.OPS,  # If, Loop, Scan, sequences, optionals
}
# op tables by node domain; com.microsoft: onnxruntime's contrib ops that exported transformers carry, and the
# standard ops some exporters put in that domain
DOMAINS: dict[str, dict[str, Callable[..., list[Value]]]] = {
    "": OPS,
    "ai.onnx": OPS,
    "com.microsoft": {**onnx_microsoft.OPS, "LayerNormalization": OPS["LayerNormalization"]},
}
