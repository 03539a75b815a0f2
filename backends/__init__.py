"""Backends: reference (numpy), llvm (llvmlite JIT), cuda (CuPy raw kernels)."""
