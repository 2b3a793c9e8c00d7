"""False alarms on normal data: long synthetic single-metric streams of awkward but healthy noise,
with no anomaly at all, through file mode's engine; every alert is a false one.

Each shape is ``--devices`` devices (seeded) of one metric, one reading every 10 s for
``--days`` simulated days, scored by :func:`~fleetwatch.filemode.scoring.detect_frame` (what
``fleetwatch detect`` runs: per device, online and causal, chunks of ``--chunk-rows``). With
``--fleet``, each shape's devices are one fleet (``fleetwatch detect --fleet``: scored in lockstep
of event time, each scope's fleet model pooled from the devices as production pools it). With
``--metrics N``, each device reports ``N`` independent streams of its shape (metrics ``value``,
``value_2``, …); a fleet of single-metric devices (the default) pools their tails alone, with
no multivariate part (a joint model takes two metrics).
With ``--join-days D`` (and ``--fleet``), the ``--devices`` devices counted are newcomers: they
start ``D`` days after as many veterans of their shape, which run from the start, so each
newcomer joins a fleet whose pooled tails know a day's excursions — what a device added to a
running fleet meets. Only the newcomers' alerts are counted; the veterans' first days are
the fleet started together that the figures without ``--join-days`` measure.

- ``student_t2``, ``student_t3``: heavy-tailed noise, Student-t with 2 and 3 degrees of freedom;
- ``random_walk``: a level that wanders (Gaussian steps);
- ``poisson``: integer counts (Poisson, mean 4);
- ``on_off``: two levels switching at random (mean dwell 30 minutes), small noise on each;
- ``load_cycle``: a 20-minute sine (a within-hour load cycle) plus noise;
- ``discharge``: a slow exponential decline (a battery over days) plus noise.

An alert is an episode: a run of consecutive alerting rows of one device (file mode's
``alert`` is "an alert of the device is open here", so a run is one alert from open to
resolve). Printed per shape: alerts per device-day over the whole run and after the first day
(once the detector has learned), and the share of alerting rows, for each budget of
``--budgets`` (``score.false_alerts_per_device_day``; default 1). Each rate comes with its exact
95 % Poisson interval over the ``--devices`` times ``--days`` device-days, and the budget is
*broken* where the whole interval lies above it, *held* where it lies at or below it, else
*undecided* (:mod:`~fleetwatch.evaluation.rates`): a budget of 1 a day needs some 20
device-days, one of 0.01 some 400, before a shape on budget can be told from one over it.

    python bench/quality/noise_budget.py [--days 7] [--devices 5] [--seed 0] [--chunk-rows 50]
        [--budgets 1,0.1,0.01] [--device-calibration] [--detectors KIND[,KIND...]]
        (a combined detector of those kinds; default: the default) [--fleet] [--metrics N]
        [--join-days D]

Last line: {"shapes": {shape: alerts_per_device_day}, "budget": the first budget, "worst":
shape, "over_budget": [shapes], "after_day1": {shape: alerts_per_device_day},
"alert_row_share": {shape: share}, "exposure_device_days", "by_budget": {budget: {"shapes",
"intervals": {shape: [low, high]}, "broken", "undecided" (shapes), "after_day1", "over_budget"
(rate above the budget), "worst_ratio" (the worst shape's rate over the budget)}}, "detectors",
"fleet", "metrics", "join_days", "days", "devices", "rows", "rows_per_s", "seconds",
"loadavg_1m" (at the start), "loadavg_1m_end"}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from fleetwatch.evaluation.detections import run_starts
from fleetwatch.evaluation.rates import rate_interval, verdict
from fleetwatch.filemode.scoring import DEFAULT_CHUNK_ROWS, detect_frame
from fleetwatch.models.registry import Tuning, detector_factory

STEP_MS = 10_000
PER_DAY = 86_400_000 // STEP_MS
START = datetime(2026, 1, 5, tzinfo=UTC)
VETERAN_SEEDS = 500_000
"""Added to a veteran's seed: veterans' streams are none of the counted devices'."""
Floats = npt.NDArray[np.float64]
Shape = Callable[[np.random.Generator, int], Floats]


def student_t(dof: float) -> Shape:
    def make(rng: np.random.Generator, n: int) -> Floats:
        return 20.0 + 0.5 * rng.standard_t(dof, n)

    return make


def random_walk(rng: np.random.Generator, n: int) -> Floats:
    return 50.0 + np.cumsum(rng.normal(0.0, 0.05, n))


def poisson(rng: np.random.Generator, n: int) -> Floats:
    return rng.poisson(4.0, n).astype(np.float64)


def on_off(rng: np.random.Generator, n: int) -> Floats:
    dwell = 30 * 60_000 / STEP_MS
    switches = rng.random(n) < 1.0 / dwell
    state = (np.cumsum(switches) + rng.integers(2)) % 2
    return np.where(state == 1, 12.0, 5.0) + rng.normal(0.0, 0.2, n)


def load_cycle(rng: np.random.Generator, n: int) -> Floats:
    t_s = np.arange(n) * STEP_MS / 1000
    return (
        50.0
        + 10.0 * np.sin(2 * np.pi * t_s / 1200 + rng.uniform(0, 2 * np.pi))
        + rng.normal(0.0, 1.0, n)
    )


def discharge(rng: np.random.Generator, n: int) -> Floats:
    t_days = np.arange(n) * STEP_MS / 86_400_000
    return 3.3 + 0.9 * np.exp(-t_days / 4.0) + rng.normal(0.0, 0.01, n)


SHAPES: dict[str, Shape] = {
    "student_t2": student_t(2),
    "student_t3": student_t(3),
    "random_walk": random_walk,
    "poisson": poisson,
    "on_off": on_off,
    "load_cycle": load_cycle,
    "discharge": discharge,
}


def stream(
    shape: Shape, seed: int, days: float, metrics: int = 1, after_days: float = 0.0
) -> pd.DataFrame:
    """One device's readings (epoch ms, then :func:`metric_names`), rounded as a sensor would
    report them, from ``after_days`` after :data:`START`; each further metric an independent
    stream of the shape."""
    n = round(days * PER_DAY)
    rng = np.random.default_rng(seed)
    start_ms = int(START.timestamp() * 1000) + round(after_days * PER_DAY) * STEP_MS
    columns = {"timestamp": start_ms + np.arange(n, dtype=np.int64) * STEP_MS}
    for name in metric_names(metrics):
        columns[name] = np.round(shape(rng, n), 4)
    return pd.DataFrame(columns)


def metric_names(metrics: int) -> list[str]:
    """``value``, ``value_2``, … for ``metrics`` metrics."""
    return ["value", *(f"value_{i}" for i in range(2, metrics + 1))]


def episodes_per_device(
    flags: npt.NDArray[np.bool_], devices: int, rows: int, skip_rows: int = 0
) -> float:
    """Runs of alerting rows per device (each device's rows contiguous), from ``skip_rows``."""
    per = flags.reshape(devices, rows)[:, skip_rows:]
    return float(sum(int(run_starts(device).sum()) for device in per)) / devices


def judge(rate: float, exposure: float, budget: float) -> tuple[tuple[float, float], str]:
    """A shape's rate of alerts a device-day over ``exposure`` device-days: its exact 95 %
    interval and whether ``budget`` is held, broken or undecided by it
    (:mod:`~fleetwatch.evaluation.rates`)."""
    count = round(rate * exposure)
    return rate_interval(count, exposure), verdict(count, exposure, budget)


def run_budget(
    budget: float, args: argparse.Namespace
) -> tuple[dict[str, float], dict[str, float], dict[str, float], int, float]:
    """Every shape at one budget: alerts per device-day, after day 1, alerting rows' share;
    the rows run and the engine's seconds."""
    tuning = Tuning(false_alerts_per_day=budget, device_calibration=args.device_calibration)
    make = detector_factory(args.detectors, tuning)
    per_day: dict[str, float] = {}
    after: dict[str, float] = {}
    share: dict[str, float] = {}
    engine_s, total_rows = 0.0, 0
    for index, (name, shape) in enumerate(SHAPES.items()):
        frames = [
            stream(
                shape, args.seed * 1000 + index * 100 + d, args.days, args.metrics, args.join_days
            ).assign(device_id=f"{name}-{d}")
            for d in range(args.devices)
        ]
        rows = len(frames[0])
        counted = args.devices * rows  # the devices counted come first
        if args.join_days:
            frames += [
                stream(
                    shape,
                    VETERAN_SEEDS + args.seed * 1000 + index * 100 + d,
                    args.join_days + args.days,
                    args.metrics,
                ).assign(device_id=f"{name}-veteran-{d}")
                for d in range(args.devices)
            ]
        frame = pd.concat(frames, ignore_index=True)
        started = time.perf_counter()
        scored = detect_frame(
            frame,
            "timestamp",
            "device_id",
            metric_names(args.metrics),
            args.chunk_rows,
            make,
            args.fleet,
        )
        engine_s += time.perf_counter() - started
        total_rows += len(frame)
        flags = scored["alert"].to_numpy(dtype=bool)[:counted]
        per_day[name] = episodes_per_device(flags, args.devices, rows) / args.days
        (low, high), judged = judge(per_day[name], args.devices * args.days, budget)
        later_days = args.days - 1
        if later_days > 0:
            after[name] = episodes_per_device(flags, args.devices, rows, PER_DAY) / later_days
        share[name] = float(flags.mean())
        later = f"{after[name]:.2f}" if name in after else "-"
        print(
            f"budget {budget:<5g} {name:<12} {per_day[name]:8.3f} alerts per device-day "
            f"[{low:.2f}, {high:.2f}] (after day 1: {later}; alerting rows {share[name]:.3%}) "
            f"{'OVER' if per_day[name] > budget else 'within'} budget, {judged}",
            flush=True,
        )
    return per_day, after, share, total_rows, engine_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--devices", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-rows", type=int, default=DEFAULT_CHUNK_ROWS)
    parser.add_argument("--budgets", default="1", help="comma-separated budgets to run")
    parser.add_argument("--detectors", help="comma-separated detector kinds to combine")
    parser.add_argument(
        "--device-calibration", action="store_true", help="score.device_calibration on"
    )
    parser.add_argument(
        "--fleet", action="store_true", help="each shape's devices as one fleet (detect --fleet)"
    )
    parser.add_argument("--metrics", type=int, default=1, help="streams of the shape a device")
    parser.add_argument(
        "--join-days",
        type=float,
        default=0.0,
        help="the devices counted join, this many days later, a fleet of as many veterans",
    )
    args = parser.parse_args()
    if args.join_days and not args.fleet:
        parser.error("--join-days needs --fleet: newcomers join a fleet")
    budgets = [float(b) for b in args.budgets.split(",") if b.strip()]
    load_start = os.getloadavg()[0]
    began = time.perf_counter()
    engine_s = 0.0
    total_rows = 0
    by_budget: dict[str, dict[str, object]] = {}
    first: tuple[dict[str, float], dict[str, float], dict[str, float]] | None = None
    for budget in budgets:
        per_day, after, share, rows, seconds = run_budget(budget, args)
        engine_s += seconds
        total_rows += rows
        first = first or (per_day, after, share)
        worst = max(per_day, key=lambda s: per_day[s])
        judged = {s: judge(v, args.devices * args.days, budget) for s, v in per_day.items()}
        by_budget[f"{budget:g}"] = {
            "shapes": {s: round(v, 4) for s, v in per_day.items()},
            "intervals": {s: [round(lo, 4), round(hi, 4)] for s, ((lo, hi), _) in judged.items()},
            "broken": [s for s, (_, v) in judged.items() if v == "broken"],
            "undecided": [s for s, (_, v) in judged.items() if v == "undecided"],
            "after_day1": {s: round(v, 4) for s, v in after.items()},
            "over_budget": [s for s, v in per_day.items() if v > budget],
            "worst_ratio": round(per_day[worst] / budget, 2),
        }
    assert first is not None, "no budget to run"
    per_day, after, share = first
    worst = max(per_day, key=lambda s: per_day[s])
    result = {
        "shapes": {s: round(v, 3) for s, v in per_day.items()},
        "budget": budgets[0],
        "worst": worst,
        "over_budget": [s for s, v in per_day.items() if v > budgets[0]],
        "after_day1": {s: round(v, 3) for s, v in after.items()},
        "alert_row_share": {s: round(v, 5) for s, v in share.items()},
        "exposure_device_days": args.devices * args.days,
        "by_budget": by_budget,
        "detectors": args.detectors or "default",
        "device_calibration": args.device_calibration,
        "fleet": args.fleet,
        "metrics": args.metrics,
        "join_days": args.join_days,
        "days": args.days,
        "devices": args.devices,
        "rows": total_rows,
        "rows_per_s": round(total_rows / engine_s) if engine_s else None,
        "seconds": round(time.perf_counter() - began, 1),
        "loadavg_1m": round(load_start, 2),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    write_results(__file__, result)


if __name__ == "__main__":
    main()
