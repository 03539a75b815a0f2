"""ONNX import (egraph_compiler/frontend/onnx/importer.py): the ONNX backend node tests that the onnx package generates keep
passing (tests/onnx_expected_pass.txt, written by bench/onnx_conformance.py --write-expected), a sample of them
through the whole compiler on LLVM, exported PyTorch models against onnxruntime where both are installed, and an
unsupported op or a free dimension is a diagnostic naming the node."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
import onnx
from onnx import TensorProto, helper

from egraph_compiler import Tensor, optimize
from egraph_compiler.frontend.onnx.importer import from_onnx
from egraph_compiler.ir.diagnostics import CompilerError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import onnx_conformance  # noqa: E402

EXPECTED = sorted((ROOT / "tests" / "onnx_expected_pass.txt").read_text().split())
COMPILED = EXPECTED[::16]  # every 16th through optimize + LLVM (the rest through the reference interpreter)


@pytest.fixture(scope="module")
def node_cases() -> dict[str, object]:
    return {c.name: c for c in onnx_conformance.cases()}


def test_the_node_tests_that_passed_still_pass(node_cases: dict[str, object]) -> None:
    assert len(EXPECTED) > 800
    failed = []
    for name in EXPECTED:
        ok, why = onnx_conformance.run_case(node_cases[name], "reference")
        if not ok:
            failed.append(f"{name}: {why}")
    assert not failed, f"{len(failed)} regressions, e.g. {failed[:5]}"


@pytest.mark.parametrize("name", COMPILED)
def test_node_tests_through_the_whole_compiler(name: str, node_cases: dict[str, object]) -> None:
    ok, why = onnx_conformance.run_case(node_cases[name], "llvm")
    assert ok, why


def _model(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", 17)])


def test_an_unsupported_op_names_the_node_and_the_op() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    m = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Unique", ["r"], ["y"], name="hm")], [x], [y])
    with pytest.raises(CompilerError, match="Unique is not supported") as info:
        from_onnx(m)
    assert "node 1 ('hm', Unique)" in str(info.value)


@pytest.mark.parametrize("e", [3.0, 2.0, 0.5, -1.0])
def test_pow_by_a_known_exponent_needs_no_logarithm(e: float) -> None:
    """transformers' tanh GELU has x ** 3.0 with the exponent an initializer: a whole exponent multiplies (the
    general pow, exp2(e * log2|x|) with a negative base's checks, ran its kernel 8x slower); others stay pow."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    k = helper.make_tensor("k", TensorProto.FLOAT, [], [e])
    g = helper.make_graph([helper.make_node("Pow", ["x", "k"], ["y"])], "g", [x], [y], initializer=[k])
    m = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    ops = {u.op.name for u in m.outputs[0].uop.toposort()}
    assert ("LOG2" in ops) == (e == 0.5)
    xv = (
        np.linspace(-2.5, 2.5, 10, dtype=np.float32).reshape(2, 5)
        if e != 0.5
        else np.linspace(0, 4, 10, dtype=np.float32).reshape(2, 5)
    )
    got = optimize(m.outputs, target="llvm", inputs=m.inputs)(x=xv)[0]
    np.testing.assert_allclose(got, np.power(xv, np.float32(e)), rtol=1e-6)


def test_a_free_dimension_needs_a_shape_and_then_compiles() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "g", [x], [y], initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CompilerError, match="not fixed"):
        from_onnx(m)
    imported = from_onnx(m, shapes={"x": (5, 3)})
    assert list(imported.inputs) == ["x"] and imported.output_names == ["y"]
    prog = optimize(imported.outputs, target="llvm")
    xv = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_allclose(prog(x=xv)[0], xv * np.array([1, 2, 3], np.float32))
    assert all(isinstance(t, Tensor) for t in imported.outputs)


HAVE_PEERS = all(importlib.util.find_spec(m) is not None for m in ("torch", "onnxruntime"))
EXPORTERS = ["torchscript", *(["dynamo"] if importlib.util.find_spec("onnxscript") is not None else [])]


def _exported_model(kind: str) -> tuple[object, object]:
    """A small PyTorch model of each family the model benchmark exports, with an input."""
    import torch
    from torch import nn

    if kind == "mlp":
        return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10), nn.Softmax(-1)), torch.randn(8, 32)
    if kind == "cnn":
        net = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, 5),
        )
        return net, torch.randn(2, 3, 16, 16)
    # a pre-norm transformer layer (self-attention with a causal mask, GELU MLP), as exported transformers have
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)

    class Causal(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(6))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x, src_mask=self.mask, is_causal=True)

    return Causal(), torch.randn(2, 6, 32)


@pytest.mark.skipif(not HAVE_PEERS, reason="needs torch and onnxruntime (pip install -e '.[models]')")
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
def test_an_exported_pytorch_model_matches_onnxruntime(kind: str, exporter: str, tmp_path: Path) -> None:
    """Both of torch's exporters (the dynamo one, the default since torch 2.9, needs onnxscript)."""
    import onnxruntime
    import torch

    torch.manual_seed(0)
    net, x = _exported_model(kind)
    net.eval()  # type: ignore[attr-defined]
    path = tmp_path / f"{kind}.onnx"
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the fused encoder-layer kernel has no ONNX export
    try:
        with torch.no_grad():
            torch.onnx.export(net, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=exporter == "dynamo")
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    xv = x.numpy()  # type: ignore[attr-defined]
    want = onnxruntime.InferenceSession(str(path)).run(None, {"x": xv})[0]
    imported = from_onnx(path)
    got = optimize(imported.outputs, target="llvm", inputs=imported.inputs)(x=xv)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(
    not HAVE_PEERS or importlib.util.find_spec("transformers") is None or "dynamo" not in EXPORTERS,
    reason="needs torch, onnxscript, onnxruntime and transformers",
)
def test_an_exported_transformers_gpt2_matches_onnxruntime(tmp_path: Path) -> None:
    """transformers' own GPT-2 (token and position embeddings, its tanh GELU, the causal mask it builds), random
    weights, exported as a user would: integer token ids in."""
    import onnxruntime
    import torch
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=16, vocab_size=50, bos_token_id=0, eos_token_id=0)
    gpt2 = GPT2Model(cfg).eval()

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt2 = gpt2

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.gpt2(input_ids=ids, use_cache=False).last_hidden_state

    ids = torch.randint(0, 50, (1, 8))
    path = tmp_path / "gpt2.onnx"
    with torch.no_grad():
        torch.onnx.export(LastHidden(), (ids,), str(path), input_names=["x"], output_names=["y"], dynamo=True)
    want = onnxruntime.InferenceSession(str(path)).run(None, {"x": ids.numpy()})[0]
    imported = from_onnx(path)
    got = optimize(imported.outputs, target="llvm", inputs=imported.inputs)(x=ids.numpy())[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_egc_onnx_runs_a_file_on_npz_inputs_and_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from egraph_compiler.cli import main

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    path = tmp_path / "m.onnx"
    onnx.save(_model([helper.make_node("Relu", ["x"], ["y"])], [x], [y]), str(path))
    np.savez(tmp_path / "in.npz", x=np.array([[-1, 2, -3], [4, -5, 6]], np.float32))
    assert main(["onnx", str(path), "--inputs", str(tmp_path / "in.npz"), "--report", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "y: shape (2, 3) dtype float32 min 0 max 6" in out and (tmp_path / "r.html").is_file()
    np.savez(tmp_path / "bad.npz", z=np.zeros(3))
    assert main(["onnx", str(path), "--inputs", str(tmp_path / "bad.npz")]) == 2
    assert "no array named 'x'" in capsys.readouterr().err


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_with_per_group_and_per_channel_scales(opset: int) -> None:
    """Opset 18 gives scale and bias per group, 21 per channel; both against numpy, and compiled."""
    from onnx import TensorProto, helper

    n, c, g, hw = 2, 6, 3, (4, 5)
    k = g if opset == 18 else c
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=g, epsilon=1e-3)
    graph = helper.make_graph(
        [node],
        "gn",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, (n, c, *hw)),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, (k,)),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, (k,)),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    rng = np.random.default_rng(opset)
    x, s, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((n, c, *hw), (k,), (k,)))
    xg = x.reshape(n, g, -1)
    y = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-3)).reshape(x.shape)
    per = (np.repeat(s, c // g), np.repeat(b, c // g)) if opset == 18 else (s, b)
    want = y * per[0].reshape(1, c, 1, 1) + per[1].reshape(1, c, 1, 1)
    prog = optimize(from_onnx(model).outputs, target="llvm")
    np.testing.assert_allclose(prog(x=x, s=s, b=b)[0], want, rtol=1e-4, atol=1e-5)
