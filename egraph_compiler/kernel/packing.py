"""Packed operands: layouts the fusion search may materialize.

A GEMM reads its right operand B (K x N, row-major) down a column of tiles: every step of the reduction moves
N elements ahead, a page or more for N >= 1024 floats, so each iteration of the innermost loop lands on a new
page and line, the hardware prefetchers stop at the page, and the tile's loads wait. Copied once into panels
of PANEL columns, P[j // PANEL, k, j % PANEL], the same reads walk one contiguous panel (measured on Zen 4:
512x4096 @ 4096x1024 34 -> 25 ms, and every register tile runs near the best one instead of up to 4x slower).

The rewrite gives every such operand that view of itself, `B = P.permute(1, 0, 2).reshape(K, N)` with
`P = B.reshape(K, N / PANEL, PANEL).permute(1, 0, 2)`: the same values, so nothing changes unless P gets a
buffer of its own. P is offered to the fusion search as a materialization candidate; fused (the default of
every other read), its reads compose back into B's.

A convolution's weight W (Cout, Cin, kh, kw) gets the same treatment as Q[co // 32, (ci, ky, kx), co % 32], which
holds 32 output channels of one (ci, ky, kx) side by side, and one block of channels in one piece: a kernel whose
accumulators run along the output channels (program.accumulator_axis) loads them as one vector and broadcasts each
input pixel, whatever the stride or the row's width (ResNet's 28- and 14-pixel rows fill no 8- or 16-lane vector
of pixels; a stride-2 input's pixels are no vector at all). Measured on Zen 4: 3x3 convolutions 2x128x28 156 ->
211 GFLOP/s, stride 2 99 -> 185. The blocks matter where a tile's weights outgrow the cache: a plain
[ci, ky, kx, co] copy puts a 32-channel tile's rows 2 KiB apart for 512 channels, into few L2 sets (512 channels at
7x7, batch 8: 16-18 -> 12.1-12.6 ms).
"""

from __future__ import annotations

from collections.abc import Callable

from egraph_compiler.ir.ops import Ops
from egraph_compiler.ir.uop import UOp, toposort

PANEL = 32  # columns a packed panel holds (a register tile's width: 2 AVX-512 or 4 AVX2 vectors)
# the fewest rows of A whose B is offered packed; the estimate then decides whether the copy pays (the page step
# it saves is the host's: extract/loop_cost.HOST_PAGE_STEP_CYCLES). On Zen 4 128 rows paid in a model, where the
# weights come cold from memory each call (GPT-2 block T=128: w_qkv and w_fc packed, 14.3 -> 12.0 ms; alone and hot
# in cache, 128x3072 @ 3072x768 gained nothing); on Emerald Rapids 64 rows do (64x512 @ 512x2048: 2.6 -> 1.5 ms)
MIN_ROWS = 32
# B is padded to whole panels only where its rows are this long: shorter rows do not step far enough to stall
# (extract/loop_cost.STALL_FROM), and the padded copy's guard outlives a fusion back into the product (GEMM 250:
# 0.17-0.29 -> 0.33-0.45 ms with a padded copy of B kept)
PAD_FROM = 256
CHANNEL_VECTOR = 16  # a convolution weight is packed when its output channels fill whole AVX-512 vectors


def packed_view(b: UOp) -> tuple[UOp, UOp]:
    """(P, B as a view of P) for a K x N tensor b. Where PANEL does not divide N, the last panel is filled up with
    zero columns (B is then the first N columns of P's): a GEMM of 1000 columns reads whole panels as one of 1024."""
    k, n = b.shape
    padded = -(-n // PANEL) * PANEL
    src = b if padded == n else b.pad(((0, 0), (0, padded - n)))
    p = src.reshape((k, padded // PANEL, PANEL)).permute((1, 0, 2))
    view = p.permute((1, 0, 2)).reshape((k, padded))
    return p, view if padded == n else view.shrink(((0, k), (0, n)))


def _right_operand(u: UOp) -> UOp | None:
    """For a matmul's right operand as it is broadcast, EXPAND(RESHAPE(B, (1, K, N)), (M, K, N)), with M rows
    and N at least two panels (whole ones, or more than PAD_FROM columns): B; None for anything else."""
    if u.op is not Ops.EXPAND or u.src[0].op is not Ops.RESHAPE:
        return None
    r = u.src[0]
    b = r.src[0]
    if len(b.shape) != 2 or r.shape != (1, *b.shape) or len(u.shape) != 3:
        return None
    m, (k, n) = u.shape[0], b.shape
    aligned = n % PANEL == 0 or n > PAD_FROM
    return b if m >= MIN_ROWS and k >= PANEL and n >= 2 * PANEL and aligned else None


def channel_blocked_view(w: UOp) -> tuple[UOp, UOp]:
    """(Q, W as a view of Q) for a (Cout, Cin, kh, kw) convolution weight w, in blocks of B = 32 output channels
    (PANEL; 16 where 32 does not divide Cout): Q[co // B, (ci, ky, kx), co % B] = w[co, ci, ky, kx]. Reading w back
    through the flattened (ci, ky, kx) takes a div and a mod that late_simplify puts back together when the
    rules did not within their limits (a load with a div in its index is priced as missing on every element)."""
    co, ci, kh, kw = w.shape
    b = PANEL if co % PANEL == 0 else CHANNEL_VECTOR
    q = w.reshape((co // b, b, ci * kh * kw)).permute((0, 2, 1))
    return q, q.permute((0, 2, 1)).reshape((co, ci, kh, kw))


def _conv_weight(u: UOp) -> UOp | None:
    """For a convolution's weight as conv2d broadcasts it (groups 1), EXPAND(RESHAPE(W, (1, 1, Cout, Cin, 1, kh, 1,
    kw)), ...) with Cout a multiple of a vector of channels: W; None for anything else."""
    if u.op is not Ops.EXPAND or u.src[0].op is not Ops.RESHAPE:
        return None
    w = u.src[0].src[0]
    if len(w.shape) != 4 or len(u.shape) != 8:
        return None
    co, ci, kh, kw = w.shape
    return w if u.src[0].shape == (1, 1, co, ci, 1, kh, 1, kw) and co % CHANNEL_VECTOR == 0 else None


def pack_operands(roots: list[UOp]) -> tuple[list[UOp], list[UOp]]:
    """The roots with every 2-d matmul's right operand and every convolution's weight read through its packed
    view, and the packed tensors (P, Q) to offer as buffers."""
    swap: dict[UOp, UOp] = {}
    packs: dict[UOp, tuple[UOp, UOp]] = {}  # operand -> (packed tensor, the operand as a view of it)
    for u in toposort(roots):
        if u.op is not Ops.REDUCE or u.arg[0] is not Ops.ADD or u.src[0].op is not Ops.MUL:
            continue
        for x in u.src[0].src:
            view: Callable[[UOp], tuple[UOp, UOp]]
            if u.arg[1] == (1,) and (b := _right_operand(x)) is not None:
                view = packed_view
            elif u.arg[1] == (3, 5, 7) and (b := _conv_weight(x)) is not None:
                view = channel_blocked_view
            else:
                continue
            if x.src[0] not in swap:
                if b not in packs:
                    packs[b] = view(b)
                swap[x.src[0]] = packs[b][1].reshape(x.src[0].shape)
    if not swap:
        return roots, []
    return [r.substitute(swap) for r in roots], [p for p, _ in packs.values()]


__all__ = ["PANEL", "channel_blocked_view", "pack_operands", "packed_view"]
