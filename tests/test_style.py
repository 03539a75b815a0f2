"""The tree stays `ruff check` and `ruff format` clean, and mypy finds no error in the package (ruff and mypy come
with the [dev] extra that `make test` installs)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> str:
    exe = Path(sys.executable).with_name("ruff")
    found = str(exe) if exe.exists() else shutil.which("ruff")
    if not found:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    return found


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_is_clean(args: list[str]) -> None:
    done = subprocess.run([_ruff(), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"ruff {' '.join(args)} is not clean:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"


def test_mypy_is_clean() -> None:
    """mypy over the whole package as it installs (rules/, extract/ and backends/ through the package's links)."""
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]')")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache"), "egraph_compiler"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"mypy is not clean:\n{done.stdout[-6000:]}{done.stderr[-2000:]}"
