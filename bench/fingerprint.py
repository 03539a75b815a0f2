"""What the benchmark models compile to, as one line each: kernel count, estimate and a hash of every kernel's
source. Two runs print the same lines when a change (a refactor, a rule, the cost model) left every program as it
was; diff the outputs to see which model changed.

    python bench/fingerprint.py [--target llvm|cuda] [--quick]

The models are bench/model_defs.py's: the quick suite, then (without --quick) the MLP, GPT-2 block, ResNet
block and ResNet downsampling block at their benchmark sizes and the 16-layer dense chain. Sources are rendered,
not run: `--target cuda` needs no GPU. Nothing is cached on disk, so each line is a fresh optimize.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("EGC_DISK_CACHE", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_defs import Model, dense_chain, gpt2_block, mlp, resnet_block, resnet_down_block, suite

from egraph_compiler import Tensor, optimize


def models(quick: bool) -> list[Model]:
    return suite(quick=True) + ([] if quick else [mlp(), gpt2_block(), resnet_block(), resnet_down_block(), dense_chain(16)])


def fingerprint(m: Model, target: str) -> str:
    ts = {k: Tensor.empty(*s, dtype="float32", name=k) for k, s in m.shapes.items()}
    t0 = time.perf_counter()
    prog = optimize(m.ours(**ts), target=target, cache=False)
    took = time.perf_counter() - t0
    digest = hashlib.sha256(str(prog.source).encode()).hexdigest()[:16]
    est = prog.report.extra.get("fusion", {}).get("chosen_s", float("nan")) * 1e3
    return f"{m.label:<46} kernels={len(prog.kernels):<3} estimate={est:.3f}ms source={digest}  ({took:.1f}s)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="llvm", choices=("llvm", "cuda"))
    ap.add_argument("--quick", action="store_true", help="the quick suite only")
    args = ap.parse_args()
    for m in models(args.quick):
        print(fingerprint(m, args.target), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
