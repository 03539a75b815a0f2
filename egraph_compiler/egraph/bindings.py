"""egglog's Rust bindings, without its Python API.

The compiler talks to egglog through `egglog.bindings` alone (programs as text, e-graphs frozen into tables).
Importing `egglog` first runs the package's `__init__`, which builds its whole high-level Python API: 0.4 s of
every process's first optimize, against 0.01 s for the extension module itself. So the extension is loaded on
its own and registered under its usual name; a later `import egglog` (by the user) finds it there and uses the
same module, and gets it as its `bindings` attribute too (`_Attach`). Where the package's layout is not the one
expected, the plain import is used.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

NAME = "egglog.bindings"
_lock = threading.Lock()


def load() -> ModuleType:
    """The `egglog.bindings` module (loaded on first use)."""
    mod = sys.modules.get(NAME)
    if mod is not None:
        return mod
    with _lock:
        mod = sys.modules.get(NAME) or _load_alone()
        if mod is None:
            from egglog import bindings

            return bindings
        return mod


def _load_alone() -> ModuleType | None:
    """The extension module loaded from the package's folder without running the package (None: not found)."""
    spec = importlib.util.find_spec("egglog")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / f"bindings{suffix}"
            if not path.is_file():
                continue
            ext = importlib.util.spec_from_file_location(NAME, path)
            if ext is None or ext.loader is None:
                continue
            mod = importlib.util.module_from_spec(ext)
            sys.modules[NAME] = mod
            try:
                ext.loader.exec_module(mod)
            except BaseException:
                del sys.modules[NAME]
                raise
            sys.meta_path.insert(0, _Attach())
            return mod
    return None


class _Attach(importlib.abc.MetaPathFinder):
    """Once: when `egglog` itself is imported, its module gets the bindings loaded here as its `bindings`
    attribute before its `__init__` runs (the import system sets it only on modules it loads itself)."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name != "egglog":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader if spec is not None else None
        if spec is None or not isinstance(loader, importlib.abc.Loader):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            module.bindings = sys.modules[NAME]  # type: ignore[attr-defined]
            run(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
