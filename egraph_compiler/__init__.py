"""egraph-compiler: an equality-saturation compiler for tinygrad-style UOp graphs."""

from typing import Any

from egraph_compiler.frontend.tensor import Tensor
from egraph_compiler.ir.diagnostics import CompilerError
from egraph_compiler.ir.dims import Variable
from egraph_compiler.ir.dtypes import DType, dtypes
from egraph_compiler.ir.ops import AxisType, Ops
from egraph_compiler.ir.uop import UOp

# after the submodule import, so that the package attribute `optimize` is the function, not the module
from egraph_compiler.optimize import optimize

__all__ = ["AxisType", "CompilerError", "DType", "Ops", "Tensor", "UOp", "Variable", "dtypes", "from_onnx", "optimize"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """`from_onnx` loads the ONNX importer's modules when first asked for (onnx itself only when called): a program
    from the compile cache starts without them."""
    if name == "from_onnx":
        from egraph_compiler.frontend.onnx.importer import from_onnx

        return from_onnx
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
