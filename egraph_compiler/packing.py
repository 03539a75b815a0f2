"""Packed matmul operands: a layout the fusion search may materialize.

A GEMM reads its right operand B (K x N, row-major) down a column of tiles: every step of the reduction moves
N elements ahead, a page or more for N >= 1024 floats, so each iteration of the innermost loop lands on a new
page and line, the hardware prefetchers stop at the page, and the tile's loads wait. Copied once into panels
of PANEL columns, P[j // PANEL, k, j % PANEL], the same reads walk one contiguous panel (measured on Zen 4:
512x4096 @ 4096x1024 34 -> 25 ms, and every register tile runs near the best one instead of up to 4x slower).

The rewrite gives every such operand that view of itself, `B = P.permute(1, 0, 2).reshape(K, N)` with
`P = B.reshape(K, N / PANEL, PANEL).permute(1, 0, 2)`: the same values, so nothing changes unless P gets a
buffer of its own. P is offered to the fusion search as a materialization candidate; fused (the default of
every other read), its reads compose back into B's.
"""

from __future__ import annotations

from egraph_compiler.ops import Ops
from egraph_compiler.uop import UOp, toposort

PANEL = 32          # columns a packed panel holds (a register tile's width: 2 AVX-512 or 4 AVX2 vectors)
# with fewer rows the copy costs what the page steps do. 128 rows pay in a model, where the weights come cold from
# memory each call: a packed panel streams, where B's rows step a page each (GPT-2 block T=128: w_qkv and w_fc
# packed, 14.3 -> 12.0 ms; alone and hot in cache, 128x3072 @ 3072x768 gains nothing)
MIN_ROWS = 128


def packed_view(b: UOp) -> tuple[UOp, UOp]:
    """(P, B as a view of P) for a K x N tensor b."""
    k, n = b.shape
    p = b.reshape((k, n // PANEL, PANEL)).permute((1, 0, 2))
    return p, p.permute((1, 0, 2)).reshape((k, n))


def _right_operand(u: UOp) -> UOp | None:
    """For a matmul's right operand as it is broadcast, EXPAND(RESHAPE(B, (1, K, N)), (M, K, N)), with M rows
    and N a multiple of the panel: B; None for anything else."""
    if u.op is not Ops.EXPAND or u.src[0].op is not Ops.RESHAPE:
        return None
    r = u.src[0]
    b = r.src[0]
    if len(b.shape) != 2 or r.shape != (1, *b.shape) or len(u.shape) != 3:
        return None
    m, (k, n) = u.shape[0], b.shape
    return b if m >= MIN_ROWS and k >= PANEL and n % PANEL == 0 and n >= 2 * PANEL else None


def pack_matmul_operands(roots: list[UOp]) -> tuple[list[UOp], list[UOp]]:
    """The roots with every 2-d matmul's right operand read through its packed view, and the packed views (P)."""
    swap: dict[UOp, UOp] = {}
    packs: dict[UOp, tuple[UOp, UOp]] = {}   # B -> (P, B as a view of P)
    for u in toposort(roots):
        if u.op is not Ops.REDUCE or u.arg[0] is not Ops.ADD or u.arg[1] != (1,) or u.src[0].op is not Ops.MUL:
            continue
        for x in u.src[0].src:
            b = _right_operand(x)
            if b is not None and x.src[0] not in swap:
                if b not in packs:
                    packs[b] = packed_view(b)
                swap[x.src[0]] = packs[b][1].reshape(x.src[0].shape)
    if not swap:
        return roots, []
    return [r.substitute(swap) for r in roots], [p for p, _ in packs.values()]


__all__ = ["PANEL", "pack_matmul_operands", "packed_view"]
