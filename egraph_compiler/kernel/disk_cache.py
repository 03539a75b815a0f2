"""The on-disk compile cache: a new process skips both optimize and LLVM for graphs and kernels it has seen.

Two kinds of entry, each one file named by a SHA-256 key:
- `programs/`: an optimized program (its kernels, buffers, inputs, outputs and report), keyed by the graph's
  structure, the output names, the options (target, CPU, limits, tune, nolocals), the core count the cost model
  assumed, and the compiler's version;
- `objects/`: the machine code LLVM made of one kernel module (and its optimized IR, for inspection), keyed by
  the module's IR, the CPU and its features, and the compiler's version; and what rendering a kernel told the
  LLVM backend (the key of its IR, its functions, buffers and parallel ranges), keyed by the kernel's structure
  and the backend's options, so that a loaded program's kernels are not rendered to IR again.

The compiler's version is a hash of the package's own source files and the versions of egglog, llvmlite and
numpy: any change to a rule, the cost model or a backend starts a fresh cache. Writes go to a temporary file in
the same folder and are renamed into place (atomic on POSIX), so processes that share the folder never read a
partial entry; an entry that cannot be read is deleted and counts as a miss. Past the size limit the entries
used least recently (by modification time, which a read refreshes) are deleted. A process lists the folder at
its first write and again only when what it has written since takes the cache past the limit, and then trims
it to LOW_WATER of the limit (listing it at every write cost a cold GPT-2 block's first call a second with 800
entries); what other processes write meanwhile counts at their own next listing.

Settings: `EGC_CACHE_DIR` (default `$XDG_CACHE_HOME/egraph-compiler`, else `~/.cache/egraph-compiler`),
`EGC_CACHE_SIZE` (bytes, with an optional K/M/G suffix; default 1G), `EGC_DISK_CACHE=0` turns it off.
`egc cache info` and `egc cache clear` show and empty it; `optimize(cache=False)` neither reads nor writes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import pickle
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from egraph_compiler.ir.diagnostics import InvalidArgument
from egraph_compiler.ir.uop import UOp, toposort

KINDS = ("programs", "objects")
DEFAULT_SIZE = 1 << 30
LOW_WATER = 0.9  # a write past the limit trims the cache to this fraction of it: room for the next writes
_version: str | None = None
_lock = threading.Lock()
_believed: dict[Path, int] = {}  # cache folder -> its bytes at this process's last listing, plus its writes since


def enabled() -> bool:
    return os.environ.get("EGC_DISK_CACHE", "1").strip().lower() not in ("0", "off", "false", "no")


def directory() -> Path:
    given = os.environ.get("EGC_CACHE_DIR")
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "egraph-compiler"


def size_limit() -> int:
    raw = os.environ.get("EGC_CACHE_SIZE", "").strip()
    if not raw:
        return DEFAULT_SIZE
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1].upper(), 1)
    try:
        value = float(raw[:-1] if scale > 1 else raw) * scale
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise InvalidArgument(
            at="EGC_CACHE_SIZE",
            why=f"{raw!r} is not a size",
            suggestion="give bytes, optionally with a K, M or G suffix (EGC_CACHE_SIZE=512M)",
        )
    return int(value)


def compiler_version() -> str:
    """A hash of the compiler's source files and the versions of the libraries that shape its output."""
    global _version
    if _version is None:
        h = hashlib.sha256()
        # the package's folder and its subpackages' (a checkout keeps rules/, extract/ and backends/ apart from it)
        package = importlib.util.find_spec("egraph_compiler")
        folders = {Path(p).resolve() for p in package.submodule_search_locations or ()} if package else set()
        for sub in ("rules", "extract", "backends"):
            spec = importlib.util.find_spec(f"egraph_compiler.{sub}")
            folders |= {Path(p).resolve() for p in (spec.submodule_search_locations or ())} if spec else set()
        for folder in sorted(folders):
            for path in sorted(folder.rglob("*.py")):
                h.update(f"{folder.name}/{path.relative_to(folder)}".encode())
                h.update(path.read_bytes())
        for dist in ("egglog", "llvmlite", "numpy"):
            try:
                h.update(f"{dist}={importlib.metadata.version(dist)}".encode())
            except importlib.metadata.PackageNotFoundError:
                h.update(f"{dist}=none".encode())
        _version = h.hexdigest()
    return _version


def graph_digest(roots: list[UOp]) -> bytes:
    """The structure of the graph under `roots`, as bytes two equal graphs share (node by node in topological
    order: op, dtype, argument, and the positions of its sources)."""
    h = hashlib.sha256()
    index: dict[UOp, int] = {}
    for u in toposort(roots):
        index[u] = len(index)
        h.update(f"{u.op.name}|{u.dtype.name}|".encode())
        h.update(pickle.dumps(u.arg, protocol=5))
        h.update(("|" + ",".join(str(index[s]) for s in u.src) + ";").encode())
    h.update(",".join(str(index[r]) for r in roots).encode())
    return h.digest()


def key(*parts: object) -> str:
    """A cache key from byte strings and plain values (their repr), with the compiler's version."""
    h = hashlib.sha256(compiler_version().encode())
    for p in parts:
        h.update(p if isinstance(p, bytes) else repr(p).encode())
        h.update(b"\x00")
    return h.hexdigest()


def load(kind: str, name: str) -> Any | None:
    """The entry `name` of `kind`, or None (missing, unreadable, or the cache is off)."""
    if not enabled():
        return None
    path = directory() / kind / f"{name}.pkl"
    try:
        data = path.read_bytes()
        value = pickle.loads(data)
    except FileNotFoundError:
        return None
    except Exception:  # a damaged entry: a miss, and gone
        path.unlink(missing_ok=True)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: evicted last
    return value


def store(kind: str, name: str, value: Any) -> None:
    """Write the entry atomically; the cache is then trimmed to its size limit. Failures (a read-only or full
    disk) leave the cache as it was: it only ever saves work."""
    if not enabled():
        return
    folder = directory() / kind
    try:
        folder.mkdir(parents=True, exist_ok=True)
        data = pickle.dumps(value, protocol=5)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".pkl")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, folder / f"{name}.pkl")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        with _lock:
            root, limit = directory(), size_limit()
            total = _believed.get(root)
            if total is not None and total + len(data) <= limit:
                _believed[root] = total + len(data)
                return
        trim(int(limit * LOW_WATER))
    except (OSError, pickle.PicklingError, RecursionError):
        pass


def _entries() -> list[tuple[float, int, Path]]:
    out = []
    for kind in KINDS:
        folder = directory() / kind
        if not folder.is_dir():
            continue
        for path in folder.glob("*.pkl"):
            try:
                st = path.stat()
            except FileNotFoundError:  # evicted by another process meanwhile
                continue
            out.append((st.st_mtime, st.st_size, path))
    return out


def trim(limit: int) -> int:
    """Delete the least recently used entries until the cache holds at most `limit` bytes; returns how many."""
    with _lock:
        entries = _entries()
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, path in sorted(entries):
            if total <= limit:
                break
            path.unlink(missing_ok=True)
            total -= size
            removed += 1
        _believed[directory()] = total
        return removed


def info() -> dict[str, Any]:
    """Where the cache is, what it holds and its limit."""
    entries = _entries()
    counts = {kind: sum(1 for _, _, p in entries if p.parent.name == kind) for kind in KINDS}
    return {
        "directory": str(directory()),
        "enabled": enabled(),
        "entries": counts,
        "bytes": sum(size for _, size, _ in entries),
        "limit_bytes": size_limit(),
        "oldest": time.ctime(min(t for t, _, _ in entries)) if entries else None,
    }


def clear() -> int:
    """Delete every entry; returns how many."""
    return trim(0)
