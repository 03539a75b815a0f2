"""ONNX control flow (If, Loop, Scan) and sequence / optional values for the ONNX import, resolved at import as the
shapes are static.

Values: besides a numpy array (known at import) or a Tensor, a sequence is a Python list of values (its length known
at import) and an optional is None (empty) or its value.

If imports only its taken branch when the condition is known at import; on a runtime condition it imports both and
selects each output elementwise (`where`), which needs outputs of one shape and dtype in both branches. Loop is
unrolled: its trip count must be known, and so must its condition where it can stop the loop early, except that a
Loop without scan outputs runs a runtime condition as a mask (a carried value keeps its value once the condition is
false; every step computed, the trip count bounding them). Scan is unrolled over the scan axis (opset 8's batched
form too, without sequence_lens shorter than the sequence). SequenceMap imports its body once per element.

Subgraphs: ops that hold one get `at["_run_graph"](graph, values, label) -> outputs` from the import driver, which
imports a GraphProto with its inputs bound to `values` (in order) and the names of the scopes around it visible;
`label` names the subgraph (and the iteration) in diagnostics.

`OPS` maps the op names to functions of (inputs, attributes, opset) -> outputs, as the importer's op table does.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from egraph_compiler.frontend.onnx.values import DTYPES, NP, NotSupportedError, Value, axis_of, ints, known, optional, tensor_of
from egraph_compiler.frontend.tensor import Tensor

RunGraph = Callable[[Any, list[Value], str], list[Value]]

MAX_UNROLL = 4096  # a Loop of more steps is a diagnostic (it is unrolled at import)


# ---- values ------------------------------------------------------------------------------------------------


def _is_tensor(v: Value) -> bool:
    """A tensor value: a known array or a Tensor (not a sequence, not an empty optional)."""
    return v is not None and not isinstance(v, list)


def _seq(v: Value, what: str) -> list[Value]:
    if not isinstance(v, list):
        raise NotSupportedError(f"its {what} is not a sequence")
    return v


def _dtype_name(v: Value) -> str:
    return v.dtype.name if isinstance(v, Tensor) else np.asarray(v).dtype.name


def _one(v: Value, what: str) -> Any:
    """The single element of a known value."""
    a = known(v, what)
    if a.size != 1:
        raise ValueError(f"its {what} has {a.size} elements (one expected)")
    return a.reshape(-1)[0]


def _flag(v: Value, what: str) -> bool | Tensor:
    """A condition: a Python bool when known at import, else a 0-d bool Tensor."""
    if isinstance(v, Tensor):
        if math.prod(v.shape) != 1:
            raise ValueError(f"its {what} has {math.prod(v.shape)} elements (one expected)")
        return v.reshape(()).cast("bool")
    return bool(_one(v, what))


def _select(cond: Tensor, a: Value, b: Value, what: str) -> Value:
    """`a` where the runtime condition holds, else `b`, through sequences and optionals alike."""
    if a is None and b is None:
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [_select(cond, x, y, f"{what} element {i}") for i, (x, y) in enumerate(zip(a, b))]
    if not (_is_tensor(a) and _is_tensor(b)):
        raise NotSupportedError(f"{what}: a sequence or optional of a different length or kind in the two cases")
    if tuple(a.shape) != tuple(b.shape) or _dtype_name(a) != _dtype_name(b):
        raise NotSupportedError(
            f"{what}: {_dtype_name(a)}{list(a.shape)} in one case, {_dtype_name(b)}{list(b.shape)} in the other "
            "(a runtime selection needs one shape and dtype)"
        )
    if not isinstance(a, Tensor) and not isinstance(b, Tensor) and np.array_equal(a, b, equal_nan=True):
        return a
    return cond.where(tensor_of(a), tensor_of(b))


def _stack(vals: list[Value], axis: int, what: str) -> Value:
    """Per-step tensors stacked along a new axis."""
    if not all(_is_tensor(v) for v in vals):
        raise NotSupportedError(f"{what}: a sequence or optional value (a scan output must be a tensor)")
    shapes = {tuple(v.shape) for v in vals}
    if len(shapes) > 1:
        raise NotSupportedError(f"{what}: its shape changes from step to step ({sorted(shapes)})")
    a = axis_of(axis, len(vals[0].shape) + 1)
    if all(not isinstance(v, Tensor) for v in vals):
        return np.stack([np.asarray(v) for v in vals], axis=a)
    ts = [tensor_of(v) for v in vals]
    return ts[0].stack(*ts[1:], dim=a) if len(ts) > 1 else ts[0].unsqueeze(a)


def _index(v: Value, axis: int, i: int) -> Value:
    """v[..., i, ...] along `axis` (the axis dropped)."""
    if not isinstance(v, Tensor):
        return np.take(np.asarray(v), i, axis=axis)
    part = v.shrink(tuple((i, i + 1) if d == axis else None for d in range(v.ndim)))
    return part.reshape(*[s for d, s in enumerate(v.shape) if d != axis]) if v.ndim > 1 else part.reshape(())


def _span(v: Value, axis: int, lo: int, hi: int) -> Value:
    if not isinstance(v, Tensor):
        return np.asarray(v)[tuple(slice(lo, hi) if d == axis else slice(None) for d in range(np.ndim(v)))]
    if hi == lo:  # an empty part has one value: known here
        return np.zeros([0 if d == axis else s for d, s in enumerate(v.shape)], NP.get(v.dtype.name, np.float32))
    return v.shrink(tuple((lo, hi) if d == axis else None for d in range(v.ndim)))


def _empty_scan_outputs(body: Any, first: int, what: str) -> list[Value]:
    """The scan outputs of a loop that runs no step, (0, *element shape): from the body's declared outputs."""
    outs: list[Value] = []
    for vo in list(body.output)[first:]:
        tt = vo.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if vo.type.WhichOneof("value") != "tensor_type" or not tt.HasField("shape") or None in dims:
            raise NotSupportedError(f"{what} runs no step, and its scan output {vo.name!r} declares no fixed shape")
        dt = DTYPES.get(tt.elem_type)
        if dt is None or dt not in NP:
            raise NotSupportedError(f"{what} runs no step, and its scan output {vo.name!r} has element type {tt.elem_type}")
        fixed: list[int] = [d for d in dims if d is not None]  # every one of them (checked above)
        outs.append(np.zeros([0, *fixed], NP[dt]))
    return outs


# ---- control flow ------------------------------------------------------------------------------------------


def _if(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    run: RunGraph = at["_run_graph"]
    cond = _flag(ins[0], "condition")
    if not isinstance(cond, Tensor):
        branch = "then_branch" if cond else "else_branch"
        return run(at[branch], [], branch)
    then, other = run(at["then_branch"], [], "then_branch"), run(at["else_branch"], [], "else_branch")
    if len(then) != len(other):
        raise ValueError(f"then_branch gives {len(then)} outputs, else_branch {len(other)}")
    try:
        return [_select(cond, a, b, f"output {i}") for i, (a, b) in enumerate(zip(then, other))]
    except NotSupportedError as e:
        raise NotSupportedError(
            f"If on a runtime condition whose branches differ in shape ({e}): its condition must be known at import "
            "(a constant or a static= input)"
        ) from None


def _loop(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    run: RunGraph = at["_run_graph"]
    body = at["body"]
    ins = ins + [None] * (2 - len(ins))
    m, cond, carried = ins[0], ins[1], list(ins[2:])
    n_scan = len(body.output) - 1 - len(carried)
    if n_scan < 0:
        raise ValueError(f"the body gives {len(body.output)} outputs for {len(carried)} loop-carried values")
    trips = None if m is None else int(_one(m, "trip count M"))
    alive: bool | Tensor = True if cond is None else _flag(cond, "condition")
    if trips is None and cond is None:
        raise NotSupportedError("a Loop without a trip count or a condition (it never ends)")
    scans: list[list[Value]] = [[] for _ in range(n_scan)]
    step = 0
    while alive is not False and (trips is None or step < trips):
        if isinstance(alive, Tensor) and (trips is None or trips > MAX_UNROLL):
            raise NotSupportedError(
                f"a Loop whose condition is computed at run time needs a trip count of at most {MAX_UNROLL} known at "
                "import (its condition must be known at import at each step otherwise)"
            )
        if isinstance(alive, Tensor) and n_scan:
            raise NotSupportedError(
                "a Loop whose condition is computed at run time (it may stop early) with scan outputs: their length "
                "would be known only at run time (its condition must be known at import at each step)"
            )
        if step >= MAX_UNROLL:
            raise NotSupportedError(f"a Loop of more than {MAX_UNROLL} steps (it is unrolled at import)")
        label = f"body, iteration {step}"
        flag = alive if isinstance(alive, Tensor) else np.asarray(alive)
        outs = run(body, [np.asarray(step, np.int64), flag, *carried], label)
        new_cond, new = outs[0], outs[1 : 1 + len(carried)]
        if isinstance(alive, Tensor):  # a runtime stop: the carried values keep their values once it is false
            try:
                carried = [_select(alive, v, old, f"loop-carried value {j}") for j, (v, old) in enumerate(zip(new, carried))]
            except NotSupportedError as e:
                raise NotSupportedError(f"a Loop on a runtime condition whose carried values change ({e})") from None
            nxt = _flag(new_cond, f"condition ({label})")
            alive = (alive & nxt) if isinstance(nxt, Tensor) else (alive if nxt else False)
        else:
            carried = list(new)
            for s, v in zip(scans, outs[1 + len(carried) :]):
                s.append(v)
            alive = _flag(new_cond, f"condition ({label})")
        step += 1
    if step == 0 and n_scan:
        stacked = _empty_scan_outputs(body, 1 + len(carried), "the Loop")
    else:
        stacked = [_stack(s, 0, f"scan output {k}") for k, s in enumerate(scans)]
    return [*carried, *stacked]


def _scan_steps(
    run: RunGraph,
    body: Any,
    states: list[Value],
    xs: list[Value],
    in_axes: list[int],
    in_dirs: list[int],
    out_axes: list[int],
    out_dirs: list[int],
    label: str,
) -> list[Value]:
    """Scan unrolled: the final states, then the scan outputs stacked (reversed where their direction is 1)."""
    n_out = len(body.output) - len(states)
    if n_out < 0:
        raise ValueError(f"the body gives {len(body.output)} outputs for {len(states)} state variables")
    if len(in_axes) != len(xs) or len(in_dirs) != len(xs) or len(out_axes) != n_out or len(out_dirs) != n_out:
        raise ValueError("scan_input_axes/directions and scan_output_axes/directions must have one entry per scan value")
    if not all(_is_tensor(x) for x in xs) or not all(_is_tensor(s) for s in states):
        raise NotSupportedError("a sequence or optional Scan input")
    axes = [axis_of(a, len(x.shape)) for a, x in zip(in_axes, xs)]
    lengths = {x.shape[a] for x, a in zip(xs, axes)}
    if len(lengths) != 1:
        raise ValueError(f"the scan inputs' sequence lengths differ ({sorted(lengths)})")
    n = lengths.pop()
    outs: list[list[Value]] = [[] for _ in range(n_out)]
    for t in range(n):
        elems = [_index(x, a, n - 1 - t if d else t) for x, a, d in zip(xs, axes, in_dirs)]
        got = run(body, [*states, *elems], f"{label}, step {t}")
        states = list(got[: len(states)])
        for o, v in zip(outs, got[len(states) :]):
            o.append(v)
    if n == 0:
        return [*states, *_empty_scan_outputs(body, len(states), "the Scan")]
    stacked = [_stack(o[::-1] if d else o, a, f"scan output {k}") for k, (o, a, d) in enumerate(zip(outs, out_axes, out_dirs))]
    return [*states, *stacked]


def _scan(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    run: RunGraph = at["_run_graph"]
    body, n_in = at["body"], int(at["num_scan_inputs"])
    if opset < 9:
        return _scan8(ins, at, run, body, n_in)
    states, xs = list(ins[: len(ins) - n_in]), list(ins[len(ins) - n_in :])
    n_out = len(body.output) - len(states)
    return _scan_steps(
        run,
        body,
        states,
        xs,
        list(at.get("scan_input_axes", [0] * n_in)),
        list(at.get("scan_input_directions", [0] * n_in)),
        list(at.get("scan_output_axes", [0] * n_out)),
        list(at.get("scan_output_directions", [0] * n_out)),
        "body",
    )


def _scan8(ins: list[Value], at: dict[str, Any], run: RunGraph, body: Any, n_in: int) -> list[Value]:
    """Scan-8: every value has a batch axis first and the scan inputs their sequence axis next; each batch entry
    is scanned on its own."""
    lens, rest = ins[0], list(ins[1:])
    states, xs = rest[: len(rest) - n_in], rest[len(rest) - n_in :]
    if not xs or not all(_is_tensor(v) for v in [*states, *xs]):
        raise ValueError("Scan-8 needs at least one tensor scan input")
    batch, seq = xs[0].shape[0], xs[0].shape[1]
    if lens is not None and any(n != seq for n in ints(lens, "sequence_lens")):
        raise NotSupportedError(f"sequence_lens shorter than the sequence ({seq}): the scan would stop early")
    n_out = len(body.output) - len(states)
    dirs = list(at.get("directions", [0] * n_in))
    per = [
        _scan_steps(
            run,
            body,
            [_index(s, 0, b) for s in states],
            [_index(x, 0, b) for x in xs],
            [0] * n_in,
            dirs,
            [0] * n_out,
            [0] * n_out,
            f"body, batch entry {b}",
        )
        for b in range(batch)
    ]
    return [_stack([p[k] for p in per], 0, f"output {k}") for k in range(len(body.output))]


def _sequence_map(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    run: RunGraph = at["_run_graph"]
    body = at["body"]
    n = len(_seq(ins[0], "first input"))
    for k, v in enumerate(ins[1:], 1):
        if isinstance(v, list) and len(v) != n:
            raise ValueError(f"input {k} is a sequence of {len(v)} elements, the first input of {n}")
    per = [run(body, [v[i] if isinstance(v, list) else v for v in ins], f"body, element {i}") for i in range(n)]
    return [[p[k] for p in per] for k in range(len(body.output))]


# ---- sequences and optionals ---------------------------------------------------------------------------------


def _position(v: Value, n: int, default: int, upto: int) -> int:
    """A known position in a sequence of n elements, in [-n, upto) (negative ones counting from the end)."""
    p = default if v is None else int(_one(v, "position"))
    if not -n <= p < upto:
        raise IndexError(f"position {p} outside a sequence of {n} elements")
    return p + n if p < 0 else p


def _sequence_construct(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    if not all(_is_tensor(v) for v in ins):
        raise NotSupportedError("a sequence of non-tensors")
    return [list(ins)]


def _sequence_at(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    seq = _seq(ins[0], "input")
    return [seq[_position(ins[1], len(seq), 0, len(seq))]]


def _sequence_insert(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    seq = _seq(ins[0], "input")
    if not _is_tensor(ins[1]):
        raise NotSupportedError("inserting a non-tensor")
    p = _position(optional(ins, 2), len(seq), len(seq), len(seq) + 1)
    return [[*seq[:p], ins[1], *seq[p:]]]


def _sequence_erase(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    seq = _seq(ins[0], "input")
    p = _position(optional(ins, 1), len(seq), -1, len(seq))
    return [[*seq[:p], *seq[p + 1 :]]]


def _split_to_sequence(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    x = ins[0]
    if not _is_tensor(x):
        raise NotSupportedError("splitting a non-tensor")
    a = axis_of(at.get("axis", 0), len(x.shape))
    n = x.shape[a]
    split = optional(ins, 1)
    if split is None:
        parts = [_index(x, a, i) if not at.get("keepdims", 1) else _span(x, a, i, i + 1) for i in range(n)]
        return [parts]
    given = known(split, "split")
    if given.ndim == 0:
        each = int(given)
        if each <= 0:
            raise ValueError(f"split size {each}")
        sizes = [min(each, n - i) for i in range(0, n, each)]
    else:
        sizes = [int(s) for s in given]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ValueError(f"split sizes {sizes} do not add up to the axis ({n})")
    starts = [int(v) for v in np.cumsum([0, *sizes])]
    return [[_span(x, a, lo, hi) for lo, hi in itertools.pairwise(starts)]]


def _concat_from_sequence(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    seq = _seq(ins[0], "input")
    if not seq:
        raise ValueError("concatenating an empty sequence")
    if not all(_is_tensor(v) for v in seq):
        raise NotSupportedError("a sequence of non-tensors")
    axis = int(at["axis"])
    if at.get("new_axis", 0):
        return [_stack(seq, axis, "ConcatFromSequence")]
    nd = len(seq[0].shape)
    if nd == 0:
        raise ValueError("concatenating 0-d tensors without new_axis")
    a = axis_of(axis, nd)
    vals = [v for v in seq if math.prod(v.shape) > 0] or [seq[0]]
    if all(not isinstance(v, Tensor) for v in vals):
        return [np.concatenate([np.asarray(v) for v in seq], axis=a)]
    ts = [tensor_of(v) for v in vals]
    return [ts[0].cat(*ts[1:], dim=a) if len(ts) > 1 else ts[0]]


def _optional_get_element(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    if not ins or ins[0] is None:
        raise ValueError("the optional is empty")
    return [ins[0]]


OPS: dict[str, Callable[..., list[Value]]] = {
    "If": _if,
    "Loop": _loop,
    "Scan": _scan,
    "SequenceMap": _sequence_map,
    "SequenceConstruct": _sequence_construct,
    "SequenceEmpty": lambda ins, at, opset: [[]],
    "SequenceAt": _sequence_at,
    "SequenceInsert": _sequence_insert,
    "SequenceErase": _sequence_erase,
    "SequenceLength": lambda ins, at, opset: [np.asarray(len(_seq(ins[0], "input")), np.int64)],
    "SplitToSequence": _split_to_sequence,
    "ConcatFromSequence": _concat_from_sequence,
    "Optional": lambda ins, at, opset: [ins[0] if ins else None],
    "OptionalHasElement": lambda ins, at, opset: [np.asarray(bool(ins) and ins[0] is not None)],
    "OptionalGetElement": _optional_get_element,
}
