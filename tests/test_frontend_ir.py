"""Frontend-IR JSON loader: examples against independent numpy code, node semantics, diagnostics."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import check

from egraph_compiler.frontend.frontend_ir import FrontendGraph, describe, load_frontend_ir
from egraph_compiler.ir.diagnostics import CompilerError, DTypeError
from egraph_compiler.ir.interpret import evaluate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOL = {"rtol": 1e-3, "atol": 1e-3}


def run_graph(g: FrontendGraph, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    inputs = g.random_inputs(seed)
    return inputs, {name: evaluate(t.uop, inputs) for name, t in g.outputs.items()}


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


# ---- the examples ------------------------------------------------------------------------------


def test_examples_directory_holds_the_three_examples() -> None:
    assert {p.stem for p in EXAMPLES.glob("*.json")} >= {"gemm_bias_relu", "conv3x3_s2_p1", "attention"}


def test_gemm_bias_relu_example_matches_numpy() -> None:
    g = load_frontend_ir(EXAMPLES / "gemm_bias_relu.json")
    inp, out = run_graph(g)
    a, b, bias = inp["A"], inp["B"], inp["bias"]
    assert a.dtype == np.float16 and a.shape == (128, 256) and bias.shape == (64,)
    c0 = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)  # fp32 accumulation, fp16 tensor
    want = np.maximum(c0 + bias, np.float16(0))
    check(out["C2"], want, dtype=np.float16, **TOL)


def test_conv_example_matches_numpy() -> None:
    g = load_frontend_ir(EXAMPLES / "conv3x3_s2_p1.json")
    inp, out = run_graph(g, seed=1)
    x, w = inp["X"].astype(np.float64), inp["W"].astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2]  # (n, c, 16, 16, 3, 3)
    want = np.einsum("nchwij,ocij->nohw", win, w)
    check(out["Y"], want, dtype=np.float32, **TOL)


def test_causal_attention_example_matches_numpy() -> None:
    g = load_frontend_ir(EXAMPLES / "attention.json")
    inp, out = run_graph(g, seed=2)
    q, k, v = (inp[n].astype(np.float64) for n in "QKV")
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    check(out["O"], _softmax(s) @ v, dtype=np.float32, **TOL)


def test_path_string_and_dict_sources_give_the_same_graph() -> None:
    path = EXAMPLES / "gemm_bias_relu.json"
    text = path.read_text()
    graphs = [load_frontend_ir(path), load_frontend_ir(str(path)), load_frontend_ir(text), load_frontend_ir(json.loads(text))]
    assert len({id(g.outputs["C2"].uop) for g in graphs}) == 1  # hash-consed: same program, same node
    assert "gemm" in describe(graphs[0]) and "C2" in describe(graphs[0])


def test_node_order_does_not_matter() -> None:
    doc = json.loads((EXAMPLES / "gemm_bias_relu.json").read_text())
    shuffled = copy.deepcopy(doc)
    shuffled["graph"].reverse()
    assert load_frontend_ir(shuffled).outputs["C2"].uop is load_frontend_ir(doc).outputs["C2"].uop


# ---- node semantics ----------------------------------------------------------------------------


def doc_with(
    nodes: list[dict[str, Any]],
    tensors: dict[str, Any],
    inputs: list[str],
    outputs: list[str],
    symbols: dict[str, int] | None = None,
) -> dict[str, Any]:
    return {
        "signature": {"inputs": [{"tensor": t} for t in inputs], "outputs": [{"tensor": t} for t in outputs]},
        "symbols": symbols or {},
        "tensors": tensors,
        "graph": nodes,
    }


def test_many_node_kinds_match_numpy() -> None:
    f32 = "fp32"
    doc = doc_with(
        [
            {"op": "MatMul", "name": "mm", "inputs": ["X", "W"], "outputs": ["H"], "attrs": {"trans_b": True, "alpha": 0.5}},
            {"op": "Elementwise", "fn": "gelu", "inputs": ["H"], "outputs": ["G"]},
            {"op": "LayerNorm", "inputs": ["G", "gamma", "beta"], "outputs": ["L"], "attrs": {"eps": 1e-5}},
            {"op": "Softmax", "inputs": ["L"], "outputs": ["S"], "attrs": {"axis": -1}},
            {"op": "Reduce", "inputs": ["S"], "outputs": ["R"], "attrs": {"axes": [0], "keepdim": True}},
            {"op": "Reduce", "inputs": ["L"], "outputs": ["Mx"], "attrs": {"op": "max", "axes": 1}},
            {"op": "Transpose", "inputs": ["L"], "outputs": ["T"]},
            {"op": "Reshape", "inputs": ["T"], "outputs": ["F"], "attrs": {"shape": [-1]}},
            {"op": "Cast", "inputs": ["F"], "outputs": ["F16"], "attrs": {"to": "fp16"}},
            {"op": "Elementwise", "fn": "where", "inputs": ["mask", "X", "X2"], "outputs": ["Wh"]},
        ],
        {
            "X": {"dtype": f32, "shape": ["M", "K"]},
            "X2": {"dtype": f32, "shape": ["M", "K"]},
            "mask": {"dtype": "bool", "shape": ["M", "K"]},
            "W": {"dtype": f32, "shape": ["N", "K"]},
            "gamma": {"dtype": f32, "shape": ["N"]},
            "beta": {"dtype": f32, "shape": ["N"]},
            "R": {"dtype": f32, "shape": [1, "N"]},
        },
        ["X", "X2", "mask", "W", "gamma", "beta"],
        ["R", "Mx", "F16", "Wh", "S"],
        {"M": 3, "K": 5, "N": 4},
    )
    g = load_frontend_ir(doc)
    inp, out = run_graph(g, seed=3)
    x, w = inp["X"].astype(np.float64), inp["W"].astype(np.float64)
    h = 0.5 * (x @ w.T)
    gel = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    ln = (gel - gel.mean(-1, keepdims=True)) / np.sqrt(gel.var(-1, keepdims=True) + 1e-5) * inp["gamma"] + inp["beta"]
    s = _softmax(ln)
    check(out["S"], s, **TOL)
    check(out["R"], s.sum(0, keepdims=True), **TOL)
    check(out["Mx"], ln.max(1), **TOL)
    check(out["F16"], ln.T.reshape(-1), dtype=np.float16, **TOL)
    check(out["Wh"], np.where(inp["mask"], inp["X"], inp["X2"]))


def test_reduce_defaults_to_sum_over_all_axes() -> None:
    doc = doc_with(
        [{"op": "Reduce", "inputs": ["X"], "outputs": ["Y"]}], {"X": {"dtype": "fp32", "shape": [2, 3]}}, ["X"], ["Y"]
    )
    inp, out = run_graph(load_frontend_ir(doc))
    check(out["Y"], inp["X"].sum(), **TOL)


def test_tensor_names_that_are_not_identifiers_still_run() -> None:
    doc = doc_with(
        [{"op": "Elementwise", "fn": "relu", "inputs": ["x.0"], "outputs": ["out-1"]}],
        {"x.0": {"dtype": "fp32", "shape": [4]}},
        ["x.0"],
        ["out-1"],
    )
    g = load_frontend_ir(doc)
    inp, out = run_graph(g)
    check(out["out-1"], np.maximum(next(iter(inp.values())), 0))


def test_declared_output_dtype_must_match() -> None:
    """A node's computed dtype that differs from the tensor table's is refused (E1004, naming both), not cast
    without a word; a matching declaration runs."""

    def doc(c_dtype: str) -> dict[str, Any]:
        return doc_with(
            [{"op": "Elementwise", "fn": "add", "inputs": ["a", "b"], "outputs": ["c"]}],
            {
                "a": {"dtype": "int32", "shape": [3]},
                "b": {"dtype": "int32", "shape": [3]},
                "c": {"dtype": c_dtype, "shape": [3]},
            },
            ["a", "b"],
            ["c"],
        )

    with pytest.raises(DTypeError, match="computed dtype int32 differs from the declared float16"):
        load_frontend_ir(doc("fp16"))
    inp, out = run_graph(load_frontend_ir(doc("int32")))
    check(out["c"], inp["a"] + inp["b"], dtype=np.int32)


# ---- diagnostics -------------------------------------------------------------------------------

BASE = json.loads((EXAMPLES / "gemm_bias_relu.json").read_text())


def mutate(fn: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    fn(doc)
    return doc


MALFORMED: list[tuple[str, Any, str]] = [
    ("bad-json", '{"signature": [}', "E1401"),
    ("truncated-json", (EXAMPLES / "gemm_bias_relu.json").read_text()[:-20], "E1401"),
    ("not-an-object", "[1, 2, 3]", "E1401"),
    ("missing-file", "/nonexistent/dir/graph.json", "E1401"),
    ("deep-nesting", "[" * 100000 + "]" * 100000, "E1401"),
    ("missing-signature", mutate(lambda d: d.pop("signature")), "E1401"),
    ("missing-tensors", mutate(lambda d: d.pop("tensors")), "E1401"),
    ("missing-graph", mutate(lambda d: d.pop("graph")), "E1401"),
    ("missing-outputs", mutate(lambda d: d["signature"].pop("outputs")), "E1401"),
    ("missing-shape", mutate(lambda d: d["tensors"]["A"].pop("shape")), "E1401"),
    ("missing-node-inputs", mutate(lambda d: d["graph"][0].pop("inputs")), "E1401"),
    ("graph-not-a-list", mutate(lambda d: d.__setitem__("graph", {"op": "GEMM"})), "E1401"),
    ("attrs-not-an-object", mutate(lambda d: d["graph"][0].__setitem__("attrs", [1])), "E1401"),
    ("unknown-symbol", mutate(lambda d: d["tensors"]["A"].__setitem__("shape", ["Q", "K"])), "E1401"),
    ("unknown-op", mutate(lambda d: d["graph"][0].__setitem__("op", "FancyGemm")), "E1101"),
    ("unknown-elementwise-fn", mutate(lambda d: d["graph"][2].__setitem__("fn", "swish2")), "E1101"),
    (
        "unknown-reduce-op",
        mutate(lambda d: d["graph"].append({"op": "Reduce", "inputs": ["C2"], "outputs": ["R"], "attrs": {"op": "median"}})),
        "E1101",
    ),
    ("unknown-node-input", mutate(lambda d: d["graph"][1].__setitem__("inputs", ["C0", "nope"])), "E1403"),
    ("unknown-signature-input", mutate(lambda d: d["signature"]["inputs"].append({"tensor": "Z"})), "E1403"),
    ("output-never-produced", mutate(lambda d: d["signature"]["outputs"].append({"tensor": "Z"})), "E1403"),
    ("cycle", mutate(lambda d: d["graph"][0].__setitem__("inputs", ["A", "C2"])), "E1402"),
    ("self-cycle", mutate(lambda d: d["graph"][2].__setitem__("inputs", ["C2"])), "E1402"),
    ("declared-shape-mismatch", mutate(lambda d: d["tensors"]["C1"].__setitem__("shape", ["N", "M"])), "E1304"),
    ("zero-size", mutate(lambda d: d["symbols"].__setitem__("M", 0)), "E1005"),
    ("negative-size", mutate(lambda d: d["tensors"]["bias"].__setitem__("shape", [-64])), "E1005"),
    ("float-size", mutate(lambda d: d["tensors"]["bias"].__setitem__("shape", [6.5])), "E1005"),
    ("unknown-dtype", mutate(lambda d: d["tensors"]["A"].__setitem__("dtype", "fp12")), "E1004"),
    ("unknown-acc-dtype", mutate(lambda d: d["graph"][0]["attrs"].__setitem__("acc_dtype", "fp99")), "E1004"),
    ("inner-dims-differ", mutate(lambda d: d["graph"][0].__setitem__("inputs", ["B", "A"])), "E1002"),
    ("broadcast-mismatch", mutate(lambda d: d["tensors"]["bias"].__setitem__("shape", [3])), "E1001"),
    ("produced-twice", mutate(lambda d: d["graph"][1].__setitem__("outputs", ["C0"])), "E1401"),
    ("wrong-arity", mutate(lambda d: d["graph"][2].__setitem__("inputs", ["C1", "C1"])), "E1401"),
]


@pytest.mark.parametrize(("name", "doc", "code"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_documents_raise_the_right_diagnostic(name: str, doc: Any, code: str) -> None:
    with pytest.raises(CompilerError) as info:
        load_frontend_ir(doc)
    assert info.value.code == code, info.value.format()
    assert info.value.at and info.value.suggestion


def test_diagnostics_name_the_node_at_fault() -> None:
    with pytest.raises(CompilerError) as info:
        load_frontend_ir(mutate(lambda d: d["graph"][0].__setitem__("inputs", ["B", "A"])))
    assert "gemm" in info.value.at
