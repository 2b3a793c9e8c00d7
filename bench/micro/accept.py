"""The gateway's per-message work without I/O: `handle()` on single readings and on batches,
against the baseline of `json.loads` alone on the same payloads.

    python bench/micro/accept.py

Last line: {"single_rps", "batch_rps", "json_only_rps", "payload_bytes"}
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.ingest.accept import handle
from fleetwatch.ingest.clock import ClockOffsets

N, DEVICES, BATCH = 100_000, 1_000, 20


def rate(fn, items: list[tuple[str, bytes]], readings_per_item: int = 1) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    for topic, payload in items:
        fn(topic, payload)
    return len(items) * readings_per_item / (time.perf_counter() - started)


def main() -> None:
    now = time.time_ns() // 1_000_000
    metrics = {"temperature": 21.5, "humidity": 40.25, "pressure": 1013.2}
    singles = [
        (f"devices/d{i % DEVICES}/telemetry", reading_payload(i // DEVICES, now - 20, now, metrics))
        for i in range(N)
    ]
    batches = [
        (
            f"devices/d{i % DEVICES}/telemetry",
            json.dumps(
                [
                    json.loads(reading_payload(i * BATCH + k, now - 20, now, metrics))
                    for k in range(BATCH)
                ]
            ).encode(),
        )
        for i in range(N // BATCH)
    ]
    clocks = ClockOffsets()
    for _ in range(2):  # the first pass warms caches; the second is reported
        json_only = rate(lambda t, p: json.loads(p), singles)
        single = rate(lambda t, p: handle(t, p, now, "devices", 1 << 20, clocks), singles)
        batch = rate(lambda t, p: handle(t, p, now, "devices", 1 << 20, clocks), batches, BATCH)
    print(
        f"json.loads alone {json_only:,.0f}/s; handle() single {single:,.0f} readings/s, "
        f"batches of {BATCH} {batch:,.0f} readings/s"
    )
    figures = {
        "single_rps": round(single),
        "batch_rps": round(batch),
        "json_only_rps": round(json_only),
        "payload_bytes": len(singles[0][1]),
    }
    print(json.dumps(figures))
    write_results(__file__, figures)


if __name__ == "__main__":
    main()
