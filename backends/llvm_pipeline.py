"""LLVM set-up the backend and its compile workers share: the target machine and the optimization pipeline.

It imports llvmlite alone, so that a compile worker process (backends/llvm_worker.py) runs the very same passes
without importing the rest of the package (egglog and all: about a second).
"""

from __future__ import annotations

from typing import Any

import llvmlite.binding as llvm

# Loads whose copies sit apart along a vector's lanes (a stride-2 convolution's input) stay scalar loads and
# inserts: LLVM's vgatherqps for them, with its shuffles, ran the kernel 2x slower on Zen 4 (1.3 vs 2.45 ms), and
# the CPU estimate prices those copies as scalar loads
NO_GATHER = "+prefer-no-gather"

# The O1 pipeline with the loop and SLP vectorizers and unrolling on: kernels run as fast as at O3 (the schedule
# already unrolled what pays), and compiling takes 20% (GEMM) to 50% (attention) less time.
SPEED_LEVEL = 1


def features(cpu_features: str) -> str:
    """The LLVM feature string: the CPU's own (empty for a named CPU: LLVM derives them) and NO_GATHER."""
    return ",".join(f for f in (cpu_features, NO_GATHER) if f)


def new_target_machine(cpu_name: str, cpu_features: str) -> Any:
    """A target machine for MCJIT code of a CPU (`cpu_features` as the CPU target has them, before `features`)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=cpu_name, features=features(cpu_features), opt=3, codemodel="jitdefault", jit=True)


def optimize_module(mod: Any, tm: Any) -> None:
    """Run the optimization pipeline over a parsed, verified module, in place."""
    pto = llvm.create_pipeline_tuning_options(speed_level=SPEED_LEVEL)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def object_code(ir: str, cpu_name: str, cpu_features: str) -> tuple[bytes, str]:
    """IR text compiled as the backend compiles it in process: (the MCJIT object code, the optimized IR).
    Raises RuntimeError where the IR does not parse or verify."""
    tm = new_target_machine(cpu_name, cpu_features)
    mod = llvm.parse_assembly(ir)
    mod.verify()
    optimize_module(mod, tm)
    engine = llvm.create_mcjit_compiler(mod, tm)
    made: list[bytes] = []
    engine.set_object_cache(lambda _m, buf: made.append(bytes(buf)), lambda _m: None)
    engine.finalize_object()
    if not made:
        raise RuntimeError("MCJIT produced no object code")
    return made[0], str(mod)
