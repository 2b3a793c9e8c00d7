"""Recall on faults that come back, and false alerts between them: one metric of heavy-tailed
noise with the same sustained shift every few hours, through file mode's engine.

Each device (``--seeds`` of them per size) is one metric of Student-t noise (3 degrees of
freedom, scale 0.5), one reading every 10 s for ``--days`` days, with a shift of ``size`` times
the scale lasting 30 readings every ``--every-h`` hours from hour 3, for each size of
``--sizes``. A fault is detected when an alert is open within 40 readings of its start; an alert
opened more than 60 readings from every fault's start is false. What it measures: whether a
calibration that learns from what passes its threshold goes blind to a fault it has already
seen, and what that buys in false alerts on the noise.

    python bench/quality/recurring_faults.py [--days 2] [--seeds 4] [--sizes 3,5,8]
        [--every-h 6] [--budget 1] [--device-calibration]

Last line: {"detected", "faults", "recall", "false_alerts", "false_per_device_day",
"by_size": {size: {"detected", "faults", "false_alerts"}}, "days", "seeds", "budget",
"device_calibration", "seconds", "loadavg_1m" (at the start), "loadavg_1m_end"}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from fleetwatch.evaluation.detections import run_starts
from fleetwatch.filemode.scoring import detect_frame
from fleetwatch.models.registry import Tuning, default_detector

STEP_MS = 10_000
PER_HOUR = 3_600_000 // STEP_MS
START_MS = 1_767_600_000_000
SCALE = 0.5
LASTS = 30
"""Readings a fault lasts."""
FOUND_WITHIN = 40
"""Readings after a fault's start within which an open alert detects it."""
NEAR = 60
"""Readings after a fault's start within which an alert's opening is not a false one."""


def device(seed: int, size: float, days: float, every_h: float) -> tuple[pd.DataFrame, list[int]]:
    """One device's readings and the rows where its faults start."""
    n = round(days * 24 * PER_HOUR)
    rng = np.random.default_rng(seed)
    values = 20.0 + SCALE * rng.standard_t(3, n)
    starts = list(range(3 * PER_HOUR, n - LASTS, round(every_h * PER_HOUR)))
    for s in starts:
        values[s : s + LASTS] += size * SCALE
    frame = pd.DataFrame(
        {
            "timestamp": START_MS + np.arange(n, dtype=np.int64) * STEP_MS,
            "value": np.round(values, 4),
            "device_id": "d",
        }
    )
    return frame, starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--sizes", default="3,5,8", help="shifts, in multiples of the scale")
    parser.add_argument("--every-h", type=float, default=6.0)
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument(
        "--device-calibration", action="store_true", help="score.device_calibration on"
    )
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    began = time.perf_counter()
    tuning = Tuning(false_alerts_per_day=args.budget, device_calibration=args.device_calibration)
    make = partial(default_detector, tuning)
    by_size: dict[str, dict[str, int]] = {}
    for size in (float(s) for s in args.sizes.split(",") if s.strip()):
        tally = {"detected": 0, "faults": 0, "false_alerts": 0}
        for seed in range(args.seeds):
            frame, starts = device(seed, size, args.days, args.every_h)
            alert = detect_frame(frame, "timestamp", "device_id", ["value"], make=make)["alert"]
            flags = alert.to_numpy().astype(bool)
            near = np.zeros(flags.size, dtype=bool)
            for s in starts:
                near[s : s + NEAR] = True
            tally["detected"] += sum(bool(flags[s : s + FOUND_WITHIN].any()) for s in starts)
            tally["faults"] += len(starts)
            tally["false_alerts"] += int((~near[np.flatnonzero(run_starts(flags))]).sum())
        by_size[f"{size:g}"] = tally
        print(
            f"size {size:g}: detected {tally['detected']}/{tally['faults']}, "
            f"false alerts {tally['false_alerts']}",
            file=sys.stderr,
            flush=True,
        )
    detected = sum(t["detected"] for t in by_size.values())
    faults = sum(t["faults"] for t in by_size.values())
    false = sum(t["false_alerts"] for t in by_size.values())
    device_days = args.days * args.seeds * len(by_size)
    result = {
        "detected": detected,
        "faults": faults,
        "recall": round(detected / faults, 3) if faults else None,
        "false_alerts": false,
        "false_per_device_day": round(false / device_days, 3) if device_days else None,
        "by_size": by_size,
        "days": args.days,
        "seeds": args.seeds,
        "budget": args.budget,
        "device_calibration": args.device_calibration,
        "seconds": round(time.perf_counter() - began, 2),
        "loadavg_1m": round(load_start, 2),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    write_results(__file__, result)


if __name__ == "__main__":
    main()
