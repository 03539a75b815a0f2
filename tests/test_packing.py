"""Packed GEMM operands (egraph_compiler/kernel/packing.py) and the index strides through a packed panel's div/mod."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import conv_ref
from hypothesis import example, given, settings
from hypothesis import strategies as st

from egraph_compiler import Tensor, optimize
from egraph_compiler.ir.interpret import evaluate
from egraph_compiler.ir.ops import AxisType, Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.cpu_target import cpu_target
from egraph_compiler.kernel.packing import PANEL, pack_operands
from egraph_compiler.kernel.program import accumulator_axis, ranges_in, stride


def E(*shape: int, name: str) -> Tensor:
    return Tensor.empty(shape, dtype="float32", name=name)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([256, 300]), st.sampled_from([32, 48]), st.sampled_from([64, 96, 300, 450]), st.booleans())
def test_the_packed_view_has_the_same_values(m: int, k: int, n: int, epilogue: bool) -> None:
    """The rewrite reads B through P.permute(1, 0, 2).reshape(K, N) (the first N columns of it, where the last panel
    is filled up with zeros): the reference interpreter gives the same result for the rewritten graph as for the
    original."""
    t = E(m, k, name="a") @ E(k, n, name="b")
    if epilogue:
        t = (t + E(n, name="c")).relu()
    (packed,), packs = pack_operands([t.uop])
    assert len(packs) == 1 and packs[0].shape == (-(-n // PANEL), k, PANEL)
    rng = np.random.default_rng(m + k + n)
    x = {
        u.arg[0]: rng.standard_normal(u.arg[1]).astype(np.float32) for u in t.uop.toposort() if u.op is Ops.BUFFER and not u.src
    }
    np.testing.assert_allclose(evaluate(packed, x), evaluate(t.uop, x), rtol=1e-5, atol=1e-5)


def test_small_or_narrow_products_are_not_packed() -> None:
    """Too few rows to pay for the copy, fewer columns than two panels, or short rows no panel divides: nothing to
    offer."""
    for a, b in (((16, 64), (64, 64)), ((256, 64), (64, 40)), ((256, 64), (64, 32)), ((256, 64), (64, 250))):
        t = E(*a, name="a") @ E(*b, name="b")
        assert pack_operands([t.uop]) == ([t.uop], [])


def test_a_long_reduction_reads_a_packed_copy() -> None:
    """512x2048 @ 2048x1024: every step of the reduction moves B's unpacked column a page (1024 floats) ahead; the
    search keeps the packed copy (one more kernel), and the product matches numpy."""
    t = E(512, 2048, name="a") @ E(2048, 1024, name="b")
    prog = optimize(t, target="llvm")
    packs = [d for d in prog.report.extra["fusion"]["decisions"] if d["tensor"].startswith("PACK")]
    assert packs
    if cpu_target().isa == "avx512":  # the AVX2 estimate keeps B as it is (not measured on an AVX2 host)
        assert packs[0]["decision"] == "materialized"
    rng = np.random.default_rng(1)
    a = rng.standard_normal((512, 2048), dtype=np.float32)
    b = rng.standard_normal((2048, 1024), dtype=np.float32)
    np.testing.assert_allclose(prog(a=a, b=b), a.astype(np.float64) @ b, rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("stall,ghz", [(8.0, 3.0), (26.0, 2.0)])
def test_packing_a_short_product_follows_the_hosts_page_step(stall: float, ghz: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """64x512 @ 512x2048: B's rows are 8 KiB apart, and each step of the reduction lands on a new page. Where that
    stalls 8 cycles of 3 GHz (Zen 4) the copy does not pay and the product reads B as it is; where it stalls 26 of
    2 GHz (Emerald Rapids: 2.6 ms unpacked against 1.5 packed with its copy) the search keeps the packed copy.
    Both are right (with both hosts' bandwidth figures, CPUMachine's defaults, whatever host runs the test, and B
    streamed from memory, as where the L3 holds less than it: from the L3, the copy pays at both stalls)."""
    from egraph_compiler.extract import loop_cost
    from egraph_compiler.extract.loop_cost import CPUMachine

    monkeypatch.setattr(loop_cost, "RESIDENT_L3", False)

    machine = {
        "EGC_PAGE_STEP_CYCLES": stall,
        "EGC_GHZ": ghz,
        "EGC_MEM_GBPS": CPUMachine.mem_gbps,
        "EGC_MEM_GBPS_ALL": CPUMachine.mem_gbps_all,
        "EGC_L3_GBPS": CPUMachine.l3_gbps,
    }
    for k, v in machine.items():
        monkeypatch.setenv(k, str(v))
    CPUMachine.for_cpu.cache_clear()
    try:
        t = E(64, 512, name="a") @ E(512, 2048, name="b")
        prog = optimize(t, target="llvm", cache=False)
    finally:
        for k in machine:
            monkeypatch.delenv(k)
        CPUMachine.for_cpu.cache_clear()
    packs = [d for d in prog.report.extra["fusion"]["decisions"] if d["tensor"].startswith("PACK")]
    assert packs  # 64 rows are offered the copy
    if cpu_target().isa == "avx512":
        assert (packs[0]["decision"] == "materialized") == (stall > 8), packs
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 512), dtype=np.float32)
    b = rng.standard_normal((512, 2048), dtype=np.float32)
    np.testing.assert_allclose(prog(a=a, b=b), a.astype(np.float64) @ b, rtol=1e-3, atol=1e-2)


def test_a_product_no_panel_divides_reads_a_padded_copy() -> None:
    """1000x512 @ 512x1000: B's rows are 4000 bytes apart, so the unpacked column steps most of a page every
    iteration; the search keeps the copy whose last panel is filled up with zero columns, and the product matches
    numpy (1000 is no multiple of a panel)."""
    t = E(1000, 512, name="a") @ E(512, 1000, name="b")
    prog = optimize(t, target="llvm")
    packs = [d for d in prog.report.extra["fusion"]["decisions"] if d["tensor"].startswith("PACK")]
    assert packs and packs[0]["tensor"] == f"PACK 32x512x{PANEL} float32"
    if cpu_target().isa == "avx512":
        assert packs[0]["decision"] == "materialized"
    rng = np.random.default_rng(2)
    a = rng.standard_normal((1000, 512), dtype=np.float32)
    b = rng.standard_normal((512, 1000), dtype=np.float32)
    np.testing.assert_allclose(prog(a=a, b=b), a.astype(np.float64) @ b, rtol=1e-3, atol=1e-2)


def _range(i: int, n: int, kind: AxisType = AxisType.LOOP) -> UOp:
    return UOp(Ops.RANGE, UOp.const(0).dtype, (UOp.const(n),), (("t", i), kind))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.sampled_from([2, 4, 8, 16]),
    st.sampled_from([1, 2, 3, 4, 8, 16]),
    st.integers(-8, 40),
    st.sampled_from([4, 8, 16, 32, 48]),
    st.booleans(),
)
def test_stride_through_mod_and_div_is_exact(s: int, n: int, outer: int, const: int, c: int, div: bool) -> None:
    """Whenever stride() gives a step for `(outer*o + s*r + const) % c` (or `//`) along r, consecutive values of r
    differ by exactly that step for every value of o: checked by enumeration."""
    o, r = _range(0, 4), _range(1, n, AxisType.UPCAST)
    e = o * UOp.const(outer) + r * UOp.const(s) + UOp.const(const)
    idx = e // UOp.const(c) if div else e % UOp.const(c)
    step = stride(idx, r)
    if step is None:
        return

    def val(ov: int, rv: int) -> int:
        v = outer * ov + s * rv + const
        q = abs(v) // c * (1 if v >= 0 else -1)  # C semantics: truncation toward zero
        return q if div else v - q * c

    for ov, rv in itertools.product(range(4), range(n - 1)):
        assert val(ov, rv + 1) - val(ov, rv) == step


def _channel_vector_reduces(prog: object, lanes: int = 16) -> list[UOp]:
    """The REDUCEs of a program whose accumulators the CPU backend keeps along a range the store does not step by 1
    (a convolution's output channels), for vectors of `lanes` floats."""
    found = []
    for k in prog.kernels:  # type: ignore[attr-defined]
        for store in (u for u in k.ast.toposort() if u.op is Ops.STORE):
            lin = store.src[0].src[1]
            for red in (u for u in store.toposort() if u.op is Ops.REDUCE):
                outer = sorted(
                    (r for r in ranges_in(red) - set(red.src[1:]) if r.arg[1] is AxisType.UPCAST),
                    key=lambda r: stride(lin, r) == 1,
                )
                contiguous = frozenset(r for r in outer if stride(lin, r) == 1)
                vec = accumulator_axis(red, outer, contiguous, lanes)
                if vec is not None and vec not in contiguous:
                    found.append(red)
    return found


def test_a_convolution_weight_gets_a_channel_blocked_view() -> None:
    """conv2d's weight (Cout, Cin, kh, kw) is read through Q[co // 32, (ci, ky, kx), co % 32]: one pack, the same values;
    output channels that fill no vector, or grouped convolutions, are left alone."""
    x, w = E(2, 5, 17, 17, name="x"), E(32, 5, 3, 3, name="w")
    t = x.conv2d(w, padding=1, stride=2)
    (packed,), packs = pack_operands([t.uop])
    assert len(packs) == 1 and packs[0].shape == (1, 45, 32)
    rng = np.random.default_rng(3)
    bufs = {
        "x": rng.standard_normal((2, 5, 17, 17), dtype=np.float32),
        "w": rng.standard_normal((32, 5, 3, 3), dtype=np.float32),
    }
    np.testing.assert_allclose(evaluate(packed, bufs), evaluate(t.uop, bufs), rtol=1e-5, atol=1e-5)
    for cout, groups in ((24, 1), (32, 2)):
        t = E(1, 4, 12, 12, name="x").conv2d(E(cout, 4 // groups, 3, 3, name="w"), groups=groups)
        assert pack_operands([t.uop]) == ([t.uop], [])


@settings(max_examples=6, deadline=None)
@given(
    st.sampled_from([1, 2]),
    st.sampled_from([3, 8, 16]),
    st.integers(5, 20),
    st.sampled_from([32, 48, 64]),
    st.sampled_from([(3, 1, 1), (3, 2, 1), (1, 2, 0), (3, 1, 0)]),
)
@example(n=2, cin=16, wo=7, cout=64, conv=(3, 1, 1))  # ResNet's last stage: a row of 7 in a tile of 8
def test_accumulators_along_output_channels_are_correct(
    n: int, cin: int, wo: int, cout: int, conv: tuple[int, int, int]
) -> None:
    """With the weight given channels-last, the schedules that keep a vector of output channels per accumulator
    (program.accumulator_axis) exist, and every one of them computes the convolution (numpy, float64). Outputs
    5 to 20 pixels wide (narrower ones take conv2d's im2col lowering; 5 to 7 pad to one tile of 8)."""
    k, stride_, padding = conv
    hw = (wo - 1) * stride_ + k - 2 * padding
    q = E(cin, k, k, cout, name="q")
    t = E(n, cin, hw, hw, name="x").conv2d(q.permute(3, 0, 1, 2), stride=stride_, padding=padding)
    alts: list[tuple[str, object]] = []
    optimize(t, target="llvm", alternatives=alts)
    rng = np.random.default_rng(n * cin * hw + cout)
    x = rng.standard_normal((n, cin, hw, hw), dtype=np.float32)
    w = rng.standard_normal((cout, cin, k, k), dtype=np.float32)
    want = conv_ref(x, w, stride_, padding)
    along = [(s, p) for s, p in alts if _channel_vector_reduces(p, cpu_target().simd_bytes // 4)]
    assert along, [s for s, _ in alts]
    for s, p in along[:4]:
        np.testing.assert_allclose(
            p(x=x, q=np.ascontiguousarray(w.transpose(1, 2, 3, 0))),
            want,  # type: ignore[operator]
            rtol=1e-4,
            atol=1e-4,
            err_msg=s,
        )


def test_a_resnet_convolution_keeps_channels_in_vectors() -> None:
    """3x3, 128 channels at 28x28, batch 2 (rows of 28 fill no vector of pixels without padding): the search keeps
    the channel-blocked weight and the estimate ranks a schedule with accumulators along the output channels first
    (measured on Zen 4: 211 GFLOP/s against 156 for the best padded row of pixels; AVX2 code 105 against 78);
    the result matches numpy."""
    t = E(2, 128, 28, 28, name="x").conv2d(E(128, 128, 3, 3, name="w"), padding=1)
    prog = optimize(t, target="llvm")
    decisions = {d["tensor"].split()[0]: d["decision"] for d in prog.report.extra["fusion"]["decisions"]}
    assert decisions["PACK"] == "materialized"
    assert _channel_vector_reduces(prog, cpu_target().simd_bytes // 4)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 128, 28, 28), dtype=np.float32)
    w = rng.standard_normal((128, 128, 3, 3), dtype=np.float32)
    np.testing.assert_allclose(prog(x=x, w=w), conv_ref(x, w, 1, 1), rtol=1e-3, atol=1e-3)
