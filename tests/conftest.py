"""Shared test settings: hypothesis profiles (fast by default; HYPOTHESIS_PROFILE=thorough for bug hunts, nightly
for the 10,000-program fuzz run of `make fuzz`)."""

import os
from collections.abc import Iterator

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
def _fresh_compiles(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test optimizes afresh: a program cached by an earlier test (under other settings a test patched)
    must not answer for it. Tests marked `compile_cache` test the cache itself."""
    if request.node.get_closest_marker("compile_cache"):
        compile_cache.clear()
        yield
        return
    with compile_cache.disabled():
        yield
