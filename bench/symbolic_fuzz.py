"""`simplify` against tinygrad on random index expressions: equivalence, bounds and size, as the oracle judges them.

    python bench/symbolic_fuzz.py [--cases 300] [--seed 1] [--show]

Each case is tests/oracle.py's tinygrad_case (tinygrad's fuzz_symbolic construction, simplified by the installed
tinygrad); each result is judged by tests/oracle_check.py's run_case. Prints the three figures, the cases that
fail any of them, and the slowest cases. Needs tinygrad (the bench extra).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from oracle import tinygrad_case
from oracle_check import figures, run_case


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", action="store_true", help="print every case, not only the failing ones")
    args = ap.parse_args()
    if args.cases < 1:
        ap.error("--cases must be at least 1")
    rng = random.Random(args.seed)
    outcomes, times = [], []
    while len(outcomes) < args.cases:
        case = tinygrad_case(rng, len(outcomes))
        if case is None:
            continue
        t0 = time.perf_counter()
        oc = run_case(case)
        times.append((time.perf_counter() - t0, oc.id))
        outcomes.append(oc)
        if args.show or oc.problems:
            print(f"{oc.line()}\n    tinygrad: {case['expected_str']}", flush=True)
        if len(outcomes) % 50 == 0:
            print(f"... {len(outcomes)}/{args.cases}: {figures(outcomes)}", file=sys.stderr, flush=True)
    secs = [t for t, _ in times]
    print(figures(outcomes))
    print(
        f"simplify per case: median {statistics.median(secs):.2f} s, slowest "
        + ", ".join(f"#{i} {t:.1f} s" for t, i in sorted(times)[-3:])
    )
    return 0 if all(o.equivalent and o.tight and o.no_larger for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
