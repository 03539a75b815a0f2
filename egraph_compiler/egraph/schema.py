"""The egglog schema, generated from the op table.

Every op becomes one constructor of sort `U`:  (OP dtype <arg fields> <src fields>)
  - dtype is the dtype's name as a String ("float32", "index", ...)
  - arg fields follow the op's ArgKind (ARG_FIELDS below)
  - sources are positional U fields for fixed arity, one `UL` list otherwise
Auxiliary sorts: Val (constant values), IL (i64 lists: shapes, axes, pairs),
UL (U lists), RKey (range identities, named by the term a range comes from).
Helper constructors used by rules (linear forms, index helpers) are declared
by the rule modules and marked unextractable.
"""

from __future__ import annotations

from egraph_compiler.ir.dtypes import ALL_DTYPES, dtypes
from egraph_compiler.ir.ops import OP_TABLE, ArgKind, Ops, OpSpec

ARG_FIELDS: dict[ArgKind, tuple[str, ...]] = {
    ArgKind.NONE: (),
    ArgKind.VALUE: ("Val",),
    ArgKind.VAR: ("String", "i64", "i64"),
    ArgKind.BUFFER: ("String", "IL"),
    ArgKind.BLOB: ("String",),
    ArgKind.SHAPE: ("IL",),
    ArgKind.PERM: ("IL",),
    ArgKind.FLAGS: ("IL",),
    ArgKind.PAIRS: ("IL",),
    ArgKind.REDUCE: ("String", "IL"),
    ArgKind.RANGE: ("RKey", "String"),
    ArgKind.INT: ("i64",),
    ArgKind.NAME: ("String",),
    ArgKind.ANY: ("String",),
}


def fixed_arity(sp: OpSpec) -> int | None:
    lo, hi = sp.arity
    return lo if lo == hi else None


def src_fields(sp: OpSpec) -> tuple[str, ...]:
    n = fixed_arity(sp)
    return ("U",) * n if n is not None else ("UL",)


def constructor_fields(sp: OpSpec) -> tuple[str, ...]:
    return ("String", *ARG_FIELDS[sp.arg], *src_fields(sp))


BASE_SORTS = """
(sort U)
(sort UL)
(datatype Val (I i64) (F f64))
(datatype IL (INil) (ICons i64 IL))
(constructor UNil () UL)
(constructor UCons (U UL) UL)
(sort RKey)
(constructor RK (String) RKey)
"""


def dtype_facts() -> str:
    """Integer dtype ranges as egglog functions, for wraparound-aware rules."""
    lines = [
        "(function dt-min (String) i64 :no-merge)",
        "(function dt-max (String) i64 :no-merge)",
        "(function dt-bits (String) i64 :no-merge)",
        "(relation dt-int (String))",
        "(relation dt-signed (String))",
        "(relation dt-unsigned (String))",
        "(relation dt-float (String))",
        "(relation dt-bool (String))",
        "(relation dt-intlike (String))",
    ]
    i64max = (1 << 63) - 1
    for d in ALL_DTYPES:
        if d.is_int or d.is_bool:
            lo, hi = int(d.min), min(int(d.max), i64max)
            lines += [
                f'(set (dt-min "{d.name}") {lo})',
                f'(set (dt-max "{d.name}") {hi})',
                f'(set (dt-bits "{d.name}") {d.bits if not d.is_bool else 1})',
            ]
            lines.append(f'(dt-int "{d.name}")' if d.is_int else f'(dt-bool "{d.name}")')
            lines.append(f'(dt-intlike "{d.name}")')
            if d.kind in "iu":
                lines.append(f'(dt-signed "{d.name}")' if d.kind == "i" else f'(dt-unsigned "{d.name}")')
        elif d.is_float:
            lines.append(f'(dt-float "{d.name}")')
    return "\n".join(lines)


def op_constructors() -> str:
    return "\n".join(f"(constructor {sp.egg_name} ({' '.join(constructor_fields(sp))}) U)" for sp in OP_TABLE.values())


PROVENANCE_PREFIX = "prov-"  # (prov-OP <the OP e-node's fields>) -> the name of the rule that first built it
PROVENANCE_SEED = "prov_seed"  # the ruleset that stamps the encoded graph's e-nodes
INPUT = "input"  # their producer


def provenance_program() -> str:
    """Per op constructor, a table of the rule that first built each of its e-nodes (a later firing that builds
    one again keeps the first), and the ruleset that stamps the e-nodes there are already as INPUT."""
    lines = [f"(ruleset {PROVENANCE_SEED})"]
    for sp in OP_TABLE.values():
        fields = constructor_fields(sp)
        vs = " ".join(f"f{i}" for i in range(len(fields)))
        lines += [
            f"(function {PROVENANCE_PREFIX}{sp.egg_name} ({' '.join(fields)}) String :merge old)",
            f'(rule ((= __e ({sp.egg_name} {vs}))) ((set ({PROVENANCE_PREFIX}{sp.egg_name} {vs}) "{INPUT}")) '
            f":ruleset {PROVENANCE_SEED})",
        ]
    return "\n".join(lines)


def schema_program() -> str:
    return "\n".join([BASE_SORTS, op_constructors(), dtype_facts()])


EGG_TO_OP: dict[str, Ops] = {sp.egg_name: op for op, sp in OP_TABLE.items()}
INDEX = dtypes.index.name
