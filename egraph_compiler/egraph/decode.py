"""Extracted e-nodes -> UOps (the inverse of encode.py), iteratively.

Field layouts come from the op table through schema.py, so decoding after
no rewriting gives back exactly the graph that was encoded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from egraph_compiler.egraph.encode import Registry
from egraph_compiler.egraph.schema import ARG_FIELDS, EGG_TO_OP, fixed_arity
from egraph_compiler.egraph.view import EGraphView, ENode
from egraph_compiler.ir.dtypes import DType, to_dtype
from egraph_compiler.ir.ops import OP_TABLE, ArgKind, AxisType, Ops
from egraph_compiler.ir.uop import UOp

_AXIS_BY_LETTER = {a.value: a for a in AxisType}


def _decode_value(node: ENode, dtype: DType) -> Any:
    v = node.args[0]
    if node.fn == "F":
        return float(v)
    if dtype.is_bool:
        return bool(v)
    if dtype.is_unsigned and v < 0:
        v += 1 << 64
    return float(v) if dtype.is_float else int(v)


class Decoder:
    """Builds UOps from a choice of one e-node per e-class."""

    def __init__(
        self,
        view: EGraphView,
        choose: Callable[[int], ENode],
        reg: Registry,
        rkey: Callable[[ENode, Decoder], Any] | None = None,
        own_kernel: bool = False,
        memo: dict[int, Any] | None = None,
    ) -> None:
        """own_kernel: decode AFTER(buffer, other kernel) as the plain buffer, leaving the other kernel out (what a
        kernel's cost estimate needs: program order runs that one first). memo: e-classes already decoded (it is
        filled in as decoding goes)."""
        self.own_kernel = own_kernel
        self.view = view
        self.choose = choose
        self.reg = reg
        self.rkey_hook = rkey
        self.memo: dict[int, Any] = {} if memo is None else memo

    def ilist(self, c: int) -> tuple[int, ...]:
        out: list[int] = []
        while True:
            n = self.view.nodes[c][0]
            if n.fn == "INil":
                return tuple(out)
            out.append(int(n.args[0]))
            c = n.args[1].id

    def ulist(self, c: int) -> list[int]:
        out: list[int] = []
        while True:
            n = self.choose(c)
            if n.fn == "UNil":
                return out
            out.append(n.args[0].id)
            c = n.args[1].id

    def range_key(self, c: int) -> Any:
        n = self.view.nodes[c][0]
        if n.fn == "RK":
            return self.reg.range_keys_inv.get(n.args[0], n.args[0])
        if self.rkey_hook is not None:
            return self.rkey_hook(n, self)
        raise ValueError(f"cannot decode range key {n.fn}")

    def decode_arg(self, kind: ArgKind, fields: tuple[Any, ...], dtype: DType) -> Any:
        match kind:
            case ArgKind.NONE:
                return None
            case ArgKind.VALUE:
                return _decode_value(self.view.nodes[fields[0].id][0], dtype)
            case ArgKind.VAR:
                return (fields[0], int(fields[1]), int(fields[2]))
            case ArgKind.BUFFER:
                return (fields[0], self.ilist(fields[1].id))
            case ArgKind.BLOB:
                return self.reg.blobs[fields[0]]
            case ArgKind.SHAPE | ArgKind.PERM:
                return self.ilist(fields[0].id)
            case ArgKind.FLAGS:
                return tuple(bool(x) for x in self.ilist(fields[0].id))
            case ArgKind.PAIRS:
                xs = self.ilist(fields[0].id)
                return tuple((xs[i], xs[i + 1]) for i in range(0, len(xs), 2))
            case ArgKind.REDUCE:
                return (Ops[fields[0]], self.ilist(fields[1].id))
            case ArgKind.RANGE:
                return (self.range_key(fields[0].id), _AXIS_BY_LETTER[fields[1]])
            case ArgKind.INT:
                return int(fields[0])
            case ArgKind.NAME:
                return fields[0]
            case ArgKind.ANY:
                return self.reg.opaque.get(fields[0], fields[0])
        raise AssertionError(kind)

    def src_classes(self, n: ENode) -> list[int]:
        op = EGG_TO_OP[n.fn]
        sp = OP_TABLE[op]
        rest = n.args[1 + len(ARG_FIELDS[sp.arg]) :]
        if fixed_arity(sp) is not None:
            return [a.id for a in rest]
        return self.ulist(rest[0].id)

    def decode(self, root: int) -> UOp:
        stack: list[tuple[int, bool]] = [(root, False)]
        while stack:
            c, ready = stack.pop()
            if c in self.memo:
                continue
            n = self.choose(c)
            if n.fn not in EGG_TO_OP:
                raise ValueError(f"e-class {c} chose non-op constructor {n.fn}")
            kids = self.src_classes(n)
            if self.own_kernel and n.fn == "AFTER":
                kids = kids[:1]
            if not ready:
                stack.append((c, True))
                stack.extend((k, False) for k in kids if k not in self.memo)
                continue
            if self.own_kernel and n.fn == "AFTER":
                self.memo[c] = self.memo[kids[0]]
                continue
            op = EGG_TO_OP[n.fn]
            sp = OP_TABLE[op]
            dtype = to_dtype(n.args[0])
            arg = self.decode_arg(sp.arg, n.args[1 : 1 + len(ARG_FIELDS[sp.arg])], dtype)
            if op is Ops.PARAM and arg[0].lstrip("-").isdigit():
                arg = (int(arg[0]), arg[1])  # a PARAM's slot is an int; the schema's name field holds it as text
            if op is Ops.END and len(kids) == 1:  # a kernel whose output axes all have size 1 loops over nothing
                self.memo[c] = self.memo[kids[0]]
                continue
            self.memo[c] = UOp(op, dtype, tuple(self.memo[k] for k in kids), arg)
        return self.memo[root]
