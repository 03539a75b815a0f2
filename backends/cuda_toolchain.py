"""The CUDA toolchain: nvcc (PTX and cubin for a named architecture), the CUDA headers NVRTC needs, and CuPy with a
visible GPU. Compiling with nvcc needs no GPU; `import_cupy` is the one place that asks for one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from typing import Any

from egraph_compiler.ir.diagnostics import BackendError, BackendUnavailable


def find_nvcc() -> str | None:
    """nvcc on PATH, under $CUDA_HOME/$CUDA_PATH, or in /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return None


def nvcc_version(nvcc: str | None = None) -> str | None:
    exe = nvcc or find_nvcc()
    if exe is None:
        return None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"release ([\d.]+)", out)
    return m.group(1) if m else None


def _arch(arch: str) -> str:
    digits = re.sub(r"^(sm_|compute_)", "", arch)
    if not digits.isdigit():
        raise BackendError(at=f"arch {arch!r}", why="not a CUDA architecture", suggestion="use e.g. 'sm_80' or 'sm_90'")
    return f"sm_{digits}"


def _run_nvcc(source: str, arch: str, kind: str, options: Sequence[str], nvcc: str | None, timeout: float) -> bytes:
    exe = nvcc or find_nvcc()
    if exe is None:
        raise BackendUnavailable(
            at="nvcc",
            why="nvcc was not found on PATH, $CUDA_HOME or /usr/local/cuda",
            suggestion="install the CUDA toolkit (e.g. apt-get install nvidia-cuda-toolkit) or put nvcc on PATH",
        )
    with tempfile.TemporaryDirectory(prefix="egc_nvcc_") as d:
        cu, out = os.path.join(d, "kernels.cu"), os.path.join(d, f"kernels.{kind}")
        with open(cu, "w") as f:
            f.write(source)
        cmd = [exe, f"-{kind}", f"-arch={_arch(arch)}", "-std=c++17", *options, "-o", out, cu]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise BackendError(
                at=" ".join(cmd[:3]), why=f"nvcc ran longer than {timeout} s", suggestion="compile fewer kernels at once"
            ) from None
        if r.returncode != 0:
            raise BackendError(
                at=f"nvcc -{kind} -arch={_arch(arch)}",
                why=(r.stderr or r.stdout).strip()[-6000:],
                suggestion="this is a renderer bug if the kernel AST is valid; see the source above",
            )
        with open(out, "rb") as f:
            return f.read()


def compile_ptx(
    source: str, arch: str = "sm_80", *, options: Sequence[str] = (), nvcc: str | None = None, timeout: float = 600
) -> str:
    """Compile CUDA C with `nvcc -ptx -arch=<arch>` in a temp dir; returns the PTX text."""
    return _run_nvcc(source, arch, "ptx", options, nvcc, timeout).decode()


def compile_cubin(
    source: str, arch: str, *, options: Sequence[str] = (), nvcc: str | None = None, timeout: float = 600
) -> bytes:
    """Compile CUDA C with `nvcc -cubin -arch=<arch>`; returns the cubin bytes."""
    return _run_nvcc(source, arch, "cubin", options, nvcc, timeout)


def cuda_include_dirs() -> list[str]:
    """CUDA header directories for NVRTC: $CUDA_PATH/$CUDA_HOME, /usr/local/cuda, nvcc's toolkit, pip nvidia-*."""
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    nvcc = find_nvcc()
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    dirs = [os.path.join(r, "include") for r in roots if r]
    try:
        import nvidia  # pip wheels: nvidia-cuda-runtime-cu12, nvidia-cuda-nvcc-cu12, ...

        for base in getattr(nvidia, "__path__", []):
            dirs += [os.path.join(base, sub, "include") for sub in ("cuda_runtime", "cuda_nvcc", "cuda_nvrtc", "cuda_cccl")]
    except ImportError:
        pass
    return list(dict.fromkeys(d for d in dirs if os.path.isfile(os.path.join(d, "cuda_fp16.h"))))


def import_cupy() -> Any:
    try:
        import cupy
    except ImportError:
        raise BackendUnavailable(
            at="target 'cuda'",
            why="CuPy is not installed",
            suggestion="pip install cupy-cuda12x (CUDA 12 driver) or cupy-cuda13x; or use target='llvm'",
        ) from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError without a driver or device
        raise BackendUnavailable(
            at="target 'cuda'",
            why=f"no usable CUDA GPU ({e})",
            suggestion="run on a machine with an NVIDIA GPU and driver, or use target='llvm'",
        ) from None
    if n == 0:
        raise BackendUnavailable(
            at="target 'cuda'",
            why="no CUDA GPU is visible",
            suggestion="check CUDA_VISIBLE_DEVICES and the driver, or use target='llvm'",
        )
    return cupy
