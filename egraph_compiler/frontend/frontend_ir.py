"""Frontend-IR JSON (seed 001 §2.2): graph signature + tensor table + node list.

    {"signature": {"inputs": [{"tensor": "A", "role": "data", "mutability": "immutable"}, ...],
                   "outputs": [{"tensor": "C"}]},
     "symbols": {"M": 64},                        # concrete sizes for symbolic dims (optional)
     "tensors": {"A": {"dtype": "fp16", "shape": ["M", 128]}, ...},
     "graph": [{"op": "GEMM", "name": "gemm", "inputs": ["A", "B"], "outputs": ["C"], "attrs": {...}}, ...]}

Nodes may come in any order; they are scheduled by their data dependencies.
Every problem becomes a diagnostic naming the node or tensor at fault.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from egraph_compiler.frontend.tensor import Tensor
from egraph_compiler.ir.diagnostics import (
    AxisAlignmentMismatch,
    CompilerError,
    CyclicGraph,
    DTypeError,
    InvalidArgument,
    InvalidSize,
    MalformedJSON,
    UnknownOp,
    UnknownTensor,
)
from egraph_compiler.ir.dtypes import DType, to_dtype


@dataclass
class FrontendGraph:
    """A loaded Frontend-IR program: named placeholder inputs and named output tensors."""

    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    signature: dict[str, Any]
    tensors: dict[str, dict[str, Any]]
    nodes: list[dict[str, Any]]
    source: str = "<dict>"
    attrs: dict[str, Any] = field(default_factory=dict)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Random inputs of the right shapes and dtypes (normal floats, small non-negative ints).

        Keyed by placeholder name (the tensor name made an identifier: "x.0" -> "x_0"), as evaluation expects.
        """
        rng = np.random.default_rng(seed)
        out = {}
        for t in self.inputs.values():
            name, dt = t.uop.arg[0], t.dtype
            if dt.is_float:
                out[name] = rng.standard_normal(t.shape).astype(np.float32 if dt.name == "bfloat16" else dt.np)
            elif dt.is_bool:
                out[name] = rng.random(t.shape) < 0.5
            else:
                out[name] = rng.integers(0, 8, t.shape).astype(dt.np)
        return out


def _fail(at: str, why: str, suggestion: str) -> MalformedJSON:
    return MalformedJSON(at=at, why=why, suggestion=suggestion)


def _require(obj: Any, key: str, kind: type | tuple[type, ...], at: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise _fail(at, f"missing required field {key!r}", f"add {key!r} (see seed 001 §2.2)")
    if not isinstance(obj[key], kind):
        raise _fail(
            f"{at}.{key}",
            f"{key!r} should be a {getattr(kind, '__name__', kind)}, got {type(obj[key]).__name__}",
            "fix the field's type",
        )
    return obj[key]


def load_frontend_ir(source: str | Path | dict[str, Any]) -> FrontendGraph:
    """Load from a path, a JSON string or an already parsed dict."""
    name = "<dict>"
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith(("{", "["))):
        path = Path(source)
        name = str(path)[:200]
        try:
            found, folder = path.is_file(), path.is_dir()
        except (OSError, ValueError):  # name too long, NUL byte, ...
            found = folder = False
        if not found:
            why = "is a directory, not a file" if folder else "file not found"
            raise MalformedJSON(at=name, why=why, suggestion="check the path")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise MalformedJSON(at=name, why=f"cannot read file: {e}", suggestion="pass a UTF-8 JSON file") from None
    elif isinstance(source, str):
        text = source
    elif isinstance(source, dict):
        text = None
    else:
        raise InvalidArgument(
            at="load_frontend_ir",
            why=f"cannot load from {type(source).__name__}",
            suggestion="pass a path, a JSON string or a dict",
        )
    if text is not None:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise MalformedJSON(
                at=f"{name}:{e.lineno}:{e.colno}", why=f"invalid JSON: {e.msg}", suggestion="fix the JSON syntax"
            ) from None
        except RecursionError:
            raise MalformedJSON(at=name, why="the JSON is nested too deeply", suggestion="flatten the document") from None
    else:
        doc = source
    if not isinstance(doc, dict):
        raise _fail(name, "the document is not a JSON object", "wrap it in {...} with signature, tensors and graph")
    return _build(doc, name)


def _build(doc: dict[str, Any], name: str) -> FrontendGraph:
    sig = _require(doc, "signature", dict, name)
    tensors = _require(doc, "tensors", dict, name)
    graph = _require(doc, "graph", list, name)
    symbols = doc.get("symbols", {})
    if not isinstance(symbols, dict):
        raise _fail(f"{name}.symbols", "symbols must map names to sizes", 'e.g. "symbols": {"M": 64}')
    sig_inputs = _require(sig, "inputs", list, f"{name}.signature")
    sig_outputs = _require(sig, "outputs", list, f"{name}.signature")
    if not sig_outputs:
        raise _fail(f"{name}.signature.outputs", "no outputs", "declare at least one output tensor")

    decl: dict[str, tuple[tuple[int, ...], DType]] = {}
    for tname, info in tensors.items():
        at = f"tensors.{tname}"
        shape_raw = _require(info, "shape", list, at)
        dtype = to_dtype(_require(info, "dtype", str, at))
        decl[tname] = (tuple(_size(s, symbols, f"{at}.shape") for s in shape_raw), dtype)

    env: dict[str, Tensor] = {}
    inputs: dict[str, Tensor] = {}
    for i, entry in enumerate(sig_inputs):
        tname = _require(entry, "tensor", str, f"signature.inputs[{i}]")
        if tname not in decl:
            raise UnknownTensor(
                at=f"signature.inputs[{i}]",
                why=f"input {tname!r} is not in the tensor table",
                suggestion=f'add "{tname}": {{"dtype": ..., "shape": [...]}} to "tensors"',
            )
        if tname in inputs:
            raise _fail(f"signature.inputs[{i}]", f"input {tname!r} is listed twice", "list each input once")
        shape, dtype = decl[tname]
        clash = [other for other in inputs if _ident(other) == _ident(tname)]
        if clash:
            raise _fail(
                f"signature.inputs[{i}]",
                f"inputs {clash[0]!r} and {tname!r} both become placeholder {_ident(tname)!r}",
                "rename one of them (placeholders are identifiers)",
            )
        inputs[tname] = env[tname] = Tensor.empty(shape, dtype=dtype, name=_ident(tname))

    for node in _schedule(graph, set(env)):
        _run_node(node, env, decl)

    outputs: dict[str, Tensor] = {}
    for i, entry in enumerate(sig_outputs):
        tname = _require(entry, "tensor", str, f"signature.outputs[{i}]")
        if tname not in env:
            raise UnknownTensor(
                at=f"signature.outputs[{i}]",
                why=f"output {tname!r} is never produced",
                suggestion="produce it with a node, or fix the name",
            )
        outputs[tname] = env[tname]
    return FrontendGraph(
        inputs, outputs, sig, tensors, graph, name, {k: v for k, v in doc.items() if k not in ("signature", "tensors", "graph")}
    )


def _ident(name: str) -> str:
    out = "".join(c if (c.isalnum() and c.isascii()) or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else f"t_{out}"


def _size(s: Any, symbols: dict[str, Any], at: str) -> int:
    if isinstance(s, str):
        if s not in symbols:
            raise MalformedJSON(
                at=at, why=f"symbolic size {s!r} has no value", suggestion=f'add "symbols": {{"{s}": <size>}} to the document'
            )
        s = symbols[s]
    if not isinstance(s, int) or isinstance(s, bool):
        raise InvalidSize(at=at, why=f"size {s!r} is not an integer", suggestion="sizes are positive integers")
    if s <= 0:
        raise InvalidSize(at=at, why=f"size {s} is not positive", suggestion="sizes are positive integers")
    return s


def _schedule(graph: list[Any], available: set[str]) -> list[dict[str, Any]]:
    """Order nodes by data dependencies (Kahn); reports cycles and undefined tensors."""
    producers: dict[str, int] = {}
    for i, node in enumerate(graph):
        at = f"graph[{i}]"
        if not isinstance(node, dict):
            raise _fail(at, "a node must be a JSON object", 'use {"op": ..., "inputs": [...], "outputs": [...]}')
        _require(node, "op", str, at)
        ins = _require(node, "inputs", list, at)
        outs = _require(node, "outputs", list, at)
        if not all(isinstance(x, str) for x in ins + outs) or not outs:
            raise _fail(at, "inputs/outputs must be non-empty lists of tensor names", "list tensor names as strings")
        if not isinstance(node.get("attrs", {}), dict):
            raise _fail(f"{at}.attrs", "attrs must be a JSON object", 'use "attrs": {"name": value, ...}')
        for o in outs:
            if o in producers or o in available:
                raise _fail(at, f"tensor {o!r} is produced twice", "give every produced tensor a unique name")
            producers[o] = i
    deps: dict[int, set[int]] = {}
    for i, node in enumerate(graph):
        deps[i] = set()
        for x in node["inputs"]:
            if x in available:
                continue
            if x not in producers:
                raise UnknownTensor(
                    at=f"graph[{i}] ({node.get('name', node['op'])})",
                    why=f"input {x!r} is neither a graph input nor produced by a node",
                    suggestion="add it to signature.inputs or produce it with a node",
                )
            deps[i].add(producers[x])
    order: list[dict[str, Any]] = []
    done: set[int] = set()
    ready = [i for i in range(len(graph)) if not deps[i]]
    while ready:
        i = ready.pop(0)
        order.append(graph[i])
        done.add(i)
        ready += [j for j in range(len(graph)) if j not in done and j not in ready and deps[j] <= done]
    if len(order) != len(graph):
        stuck = [graph[i].get("name", graph[i]["op"]) for i in range(len(graph)) if i not in done]
        raise CyclicGraph(
            at=f"nodes {stuck}",
            why="these nodes depend on each other in a cycle",
            suggestion="break the cycle: a tensor cannot (indirectly) feed the node that produces it",
        )
    return order


# ---- node semantics ----------------------------------------------------------------------------

_NODE_FIELDS = frozenset({"op", "name", "inputs", "outputs", "attrs"})


def _attr(node: dict[str, Any], key: str, default: Any, kind: type | tuple[type, ...] | None = None) -> Any:
    # attributes live in "attrs" or, for brevity, on the node itself (never the node's own fields: Reduce's "op")
    v = node.get("attrs", {}).get(key, default if key in _NODE_FIELDS else node.get(key, default))
    if kind is not None and v is not default and not isinstance(v, kind):
        raise _fail(
            f"{node.get('name', node['op'])}.attrs.{key}",
            f"{key}={v!r} has the wrong type",
            f"use a {getattr(kind, '__name__', kind)}",
        )
    return v


def _required(node: dict[str, Any], key: str, kind: type) -> Any:
    v = _attr(node, key, None, kind)
    if v is None:
        raise _fail(
            f"{node.get('name', node['op'])}.attrs",
            f"{node['op']} needs the attribute {key!r}",
            f'add "attrs": {{"{key}": ...}}',
        )
    return v


def _arity(node: dict[str, Any], lo: int, hi: int) -> None:
    n = len(node["inputs"])
    if not lo <= n <= hi:
        raise _fail(node.get("name", node["op"]), f"{node['op']} takes {lo}..{hi} inputs, got {n}", "check the node's inputs")


def _gemm(node: dict[str, Any], x: list[Tensor]) -> Tensor:
    _arity(node, 2, 3)
    a, b = x[0], x[1]
    if _attr(node, "trans_a", False, bool):
        a = a.transpose(-1, -2)
    if _attr(node, "trans_b", False, bool):
        b = b.transpose(-1, -2)
    acc = _attr(node, "acc_dtype", None, str)
    out_dtype = a.dtype
    if acc is not None:
        a, b = a.cast(acc), b.cast(acc)
    out = a @ b
    alpha = _attr(node, "alpha", 1.0, (int, float))
    if alpha != 1.0:
        out = out * alpha
    if len(x) == 3:
        out = out + x[2].cast(out.dtype) * _attr(node, "beta", 1.0, (int, float))
    return out.cast(out_dtype)


_ELEMENTWISE: dict[str, Callable[..., Tensor]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": lambda a, b: a.maximum(b),
    "min": lambda a, b: a.minimum(b),
    "pow": lambda a, b: a**b,
    "relu": lambda a: a.relu(),
    "gelu": lambda a: a.gelu(),
    "silu": lambda a: a.silu(),
    "exp": lambda a: a.exp(),
    "log": lambda a: a.log(),
    "sqrt": lambda a: a.sqrt(),
    "rsqrt": lambda a: a.rsqrt(),
    "sigmoid": lambda a: a.sigmoid(),
    "tanh": lambda a: a.tanh(),
    "neg": lambda a: -a,
    "abs": lambda a: a.abs(),
    "sin": lambda a: a.sin(),
    "cos": lambda a: a.cos(),
    "reciprocal": lambda a: a.reciprocal(),
    "exp2": lambda a: a.exp2(),
    "square": lambda a: a * a,
    "where": lambda c, a, b: c.where(a, b),
}


def _elementwise(node: dict[str, Any], x: list[Tensor]) -> Tensor:
    fn = _attr(node, "fn", None, str)
    if fn not in _ELEMENTWISE:
        raise UnknownOp(
            at=node.get("name", "Elementwise"),
            why=f"unknown elementwise fn {fn!r}",
            suggestion=f"use one of: {', '.join(sorted(_ELEMENTWISE))}",
        )
    f = _ELEMENTWISE[fn]
    want = f.__code__.co_argcount
    _arity(node, want, want)
    return f(*x)


def _reduce(node: dict[str, Any], x: list[Tensor]) -> Tensor:
    _arity(node, 1, 1)
    op = _attr(node, "op", "sum", str).lower()
    fns = {"sum": Tensor.sum, "max": Tensor.max, "min": Tensor.min, "mean": Tensor.mean, "prod": Tensor.prod}
    if op not in fns:
        raise UnknownOp(
            at=node.get("name", "Reduce"), why=f"unknown reduce op {op!r}", suggestion=f"use one of: {', '.join(fns)}"
        )
    axes = _attr(node, "axes", None, (list, int))
    return fns[op](x[0], tuple(axes) if isinstance(axes, list) else axes, _attr(node, "keepdim", False, bool))


def _conv(node: dict[str, Any], x: list[Tensor]) -> Tensor:
    _arity(node, 2, 3)
    pad = _attr(node, "padding", _attr(node, "pad", 0, (int, list)), (int, list))
    return x[0].conv2d(
        x[1],
        x[2] if len(x) > 2 else None,
        stride=_seq(_attr(node, "stride", 1, (int, list))),
        padding=_seq(pad),
        dilation=_seq(_attr(node, "dilation", 1, (int, list))),
        groups=_attr(node, "groups", 1, int),
    )


def _seq(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _attention(node: dict[str, Any], x: list[Tensor]) -> Tensor:
    _arity(node, 3, 4)
    return x[0].scaled_dot_product_attention(
        x[1], x[2], attn_mask=x[3] if len(x) > 3 else None, is_causal=_attr(node, "causal", False, bool)
    )


def _layernorm(node: dict[str, Any], x: list[Tensor]) -> Tensor:
    _arity(node, 1, 3)
    out = x[0].layernorm(_attr(node, "axis", -1, int), _attr(node, "eps", 1e-5, (int, float)))
    if len(x) > 1:
        out = out * x[1]
    if len(x) > 2:
        out = out + x[2]
    return out.cast(x[0].dtype)


def _softmax(node: dict[str, Any], x: list[Tensor]) -> Tensor:
    _arity(node, 1, 1)
    return x[0].softmax(_attr(node, "axis", -1, int)).cast(x[0].dtype)


def _cast(node: dict[str, Any], x: list[Tensor]) -> Tensor:
    _arity(node, 1, 1)
    return x[0].cast(_attr(node, "to", None, str) or "float32")


def _reshape(node: dict[str, Any], x: list[Tensor]) -> Tensor:
    _arity(node, 1, 1)
    return x[0].reshape(tuple(_required(node, "shape", list)))


def _transpose(node: dict[str, Any], x: list[Tensor]) -> Tensor:
    _arity(node, 1, 1)
    return x[0].permute(tuple(_attr(node, "perm", None, list) or reversed(range(x[0].ndim))))


_NODES: dict[str, Callable[[dict[str, Any], list[Tensor]], Tensor]] = {
    "GEMM": _gemm,
    "MatMul": _gemm,
    "Elementwise": _elementwise,
    "Reduce": _reduce,
    "Conv": _conv,
    "Attention": _attention,
    "LayerNorm": _layernorm,
    "Softmax": _softmax,
    "Cast": _cast,
    "Reshape": _reshape,
    "Transpose": _transpose,
}


def _run_node(node: dict[str, Any], env: dict[str, Tensor], decl: dict[str, tuple[tuple[int, ...], DType]]) -> None:
    label = node.get("name", node["op"])
    if node["op"] not in _NODES:
        raise UnknownOp(
            at=f"node {label!r}", why=f"unknown op {node['op']!r}", suggestion=f"use one of: {', '.join(sorted(_NODES))}"
        )
    if len(node["outputs"]) != 1:
        raise _fail(f"node {label!r}", "every node here has exactly one output", "list one output tensor")
    try:
        out = _NODES[node["op"]](node, [env[i] for i in node["inputs"]])
    except CompilerError as e:
        e.at = f"node {label!r} ({node['op']}): {e.at}"
        raise type(e)(at=e.at, why=e.why, suggestion=e.suggestion, **e.details) from None
    oname = node["outputs"][0]
    if oname in decl:
        shape, dtype = decl[oname]
        if out.shape != shape:
            raise AxisAlignmentMismatch(
                at=f"node {label!r} -> {oname!r}",
                why=f"computed shape {out.shape} differs from the declared {shape}",
                suggestion="fix the tensor table or the node",
            )
        if out.dtype is not dtype:
            raise DTypeError(
                at=f"node {label!r} -> {oname!r}",
                why=f"computed dtype {out.dtype.name} differs from the declared {dtype.name}",
                suggestion=f"declare {oname!r} as {out.dtype.name}, or add a CAST node to {dtype.name}",
            )
    env[oname] = out


def describe(g: FrontendGraph) -> str:
    lines = [f"Frontend-IR {g.source}: {len(g.nodes)} nodes"]
    for n, t in g.inputs.items():
        lines.append(f"  input  {n}: {t.dtype.name}{list(t.shape)}")
    for node in g.nodes:
        lines.append(
            f"  node   {node.get('name', '?')}: {node['op']}({', '.join(node['inputs'])}) -> "
            f"{', '.join(node['outputs'])} {node.get('attrs', {}) or ''}"
        )
    for n, t in g.outputs.items():
        lines.append(f"  output {n}: {t.dtype.name}{list(t.shape)} ({math.prod(t.shape)} elements)")
    return "\n".join(lines)
