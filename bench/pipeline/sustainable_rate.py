"""The rate this machine holds at the latency objective: the whole path under load
(:class:`bench.pipeline.under_load.Pipeline`), started and warmed up once, then fed at rising
offered rates, from ``--rate-from`` by ``--step`` to ``--rate-to``. At each rate the pipeline
runs up to ``HOLD_RUNS`` consecutive phases of ``--seconds`` each, one after another, and the
stepping stops at the first phase that misses the objective (:func:`holds`: p99 > 1 s or
> twice p50, a probe spike without an alert, the rate not offered, or a backlog left when
publishing stops). The sustainable rate is the highest at which ``HOLD_RUNS`` phases in a row
held it.

One pipeline, warmed up once, is what is measured because a scorer in production lives for
days: a fresh scorer's micro-batches shorten for minutes while its JIT compiles Spark's code
(decision 0021: ~300 s to settle), which a deployed one has long done. So the fleet first runs
at 1,000/s for ``--warmup`` seconds (300 to match a settled JIT); a fresh pipeline for each
phase would pay that warm-up for every phase and measure the JIT as much as the rate.

    python bench/pipeline/sustainable_rate.py [--seconds 60] [--rate-from 5000] [--step 1000]
        [--rate-to 10000] [--warmup 300] [--trainer]

Last line: {"sustainable_rps", "objective_p99_ms", "tail_ratio", "runs_per_rate", "warmup_s",
"warmup" (the warm-up's p50, p99, pipeline cores, load), "rates": [per rate: held, and of each
phase its p50, p99, p99 / p50, pipeline cores and load], "peak_rss_mb"}
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import load_avg_1m, write_results
from bench.pipeline.under_load import DEVICES, Pipeline
from fleetwatch.contracts.settings import Settings
from fleetwatch.stack.manager import Stack

HOLD_RUNS = 3
"""Consecutive phases a rate must hold the objective in to count as sustainable."""
OBJECTIVE_MS = 1000.0
"""The latency objective: a spike's alert p99 within a second of its publish."""
TAIL_RATIO = 2.0
"""The objective's other half: p99 at most twice p50 (a tail of the batches' own pace, not of
stalls beside them)."""
BACKLOG_MS = 2 * OBJECTIVE_MS
"""Readings backed up when the scorer commits the last one more than this after publishing
stops: the last reading's own latency (up to the objective) and one objective's worth more."""
OFFERED_SHARE = 0.95
"""A phase offered its rate when the load generator kept 95 % of it."""


def holds(phase: dict[str, Any], rate: float) -> bool:
    """A phase met the latency objective at ``rate`` readings/s: every probe spike alerted,
    p99 ≤ ``OBJECTIVE_MS`` and ≤ ``TAIL_RATIO`` times p50, the load generator offered the rate and
    the scorer had no backlog left when publishing stopped (``BACKLOG_MS``)."""
    p50, p99 = phase["p50_ms"], phase["p99_ms"]
    return (
        p50 is not None
        and p99 is not None
        and p99 <= OBJECTIVE_MS
        and p99 <= TAIL_RATIO * p50
        and phase["probe_spikes_without_alert"] == 0
        and phase["offered_rps"] >= OFFERED_SHARE * rate
        and phase["catch_up_ms"] <= BACKLOG_MS
    )


def find_rate(
    pipe: Pipeline, args: argparse.Namespace
) -> tuple[float | None, list[dict[str, Any]]]:
    """Step the offered rate up by ``--step`` from ``--rate-from`` on the running pipeline
    until a phase misses the objective; the sustainable rate is the highest at which
    ``HOLD_RUNS`` consecutive phases all held it (``None``: not the first rate)."""
    held: float | None = None
    tried: list[dict[str, Any]] = []
    rate = float(args.rate_from)
    while rate <= args.rate_to:
        phases = []
        for i in range(HOLD_RUNS):
            phase = pipe.phase(f"{rate:.0f}/s#{i + 1}", rate / DEVICES, args.seconds)
            phase["held"] = holds(phase, rate)
            phases.append(phase)
            print(f"rate {rate:.0f}/s phase {i + 1}: holds {phase['held']}", flush=True)
            if not phase["held"]:
                break
        tried.append({"rate": rate, "phases": phases, "held": all(p["held"] for p in phases)})
        if not tried[-1]["held"]:  # a phase missed: the ones after it were not run
            break
        held = rate
        rate += args.step
    return held, tried


def figures(phase: dict[str, Any]) -> dict[str, Any]:
    """A phase's headline figures."""
    p50, p99 = phase["p50_ms"], phase["p99_ms"]
    return {
        "p50_ms": p50,
        "p99_ms": p99,
        "p99_over_p50": round(p99 / p50, 2) if p50 and p99 else None,
        "pipeline_cores": phase["pipeline_cores"],
        "load_avg_1m": phase["load_avg_1m"],
        "offered_rps": phase["offered_rps"],
        "catch_up_ms": phase["catch_up_ms"],
        "probe_spikes_without_alert": phase["probe_spikes_without_alert"],
    }


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="length of each phase")
    parser.add_argument("--rate-from", type=float, default=5000.0, help="readings/s")
    parser.add_argument("--rate-to", type=float, default=10000.0, help="readings/s")
    parser.add_argument("--step", type=float, default=1000.0, help="readings/s")
    parser.add_argument(
        "--noise", choices=("realistic", "gaussian"), default="realistic", help="the fleet's"
    )
    parser.add_argument("--warmup", type=int, default=300, help="seconds at 1,000/s, once")
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
        with Pipeline(settings, args.noise, args.trainer) as pipe:
            print(f"warm-up {args.warmup} s at 1,000/s (load {load_avg_1m()})", flush=True)
            warmup = pipe.phase("warmup", 1.0, args.warmup)
            held, tried = find_rate(pipe, args)
    finally:
        if not was_up:
            stack.down()
    print(json.dumps({"warmup": warmup, "tried": tried}))
    headline = {
        # no rate held: below the first one tried
        "sustainable_rps": held if held is not None else f"below {args.rate_from:,.0f}",
        "objective_p99_ms": OBJECTIVE_MS,
        "tail_ratio": TAIL_RATIO,
        "runs_per_rate": HOLD_RUNS,
        "trainer": args.trainer,
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "warmup": figures(warmup),
        "rates": [
            {"rate": t["rate"], "held": t["held"], "phases": [figures(p) for p in t["phases"]]}
            for t in tried
        ],
        "peak_rss_mb": pipe.peak_rss_mb,
    }
    print(json.dumps(headline))
    write_results(__file__, headline)


if __name__ == "__main__":
    main()
