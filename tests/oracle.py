"""The tinygrad symbolic oracle (../shared/oracle): case loading, UOp building, evaluation, sizes."""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path
from typing import Any

from egraph_compiler import UOp
from egraph_compiler.ir.dtypes import DType, dtypes
from egraph_compiler.ir.ops import Ops
from egraph_compiler.ir.uop import toposort

ORACLE_CANDIDATES = [
    Path(__file__).resolve().parent.parent.parent / "shared" / "oracle" / "tinygrad_symbolic_public.jsonl",
    Path(__file__).resolve().parent / "data" / "tinygrad_symbolic_public.jsonl",
]

DTYPES = {
    "dtypes.weakint": dtypes.index,
    "dtypes.bool": dtypes.bool,
    "dtypes.int": dtypes.int32,
    "dtypes.uint": dtypes.uint32,
    "dtypes.float": dtypes.float32,
    "dtypes.long": dtypes.int64,
    "dtypes.weakfloat": dtypes.float32,
}
BINARY = {
    "ADD": Ops.ADD,
    "MUL": Ops.MUL,
    "FLOORDIV": Ops.IDIV,
    "FLOORMOD": Ops.MOD,
    "CMPLT": Ops.CMPLT,
    "CMPNE": Ops.CMPNE,
    "MAX": Ops.MAX,
    "XOR": Ops.XOR,
    "AND": Ops.AND,
    "OR": Ops.OR,
    "SHL": Ops.SHL,
    "SHR": Ops.SHR,
}


def oracle_path() -> Path | None:
    return next((p for p in ORACLE_CANDIDATES if p.is_file()), None)


def load_cases() -> list[dict[str, Any]]:
    p = oracle_path()
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p else []


def _dt(node: dict[str, Any]) -> DType:
    return DTYPES[node["dtype"]]


def build(node: dict[str, Any], want: DType | None = None) -> UOp:
    """Build the UOp for an oracle expression; weakint nodes adopt the dtype of the context (`want`)."""
    dt = _dt(node)
    if dt is dtypes.index and want is not None and want.is_int:
        dt = want
    op = node["op"]
    if op == "VAR":
        return UOp.variable(node["name"], int(node["min"]), int(node["max"]), dt)
    if op == "CONST":
        return UOp.const(node["value"], dt)
    src = node["src"]
    if op in BINARY:
        if BINARY[op] in (Ops.CMPLT, Ops.CMPNE):
            sub = [_dt(s) for s in src]
            operand = next((d for d in sub if d is not dtypes.index), dtypes.index)
            if want is not None and operand is dtypes.index and want.is_int and want is not dtypes.bool:
                operand = want
            a, b = build(src[0], operand), build(src[1], operand)
        else:
            a, b = build(src[0], dt), build(src[1], dt)
        return UOp.build(BINARY[op], (a, b))
    if op == "WHERE":
        return UOp.build(Ops.WHERE, (build(src[0], dtypes.bool), build(src[1], dt), build(src[2], dt)))
    if op == "CAST":
        inner = build(src[0])
        return UOp(Ops.CAST, dt, (inner,))
    if op == "TRUNC":
        return UOp.build(Ops.TRUNC, (build(src[0], dt),))
    if op == "RECIPROCAL":
        return UOp.build(Ops.RECIP, (build(src[0], dt),))
    raise ValueError(f"unknown oracle op {op}")


def assignments(u: UOp, n_random: int = 300, seed: int = 0) -> list[dict[str, int]]:
    """All assignments when few, else corners plus random points, of the expression's variables."""
    vs = sorted({(v.arg[0], v.arg[1], v.arg[2]) for v in toposort([u]) if v.op is Ops.DEFINE_VAR})
    ranges = [range(lo, hi + 1) for _, lo, hi in vs]
    total = 1
    for r in ranges:
        total *= len(r)
    if total <= 4000:
        return [dict(zip([v[0] for v in vs], p)) for p in itertools.product(*ranges)]
    rng = random.Random(seed)
    pts = [dict(zip([v[0] for v in vs], p)) for p in itertools.product(*[(r[0], r[-1]) for r in ranges])][:256]
    pts += [{name: rng.randint(lo, hi) for name, lo, hi in vs} for _ in range(n_random)]
    return pts


def divides_by_zero(u: UOp, env: dict[str, int]) -> bool:
    from egraph_compiler.ir.interpret import evaluate

    divisors = [n.src[1] for n in toposort([u]) if n.op in (Ops.IDIV, Ops.MOD)]
    return any(int(evaluate(d, var_values=env)) == 0 for d in divisors)


def value(u: UOp, env: dict[str, int]) -> int | float:
    from egraph_compiler.ir.interpret import evaluate

    return evaluate(u, var_values=env).item()


def tree_size(u: UOp) -> int:
    """Nodes of the expression written as a tree (no sharing), the way an infix string counts them."""
    sizes: dict[UOp, int] = {}
    for n in toposort([u]):
        sizes[n] = 1 + sum(sizes[s] for s in n.src)
    return sizes[u]


_TOKEN = re.compile(
    r"\.where\(|\.maximum\(|\((?:int|bool|float|uint|long|unsigned int)\)|//|<<|>>|!=|<=|>=|==|"
    r"[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d+)?|[-+*%<>^&|(),!]"
)


def expected_size(s: str) -> int:
    """Node count of tinygrad's printed result (operators, calls and casts are nodes; names and numbers leaves)."""
    n = 0
    prev = None
    for t in _TOKEN.findall(s):
        if t in ("(", ")", ","):
            prev = t
            continue
        if t == "-" and (prev is None or prev in ("(", ",") or (prev in "+*%<>^&|" or prev in ("//", "!=", "<<", ">>"))):
            prev = "neg"
            continue  # sign of a literal
        if t in ("if", "else", "not", "and", "or"):
            n += 1 if t in ("if", "not", "and", "or") else 0
        else:
            n += 1
        prev = t
    return n


# ---- random cases from tinygrad ----------------------------------------------------------------------------------
# The held-out half of the oracle is random index expressions with tinygrad's simplified results. These build such
# cases the way tinygrad's test/external/fuzz_symbolic.py does: a tape of 2-30 steps over three variables with
# random upper bounds (add a variable, add/multiply by a small constant, floor-divide or take the remainder by
# 1-9), sometimes ended by a comparison, then simplified by the tinygrad that is installed.

_UPPER = [*range(1, 10), 16, 32, 64, 128, 256]


def tinygrad_case(rng: random.Random, case_id: int = 0) -> dict[str, Any] | None:
    """One random oracle case (the format of load_cases), or None when tinygrad's expression is a bare leaf."""
    from tinygrad import dtypes as tdt
    from tinygrad.uop.ops import Ops as TOps
    from tinygrad.uop.ops import UOp as TUOp

    vs = [TUOp.variable(f"v{i + 1}", 0, rng.choice(_UPPER)) for i in range(3)]
    tape = [rng.choice(("add_v", "div", "mul", "add_num", "mod")) for _ in range(rng.randint(2, 30))]
    if rng.random() < 0.05:
        tape.append("lt")
    elif rng.random() < 0.05:
        tape.append("ge")
    e = TUOp.const(0, tdt.weakint)
    for step in tape:
        if step == "add_v":
            e = e + vs[rng.randint(0, 2)]
        elif step == "div":
            e = e // rng.randint(1, 9)
        elif step == "mul":
            e = e * rng.randint(-4, 4)
        elif step == "mod":
            e = e % rng.randint(1, 9)
        elif step == "add_num":
            e = e + rng.randint(-4, 4)
        else:
            e = (e < rng.randint(-4, 4)) if step == "lt" else (e >= rng.randint(-4, 4))
    if e.op in (TOps.CONST, TOps.BUFFER):
        return None
    names = {tdt.weakint: "dtypes.weakint", tdt.bool: "dtypes.bool", tdt.int: "dtypes.int"}

    def as_json(u: Any) -> dict[str, Any]:
        if u.op is TOps.BUFFER:  # tinygrad 0.14's variable: a parameter with its bounds
            lo, hi = u.arg.vmin_vmax
            return {"op": "VAR", "name": u.arg.name, "min": lo, "max": hi, "dtype": names[u.dtype]}
        if u.op is TOps.CONST:
            return {"op": "CONST", "value": u.arg, "dtype": names[u.dtype]}
        return {"op": u.op.name, "dtype": names[u.dtype], "src": [as_json(s) for s in u.src]}

    s = e.simplify()
    return {
        "id": case_id,
        "expr_str": e.render(simplify=False),
        "expr": as_json(e),
        "expected_min": int(s.vmin),
        "expected_max": int(s.vmax),
        "expected_str": s.render(),
    }
