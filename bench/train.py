"""Training throughput of the trainer's Spark plan on local Spark (file source, availableNow).

``--devices`` devices send ``--readings`` readings each (temperature and humidity), written as
``--files`` files of telemetry records; the trainer's plan (de-dup → explode →
transformWithStateInPandas → memory sink) learns them one file per micro-batch. The baseline in
the same run is the scorer's plan (de-dup → explode → mapInArrow) over the same files.

    python bench/train.py [--devices 1000] [--readings 60] [--files 3]

Last line: {"devices", "readings", "batches", "throughput_rps", "batch_ms_median",
"batch_ms_max", "baseline_throughput_rps", "baseline_batch_ms_median"}
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from fleetwatch.contracts.settings import Settings
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.streaming.score import alerts_frame, readings_frame
from fleetwatch.streaming.session import build_session
from fleetwatch.streaming.train import updates_frame

INTERVAL_MS = 60_000
START_MS = 1_763_750_000_000


def write_files(folder: Path, devices: int, readings: int, files: int) -> int:
    rng = np.random.default_rng(0)
    per_file = readings // files
    for f in range(files):
        lines = []
        for d in range(devices):
            for seq in range(f * per_file, (f + 1) * per_file):
                event_ms = START_MS + seq * INTERVAL_MS
                metrics = {
                    "temperature": round(21.0 + float(rng.normal(0, 0.3)), 3),
                    "humidity": round(50.0 + float(rng.normal(0, 0.5)), 3),
                }
                record = {"device_id": f"dev-{d:05d}", "seq": seq, "event_ms": event_ms}
                record |= {"received_ms": event_ms + 5, "metrics": metrics}
                lines.append(json.dumps(record))
        (folder / f"part-{f:03d}.txt").write_text("\n".join(lines) + "\n")
    return devices * per_file * files


def run_plan(spark: Any, source: Path, work: Path, plan: str) -> tuple[float, list[int]]:
    """Wall time of the whole run and the duration of each micro-batch that had data."""
    raw = spark.readStream.option("maxFilesPerTrigger", 1).text(str(source))
    readings = readings_frame(raw, "10 minutes")
    if plan == "train":
        out = updates_frame(readings)
    else:
        out = alerts_frame(readings, FixedBaseline(bands={"temperature": (21.0, 8.0)}))
    name = f"{plan}_{uuid.uuid4().hex[:8]}"
    began = time.perf_counter()
    query = (
        out.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(work / name))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - began
    if query.exception() is not None:
        raise SystemExit(f"{plan} failed: {query.exception()}")
    durations = [
        int(p["durationMs"]["triggerExecution"])
        for p in query.recentProgress
        if p["numInputRows"] > 0
    ]
    return wall, durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--readings", type=int, default=60, help="per device")
    parser.add_argument("--files", type=int, default=3, help="= micro-batches")
    args = parser.parse_args()
    spark = build_session(Settings(), "fleetwatch-bench-train")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            source = work / "in"
            source.mkdir()
            total = write_files(source, args.devices, args.readings, args.files)
            print(f"{args.devices} devices, {total} readings in {args.files} files")
            base_wall, base_batches = run_plan(spark, source, work, "score")
            print(f"baseline (scorer plan): {total / base_wall:,.0f} readings/s, {base_batches} ms")
            wall, batches = run_plan(spark, source, work, "train")
            print(f"trainer:                {total / wall:,.0f} readings/s, {batches} ms")
    finally:
        spark.stop()
    print(
        json.dumps(
            {
                "devices": args.devices,
                "readings": total,
                "batches": len(batches),
                "throughput_rps": round(total / wall),
                "batch_ms_median": statistics.median(batches),
                "batch_ms_max": max(batches),
                "baseline_throughput_rps": round(total / base_wall),
                "baseline_batch_ms_median": statistics.median(base_batches),
            }
        )
    )


if __name__ == "__main__":
    main()
