"""Read slack: intermediate buffers made long enough for the reads of padded tiles past their end.

A tile padded past an axis's end (20 columns in tiles of 8: Padto) computes lanes whose results are never
stored; their loads still run, at indices past the buffer's last element where the padded axis is the
buffer's last. A backend must keep such a read inside the buffer (a masked vector load, a clamped address),
and that costs in the innermost loop: a 3x3 convolution's input row read under a mask ran 1.8x slower than
unmasked loads. An intermediate buffer is the program's own to size, so it gets the few elements those reads
need after its end (`slack`): the reads are then inside it, and backends emit plain loads. What they read
there only feeds the padded lanes. Inputs and outputs keep their sizes (the caller's arrays).
"""

from __future__ import annotations

import dataclasses

from egraph_compiler.ir.ops import Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.analysis import index_of
from egraph_compiler.kernel.program import BufferSpec, buffer_of

# The most slack a buffer gets, as a fraction of its size (and at least MIN_SLACK elements): past it (a batch
# of one row padded to a tile of 8 rows), the reads stay masked rather than the buffer growing severalfold
MAX_SLACK_FRACTION = 0.25
MIN_SLACK = 1024


def slack(asts: list[UOp], specs: dict[str, BufferSpec]) -> dict[str, int]:
    """The intermediates whose loads in `asts` read past their end, each with the size that holds every such
    read (within MAX_SLACK_FRACTION / MIN_SLACK of its own size; loads before the start get nothing)."""
    need: dict[str, int] = {}
    for ast in asts:
        for u in ast.toposort():
            if u.op is not Ops.LOAD:
                continue
            idx = index_of(u.src[0])
            spec = specs.get(buffer_of(u.src[0]).arg[0])
            if idx is None or spec is None or spec.kind != "intermediate":
                continue
            lo, hi = int(idx.vmin), int(idx.vmax)
            if lo >= 0 and hi >= spec.size and hi + 1 - spec.size <= max(MIN_SLACK, spec.size * MAX_SLACK_FRACTION):
                need[spec.name] = max(need.get(spec.name, 0), hi + 1)
    return need


def with_slack(asts: list[UOp], specs: dict[str, BufferSpec]) -> tuple[list[UOp], dict[str, BufferSpec]]:
    """`asts` and `specs` with every intermediate that `slack` names grown to its new size (the flat BUFFER
    nodes of the kernels too, whose size backends read)."""
    sizes = slack(asts, specs)
    if not sizes:
        return asts, specs
    old = {u for a in asts for u in a.toposort() if u.op is Ops.BUFFER and u.arg[0] in sizes}
    mapping = {u: UOp(Ops.BUFFER, u.dtype, u.src, (u.arg[0], (sizes[u.arg[0]],))) for u in old}
    new_specs = {n: dataclasses.replace(s, size=sizes[n]) if n in sizes else s for n, s in specs.items()}
    return [a.substitute(mapping) for a in asts], new_specs
