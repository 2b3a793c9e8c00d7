"""The rate this machine holds at the latency objective: the whole path under load
(:mod:`bench.pipeline.under_load`'s phases) at rising offered rates, from ``--rate-from`` by
``--step`` to ``--rate-to``, until a run misses the objective (p99 > 1 s, a probe spike without
an alert, the rate not offered, or a backlog left when publishing stops). The sustainable rate
is the highest that held it in ``HOLD_RUNS`` consecutive runs, each with a fresh scorer.
Each run first feeds the fleet at 1,000/s for ``--warmup`` seconds, as ``under_load.py``
does: a fresh scorer's batches shorten for minutes while its JIT compiles Spark's code, so a
run without it measures the JIT as much as the rate.

    python bench/pipeline/sustainable_rate.py [--seconds 30] [--rate-from 2000] [--step 2000]
        [--rate-to 20000] [--warmup 15] [--trainer]

Last line: {"sustainable_rps", "objective_p99_ms", "runs_per_rate", "warmup_s", "rates": [per
rate: held, p50, p99, pipeline cores and load of each run]}
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from bench.pipeline.under_load import HOLD_RUNS, OBJECTIVE_MS, find_rate
from fleetwatch.contracts.settings import Settings
from fleetwatch.stack.manager import Stack


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=30, help="length of each run's phase")
    parser.add_argument("--rate-from", type=float, default=2000.0, help="readings/s")
    parser.add_argument("--rate-to", type=float, default=20000.0, help="readings/s")
    parser.add_argument("--step", type=float, default=2000.0, help="readings/s")
    parser.add_argument(
        "--noise", choices=("realistic", "gaussian"), default="realistic", help="the fleet's"
    )
    parser.add_argument("--warmup", type=int, default=15, help="seconds at 1,000/s first")
    parser.add_argument("--trainer", action="store_true", help="run the trainer beside them")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return args


def main() -> None:
    args = arguments()
    settings = Settings()
    stack = Stack(settings)
    was_up = all(c.pid for c in stack.status())
    stack.up()
    try:
        held, tried = find_rate(settings, args)
    finally:
        if not was_up:
            stack.down()
    print(json.dumps({"tried": tried}))
    headline = {
        # no rate held: below the first one tried
        "sustainable_rps": held if held is not None else f"below {args.rate_from:,.0f}",
        "objective_p99_ms": OBJECTIVE_MS,
        "runs_per_rate": HOLD_RUNS,
        "trainer": args.trainer,
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "rates": [
            {
                "rate": t["rate"],
                "held": t["held"],
                "p50_ms": [ph["p50_ms"] for ph in t["phases"]],
                "p99_ms": [ph["p99_ms"] for ph in t["phases"]],
                "pipeline_cores": [ph["pipeline_cores"] for ph in t["phases"]],
                "load_avg_1m": [ph["load_avg_1m"] for ph in t["phases"]],
            }
            for t in tried
        ],
    }
    print(json.dumps(headline))
    write_results(__file__, headline)


if __name__ == "__main__":
    main()
