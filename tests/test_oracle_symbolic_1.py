"""The second half of the tinygrad symbolic oracle cases (see tests/test_oracle_symbolic.py)."""

from __future__ import annotations

from oracle_check import OracleChunkTests


class TestChunk1(OracleChunkTests):
    CHUNK = 1
