"""Throughput of ``fleetwatch detect`` on a recorded CSV, end to end (read → score → write).

A generated file of ``--rows`` rows from ``--devices`` devices (one reading a minute each,
interleaved; columns timestamp, device_id, temperature, humidity, pressure) is scored by
:func:`~fleetwatch.filemode.csvfile.detect_csv` with its defaults. The baseline in the same run
reads the same file as text and writes it back (``pd.read_csv`` + ``to_csv`` in the same
pieces), the I/O floor any scoring pays.

    python bench/micro/detect.py [--rows 200000] [--devices 100] [--chunk-rows 50]

Last line: {"rows", "devices", "chunk_rows", "seconds", "rows_per_s", "alerts",
"baseline_seconds", "baseline_rows_per_s", "slowdown"}
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from fleetwatch.filemode.csvfile import DEFAULT_PIECE_ROWS, detect_csv

START = pd.Timestamp("2026-01-01T00:00:00")


def write_recording(path: Path, rows: int, devices: int) -> None:
    rng = np.random.default_rng(0)
    step = np.arange(rows) // devices
    times = (START + pd.to_timedelta(step, unit="min")).strftime("%Y-%m-%dT%H:%M:%SZ")
    frame = pd.DataFrame(
        {
            "timestamp": times,
            "device_id": [f"dev-{d:04d}" for d in np.arange(rows) % devices],
            "temperature": np.round(21.0 + rng.normal(0, 0.3, rows), 3),
            "humidity": np.round(50.0 + rng.normal(0, 0.5, rows), 3),
            "pressure": np.round(1013.0 + rng.normal(0, 1.0, rows), 2),
        }
    )
    frame.to_csv(path, index=False)


def baseline(source: Path, out: Path) -> float:
    began = time.perf_counter()
    reader = pd.read_csv(source, dtype=str, keep_default_na=False, chunksize=DEFAULT_PIECE_ROWS)
    with reader:
        for i, piece in enumerate(reader):
            piece.to_csv(out, mode="w" if i == 0 else "a", header=i == 0, index=False)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--chunk-rows", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleetwatch-bench-detect-") as tmp:
        source = Path(tmp) / "recording.csv"
        write_recording(source, args.rows, args.devices)
        base = baseline(source, Path(tmp) / "copy.csv")
        summary = detect_csv(source, Path(tmp) / "scores.csv", chunk_rows=args.chunk_rows)
    figures = {
        "rows": summary.rows,
        "devices": summary.devices,
        "chunk_rows": args.chunk_rows,
        "seconds": round(summary.seconds, 3),
        "rows_per_s": round(summary.rows_per_s),
        "alerts": summary.alerts,
        "baseline_seconds": round(base, 3),
        "baseline_rows_per_s": round(summary.rows / base),
        "slowdown": round(summary.seconds / base, 1),
    }
    print(
        f"detect: {summary.rows:,} rows, {summary.devices} devices in {summary.seconds:.2f} s "
        f"({summary.rows_per_s:,.0f} rows/s, {summary.alerts} alerts); "
        f"read + write alone {base:.2f} s ({summary.rows / base:,.0f} rows/s)"
    )
    print(json.dumps(figures))
    write_results(__file__, figures)


if __name__ == "__main__":
    main()
