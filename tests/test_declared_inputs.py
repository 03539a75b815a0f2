"""A program's inputs are the placeholders the user declared, whether or not an output still reads them.

An input the optimizer finds the outputs do not depend on, a Frontend-IR input no node reads and an ONNX graph input
no output reads are all accepted (their shape and dtype checked, their values ignored): a caller passes what the
graph declares. Results are compared with numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from egraph_compiler import Tensor, cli, optimize
from egraph_compiler.ir.diagnostics import CompilerError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("target", ["reference", "llvm"])
def test_an_input_the_outputs_stop_reading_is_still_accepted_and_checked(target: str) -> None:
    a, b = Tensor.empty(3, name="a"), Tensor.empty(3, name="b")
    out = a.pad(((1, 1),)).shrink(((0, 1),)) + b[:1]  # the padding alone: a is never read
    prog = optimize(out, target=target, cache=False)
    assert prog.inputs == ["a", "b"]
    av, bv = np.array([5, 6, 7], np.float32), np.array([1.5, 2, 3], np.float32)
    np.testing.assert_array_equal(prog(a=av, b=bv), bv[:1])
    with pytest.raises(CompilerError, match="E1404"):  # still required ...
        prog(b=bv)
    with pytest.raises(CompilerError, match=r"E1404.*shape"):  # ... and still checked
        prog(a=np.ones(4, np.float32), b=bv)


@pytest.mark.parametrize("target", ["reference", "llvm"])
def test_inputs_keyword_declares_the_signature_in_its_order(target: str) -> None:
    a, b, c = (Tensor.empty((2, 2), name=n) for n in "abc")
    prog = optimize(a * 2 + c, target=target, inputs={"b": b, "c": c, "a": a}, cache=False)
    assert prog.inputs == ["b", "c", "a"]
    av, cv = np.arange(4, dtype=np.float32).reshape(2, 2), np.full((2, 2), 0.5, np.float32)
    np.testing.assert_array_equal(prog(a=av, b=np.zeros((2, 2), np.float32), c=cv), av * 2 + cv)


@pytest.mark.parametrize(
    "inputs, why",
    [
        ("a", "got str"),
        ([Tensor.empty(2, name="a") + 1], "not a placeholder"),
        ([], "reads the placeholder 'a'"),
    ],
)
def test_inputs_keyword_that_misses_or_is_not_placeholders_is_diagnosed(inputs: object, why: str) -> None:
    a = Tensor.empty(2, name="a")
    with pytest.raises(CompilerError, match="E1006") as e:
        optimize(a + 1, target="reference", inputs=inputs, cache=False)
    assert why in str(e.value)


def test_two_declared_inputs_with_one_name_are_refused() -> None:
    a = Tensor.empty(2, name="a")
    with pytest.raises(CompilerError, match=r"E1006.*share the name"):
        optimize(a + 1, target="reference", inputs=[a, Tensor.empty(2, name="a", dtype="int32")], cache=False)


def test_cli_runs_a_frontend_ir_file_with_an_unused_declared_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((ROOT / "examples" / "gemm_bias_relu.json").read_text())
    doc["signature"]["inputs"].append({"tensor": "extra", "role": "data", "mutability": "immutable"})
    doc["tensors"]["extra"] = {"dtype": "fp16", "shape": ["N"]}
    path = tmp_path / "unused.json"
    path.write_text(json.dumps(doc))
    rc = cli.main(["run", str(path), "--target", "reference", "--check"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "check: PASS" in out


def test_an_onnx_graph_input_no_output_reads_is_accepted() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from egraph_compiler.frontend.onnx.importer import from_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x, mask], [y])
    model = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    onnx.checker.check_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    prog = optimize(model.outputs, target="llvm", inputs=model.inputs, cache=False)
    xv = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    (got,) = prog(x=xv, mask=np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(got, np.maximum(xv, 0))
