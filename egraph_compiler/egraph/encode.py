"""UOp graphs -> egglog terms, one node at a time.

Each UOp becomes a global binding `(let $nK (OP dtype args... srcs...))`
whose sources refer to earlier bindings, so a deep graph is inserted in
topological order without building one deep term (which egglog-python
handles quadratically and recursively). Values egglog cannot hold as text
(data blobs, range keys, opaque args) live in a `Registry` the decoder shares.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from egraph_compiler.egraph.schema import fixed_arity
from egraph_compiler.ir.dtypes import DType
from egraph_compiler.ir.ops import OP_TABLE, ArgKind
from egraph_compiler.ir.uop import Blob, UOp, arg_key, toposort


def egg_str(s: str) -> str:
    return json.dumps(s)  # egglog string literals use the same escapes


def egg_float(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    r = repr(float(v))
    return r if ("." in r or "e" in r or "n" in r) else r + ".0"


def egg_int(v: int, dtype: DType | None = None) -> str:
    if dtype is not None and dtype.is_unsigned and v >= 1 << 63:
        v -= 1 << 64  # uint64 values above 2**63 are stored as their two's-complement bit pattern
    return str(int(v))


def egg_ilist(xs: Iterable[int]) -> str:
    out = "(INil)"
    for x in reversed(list(xs)):
        out = f"(ICons {int(x)} {out})"
    return out


def egg_ulist(refs: Iterable[str]) -> str:
    out = "(UNil)"
    for r in reversed(list(refs)):
        out = f"(UCons {r} {out})"
    return out


@dataclass
class Registry:
    """Side tables for args that travel to egglog as opaque ids."""

    blobs: dict[str, Blob] = field(default_factory=dict)
    range_keys: dict[Any, str] = field(default_factory=dict)
    range_keys_inv: dict[str, Any] = field(default_factory=dict)
    opaque: dict[str, Any] = field(default_factory=dict)

    def range_key(self, key: Any) -> str:
        k = arg_key(key)  # keys told apart as UOp args are: 1, 1.0 and True are three keys
        if k not in self.range_keys:
            rid = f"k{len(self.range_keys)}"
            self.range_keys[k] = rid
            self.range_keys_inv[rid] = key
        return self.range_keys[k]

    def opaque_id(self, v: Any) -> str:
        rid = f"o{len(self.opaque)}"
        for k, x in self.opaque.items():
            if arg_key(x) == arg_key(v):  # not ==: 1, 1.0 and True are different args
                return k
        self.opaque[rid] = v
        return rid


def encode_value(v: Any, dtype: DType) -> str:
    if isinstance(v, bool):
        return f"(I {int(v)})"
    if dtype.is_float:
        return f"(F {egg_float(float(v))})"
    return f"(I {egg_int(v, dtype)})"


def encode_arg(u: UOp, reg: Registry) -> list[str]:
    kind, a = OP_TABLE[u.op].arg, u.arg
    match kind:
        case ArgKind.NONE:
            return []
        case ArgKind.VALUE:
            return [encode_value(a, u.dtype)]
        case ArgKind.VAR:
            return [egg_str(a[0]), str(int(a[1])), str(int(a[2]))]
        case ArgKind.BUFFER:
            return [egg_str(str(a[0])), egg_ilist(a[1])]
        case ArgKind.BLOB:
            reg.blobs[a.digest] = a
            return [egg_str(a.digest)]
        case ArgKind.SHAPE | ArgKind.PERM:
            return [egg_ilist(a)]
        case ArgKind.FLAGS:
            return [egg_ilist(int(bool(f)) for f in a)]
        case ArgKind.PAIRS:
            return [egg_ilist(x for p in a for x in p)]
        case ArgKind.REDUCE:
            return [egg_str(a[0].name), egg_ilist(a[1])]
        case ArgKind.RANGE:
            return [f"(RK {egg_str(reg.range_key(a[0]))})", egg_str(a[1].value)]
        case ArgKind.INT:
            return [str(int(a))]
        case ArgKind.NAME:
            return [egg_str(str(a))]
        case ArgKind.ANY:
            return [egg_str(reg.opaque_id(a))]
    raise AssertionError(f"unhandled arg kind {kind}")


def encode_node(u: UOp, src_refs: list[str], reg: Registry) -> str:
    sp = OP_TABLE[u.op]
    srcs = src_refs if fixed_arity(sp) is not None else [egg_ulist(src_refs)]
    fields = [egg_str(u.dtype.name), *encode_arg(u, reg), *srcs]
    return f"({sp.egg_name} {' '.join(fields)})"


class Encoder:
    """Inserts UOp graphs into an e-graph session; remembers the binding of every node."""

    def __init__(self, reg: Registry, prefix: str = "n") -> None:
        self.reg = reg
        self.prefix = prefix
        self.names: dict[UOp, str] = {}

    def commands(self, roots: Iterable[UOp]) -> list[str]:
        """`let` commands for every node not inserted yet, sources first."""
        out: list[str] = []
        for u in toposort(roots):
            if u in self.names:
                continue
            name = f"${self.prefix}{len(self.names)}"
            out.append(f"(let {name} {encode_node(u, [self.names[s] for s in u.src], self.reg)})")
            self.names[u] = name
        return out
