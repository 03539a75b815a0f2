"""Per-node costs for scalar (symbolic) extraction.

Costs approximate instruction latency on a CPU: an integer division or
modulo costs several adds; helper constructors that only exist to drive
rules (linear forms, index helpers) can never be extracted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from egraph_compiler.egraph.schema import EGG_TO_OP
from egraph_compiler.egraph.view import EGraphView, ENode
from egraph_compiler.ir.ops import OP_TABLE, Category, Ops

INF = math.inf

OP_COSTS: dict[Ops, float] = {
    Ops.CONST: 1,
    Ops.DEFINE_VAR: 1,
    Ops.RANGE: 1,
    Ops.SPECIAL: 1,
    Ops.ADD: 2,
    Ops.MUL: 3,
    Ops.MAX: 2,
    Ops.CMPLT: 2,
    Ops.CMPNE: 2,
    Ops.AND: 2,
    Ops.OR: 2,
    Ops.XOR: 2,
    Ops.SHL: 2,
    Ops.SHR: 2,
    Ops.WHERE: 3,
    Ops.CAST: 2,
    Ops.BITCAST: 1,
    Ops.TRUNC: 3,
    Ops.IDIV: 10,
    Ops.MOD: 10,
    Ops.RECIP: 8,
    Ops.FDIV: 8,
    Ops.EXP2: 20,
    Ops.LOG2: 20,
    Ops.SIN: 20,
    Ops.COS: 20,
    Ops.SQRT: 12,
}


@dataclass
class ScalarCost:
    """Cost of an e-node for expression extraction; constructors outside the op table are free
    structure (lists, values) or, if listed in `unextractable`, forbidden."""

    unextractable: set[str] = field(default_factory=set)
    default_op_cost: float = 4.0

    def node_cost(self, n: ENode, view: EGraphView) -> float:
        if n.fn in self.unextractable:
            return INF
        op = EGG_TO_OP.get(n.fn)
        if op is None:
            return 0.0
        if op in OP_COSTS:
            return float(OP_COSTS[op])
        cat = OP_TABLE[op].category
        return 1.0 if cat in (Category.SOURCE, Category.MOVEMENT, Category.ORDERING) else self.default_op_cost
