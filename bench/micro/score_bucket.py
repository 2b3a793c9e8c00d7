"""The scorer's Python side without Spark: a simulated fleet's readings through what the
operator does per bucket and micro-batch — the bucket's state value unpickled, the input rows
scored (:func:`~fleetwatch.streaming.scorer.processor.score_rows`), the state pickled again.

The fleet is the end-to-end bench's (``bench/pipeline/under_load.py``): ``--devices`` devices
of the default scenario (temperature, the scenario's noise, a spike every 25th reading), 1
reading/s each, recorded in virtual time and accepted by the gateway's check; micro-batches
of ``--batch-ms`` of arrival time, each device in one of the plan's 16 buckets. No trainer
runs (as in that bench): devices are scored by the fixed baseline. The heap is settled as the
operator's worker settles it (:func:`~fleetwatch.heap.settle_worker`). CPU time per reading over
``--rounds`` readings per device after ``--warm`` readings of warm-up, the least of
``--repeat`` passes (each from empty state), and of it the state's unpickling and pickling
(``state_ms_per_batch``); ``--profile N`` prints the N functions with the most cumulative time
instead. Before the timing, one untimed pass over every batch gives the ``fingerprint``: a digest
of every output row of every bucket's micro-batch and of each bucket's state bytes at the end,
so a change to the scorer that should not change what it writes or keeps is checked by comparing
it.

    python bench/micro/score_bucket.py [--devices 1000] [--rounds 60] [--noise realistic]

Last line: {"us_per_reading", "ms_per_batch", "state_ms_per_batch", "state_bytes",
"out_rows_per_batch", "readings", "batches", "noise", "fingerprint"}
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import pstats
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from fleetwatch.contracts.settings import Settings
from fleetwatch.heap import settle_worker
from fleetwatch.ingest.accept import handle
from fleetwatch.ingest.clock import ClockOffsets
from fleetwatch.simulator.recording import record, recorded
from fleetwatch.simulator.scenario import Scenario
from fleetwatch.streaming.buckets import BUCKETS
from fleetwatch.streaming.scorer.bucket_step import MemoryStore, new_bucket
from fleetwatch.streaming.scorer.bucket_value import dump_bucket, load_bucket
from fleetwatch.streaming.scorer.policy import policy_of
from fleetwatch.streaming.scorer.processor import Context, score_rows, topic_names

START_MS = 1_736_931_600_000  # 2025-01-15T09:00:00Z


Frames = list[tuple[int, int, dict[int, pd.DataFrame]]]
"""(arrival ms, watermark, bucket -> input rows) of each micro-batch."""


def batches(devices: int, rounds: int, noise: str, batch_ms: int) -> Frames:
    settings = Settings()
    scenario = Scenario(
        devices=devices, rate=1.0, count=rounds, seed=11, prefix="bench"
    ).with_overrides(spike_every=25, noise=noise)
    path = Path(tempfile.mkdtemp()) / "fleet.jsonl"
    record(scenario, path, START_MS)
    clocks = ClockOffsets()
    lateness = 120_000
    out: Frames = []
    rows: dict[int, list[tuple[str, str, int, int]]] = defaultdict(list)
    end, newest, offset = None, 0, 0

    def close(at: int) -> None:
        frames = {
            b: pd.DataFrame(
                {
                    "device_id": [r[0] for r in rs],
                    "bucket": b,
                    "src": "r",
                    "reading": [r[1] for r in rs],
                    "params": None,
                    "partition": [r[2] for r in rs],
                    "offset": [r[3] for r in rs],
                }
            )
            for b, rs in rows.items()
        }
        out.append((at, max(0, newest - lateness), frames))
        rows.clear()

    for item in recorded(path):
        if isinstance(item, dict):
            continue
        received = START_MS + item.at_ms
        end = received + batch_ms if end is None else end
        while received >= end:
            close(end)
            end += batch_ms
        topic = settings.mqtt.telemetry_topic(item.device_id)
        outcome = handle(topic, item.payload, received, settings.mqtt.root, 1 << 20, clocks)
        for accepted in outcome.accepted:
            device = accepted.key.decode()
            bucket = zlib.crc32(accepted.key) % BUCKETS
            rows[bucket].append((device, accepted.value.decode(), bucket % 4, offset))
            newest = max(newest, accepted.timestamp_ms)
            offset += 1
    if rows and end is not None:
        close(end)
    return out


@dataclass
class Cost:
    cpu_s: float = 0.0
    state_s: float = 0.0
    """Of :attr:`cpu_s`, unpickling each bucket's state and pickling it again."""
    out_rows: int = 0
    state_bytes: int = 0
    """The buckets' state values at the end, in all."""

    def __sub__(self, other: Cost) -> Cost:
        return Cost(
            self.cpu_s - other.cpu_s,
            self.state_s - other.state_s,
            self.out_rows - other.out_rows,
            self.state_bytes,
        )


def run(frames: Frames, digest: hashlib._Hash | None = None) -> Cost:
    """The CPU time over ``frames`` from empty state, as the operator spends it per bucket:
    its state unpickled from its value, the readings scored, the state pickled. ``digest``,
    when given, takes every output row (with its batch and bucket) and each bucket's state
    bytes at the end."""
    settings = Settings()
    context = Context(
        policy_of(settings), MemoryStore(), topic_names(settings), settings.topics.telemetry_raw
    )
    stored: dict[int, bytes] = {}
    cost = Cost()
    clock = time.process_time
    started = clock()
    for at, watermark, by_bucket in frames:
        for b, frame in by_bucket.items():
            t0 = clock()
            saved = stored.get(b)
            bucket = new_bucket() if saved is None else load_bucket(saved)
            t1 = clock()
            scored = score_rows(frame, bucket, saved, b, watermark, at, context)
            t2 = clock()
            stored[b] = dump_bucket(bucket)
            cost.state_s += t1 - t0 + clock() - t2
            cost.out_rows += len(scored)
            if digest is not None:
                rows = list(scored.itertuples(index=False, name=None))
                digest.update(repr((at, b, list(scored.columns), rows)).encode())
    cost.cpu_s = clock() - started
    if digest is not None:
        for b in sorted(stored):
            digest.update(repr(b).encode() + stored[b])
    cost.state_bytes = sum(len(v) for v in stored.values())
    return cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=60, help="readings per device measured")
    parser.add_argument("--warm", type=int, default=10, help="readings per device before")
    parser.add_argument("--noise", choices=("realistic", "gaussian"), default="realistic")
    parser.add_argument("--batch-ms", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="0: the fingerprint only")
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions")
    args = parser.parse_args()
    settle_worker()  # as the operator's worker does at its first task
    frames = batches(args.devices, args.warm + args.rounds, args.noise, args.batch_ms)
    warm = args.warm * 1000 // args.batch_ms
    measured = frames[warm:]
    readings = sum(len(f) for _, _, bs in measured for f in bs.values())
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run(frames)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)
        return
    digest = hashlib.sha256()
    run(frames, digest)
    fingerprint = digest.hexdigest()[:16]
    print(f"fingerprint: {fingerprint}")
    if args.repeat == 0:
        return  # the fingerprint only: nothing timed, no results written
    best: Cost | None = None
    for _ in range(args.repeat):
        run(frames[:warm])  # the same warm-up each pass, not measured
        cost = run(frames) - run(frames[:warm])
        best = cost if best is None or cost.cpu_s < best.cpu_s else best
        print(
            f"pass: {cost.cpu_s * 1e6 / readings:.1f} µs per reading, state "
            f"{cost.state_s * 1e3 / len(measured):.1f} ms per batch ({cost.out_rows} output rows)"
        )
    assert best is not None
    figures = {
        "us_per_reading": round(best.cpu_s * 1e6 / readings, 1),
        "ms_per_batch": round(best.cpu_s * 1000 / len(measured), 1),
        "state_ms_per_batch": round(best.state_s * 1000 / len(measured), 1),
        "state_bytes": best.state_bytes,
        "out_rows_per_batch": round(best.out_rows / len(measured), 1),
        "readings": readings,
        "batches": len(measured),
        "noise": args.noise,
        "fingerprint": fingerprint,
    }
    print(json.dumps(figures))
    write_results(__file__, figures)


if __name__ == "__main__":
    main()
