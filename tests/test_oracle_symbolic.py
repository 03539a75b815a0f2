"""The tinygrad symbolic oracle (../shared/oracle): 360 expressions from tinygrad's own test suite.

Every case goes through `simplify`, and three figures are computed and printed:
  equivalent    the result equals the input at every sampled assignment (points that divide by zero skipped),
                evaluated by the reference interpreter
  bounds-tight  the bounds we prove (the e-graph's, intersected with the result's own vmin/vmax) hold at every
                sampled point and are at least as tight as tinygrad's
  no-larger     the result, written as a tree, has no more nodes than tinygrad's printed result
All cases must be equivalent and bounds-tight; at least 90% must be no larger.

The cases are split into two chunks: this file and test_oracle_symbolic_1.py (see tests/oracle_check.py).
`pytest tests/test_oracle_symbolic.py tests/test_oracle_symbolic_1.py` prints the figures of each chunk and of
all cases on the terminal; under xdist, `-rP` shows each chunk's figures.
"""

from __future__ import annotations

from oracle_check import OracleChunkTests


class TestChunk0(OracleChunkTests):
    CHUNK = 0
