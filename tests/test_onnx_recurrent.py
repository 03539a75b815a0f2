"""ONNX's recurrent ops (egraph_compiler/frontend/onnx/recurrent.py: RNN, GRU, LSTM) through from_onnx: the ONNX backend node
tests, models of every option against onnxruntime, PyTorch's nn.RNN/GRU/LSTM with their weights converted, one
LSTM through the whole compiler on LLVM, and diagnostics for what is not supported. The ops are put in the
import's op table for each test (monkeypatch), as onnx_import registers them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")
import onnx
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import optimize
from egraph_compiler.frontend.onnx import importer as onnx_import
from egraph_compiler.frontend.onnx import recurrent as onnx_recurrent
from egraph_compiler.frontend.onnx.importer import from_onnx
from egraph_compiler.ir.diagnostics import CompilerError, InvalidArgument, UnsupportedOp
from egraph_compiler.ir.interpret import evaluate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import onnx_conformance  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# the backend node tests of these ops in onnx 1.23: every one passes
NODE_TESTS = [
    "test_gru_batchwise",
    "test_gru_bidirectional",
    "test_gru_defaults",
    "test_gru_reverse",
    "test_gru_seq_length",
    "test_gru_with_initial_bias",
    "test_lstm_batchwise",
    "test_lstm_bidirectional",
    "test_lstm_defaults",
    "test_lstm_reverse",
    "test_lstm_with_initial_bias",
    "test_lstm_with_peepholes",
    "test_rnn_seq_length",
    "test_simple_rnn_batchwise",
    "test_simple_rnn_bidirectional",
    "test_simple_rnn_defaults",
    "test_simple_rnn_reverse",
    "test_simple_rnn_with_initial_bias",
]


@pytest.fixture(autouse=True)
def recurrent(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, fn in onnx_recurrent.OPS.items():
        monkeypatch.setitem(onnx_import.OPS, name, fn)
    yield


def test_the_backend_node_tests_pass() -> None:
    cases = [c for c in onnx_conformance.cases() if any(k in c.name for k in ("_rnn_", "_gru_", "_lstm_"))]
    results = {c.name: onnx_conformance.run_case(c, "reference") for c in cases}
    for name, (ok, why) in sorted(results.items()):
        print(f"{name}: {'pass' if ok else 'FAIL ' + why}")
    assert set(NODE_TESTS) <= set(results), sorted(set(NODE_TESTS) - set(results))
    failed = {n: why for n, (ok, why) in results.items() if not ok}
    assert not failed, failed


# ---- models of our own against onnxruntime -------------------------------------------------------------------


def _recurrent_model(
    op: str,
    rng: np.random.Generator,
    *,
    seq: int = 4,
    batch: int = 3,
    size: int = 5,
    hidden: int = 4,
    lens: list[int] | None = None,
    lens_at_run: bool = False,
    initial: bool = False,
    peepholes: bool = False,
    bias: bool = True,
    layout: int = 0,
    opset: int = 14,
    **attrs: Any,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One recurrent node with random weights (initializers) and its feeds; outputs Y, Y_h (and Y_c)."""
    nd = 2 if attrs.get("direction") == "bidirectional" else 1
    g = GATES[op]
    x = rng.standard_normal((seq, batch, size) if layout == 0 else (batch, seq, size)).astype(np.float32)
    feeds = {"X": x}
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape)]
    inits = [
        numpy_helper.from_array((rng.standard_normal((nd, g * hidden, size)) * 0.7).astype(np.float32), "W"),
        numpy_helper.from_array((rng.standard_normal((nd, g * hidden, hidden)) * 0.7).astype(np.float32), "R"),
    ]
    names = ["X", "W", "R", ""]
    if bias:
        names[3] = "B"
        inits.append(numpy_helper.from_array((rng.standard_normal((nd, 2 * g * hidden)) * 0.5).astype(np.float32), "B"))
    names.append("")
    if lens is not None:
        names[4] = "L"
        if lens_at_run:
            feeds["L"] = np.array(lens, np.int32)
            inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, [batch]))
        else:
            inits.append(numpy_helper.from_array(np.array(lens, np.int32), "L"))
    state = (nd, batch, hidden) if layout == 0 else (batch, nd, hidden)
    for name in ("H0", "C0")[: 2 if op == "LSTM" else 1]:
        if initial:
            feeds[name] = rng.standard_normal(state).astype(np.float32)
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, state))
        names.append(name if initial else "")
    if peepholes:
        names.append("P")
        inits.append(numpy_helper.from_array(rng.standard_normal((nd, 3 * hidden)).astype(np.float32), "P"))
    while names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, names, outs, hidden_size=hidden, **({"layout": layout} if layout else {}), **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_empty_tensor_value_info(o) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), feeds


def _ours(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    m = from_onnx(model)
    return [np.asarray(v) for v in evaluate([t.uop for t in m.outputs], {k: v for k, v in feeds.items() if k in m.inputs})]


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in sess.run(None, feeds)]


def _close(got: list[np.ndarray], want: list[np.ndarray], tol: float = 1e-5) -> None:
    assert len(got) >= len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (i, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"output {i}")


ORT_CASES: list[tuple[str, dict[str, Any]]] = [
    ("RNN", {}),
    ("RNN", {"direction": "bidirectional", "initial": True}),
    ("RNN", {"direction": "reverse", "clip": 0.3}),
    ("RNN", {"lens": [4, 2, 1]}),
    (
        "RNN",
        {"activations": ["Relu", "Affine"], "activation_alpha": [0.5], "activation_beta": [0.1], "direction": "bidirectional"},
    ),
    ("RNN", {"activations": ["LeakyRelu"], "activation_alpha": [0.2]}),
    ("RNN", {"activations": ["LeakyRelu"]}),  # the default alpha 0.01
    ("RNN", {"activations": ["ThresholdedRelu"], "activation_alpha": [0.3]}),
    ("RNN", {"activations": ["ScaledTanh"], "activation_alpha": [0.7], "activation_beta": [1.3]}),
    ("RNN", {"activations": ["HardSigmoid"]}),  # the defaults 0.2, 0.5
    ("RNN", {"activations": ["Elu"], "activation_alpha": [0.8]}),
    ("RNN", {"activations": ["Softsign"]}),
    ("RNN", {"activations": ["Softplus"]}),
    ("RNN", {"activations": ["Sigmoid"], "opset": 7, "bias": False}),
    ("GRU", {}),
    ("GRU", {"direction": "bidirectional", "initial": True, "linear_before_reset": 1}),
    ("GRU", {"linear_before_reset": 1, "clip": 0.5, "direction": "reverse"}),
    ("GRU", {"clip": 0.4, "initial": True}),
    ("GRU", {"lens": [2, 4, 3], "direction": "reverse", "initial": True}),
    ("GRU", {"lens": [1, 4, 3], "lens_at_run": True, "direction": "bidirectional", "linear_before_reset": 1}),
    ("GRU", {"activations": ["HardSigmoid", "LeakyRelu"], "activation_alpha": [0.3, 0.2], "activation_beta": [0.45]}),
    ("LSTM", {}),
    ("LSTM", {"direction": "bidirectional", "initial": True, "peepholes": True}),
    ("LSTM", {"clip": 0.4, "initial": True, "peepholes": True}),
    ("LSTM", {"input_forget": 1, "initial": True, "peepholes": True}),
    ("LSTM", {"lens": [4, 2, 1], "initial": True}),
    ("LSTM", {"lens": [3, 1, 4], "lens_at_run": True, "direction": "bidirectional", "initial": True}),
    ("LSTM", {"lens": [4, 4, 4], "direction": "reverse"}),  # every entry the full length: no masks
    (
        "LSTM",
        {
            "direction": "bidirectional",
            "activations": ["HardSigmoid", "Elu", "Softsign", "Sigmoid", "ScaledTanh", "Affine"],
            "activation_alpha": [0.3, 0.7, 0.6, 0.9],
            "activation_beta": [0.45, 1.2, 0.1],
        },
    ),
]


@pytest.mark.parametrize("op,options", ORT_CASES, ids=[f"{op}-{i}" for i, (op, _) in enumerate(ORT_CASES)])
def test_a_recurrent_node_matches_onnxruntime(op: str, options: dict[str, Any]) -> None:
    model, feeds = _recurrent_model(op, np.random.default_rng(len(str(options))), **options)
    _close(_ours(model, feeds), _onnxruntime(model, feeds))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layout_1_matches_onnxruntime_on_the_transposed_model(op: str) -> None:
    """onnxruntime runs only layout=0: the same model with layout=0 and transposed inputs and outputs answers."""
    model, feeds = _recurrent_model(op, np.random.default_rng(3), layout=1, initial=True, direction="bidirectional")
    seq_major = onnx.ModelProto()
    seq_major.CopyFrom(model)
    del seq_major.graph.node[0].attribute[:]
    seq_major.graph.node[0].attribute.extend(a for a in model.graph.node[0].attribute if a.name != "layout")
    for vi in seq_major.graph.input:
        dims = vi.type.tensor_type.shape.dim
        dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
    want = _onnxruntime(seq_major, {k: np.ascontiguousarray(v.swapaxes(0, 1)) for k, v in feeds.items()})
    want = [want[0].transpose(2, 0, 1, 3), *[w.transpose(1, 0, 2) for w in want[1:]]]
    got = _ours(model, feeds)
    assert got[0].shape == (3, 4, 2, 4)  # (batch, seq, directions, hidden)
    _close(got, want)


# ---- PyTorch's modules, their weights converted ------------------------------------------------------------------


def _torch_gates(t: Any, op: str) -> np.ndarray:
    """A torch weight or bias (gates stacked on axis 0) in ONNX's gate order."""
    a = t.detach().numpy()
    parts = np.split(a, GATES[op])
    if op == "LSTM":  # torch i, f, g, o -> ONNX i, o, f, c
        parts = [parts[0], parts[3], parts[1], parts[2]]
    elif op == "GRU":  # torch r, z, n -> ONNX z, r, h
        parts = [parts[1], parts[0], parts[2]]
    return np.concatenate(parts)


@pytest.mark.parametrize(
    "op,bidirectional,batch_first",
    [("LSTM", True, True), ("LSTM", False, False), ("GRU", True, False), ("GRU", False, True), ("RNN", True, True)],
)
def test_torch_modules_with_their_weights_converted(op: str, bidirectional: bool, batch_first: bool) -> None:
    """nn.GRU is ONNX's GRU with linear_before_reset=1; batch_first is layout=1."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    seq, batch, size, hidden = 5, 2, 3, 4
    net = getattr(torch.nn, op)(size, hidden, batch_first=batch_first, bidirectional=bidirectional)
    nd = 2 if bidirectional else 1
    x = torch.randn((batch, seq, size) if batch_first else (seq, batch, size))
    h0 = torch.randn(nd, batch, hidden)
    c0 = torch.randn(nd, batch, hidden)
    with torch.no_grad():
        y, state = net(x, (h0, c0) if op == "LSTM" else h0)
    suffixes = ["", "_reverse"][:nd]
    w = np.stack([_torch_gates(getattr(net, f"weight_ih_l0{s}"), op) for s in suffixes])
    r = np.stack([_torch_gates(getattr(net, f"weight_hh_l0{s}"), op) for s in suffixes])
    b = np.stack([np.concatenate([_torch_gates(getattr(net, f"bias_{k}_l0{s}"), op) for k in ("ih", "hh")]) for s in suffixes])
    layout = 1 if batch_first else 0

    def states(v: Any) -> np.ndarray:
        return v.numpy().transpose(1, 0, 2) if batch_first else v.numpy()

    feeds = {"X": x.numpy(), "H0": states(h0)}
    names = ["X", "W", "R", "B", "", "H0"]
    if op == "LSTM":
        feeds["C0"] = states(c0)
        names.append("C0")
    attrs: dict[str, Any] = {"hidden_size": hidden, "direction": "bidirectional" if bidirectional else "forward"}
    if layout:
        attrs["layout"] = 1
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    outs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, **attrs)],
        "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in outs],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in (("W", w), ("R", r), ("B", b))],
    )
    got = _ours(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), feeds)
    # torch's output has the directions side by side on the last axis, its final states are (directions, batch, hidden)
    if batch_first:  # Y (batch, seq, directions, hidden), the states (batch, directions, hidden)
        y_ours, finals = got[0].reshape(batch, seq, nd * hidden), [g.transpose(1, 0, 2) for g in got[1:]]
    else:  # Y (seq, directions, batch, hidden)
        y_ours, finals = got[0].transpose(0, 2, 1, 3).reshape(seq, batch, nd * hidden), got[1:]
    np.testing.assert_allclose(y_ours, y.numpy(), rtol=1e-5, atol=1e-5)
    for g, want in zip(finals, state if op == "LSTM" else (state,), strict=True):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-5, atol=1e-5)


# ---- the whole compiler --------------------------------------------------------------------------------------


def test_an_lstm_compiled_for_llvm_matches_onnxruntime() -> None:
    model, feeds = _recurrent_model(
        "LSTM",
        np.random.default_rng(7),
        seq=2,
        batch=2,
        size=3,
        hidden=3,
        initial=True,
        peepholes=True,
        lens=[2, 1],
        lens_at_run=True,
    )
    m = from_onnx(model)
    prog = optimize(m.outputs, target="llvm")
    got = prog(**{k: v for k, v in feeds.items() if k in prog.inputs})
    _close(list(got if isinstance(got, tuple) else (got,)), _onnxruntime(model, feeds), tol=1e-4)


# ---- diagnostics ---------------------------------------------------------------------------------------------


def test_an_unsupported_activation_names_the_node_and_the_activation() -> None:
    model, _ = _recurrent_model("LSTM", np.random.default_rng(0), activations=["Sigmoid", "Swish", "Tanh"])
    with pytest.raises(UnsupportedOp) as e:
        from_onnx(model)
    assert "LSTM" in e.value.at and "node 0" in e.value.at
    assert "'Swish'" in e.value.why and "HardSigmoid" in e.value.why


@pytest.mark.parametrize(
    "op,options,error,words",
    [
        ("GRU", {"layout": 2}, UnsupportedOp, "layout=2"),
        ("RNN", {"direction": "sideways"}, UnsupportedOp, "direction 'sideways'"),
        ("RNN", {"activations": ["Tanh", "Tanh", "Tanh"]}, InvalidArgument, "3 activations"),
        ("LSTM", {"lens": [5, 1, 1]}, InvalidArgument, "sequence_lens"),
        ("GRU", {"clip": -1.0}, InvalidArgument, "clip"),
    ],
)
def test_bad_or_unsupported_attributes_are_diagnostics(
    op: str, options: dict[str, Any], error: type[CompilerError], words: str
) -> None:
    model, _ = _recurrent_model(op, np.random.default_rng(0), **options)
    with pytest.raises(error) as e:
        from_onnx(model)
    assert words in e.value.why and op in e.value.at


def test_a_hidden_size_that_disagrees_with_r_is_a_diagnostic() -> None:
    model, _ = _recurrent_model("GRU", np.random.default_rng(0))
    next(a for a in model.graph.node[0].attribute if a.name == "hidden_size").i = 5
    with pytest.raises(InvalidArgument, match="hidden_size=5"):
        from_onnx(model)
