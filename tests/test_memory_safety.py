"""Compiled programs never read or write past their buffers: inputs placed so that their last byte is the last
before an inaccessible page (any read past them faults), run in a child process, results against numpy.

Padded tiles (a row tile of 8 over 100 rows) compute rows that do not exist; their accesses must be guarded or
clamped. A gate the rules folded to the constant True once passed for a guard, and a model with 100 rows
segfaulted (kernel/program.without_true_gates)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import ctypes, mmap, os, sys
    import numpy as np
    os.environ["EGC_DISK_CACHE"] = "0"
    from egraph_compiler import Tensor, optimize

    PAGE = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    keep = []

    def at_page_end(a):
        # a copy of a whose last byte is followed by a PROT_NONE page: reading past it faults
        n = a.nbytes
        pages = -(-n // PAGE) + 1
        m = mmap.mmap(-1, pages * PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        keep.append(m)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        assert libc.mprotect(ctypes.c_void_p(base + (pages - 1) * PAGE), PAGE, 0) == 0
        out = np.frombuffer(m, dtype=a.dtype, count=a.size, offset=(pages - 1) * PAGE - n).reshape(a.shape)
        out[...] = a
        return out

    def gelu(v):
        return 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))

    rng = np.random.default_rng(0)
    for m, c, h in [(100, 640, 2560), (37, 96, 200)]:
        names = dict(x=(m, c), w1=(c, h), b1=(h,), w2=(h, c), b2=(c,))
        vals = {k: (rng.standard_normal(s, dtype=np.float32) / np.float32(np.sqrt(s[0]))) for k, s in names.items()}
        t = {k: Tensor.empty(*s, dtype="float32", name=k) for k, s in names.items()}
        prog = optimize(t["x"] + ((t["x"] @ t["w1"] + t["b1"]).gelu() @ t["w2"] + t["b2"]), target="llvm", cache=False)
        out = np.asarray(prog(**{k: at_page_end(v) for k, v in vals.items()}))
        want = vals["x"] + (gelu(vals["x"] @ vals["w1"] + vals["b1"]) @ vals["w2"] + vals["b2"])
        err = float(np.abs(out - want).max())
        assert err < 2e-3, (m, c, h, err)
        print(m, c, h, [k.schedule for k in prog.kernels], err, flush=True)
    print("ok")
    """
)


def test_models_with_rows_no_tile_divides_stay_inside_their_buffers() -> None:
    """An MLP block of 100 and of 37 rows (row tiles of 8 run past the last row) on inputs that end at an
    inaccessible page: no fault, and numpy's values."""
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), (
        f"exit {r.returncode} (negative: killed by that signal)\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    )
