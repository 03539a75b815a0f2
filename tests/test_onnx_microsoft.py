"""The com.microsoft ops of exported transformers (egraph_compiler/frontend/onnx/microsoft.py) against onnxruntime, which
implements them: one-node models with random inputs, through the reference interpreter and through LLVM."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from egraph_compiler import optimize
from egraph_compiler.frontend.onnx.importer import from_onnx
from egraph_compiler.ir.diagnostics import UnsupportedOp
from egraph_compiler.ir.interpret import evaluate

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
helper = onnx.helper
F = onnx.TensorProto.FLOAT


def _model(op: str, inputs: dict[str, tuple[int, ...]], outputs: int = 1, **attrs: Any) -> Any:
    names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, list(inputs), names, domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, F, None) for n in names],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


CASES = [
    ("FusedMatMul", {"a": (2, 4, 3), "b": (2, 5, 4)}, 1, {"alpha": 0.5, "transA": 1, "transB": 1}),
    ("FusedMatMul", {"a": (3, 4), "b": (4, 6)}, 1, {}),
    ("Gelu", {"x": (3, 7)}, 1, {}),
    ("BiasGelu", {"x": (3, 7), "b": (7,)}, 1, {}),
    ("FastGelu", {"x": (3, 7), "b": (7,)}, 1, {}),
    ("FastGelu", {"x": (2, 5)}, 1, {}),
    ("QuickGelu", {"x": (3, 7)}, 1, {"alpha": 1.5}),
    ("SkipLayerNormalization", {"x": (2, 3, 8), "s": (2, 3, 8), "g": (8,), "be": (8,), "bi": (8,)}, 4, {"epsilon": 1e-5}),
    ("SkipLayerNormalization", {"x": (2, 3, 8), "s": (2, 3, 8), "g": (8,)}, 1, {}),
    ("SkipSimplifiedLayerNormalization", {"x": (2, 3, 8), "s": (2, 3, 8), "g": (8,)}, 4, {"epsilon": 1e-6}),
]


@pytest.mark.parametrize(("op", "inputs", "outputs", "attrs"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_matches_onnxruntime(op: str, inputs: dict[str, tuple[int, ...]], outputs: int, attrs: dict[str, Any]) -> None:
    model = _model(op, inputs, outputs, **attrs)
    rng = np.random.default_rng(len(inputs) + outputs)
    feed = {n: rng.standard_normal(s).astype(np.float32) for n, s in inputs.items()}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    m = from_onnx(model)
    got = evaluate([t.uop for t in m.outputs], feed)
    for i, (g, w) in enumerate(zip(got, want)):
        if op.startswith("SkipSimplified") and i == 1:
            continue  # onnxruntime leaves the mean of a simplified normalization unset
        np.testing.assert_allclose(np.asarray(g).reshape(np.shape(w)), w, rtol=1e-4, atol=1e-5, err_msg=f"{op} output {i}")


def test_a_transformer_layer_of_contrib_ops_compiles() -> None:
    """FusedMatMul -> BiasGelu -> SkipLayerNormalization, as onnxruntime's transformer optimizer writes them."""
    nodes = [
        helper.make_node("FusedMatMul", ["x", "w"], ["h"], domain="com.microsoft", alpha=1.0),
        helper.make_node("BiasGelu", ["h", "b"], ["a"], domain="com.microsoft"),
        helper.make_node("SkipLayerNormalization", ["a", "x", "g", "be"], ["y"], domain="com.microsoft", epsilon=1e-5),
    ]
    shapes = {"x": (4, 16), "w": (16, 16), "b": (16,), "g": (16,), "be": (16,)}
    graph = helper.make_graph(
        nodes,
        "layer",
        [helper.make_tensor_value_info(n, F, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    rng = np.random.default_rng(7)
    feed = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    prog = optimize(from_onnx(model).outputs, target="llvm")
    got = prog(**feed)
    np.testing.assert_allclose(got[0] if isinstance(got, (list, tuple)) else got, want, rtol=1e-4, atol=1e-5)


def test_other_domains_and_unknown_contrib_ops_are_diagnostics() -> None:
    with pytest.raises(UnsupportedOp, match="MatMulNBits"):
        from_onnx(_model("MatMulNBits", {"a": (2, 4), "b": (4, 4)}))
    node = helper.make_node("Foo", ["x"], ["y"], domain="org.example")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", F, (2,))], [helper.make_tensor_value_info("y", F, None)]
    )
    with pytest.raises(UnsupportedOp, match=r"org\.example"):
        from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.example", 1)]))
