"""ONNX's recurrent ops (RNN, GRU, LSTM) for the ONNX import, unrolled over the (static) sequence length with the
Tensor API: the input projection of every step is one matmul, then each step adds the recurrent projection of the
state and applies the gates.

What the ONNX spec leaves open follows onnxruntime: `activation_alpha`/`activation_beta` are consumed in order by the
activations that take them (Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu), forward direction
first; `clip` bounds every gate's pre-activation (peephole and biases added) but not the cell state before h;
`input_forget=1` makes the forget gate 1 - i. `sequence_lens` (known, or a runtime Tensor) masks the steps past each
batch entry's length: its state is kept there and Y is zero; a reverse pass starts at the entry's last step.

`OPS` maps the op names to functions of (inputs, attributes, opset) -> outputs, as the importer's op table does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from egraph_compiler.frontend.onnx.values import NotSupportedError, Value, given, known, optional, tensor_of, text
from egraph_compiler.frontend.tensor import Tensor

Activation = Callable[[Tensor], Tensor]

# name (lower case) -> (takes alpha, takes beta, default alpha, default beta, function of (x, alpha, beta))
_ACTIVATIONS: dict[str, tuple[bool, bool, float, float, Callable[[Tensor, float, float], Tensor]]] = {
    "relu": (False, False, 0.0, 0.0, lambda x, a, b: x.relu()),
    "tanh": (False, False, 0.0, 0.0, lambda x, a, b: x.tanh()),
    "sigmoid": (False, False, 0.0, 0.0, lambda x, a, b: x.sigmoid()),
    "affine": (True, True, 1.0, 0.0, lambda x, a, b: x * a + b),
    "leakyrelu": (True, False, 0.01, 0.0, lambda x, a, b: x.leaky_relu(a)),
    "thresholdedrelu": (True, False, 1.0, 0.0, lambda x, a, b: (x > a).where(x, 0.0)),
    "scaledtanh": (True, True, 1.0, 1.0, lambda x, a, b: (x * b).tanh() * a),
    "hardsigmoid": (True, True, 0.2, 0.5, lambda x, a, b: x.hardsigmoid(a, b)),
    "elu": (True, False, 1.0, 0.0, lambda x, a, b: x.elu(a)),
    "softsign": (False, False, 0.0, 0.0, lambda x, a, b: x.softsign()),
    "softplus": (False, False, 0.0, 0.0, lambda x, a, b: x.softplus()),
}
_NAMES = "Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus"


def _bound(fn: Callable[[Tensor, float, float], Tensor], a: float, b: float) -> Activation:
    """fn with its alpha and beta bound."""
    return lambda x: fn(x, a, b)


def _activations(at: dict[str, Any], defaults: list[str], directions: int) -> list[list[Activation]]:
    """The activation functions of each direction (len(defaults) of them each), alphas and betas bound."""
    per = len(defaults)
    given = at.get("activations")
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in given] if given else defaults * directions
    if len(names) == per and directions == 2:  # one direction's list: both use it
        names = names * 2
    if len(names) != per * directions:
        raise ValueError(f"{len(names)} activations for {directions} direction(s) of {per} each")
    alphas, betas = list(at.get("activation_alpha", [])), list(at.get("activation_beta", []))
    fns: list[Activation] = []
    for name in names:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise NotSupportedError(f"the activation {name!r} (supported: {_NAMES})")
        takes_a, takes_b, a, b, fn = entry
        if takes_a and alphas:
            a = float(alphas.pop(0))
        if takes_b and betas:
            b = float(betas.pop(0))
        fns.append(_bound(fn, a, b))
    return [fns[d * per : (d + 1) * per] for d in range(directions)]


@dataclass
class _Setup:
    """What every recurrent op reads: the input as (seq, batch, input), the directions' parameters, the masks."""

    x: Tensor
    seq: int
    batch: int
    hidden: int
    directions: int
    acts: list[list[Activation]]
    clip: float | None
    masks: list[Tensor | None] | None  # per step: (batch, 1) bool, True inside the entry's sequence; None: all inside
    layout: int
    direction: str

    def clipped(self, v: Tensor) -> Tensor:
        return v if self.clip is None else v.clip(-self.clip, self.clip)

    def order(self, d: int) -> list[int]:
        """The steps direction d takes: the last first for a reverse pass."""
        reverse = self.direction == "reverse" or d == 1
        return list(range(self.seq - 1, -1, -1)) if reverse else list(range(self.seq))


def _setup(ins: list[Value], at: dict[str, Any], gates: int, defaults: list[str], initial: int) -> _Setup:
    """Inputs checked and read; `initial` is how many initial-state inputs follow sequence_lens."""
    layout = int(at.get("layout", 0))
    if layout not in (0, 1):
        raise NotSupportedError(f"layout={layout} (0 or 1)")
    direction = text(at, "direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise NotSupportedError(f"direction {direction!r} (forward, reverse or bidirectional)")
    directions = 2 if direction == "bidirectional" else 1
    x = tensor_of(ins[0])
    if x.ndim != 3:
        raise ValueError(f"X has rank {x.ndim}, not 3")
    if layout == 1:
        x = x.permute(1, 0, 2)
    seq, batch, size = x.shape
    w, r = ins[1], ins[2]
    hidden = int(r.shape[-1])
    if "hidden_size" in at and int(at["hidden_size"]) != hidden:
        raise ValueError(f"hidden_size={at['hidden_size']} but R has shape {tuple(r.shape)}")
    want: dict[str, tuple[Value, tuple[int, ...]]] = {
        "W": (w, (directions, gates * hidden, size)),
        "R": (r, (directions, gates * hidden, hidden)),
    }
    if given(ins, 3):
        want["B"] = (ins[3], (directions, 2 * gates * hidden))
    state = (batch, directions, hidden) if layout == 1 else (directions, batch, hidden)
    for k, what in list(enumerate(("initial_h", "initial_c"), start=5))[:initial]:
        if given(ins, k):
            want[what] = (ins[k], state)
    for what, (v, shape) in want.items():
        if tuple(v.shape) != shape:
            raise ValueError(f"{what} has shape {tuple(v.shape)}, not {shape} ({direction}, hidden_size {hidden})")
    clip = at.get("clip")
    if clip is not None and not clip > 0:
        raise ValueError(f"clip={clip} (a positive threshold)")
    return _Setup(
        x=x,
        seq=seq,
        batch=batch,
        hidden=hidden,
        directions=directions,
        acts=_activations(at, defaults, directions),
        clip=None if clip is None else float(clip),
        masks=_masks(optional(ins, 4), seq, batch),
        layout=layout,
        direction=direction,
    )


def _masks(lens: Value, seq: int, batch: int) -> list[Tensor | None] | None:
    """Per step, which batch entries it is inside (None for a step that every entry has); None where every
    entry has the full length."""
    if lens is None:
        return None
    if tuple(lens.shape) != (batch,):
        raise ValueError(f"sequence_lens has shape {tuple(lens.shape)}, not ({batch},)")
    if isinstance(lens, Tensor):
        if lens.dtype.is_float:
            raise ValueError(f"sequence_lens of dtype {lens.dtype.name}")
        col = lens.reshape(batch, 1)
        return [col > t for t in range(seq)]  # type: ignore[misc]
    n = known(lens, "sequence_lens").astype(np.int64)
    if ((n < 0) | (n > seq)).any():
        raise ValueError(f"sequence_lens {n.tolist()} outside [0, {seq}]")
    if (n == seq).all():
        return None
    return [None if (n > t).all() else tensor_of((n > t).reshape(batch, 1)) for t in range(seq)]


def _direction(v: Value, d: int) -> Tensor:
    """Direction d of a (directions, ...) parameter."""
    if not isinstance(v, Tensor):
        return tensor_of(np.ascontiguousarray(np.asarray(v)[d]))
    return v.shrink(((d, d + 1), *[None] * (v.ndim - 1))).reshape(*v.shape[1:])


def _transposed(v: Value, d: int) -> Tensor:
    """Direction d of a (directions, rows, cols) weight, as (cols, rows): the right operand of x @ W^T."""
    if not isinstance(v, Tensor):
        return tensor_of(np.ascontiguousarray(np.asarray(v)[d].T))
    return _direction(v, d).T


def _cols(t: Tensor, lo: int, hi: int) -> Tensor:
    """Columns [lo, hi) of the last axis."""
    return t.shrink((*[None] * (t.ndim - 1), (lo, hi)))


def _initial(ins: list[Value], k: int, s: _Setup, d: int, dtype: Any) -> Tensor:
    """Direction d's initial state (input k), zeros where omitted."""
    v = optional(ins, k)
    if v is None:
        return Tensor.zeros(s.batch, s.hidden, dtype=dtype)
    if s.layout == 1:
        v = tensor_of(v).permute(1, 0, 2)
    return _direction(v, d)


def _projected(s: _Setup, w: Value, d: int, bias: Tensor | None) -> Tensor:
    """Every step's input projection (seq, batch, gates * hidden), plus `bias`."""
    x2 = s.x.reshape(s.seq * s.batch, s.x.shape[2])
    xw = x2 @ _transposed(w, d)
    if bias is not None:
        xw = xw + bias
    return xw.reshape(s.seq, s.batch, xw.shape[-1])


def _step_of(xw: Tensor, t: int) -> Tensor:
    return xw.shrink(((t, t + 1), None, None)).reshape(xw.shape[1], xw.shape[2])


def _keep(s: _Setup, t: int, new: Tensor, old: Tensor) -> Tensor:
    """The new state where step t is inside the entry's sequence, else the old one."""
    mask = None if s.masks is None else s.masks[t]
    return new if mask is None else mask.where(new, old)


def _outputs(s: _Setup, ys: list[list[Tensor]], finals: list[list[Tensor]], dtype: Any) -> list[Value]:
    """Y (seq, directions, batch, hidden) from each direction's per-step outputs (in time order), and each final
    state stacked over the directions (directions, batch, hidden); the layout=1 forms where asked for."""
    per_dir = [y[0].stack(*y[1:], dim=0) if len(y) > 1 else y[0].unsqueeze(0) for y in ys]
    y = per_dir[0].stack(*per_dir[1:], dim=1) if len(per_dir) > 1 else per_dir[0].unsqueeze(1)
    outs = [y.cast(dtype)]
    for k in range(len(finals[0])):
        parts = [f[k] for f in finals]
        h = parts[0].stack(*parts[1:], dim=0) if len(parts) > 1 else parts[0].unsqueeze(0)
        outs.append(h.cast(dtype))
    if s.layout == 1:
        outs = [outs[0].permute(2, 0, 1, 3), *[o.permute(1, 0, 2) for o in outs[1:]]]
    return outs


def _bias(ins: list[Value], d: int, n: int) -> tuple[Tensor, Tensor] | None:
    """Direction d's (Wb, Rb), n values each; None where B is omitted."""
    if len(ins) <= 3 or ins[3] is None:
        return None
    b = _direction(ins[3], d)
    return _cols(b, 0, n), _cols(b, n, 2 * n)


def _zero_output(s: _Setup, t: int, h: Tensor) -> Tensor:
    """Y at step t: the state, zero past the entry's length."""
    mask = None if s.masks is None else s.masks[t]
    return h if mask is None else mask.where(h, 0.0)


def _rnn(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb)."""
    s = _setup(ins, at, 1, ["Tanh"], 1)
    dtype, n = s.x.dtype, s.hidden
    ys, finals = [], []
    for d in range(s.directions):
        (f,) = s.acts[d]
        bias = _bias(ins, d, n)
        xw = _projected(s, ins[1], d, None if bias is None else bias[0] + bias[1])
        rt = _transposed(ins[2], d)
        h = _initial(ins, 5, s, d, dtype)
        y: dict[int, Tensor] = {}
        for t in s.order(d):
            new = f(s.clipped(_step_of(xw, t) + h @ rt))
            y[t] = _zero_output(s, t, new)
            h = _keep(s, t, new, h)
        ys.append([y[t] for t in range(s.seq)])
        finals.append([h])
    return _outputs(s, ys, finals, dtype)


def _gru(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """zt = f(Xt Wz^T + Ht-1 Rz^T + Wbz + Rbz), rt likewise, ht = g(Xt Wh^T + (rt * Ht-1) Rh^T + Rbh + Wbh)
    (linear_before_reset=1: g(Xt Wh^T + rt * (Ht-1 Rh^T + Rbh) + Wbh)), Ht = (1 - zt) * ht + zt * Ht-1."""
    s = _setup(ins, at, 3, ["Sigmoid", "Tanh"], 1)
    dtype, n = s.x.dtype, s.hidden
    linear = bool(at.get("linear_before_reset", 0))
    ys, finals = [], []
    for d in range(s.directions):
        f, g = s.acts[d]
        bias = _bias(ins, d, 3 * n)
        rbh = None
        if bias is None:
            xw = _projected(s, ins[1], d, None)
        else:
            wb, rb = bias
            rbh = _cols(rb, 2 * n, 3 * n)
            if linear:  # Rbh goes inside the reset: add only the z and r parts of Rb here
                xw = _projected(s, ins[1], d, wb + _cols(rb, 0, 2 * n).cat(Tensor.zeros(n, dtype=rb.dtype)))
            else:
                xw = _projected(s, ins[1], d, wb + rb)
        rt = _transposed(ins[2], d)  # (hidden, 3 hidden): z, r, h columns
        r_zr, r_h = _cols(rt, 0, 2 * n), _cols(rt, 2 * n, 3 * n)
        h = _initial(ins, 5, s, d, dtype)
        y: dict[int, Tensor] = {}
        for t in s.order(d):
            xt = _step_of(xw, t)
            zr = _cols(xt, 0, 2 * n) + h @ r_zr
            z = f(s.clipped(_cols(zr, 0, n)))
            r = f(s.clipped(_cols(zr, n, 2 * n)))
            if linear:
                hr = h @ r_h
                pre = _cols(xt, 2 * n, 3 * n) + r * (hr if rbh is None else hr + rbh)
            else:
                pre = _cols(xt, 2 * n, 3 * n) + (r * h) @ r_h
            cand = g(s.clipped(pre))
            new = (1.0 - z) * cand + z * h
            y[t] = _zero_output(s, t, new)
            h = _keep(s, t, new, h)
        ys.append([y[t] for t in range(s.seq)])
        finals.append([h])
    return _outputs(s, ys, finals, dtype)


def _lstm(ins: list[Value], at: dict[str, Any], opset: int) -> list[Value]:
    """it = f(Xt Wi^T + Ht-1 Ri^T + Pi * Ct-1 + Wbi + Rbi), ft likewise with Pf (1 - it with input_forget=1),
    ct = g(Xt Wc^T + Ht-1 Rc^T + Wbc + Rbc), Ct = ft * Ct-1 + it * ct, ot = f(... + Po * Ct), Ht = ot * h(Ct);
    the gates are stacked i, o, f, c in W, R and B, and i, o, f in P."""
    s = _setup(ins, at, 4, ["Sigmoid", "Tanh", "Tanh"], 2)
    dtype, n = s.x.dtype, s.hidden
    p_in = optional(ins, 7)
    if p_in is not None and tuple(p_in.shape) != (s.directions, 3 * n):
        raise ValueError(f"P has shape {tuple(p_in.shape)}, not {(s.directions, 3 * n)}")
    input_forget = bool(at.get("input_forget", 0))
    ys, finals = [], []
    for d in range(s.directions):
        f, g, hf = s.acts[d]
        bias = _bias(ins, d, 4 * n)
        xw = _projected(s, ins[1], d, None if bias is None else bias[0] + bias[1])
        rt = _transposed(ins[2], d)
        p = None if p_in is None else _direction(p_in, d)
        pi, po, pf = (None, None, None) if p is None else (_cols(p, 0, n), _cols(p, n, 2 * n), _cols(p, 2 * n, 3 * n))
        h = _initial(ins, 5, s, d, dtype)
        c = _initial(ins, 6, s, d, dtype)
        y: dict[int, Tensor] = {}
        for t in s.order(d):
            gates = _step_of(xw, t) + h @ rt
            i_pre, o_pre, f_pre, c_pre = (_cols(gates, k * n, (k + 1) * n) for k in range(4))
            i = f(s.clipped(i_pre if pi is None else i_pre + pi * c))
            if input_forget:
                fg = 1.0 - i
            else:
                fg = f(s.clipped(f_pre if pf is None else f_pre + pf * c))
            cell = fg * c + i * g(s.clipped(c_pre))
            o = f(s.clipped(o_pre if po is None else o_pre + po * cell))
            new = o * hf(cell)
            y[t] = _zero_output(s, t, new)
            h = _keep(s, t, new, h)
            c = _keep(s, t, cell, c)
        ys.append([y[t] for t in range(s.seq)])
        finals.append([h, c])
    return _outputs(s, ys, finals, dtype)


OPS: dict[str, Callable[[list[Value], dict[str, Any], int], list[Value]]] = {
    "RNN": _rnn,
    "GRU": _gru,
    "LSTM": _lstm,
}
