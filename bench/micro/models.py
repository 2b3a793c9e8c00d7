"""Detector throughput, processed per device as the Spark job will (one pandas frame per key).

For each registered detector kind and for the combined default: warm every device up on two
days of its readings (not timed), then time ``score`` and ``learn`` (with the alerts as the
exclusion mask) on the next batch of each device. The existing ``FixedBaseline.score`` runs on
the same batches in the same run as the baseline.

    python bench/micro/models.py [--devices 1000] [--readings 600]

Last line: {"devices", "readings_per_device", "rows", "score_rps": {kind: ...},
"learn_rps": {kind: ...}, "baseline_score_rps"}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.models.registry import KINDS, create

INTERVAL_MS = 5 * 60_000
PER_DAY = 288
WARMUP_READINGS = 2 * PER_DAY


def device_frame(device: int, seed: int, start: int, n: int) -> pd.DataFrame:
    """Long-form readings of one device: temperature and humidity, daily cycle, shared factor."""
    rng = np.random.default_rng([device, seed])
    i = np.arange(start, start + n)
    daily = np.sin(2 * np.pi * i / PER_DAY + device)
    factor = rng.normal(0.0, 1.0, n)
    t = np.repeat(i.astype(np.int64) * INTERVAL_MS, 2)
    values = np.empty(2 * n)
    values[0::2] = 21.0 + 2.0 * daily + 0.8 * factor + rng.normal(0.0, 0.3, n)
    values[1::2] = 50.0 - 3.0 * daily - 2.0 * factor + rng.normal(0.0, 0.5, n)
    metric = np.tile(np.array(["temperature", "humidity"], dtype=object), n)
    return pd.DataFrame({"event_ms": t, "metric": metric, "value": values})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--readings", type=int, default=600)
    args = parser.parse_args()
    warm = [device_frame(d, 0, 0, WARMUP_READINGS) for d in range(args.devices)]
    batches = [device_frame(d, 1, WARMUP_READINGS, args.readings) for d in range(args.devices)]
    rows = sum(len(b) for b in batches)
    print(f"{args.devices} devices x {args.readings} readings x 2 metrics = {rows} rows")

    baseline = FixedBaseline(bands={"temperature": (21.0, 8.0), "humidity": (50.0, 15.0)})
    began = time.perf_counter()
    for b in batches:
        baseline.score(b["metric"].to_numpy(), b["value"].to_numpy())
    baseline_rps = rows / (time.perf_counter() - began)
    print(f"{'fixed-baseline':>14}  score {baseline_rps:>12,.0f} rows/s")

    score_rps: dict[str, float] = {}
    learn_rps: dict[str, float] = {}
    alert_rate: dict[str, float] = {}
    for kind in sorted(KINDS):
        detectors = [create(kind).learn(w) for w in warm]
        began = time.perf_counter()
        scored = [d.score(b) for d, b in zip(detectors, batches, strict=True)]
        score_rps[kind] = rows / (time.perf_counter() - began)
        began = time.perf_counter()
        for d, b, s in zip(detectors, batches, scored, strict=True):
            d.learn(b, exclude=s.alert)
        learn_rps[kind] = rows / (time.perf_counter() - began)
        alert_rate[kind] = float(np.mean(np.concatenate([s.alert for s in scored])))
        print(
            f"{kind:>14}  score {score_rps[kind]:>12,.0f} rows/s   learn {learn_rps[kind]:>10,.0f}"
            f" rows/s   alerts on normal data {alert_rate[kind]:.2e}"
            f"   params {len(json.dumps(detectors[0].to_params()))} B"
        )
    figures = {
        "devices": args.devices,
        "readings_per_device": args.readings,
        "rows": rows,
        "score_rps": {k: round(v) for k, v in score_rps.items()},
        "learn_rps": {k: round(v) for k, v in learn_rps.items()},
        "baseline_score_rps": round(baseline_rps),
        "alert_rate": alert_rate,
    }
    print(json.dumps(figures))
    write_results(__file__, figures)


if __name__ == "__main__":
    main()
