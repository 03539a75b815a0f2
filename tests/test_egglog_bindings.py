"""egglog's Rust bindings load without its Python API (egraph/bindings.py), and a later `import egglog` in the
same process uses the very module the compiler loaded."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import sys
from egraph_compiler.egraph import bindings
mod = bindings.load()
assert "egglog" not in sys.modules, "the Python API was imported"
eg = mod.EGraph()
eg.parse_and_run_program("(datatype E (Num i64)) (let x (Num 3))")
import egglog
from egglog import bindings as theirs
assert theirs is mod and egglog.bindings is mod
egglog.EGraph()  # the Python API works over the same module
print("ok")
"""


def test_the_bindings_load_alone_and_egglog_shares_them() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
