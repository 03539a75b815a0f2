"""egraph-compiler: an equality-saturation compiler for tinygrad-style UOp graphs."""

from egraph_compiler.diagnostics import CompilerError
from egraph_compiler.dtypes import DType, dtypes
from egraph_compiler.onnx_import import from_onnx  # onnx itself is imported only when called
from egraph_compiler.ops import AxisType, Ops

# after the submodule import, so that the package attribute `optimize` is the function, not the module
from egraph_compiler.optimize import optimize
from egraph_compiler.tensor import Tensor
from egraph_compiler.uop import UOp

__all__ = ["AxisType", "CompilerError", "DType", "Ops", "Tensor", "UOp", "dtypes", "from_onnx", "optimize"]
__version__ = "0.1.0"
