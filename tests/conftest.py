"""Shared test settings: hypothesis profiles (fast by default; HYPOTHESIS_PROFILE=thorough for bug hunts, nightly
for the 10,000-program fuzz run of `make fuzz`)."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from egraph_compiler import compile_cache

settings.register_profile(
    "fast",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "nightly", max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.fixture(autouse=True)
def _fresh_compiles(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test optimizes afresh: a program cached by an earlier test (under other settings a test patched), or
    by an earlier run on disk, must not answer for it. Tests marked `compile_cache` test the caches themselves,
    with a disk cache of their own (in the test's temporary folder)."""
    if request.node.get_closest_marker("compile_cache"):
        compile_cache.clear()
        monkeypatch.setenv("EGC_DISK_CACHE", "1")
        monkeypatch.setenv("EGC_CACHE_DIR", str(tmp_path / "egc-cache"))
        yield
        return
    monkeypatch.setenv("EGC_DISK_CACHE", "0")
    with compile_cache.disabled():
        yield
