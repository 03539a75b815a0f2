"""ONNX control flow and sequence / optional values (egraph_compiler/frontend/onnx/control.py) through from_onnx: the ONNX
backend node tests of If, Loop, Scan, the sequence and optional ops and the function bodies that use them, models
against onnxruntime (If on a known and on a runtime condition, Loop with carried state and scan outputs, on a
runtime condition, Scan with reverse directions and other axes, sequences and optionals round trips), one Loop
through the whole compiler on LLVM, and diagnostics for what is not supported."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import optimize
from egraph_compiler.frontend.onnx import control as onnx_control
from egraph_compiler.frontend.onnx.importer import OnnxModel, from_onnx
from egraph_compiler.ir.diagnostics import InvalidArgument, UnsupportedOp
from egraph_compiler.ir.interpret import evaluate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import onnx_conformance  # noqa: E402

F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL

# the backend node tests (onnx 1.23) of these ops, and of the function bodies that use them: every one passes
NODE_TESTS = [
    "test_affine_grid_2d_align_corners_expanded",
    "test_affine_grid_2d_expanded",
    "test_affine_grid_3d_align_corners_expanded",
    "test_affine_grid_3d_expanded",
    "test_identity_opt",
    "test_identity_sequence",
    "test_if",
    "test_if_opt",
    "test_if_seq",
    "test_linear_attention_decode_step_expanded",
    "test_linear_attention_delta_expanded",
    "test_linear_attention_explicit_scale_expanded",
    "test_linear_attention_fp16_expanded",
    "test_linear_attention_gated_delta_beta_scalar_expanded",
    "test_linear_attention_gated_delta_expanded",
    "test_linear_attention_gated_delta_gqa_expanded",
    "test_linear_attention_gated_delta_mqa_expanded",
    "test_linear_attention_gated_expanded",
    "test_linear_attention_gated_per_head_decay_expanded",
    "test_linear_attention_linear_expanded",
    "test_linear_attention_linear_t1_no_past_expanded",
    "test_linear_attention_no_past_explicit_zeros_expanded",
    "test_linear_attention_prefill_with_past_expanded",
    "test_loop11",
    "test_loop13_seq",
    "test_loop16_seq_none",
    "test_optional_get_element_optional_sequence",
    "test_optional_get_element_optional_tensor",
    "test_optional_get_element_sequence",
    "test_optional_get_element_tensor",
    "test_optional_has_element_empty_no_input_name_optional_input",
    "test_optional_has_element_empty_no_input_name_tensor_input",
    "test_optional_has_element_empty_no_input_optional_input",
    "test_optional_has_element_empty_no_input_tensor_input",
    "test_optional_has_element_empty_optional_input",
    "test_optional_has_element_optional_input",
    "test_optional_has_element_tensor_input",
    "test_range_bfloat16_type_positive_delta_expanded",
    "test_range_float16_type_positive_delta_expanded",
    "test_range_float_type_positive_delta_expanded",
    "test_range_int32_type_negative_delta_expanded",
    "test_scan9_multi_state",
    "test_scan9_scalar",
    "test_scan9_sum",
    "test_scan_sum",
    "test_sequence_insert_at_back",
    "test_sequence_insert_at_front",
    "test_sequence_map_add_1_sequence_1_tensor",
    "test_sequence_map_add_1_sequence_1_tensor_expanded",
    "test_sequence_map_add_2_sequences",
    "test_sequence_map_add_2_sequences_expanded",
    "test_sequence_map_extract_shapes",
    "test_sequence_map_extract_shapes_expanded",
    "test_sequence_map_identity_1_sequence",
    "test_sequence_map_identity_1_sequence_1_tensor",
    "test_sequence_map_identity_1_sequence_1_tensor_expanded",
    "test_sequence_map_identity_1_sequence_expanded",
    "test_sequence_map_identity_2_sequences",
    "test_sequence_map_identity_2_sequences_expanded",
    "test_split_to_sequence_1",
    "test_split_to_sequence_2",
    "test_split_to_sequence_nokeepdims",
]


def test_the_backend_node_tests_pass() -> None:
    cases = {c.name: c for c in onnx_conformance.cases() if c.name in NODE_TESTS}
    assert sorted(cases) == sorted(NODE_TESTS)
    failed = [f"{n}: {why}" for n in NODE_TESTS for ok, why in [onnx_conformance.run_case(cases[n], "reference")] if not ok]
    assert not failed, failed


# ---- helpers ---------------------------------------------------------------------------------------------------


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 18, inits: list[Any] = ()) -> Any:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8  # what onnxruntime reads
    return m


def _ort(model: Any, feed: dict[str, Any]) -> list[Any]:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def _ours(m: OnnxModel, feed: dict[str, np.ndarray]) -> list[Any]:
    """The imported graph evaluated by the reference interpreter, its outputs regrouped into sequences."""
    got = evaluate([t.uop for t in m.outputs], {k: v for k, v in feed.items() if k in m.inputs}) if m.outputs else ()

    def grouped(s: Any) -> Any:
        return None if s is None else [grouped(e) for e in s] if isinstance(s, list) else np.asarray(got[s])

    return [grouped(s) for s in m.output_structure]


def _close(got: Any, want: Any) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _close(g, w)
        return
    assert got is not None and np.shape(got) == np.shape(want), (np.shape(got), np.shape(want))
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=1e-5, atol=1e-5)


def _graph(name: str, nodes: list[Any], inputs: list[Any], outputs: list[Any]) -> Any:
    return helper.make_graph(nodes, name, inputs, outputs)


def _vi(name: str, elem: int = F, shape: Any = None) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


# ---- If ----------------------------------------------------------------------------------------------------------


def _if_model(else_shape: tuple[int, ...] = (2, 3), else_op: str = "Neg") -> Any:
    """y = If(c) then x * 2 + w (outer names) else a Neg of x, or (else_shape other) a slice of it."""
    then = _graph(
        "then",
        [helper.make_node("Mul", ["x", "two"], ["t0"]), helper.make_node("Add", ["t0", "w"], ["t_out"])],
        [],
        [_vi("t_out")],
    )
    if else_shape == (2, 3):
        else_nodes = [helper.make_node(else_op, ["x"], ["e_out"])]
    else:
        else_nodes = [helper.make_node("Slice", ["x", "zero", "one", "zero"], ["e_out"])]
    other = _graph("else", else_nodes, [], [_vi("e_out")])
    inits = [
        numpy_helper.from_array(np.float32(2.0), "two"),
        numpy_helper.from_array(np.arange(3, dtype=np.float32), "w"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="the_if")
    return _model([node], [_vi("c", B, []), _vi("x", F, [2, 3])], [_vi("y")], inits=inits)


X23 = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)


@pytest.mark.parametrize("c", [True, False])
def test_if_on_a_known_condition_imports_only_that_branch(c: bool) -> None:
    model = _if_model(else_op="Unique")  # an op the import does not support: only the taken branch may import it
    if c:
        m = from_onnx(model, static={"c": np.array(c)})
        assert list(m.inputs) == ["x"]
        want = _ort(_if_model(), {"c": np.array(c), "x": X23})
        _close(_ours(m, {"x": X23}), want)
    else:
        with pytest.raises(UnsupportedOp, match="Unique is not supported") as info:
            from_onnx(model, static={"c": np.array(c)})
        assert "node 0 ('the_if', If) else_branch: node 0" in str(info.value)


def test_if_on_a_runtime_condition_selects_elementwise() -> None:
    model = _if_model()
    m = from_onnx(model)
    assert set(m.inputs) == {"c", "x"}
    for c in (True, False):
        feed = {"c": np.array(c), "x": X23}
        _close(_ours(m, feed), _ort(model, feed))


def test_if_on_a_runtime_condition_whose_branches_differ_is_a_diagnostic() -> None:
    model = _if_model(else_shape=(1, 3))
    with pytest.raises(UnsupportedOp, match="branches differ in shape") as info:
        from_onnx(model)
    assert "float32[2, 3] in one case, float32[1, 3] in the other" in str(info.value)
    feed = {"c": np.array(False), "x": X23}
    _close(_ours(from_onnx(model, static={"c": np.array(False)}), {"x": X23}), _ort(model, feed))  # known: fine


# ---- Loop --------------------------------------------------------------------------------------------------------


def _loop_model(scan: bool = True, runtime_cond: bool = False, bad_op: bool = False) -> Any:
    """Loop over M (an initializer) with carried (s, k): s = s * 0.5 + x[i] (x an outer name, i the iteration),
    k = k + 1; scan output s + k. The condition: i < 3 (known at each step), or (runtime_cond) sum(s) < limit."""
    nodes = [
        helper.make_node("Unsqueeze", ["i", "ax0"], ["i1"]),
        helper.make_node("Add", ["i1", "one"], ["i2"]),
        helper.make_node("Slice", ["x", "i1", "i2", "ax0"], ["row"]),  # (1, 4)
        helper.make_node("Squeeze", ["row", "ax0"], ["row1"]),
        helper.make_node("Mul", ["s_in", "half"], ["s_half"]),
        helper.make_node("Add", ["s_half", "row1"], ["s_out"]),
        helper.make_node("Add", ["k_in", "one"], ["k_out"]),
        helper.make_node("Cast", ["k_out"], ["k_f"], to=F),
        helper.make_node("Add", ["s_out", "k_f"], ["scan_out"]),
    ]
    if runtime_cond:
        nodes += [
            helper.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0),
            helper.make_node("Less", ["tot", "lim"], ["c_out"]),
        ]
    else:
        nodes += [helper.make_node("Less", ["i", "three"], ["c_out"])]
    if bad_op:
        nodes += [helper.make_node("Unique", ["s_out"], ["u"], name="not_here")]
    outs = [_vi("c_out", B, []), _vi("s_out", F, [4]), _vi("k_out", I64, [1])] + ([_vi("scan_out", F, [4])] if scan else [])
    body = _graph("body", nodes, [_vi("i", I64, []), _vi("c_in", B, []), _vi("s_in", F, [4]), _vi("k_in", I64, [1])], outs)
    inits = [
        numpy_helper.from_array(np.array(6, np.int64), "M"),
        numpy_helper.from_array(np.array(True), "c0"),
        numpy_helper.from_array(np.array([0], np.int64), "ax0"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array(3, np.int64), "three"),
        numpy_helper.from_array(np.float32(0.5), "half"),
        numpy_helper.from_array(np.array([0], np.int64), "k0"),
    ]
    loop_outs = ["s", "k"] + (["scans"] if scan else [])
    node = helper.make_node("Loop", ["M", "c0", "s0", "k0"], loop_outs, body=body, name="the_loop")
    graph_outs = [_vi("s", F, [4]), _vi("k", I64, [1])] + ([_vi("scans", F, [None, 4])] if scan else [])
    ins = [_vi("x", F, [6, 4]), _vi("s0", F, [4])] + ([_vi("lim", F, [])] if runtime_cond else [])
    return _model([node], ins, graph_outs, inits=inits)


XS = np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32)
S0 = np.array([1.0, -2.0, 0.5, 3.0], np.float32)


def test_loop_with_carried_state_and_scan_outputs() -> None:
    model = _loop_model()
    m = from_onnx(model)
    want = _ort(model, {"x": XS, "s0": S0})
    assert np.shape(want[2]) == (4, 4)  # i < 3 stops it after 4 steps of the 6
    _close(_ours(m, {"x": XS, "s0": S0}), want)


def test_loop_on_a_runtime_condition_masks_the_carried_values() -> None:
    model = _loop_model(scan=False, runtime_cond=True)
    m = from_onnx(model)
    for lim in (-100.0, 2.0, 5.0, 100.0):  # stops after 1, a few, or all 6 steps
        feed = {"x": XS, "s0": S0, "lim": np.array(lim, np.float32)}
        _close(_ours(m, feed), _ort(model, feed))


def test_a_loop_through_the_whole_compiler() -> None:
    model = _loop_model()
    m = from_onnx(model)
    prog = optimize(m.outputs, target="llvm")
    got = prog(x=XS, s0=S0)
    for g, w in zip(got, _ort(model, {"x": XS, "s0": S0})):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-5, atol=1e-5)


def test_loop_diagnostics(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnsupportedOp, match="with scan outputs: their length would be known only at run time"):
        from_onnx(_loop_model(scan=True, runtime_cond=True))
    with pytest.raises(UnsupportedOp, match="Unique is not supported") as info:
        from_onnx(_loop_model(bad_op=True))
    assert "node 0 ('the_loop', Loop) body, iteration 0: node 10 ('not_here', Unique)" in str(info.value)
    model = _loop_model()
    model.graph.initializer.pop(0)  # M becomes a graph input: a runtime trip count
    model.graph.input.append(_vi("M", I64, []))
    with pytest.raises(UnsupportedOp, match="trip count M must be known at import"):
        from_onnx(model)
    assert from_onnx(model, static={"M": np.array(2, np.int64)}).outputs[2].shape == (2, 4)
    monkeypatch.setattr(onnx_control, "MAX_UNROLL", 3)
    with pytest.raises(UnsupportedOp, match="more than 3 steps"):
        from_onnx(_loop_model())
    forever = _graph(
        "b", [helper.make_node("Identity", ["c"], ["co"])], [_vi("i", I64, []), _vi("c", B, [])], [_vi("co", B, [])]
    )
    endless = _model([helper.make_node("Loop", ["", ""], [], body=forever)], [], [])
    with pytest.raises(UnsupportedOp, match="never ends"):
        from_onnx(endless)


# ---- Scan --------------------------------------------------------------------------------------------------------


def _scan_model() -> Any:
    """Two states (a running sum and a running max) over two scan inputs: a (5, 3) read along axis 0 backwards and
    b (3, 5) read along axis 1; outputs stacked along axis 1 in reverse and along axis 0 forward."""
    body = _graph(
        "body",
        [
            helper.make_node("Add", ["sum_in", "a_t"], ["sum_out"]),
            helper.make_node("Max", ["max_in", "b_t"], ["max_out"]),
            helper.make_node("Mul", ["sum_out", "b_t"], ["y1"]),
            helper.make_node("Sub", ["max_out", "a_t"], ["y2"]),
        ],
        [_vi("sum_in", F, [3]), _vi("max_in", F, [3]), _vi("a_t", F, [3]), _vi("b_t", F, [3])],
        [_vi("sum_out", F, [3]), _vi("max_out", F, [3]), _vi("y1", F, [3]), _vi("y2", F, [3])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "m0", "a", "b"],
        ["s", "mx", "y1s", "y2s"],
        body=body,
        num_scan_inputs=2,
        scan_input_axes=[0, 1],
        scan_input_directions=[1, 0],
        scan_output_axes=[1, -2],
        scan_output_directions=[1, 0],
    )
    ins = [_vi("s0", F, [3]), _vi("m0", F, [3]), _vi("a", F, [5, 3]), _vi("b", F, [3, 5])]
    outs = [_vi("s", F, [3]), _vi("mx", F, [3]), _vi("y1s", F, [3, 5]), _vi("y2s", F, [5, 3])]
    return _model([node], ins, outs)


def test_scan_with_reverse_directions_and_axes() -> None:
    model = _scan_model()
    rng = np.random.default_rng(2)
    feed = {
        "s0": rng.standard_normal(3).astype(np.float32),
        "m0": np.full(3, -1.0, np.float32),
        "a": rng.standard_normal((5, 3)).astype(np.float32),
        "b": rng.standard_normal((3, 5)).astype(np.float32),
    }
    _close(_ours(from_onnx(model), feed), _ort(model, feed))


# ---- sequences and optionals -----------------------------------------------------------------------------------


def _seq_vi(name: str, shape: Any = None) -> Any:
    return helper.make_tensor_sequence_value_info(name, F, shape)


def test_sequence_round_trips() -> None:
    """A sequence input and a split tensor, inserted, erased, read, mapped and concatenated (on a new axis and
    not), with their lengths; a sequence output."""
    body = _graph("sq", [helper.make_node("Mul", ["e", "e"], ["e2"])], [_vi("e", F, [2, 3])], [_vi("e2", F, [2, 3])])
    nodes = [
        helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"], axis=0),  # (2,3), (2,3) of a (4, 3)
        helper.make_node("SequenceInsert", ["parts", "extra"], ["p3"]),  # at the end
        helper.make_node("SequenceInsert", ["p3", "x_head", "zero"], ["p4"]),  # at the front
        helper.make_node("SequenceErase", ["p4", "minus_two"], ["p5"]),
        helper.make_node("SequenceAt", ["p5", "minus_one"], ["last"]),
        helper.make_node("SequenceLength", ["p5"], ["n"]),
        helper.make_node("SequenceMap", ["p5"], ["sq5"], body=body),
        helper.make_node("ConcatFromSequence", ["sq5"], ["cat"], axis=1),
        helper.make_node("ConcatFromSequence", ["inp"], ["stacked"], axis=-1, new_axis=1),
        helper.make_node("SequenceConstruct", ["last", "x_head"], ["pair"]),
        helper.make_node("Optional", ["pair"], ["opt"]),
        helper.make_node("OptionalHasElement", ["opt"], ["has"]),
        helper.make_node("OptionalGetElement", ["opt"], ["pair2"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([2, 2], np.int64), "sizes"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(-2, np.int64), "minus_two"),
        numpy_helper.from_array(np.array(-1, np.int64), "minus_one"),
    ]
    ins = [_vi("x", F, [4, 3]), _vi("extra", F, [2, 3]), _vi("x_head", F, [2, 3]), _seq_vi("inp", [2])]
    outs = [
        _vi("last", F, [2, 3]),
        _vi("n", I64, []),
        _vi("cat", F, [2, None]),
        _vi("stacked", F, [2, None]),
        _vi("has", B, []),
        _seq_vi("pair2", [2, 3]),
    ]
    model = _model(nodes, ins, outs, inits=inits)
    rng = np.random.default_rng(3)
    x, extra, head = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (2, 3), (2, 3)))
    inp = [rng.standard_normal(2).astype(np.float32) for _ in range(3)]
    m = from_onnx(model, shapes={"inp": [(2,), (2,), (2,)]})
    assert [k for k in m.inputs if k.startswith("inp")] == ["inp_0", "inp_1", "inp_2"]
    assert m.output_names[-2:] == ["pair2_0", "pair2_1"] and isinstance(m.output_structure[-1], list)
    got = _ours(m, {"x": x, "extra": extra, "x_head": head, **{f"inp_{i}": v for i, v in enumerate(inp)}})
    want = _ort(model, {"x": x, "extra": extra, "x_head": head, "inp": inp})
    _close(got, want)
    assert got[1] == 3 and got[3].shape == (2, 3)


def test_an_empty_optional_and_a_sequence_bound_at_import() -> None:
    nodes = [
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
        helper.make_node("SequenceLength", ["s"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
    ]
    opt = helper.make_tensor_value_info("o", F, [3])
    opt.type.CopyFrom(helper.make_optional_type_proto(opt.type))
    model = _model(nodes, [opt, _seq_vi("s")], [_vi("has", B, []), _vi("n", I64, []), _vi("cat", F, [None])])
    seq = [np.arange(2, dtype=np.float32), np.ones(3, np.float32)]
    m = from_onnx(model, static={"o": None, "s": seq})
    assert m.inputs == {}
    got = _ours(m, {})
    assert got[0] == np.array(False) and got[1] == 2
    np.testing.assert_array_equal(got[2], np.concatenate(seq))
    assert _ours(from_onnx(model, static={"s": seq}, shapes={"o": (3,)}), {"o": np.ones(3, np.float32)})[0]


def test_sequence_and_optional_diagnostics() -> None:
    seq_add = _model([helper.make_node("Add", ["s", "s"], ["y"], name="adds")], [_seq_vi("s", [2])], [_vi("y", F, [2])])
    with pytest.raises(UnsupportedOp, match="needs its length and the shape of each element"):
        from_onnx(seq_add)
    with pytest.raises(UnsupportedOp, match="a sequence input \\(the op Add takes tensors\\)") as info:
        from_onnx(seq_add, shapes={"s": [(2,)]})
    assert "node 0 ('adds', Add)" in str(info.value)
    with pytest.raises(InvalidArgument, match="does not fit the declared shape"):
        from_onnx(seq_add, shapes={"s": [(2,), (3,)]})
    empty = _model(
        [
            helper.make_node("Optional", [], ["o"], type=helper.make_tensor_type_proto(F, [2])),
            helper.make_node("OptionalGetElement", ["o"], ["y"]),
        ],
        [],
        [_vi("y", F, [2])],
    )
    with pytest.raises(InvalidArgument, match="the optional is empty"):
        from_onnx(empty)
    at = _model([helper.make_node("SequenceAt", ["s", "p"], ["y"])], [_seq_vi("s", [2]), _vi("p", I64, [])], [_vi("y", F, [2])])
    with pytest.raises(UnsupportedOp, match="position must be known at import"):
        from_onnx(at, shapes={"s": [(2,), (2,)]})
    with pytest.raises(InvalidArgument, match="position 2 outside a sequence of 2 elements"):
        from_onnx(at, shapes={"s": [(2,), (2,)]}, static={"p": np.array(2)})
