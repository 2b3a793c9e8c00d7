"""What the false-alert budget buys: recall, delay and false alerts at each budget, on SKAB, the
simulated fleet and healthy noise, so that ``score.false_alerts_per_device_day`` is chosen
from a curve and not from habit.

Per budget of ``--budgets`` (``score.false_alerts_per_device_day``), the default detector:

- SKAB (``--skab``, read where it lies; :mod:`bench.quality.realdata`'s engine and scoring):
  the held-out files' (``valve2/``, ``other/``) outlier F1 with its 95 % bootstrap interval over
  files, recall (100 - MAR %), FAR %, alert episodes that open outside any fault's window, and
  the median delay from a fault's first labelled row to its first alerting row (rows, about a
  second each), over the faults alerted on; the tuning files' (``valve1/``) F1 beside them.
- The simulated fleet (:mod:`bench.quality.offline`): one recording of the realistic eval-500
  scenario (``--devices``, ``--minutes``, ``--start``; recorded once, replayed at every
  budget), through the trainer and scorer steps: F1, recall, false alerts per device-day and
  the median delay of spikes, dips and level shifts (seconds; one reading a second).
- Healthy noise (:mod:`bench.quality.noise_budget`, ``--noise-devices`` devices of every shape
  for ``--noise-days``): the worst shape's false alerts per device-day and its ratio to the
  budget.

``per_1000_devices_day`` is what the budget promises a fleet of 1,000 devices (its false alerts
a day); ``sim_false_per_1000_day`` what the simulated fleet's measured rate gives at that size.

    python bench/quality/budget_curve.py --skab DIR [--budgets 3,1,0.3,0.1,0.03,0.01]
        [--devices 100] [--minutes 12] [--start ISO] [--noise-days 1] [--noise-devices 3]

Last line: {"budgets": [...], "curve": [{"budget", "per_1000_devices_day", "skab_f1",
"skab_f1_ci", "skab_recall_pct", "skab_far_pct", "skab_false_openings", "skab_delay_rows_p50",
"skab_tuning_f1", "sim_f1", "sim_recall", "sim_false_per_device_day",
"sim_false_per_1000_day", "sim_delay_p50_s" {kind: s}, "noise_worst", "noise_worst_per_day",
"noise_worst_ratio"}], "devices", "minutes", "noise_days", "noise_devices", "seconds",
"loadavg_1m", "loadavg_1m_end"}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from bench.quality import noise_budget, offline, realdata
from fleetwatch.contracts.settings import Settings
from fleetwatch.evaluation.skab import SKAB_TRAIN_ROWS, SkabTally
from fleetwatch.filemode.scoring import DEFAULT_CHUNK_ROWS
from fleetwatch.models.registry import Tuning, detector_factory
from fleetwatch.simulator.recording import read_header

BUDGETS = "3,1,0.3,0.1,0.03,0.01"
"""Half-decades from three false alerts a device-day to one in a hundred device-days."""
FLEET = 1000
"""The fleet the budget's promise is stated for (``per_1000_devices_day``)."""
SIM_KINDS = ("spike", "dip", "level_shift")
"""The simulator's kinds of sudden fault."""


def first_fault_delay(labelled: npt.NDArray[np.bool_], flags: npt.NDArray[np.bool_]) -> int | None:
    """Rows from the first labelled row of a file's first fault to its first alerting row
    within that fault; ``None`` when none of the fault's rows alerts."""
    starts = np.flatnonzero(labelled)
    if starts.size == 0:
        return None
    start = int(starts[0])
    ends = np.flatnonzero(~labelled[start:])
    end = start + (int(ends[0]) if ends.size else labelled.size - start)
    hit = np.flatnonzero(flags[start:end])
    return int(hit[0]) if hit.size else None


def skab_at(files: list[tuple[str, Path]], budget: float, chunk_rows: int) -> dict[str, Any]:
    """The default detector at ``budget`` over SKAB's files: held-out figures and the tuning
    files' F1."""
    make = detector_factory(None, Tuning(false_alerts_per_day=budget))
    held: list[realdata.Scored] = []
    tuning = SkabTally()
    delays: list[int] = []
    for category, path in files:
        frame = realdata.read_skab(path)
        flags, _, scores = realdata.detect(frame, chunk_rows, make)
        frame[realdata.FLAG] = flags
        labelled = frame["anomaly"].to_numpy() > 0
        tally = realdata.score_frame(frame, SKAB_TRAIN_ROWS)
        if category in realdata.TUNING:
            tuning += tally
            continue
        held.append((tally, labelled[SKAB_TRAIN_ROWS:], scores[SKAB_TRAIN_ROWS:]))
        delay = first_fault_delay(labelled[SKAB_TRAIN_ROWS:], flags[SKAB_TRAIN_ROWS:])
        if delay is not None:
            delays.append(delay)
    out = realdata.held_out(held)
    mar = out["mar_pct"]
    return {
        "skab_f1": out["outlier_f1"],
        "skab_f1_ci": out["outlier_f1_ci"],
        "skab_recall_pct": None if mar is None else round(100.0 - mar, 2),
        "skab_far_pct": out["far_pct"],
        "skab_false_openings": out["false_openings"],
        "skab_delay_rows_p50": float(np.median(delays)) if delays else None,
        "skab_tuning_f1": realdata.figures(tuning)["outlier_f1"],
    }


def sim_at(recording: Path, budget: float, args: argparse.Namespace) -> dict[str, Any]:
    """The recording replayed with the budget at ``budget``."""
    settings = Settings()
    score = settings.score.model_copy(update={"false_alerts_per_device_day": budget})
    settings = settings.model_copy(update={"score": score})
    scenario, _ = read_header(recording)
    run = offline.replay(
        recording,
        settings,
        round(args.train_s * 1000),
        args.batch_ms,
        round(offline.FLEET_S * 1000),
        round(offline.FLEET_EVERY_S * 1000),
    )
    report = offline.summary(run, scenario, offline.TOLERANCE_S)
    per_day = report["false_alerts_per_device_day"]
    return {
        "sim_f1": round(report["f1"], 3),
        "sim_recall": round(report["recall"], 3),
        "sim_false_per_device_day": round(per_day, 2),
        "sim_false_per_1000_day": round(per_day * FLEET),
        "sim_delay_p50_s": {
            kind: report["by_kind"].get(kind, {}).get("delay_p50_s") for kind in SIM_KINDS
        },
    }


def noise_at(budget: float, args: argparse.Namespace) -> dict[str, Any]:
    """The worst healthy-noise shape at ``budget``."""
    run = argparse.Namespace(
        seed=0,
        days=args.noise_days,
        devices=args.noise_devices,
        metrics=1,
        chunk_rows=DEFAULT_CHUNK_ROWS,
        detectors=None,
        device_calibration=False,
        fleet=False,
    )
    per_day, _, _, _, _ = noise_budget.run_budget(budget, run)
    worst = max(per_day, key=lambda shape: per_day[shape])
    return {
        "noise_worst": worst,
        "noise_worst_per_day": round(per_day[worst], 3),
        "noise_worst_ratio": round(per_day[worst] / budget, 1),
    }


def show(row: dict[str, Any]) -> None:
    delays = ", ".join(f"{k} {v}" for k, v in row["sim_delay_p50_s"].items())
    print(
        f"budget {row['budget']:<5g} ({row['per_1000_devices_day']:g} a day for {FLEET} devices)"
        f"  SKAB held-out F1 {row['skab_f1']} {row['skab_f1_ci']} recall "
        f"{row['skab_recall_pct']} % FAR {row['skab_far_pct']} % false openings "
        f"{row['skab_false_openings']} delay p50 {row['skab_delay_rows_p50']} rows"
        f" (tuning F1 {row['skab_tuning_f1']})  sim F1 {row['sim_f1']} recall "
        f"{row['sim_recall']} false {row['sim_false_per_device_day']} a device-day "
        f"({row['sim_false_per_1000_day']} for {FLEET}) delay p50 s: {delays}  noise worst "
        f"{row['noise_worst']} {row['noise_worst_per_day']} a device-day "
        f"({row['noise_worst_ratio']}x)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skab", type=Path, help="SKAB's data/ folder (valve1/, valve2/, other/)")
    parser.add_argument("--budgets", default=BUDGETS, help="comma-separated budgets")
    parser.add_argument("--devices", type=int, default=offline.DEFAULT_DEVICES)
    parser.add_argument("--minutes", type=float, default=offline.DEFAULT_MINUTES)
    parser.add_argument("--start", default="2026-11-20T10:00:00Z", help="the recording's start")
    parser.add_argument("--train-s", type=float, default=10.0, help="trainer step")
    parser.add_argument("--batch-ms", type=int, default=1000, help="scorer batch")
    parser.add_argument("--noise-days", type=float, default=1.0)
    parser.add_argument("--noise-devices", type=int, default=3)
    args = parser.parse_args()
    files = realdata.skab_files(args.skab) if args.skab and args.skab.is_dir() else []
    if not files:
        print(realdata.WHERE)
        return
    budgets = [float(b) for b in args.budgets.split(",")]
    load_start = os.getloadavg()[0]
    began = time.perf_counter()
    scenario = offline.scenario_of(
        argparse.Namespace(
            scenario=offline.ROOT / "deploy/scenarios/eval-500.toml",
            devices=args.devices,
            minutes=args.minutes,
            noise="realistic",
            seed=None,
        )
    )
    recording = offline.make_recording(scenario, offline.start_ms_of(args.start))
    curve = []
    for budget in budgets:
        row: dict[str, Any] = {"budget": budget, "per_1000_devices_day": budget * FLEET}
        row |= skab_at(files, budget, DEFAULT_CHUNK_ROWS)
        row |= sim_at(recording, budget, args)
        row |= noise_at(budget, args)
        show(row)
        curve.append(row)
    result = {
        "budgets": budgets,
        "curve": curve,
        "devices": args.devices,
        "minutes": args.minutes,
        "noise_days": args.noise_days,
        "noise_devices": args.noise_devices,
        "seconds": round(time.perf_counter() - began, 1),
        "loadavg_1m": round(load_start, 2),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    write_results(__file__, result)


if __name__ == "__main__":
    main()
