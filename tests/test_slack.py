"""Read slack (kernel/slack.py): intermediates grown for the reads of padded tiles past their end, so that
backends load them without masks; inputs, outputs, reads before the start and reads too far past stay as
they were. End to end: a convolution whose padded column tile reads past its padded input's end runs with plain
loads, and its values are numpy's."""

from __future__ import annotations

import numpy as np

from egraph_compiler import AxisType, Ops, Tensor, UOp, dtypes, optimize
from egraph_compiler.extract.schedule import describe_schedule
from egraph_compiler.kernel.program import BufferSpec, Program
from egraph_compiler.kernel.slack import MAX_SLACK_FRACTION, MIN_SLACK, slack, with_slack

F32 = dtypes.float32


def _buf(name: str, n: int) -> UOp:
    return UOp(Ops.BUFFER, F32, (), (name, (n,)))


def _copy(src: UOp, dst: UOp, idx_read: UOp, idx_write: UOp, *ranges: UOp) -> UOp:
    value = UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (src, idx_read)),))
    st = UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (dst, idx_write)), value))
    return UOp.build(Ops.SINK, (UOp.build(Ops.END, (st, *ranges)),))


def _specs(**kinds: tuple[int, str]) -> dict[str, BufferSpec]:
    return {n: BufferSpec(n, F32, size, kind, (size,)) for n, (size, kind) in kinds.items()}


def test_a_padded_tile_past_an_intermediates_end_gets_just_the_slack_it_reads() -> None:
    """Rows of 20 in tiles of 8 read up to element 23: the intermediate grows to 24, and the kernel's BUFFER
    node says so; an input read the same way keeps its size."""
    o, u = UOp.range(3, 0), UOp.range(8, 1, AxisType.UPCAST)
    col = o * 8 + u
    tmp, inp, out = _buf("tmp", 20), _buf("x", 20), _buf("y", 24)
    specs = _specs(tmp=(20, "intermediate"), x=(20, "input"), y=(24, "output"))
    a = _copy(tmp, out, col, col, o, u)
    b = _copy(inp, out, col, col, o, u)
    assert slack([a, b], specs) == {"tmp": 24}
    (new_a, new_b), new_specs = with_slack([a, b], specs)
    assert new_specs["tmp"].size == 24 and new_specs["x"].size == 20 and new_specs["y"].size == 24
    sizes = {u.arg[0]: u.arg[1] for u in new_a.toposort() + new_b.toposort() if u.op is Ops.BUFFER}
    assert sizes == {"tmp": (24,), "x": (20,), "y": (24,)}


def test_reads_before_the_start_or_too_far_past_get_no_slack() -> None:
    r = UOp.range(64, 0)
    tmp, out = _buf("tmp", 16), _buf("y", 64)
    specs = _specs(tmp=(16, "intermediate"), y=(64, "output"))
    assert slack([_copy(tmp, out, r - 8, r, r)], specs) == {}  # reads tmp[-8]
    big = MIN_SLACK * 4
    long_tmp = _buf("tmp", big)
    specs = _specs(tmp=(big, "intermediate"), y=(64, "output"))
    far = big + int(big * MAX_SLACK_FRACTION) + 64
    assert slack([_copy(long_tmp, out, r + (far - 64), r, r)], specs) == {}
    near = big + int(big * MAX_SLACK_FRACTION)
    assert slack([_copy(long_tmp, out, r + (near - 64), r, r)], specs) == {"tmp": near}


def test_a_convolution_whose_column_tile_passes_its_padded_input_reads_it_unmasked() -> None:
    """A 3x3 convolution over 20-pixel rows (tiles of 8 columns: 24): the padded input copy has the slack its
    last row's reads need, the convolution loads it with no mask (the masked loads and their lane shuffles ran it
    1.6x slower), and the values are numpy's. The program with that tile is taken from the ranked alternatives,
    whichever tile this host's estimate picks (Zen 5's AVX-512 code: 3 x 7, Zen 3's AVX2 code: 4 pixels by 16
    channels; neither passes a row)."""
    n, c, hw = 1, 96, 20
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((n, c, hw, hw), dtype=np.float32)
    wv = rng.standard_normal((c, c, 3, 3), dtype=np.float32) * np.float32(0.05)
    x, w = Tensor.empty((n, c, hw, hw), name="x"), Tensor.empty((c, c, 3, 3), name="w")
    alts: list[tuple[str, Program]] = []
    optimize(x.conv2d(w, padding=1), target="llvm", cache=False, alternatives=alts)
    tiled = [p for d, p in alts if "3L 8u" in d and "red[" in d]
    assert tiled, [d for d, _ in alts]
    prog = tiled[0]
    conv = next(k for k in prog.kernels if "red[" in describe_schedule(k.ast))
    grown = [s for s in prog.buffers.values() if s.kind == "intermediate" and s.size > int(np.prod(s.shape))]
    assert grown, [(s.name, s.size, s.shape) for s in prog.buffers.values()]
    assert "masked.load" not in prog.source[conv.name]
    xp = np.pad(xv, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n, c, h, w, 3, 3
    want = np.einsum("nchwyx,ocyx->nohw", windows.astype(np.float64), wv.astype(np.float64))
    np.testing.assert_allclose(np.asarray(prog(x=xv, w=wv)), want, rtol=1e-4, atol=1e-4)
