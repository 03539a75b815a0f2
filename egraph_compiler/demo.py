"""The main job: load the GEMM+bias+ReLU Frontend-IR example, optimize it, run it, check it against numpy.

python -m egraph_compiler.demo [--target llvm|reference|cuda] [FILE.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources
from pathlib import Path
from typing import cast

import numpy as np

from egraph_compiler.frontend.frontend_ir import describe, load_frontend_ir
from egraph_compiler.ir.diagnostics import CompilerError
from egraph_compiler.ir.uop import pretty
from egraph_compiler.optimize import GraphLike, optimize


def example_path(name: str = "gemm_bias_relu.json") -> Path:
    """An example shipped with the package (`egraph_compiler.examples`: the checkout's examples/ folder)."""
    try:
        found = Path(str(resources.files("egraph_compiler.examples") / name))
    except ModuleNotFoundError:  # a checkout put on sys.path without installing: the folder beside the package
        found = Path(__file__).resolve().parent.parent / "examples" / name
    return found


EXAMPLE = example_path()


def numpy_gemm_bias_relu(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Independent numpy oracle: fp32 accumulation, fp16 intermediates, as the example's tensor table says."""
    c0 = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    return np.maximum(c0 + bias, np.float16(0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", default=str(EXAMPLE))
    ap.add_argument("--target", default="llvm")
    args = ap.parse_args(argv)
    try:
        g = load_frontend_ir(args.file)
        print(describe(g))
        inputs = g.random_inputs(seed=0)
        t0 = time.perf_counter()
        # a FrontendGraph is a GraphLike (named Tensor inputs and outputs); mypy holds the protocol's settable
        # Mapping[str, TensorLike] attributes invariant against its dict[str, Tensor] ones
        prog = optimize(cast(GraphLike, g), target=args.target)
        t1 = time.perf_counter()
        out = prog(**inputs)
        dt = time.perf_counter() - t1
    except CompilerError as e:
        print(e.format(), file=sys.stderr)
        return 2
    print(f"\noptimized in {(t1 - t0) * 1e3:.0f} ms: {len(prog.kernels)} kernel(s)")
    print(str(prog.report).split("\n", 1)[0])
    for k in prog.kernels:
        print(f"\nkernel {k.name}:\n{pretty(k.ast, max_lines=40)}")
    ref = numpy_gemm_bias_relu(inputs["A"], inputs["B"], inputs["bias"])
    err = float(np.max(np.abs(out.astype(np.float32) - ref.astype(np.float32))))
    ok = np.allclose(out.astype(np.float32), ref.astype(np.float32), rtol=1e-3, atol=1e-3)
    print(f"\nran on {args.target} in {dt * 1e3:.1f} ms (first call, includes compiling); output {out.dtype}{list(out.shape)}")
    print(f"C2[:2, :6] =\n{out[:2, :6]}")
    print(f"max |C2 - numpy| = {err:.3g}  ->  {'OK' if ok else 'MISMATCH'} (rtol=atol=1e-3)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
