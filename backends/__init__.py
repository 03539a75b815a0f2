"""Backends: reference (numpy), llvm (llvmlite JIT), cuda (CuPy raw kernels)."""

from __future__ import annotations

from egraph_compiler.ir.diagnostics import InvalidArgument
from egraph_compiler.kernel.program import Backend

TARGETS = ("reference", "llvm", "cuda")


def get_backend(target: str, cpu: str | None = None) -> Backend:
    """The backend object for a target name (imported lazily: llvmlite/cupy load only when used); `cpu` names
    the CPU the llvm target generates code for (default $EGC_CPU, else the host)."""
    if cpu is not None and target != "llvm":
        raise InvalidArgument(
            at=f"cpu={cpu!r}",
            why=f"the {target!r} target generates no CPU code",
            suggestion="pass cpu= with target='llvm' only",
        )
    if target == "reference":
        from egraph_compiler.backends.reference import ReferenceBackend

        return ReferenceBackend()
    if target == "llvm":
        from egraph_compiler.backends.llvm import LLVMBackend

        return LLVMBackend(cpu=cpu)
    if target == "cuda":
        from egraph_compiler.backends.cuda import CUDABackend

        return CUDABackend()
    raise InvalidArgument(
        at=f"target {target!r}",
        why=f"unknown target; known targets are {list(TARGETS)}",
        suggestion="use target='llvm', 'cuda' or 'reference'",
    )
