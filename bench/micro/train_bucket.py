"""One bucket of devices through the trainer's Python step, without Spark.

``--devices`` warm devices (``--warm`` readings of temperature and humidity each, as in
``bench/pipeline/train.py``) share one bucket; ``--batches`` consecutive micro-batches of
``--rounds`` readings per device go through what the processor does per bucket: the state value
read, each device's new readings as a batch, its repeat state read and written
(:func:`~fleetwatch.streaming.trainer.processor.new_batches`), the learning
(:func:`~fleetwatch.streaming.trainer.processor.learn_bucket`) and the state value written. Twice:
``cold``, every batch reading the devices' parameters from the state value's text, and
``warm``, through :class:`~fleetwatch.streaming.trainer.bucket_state.WarmBuckets` as a reused Python
worker does. Both must publish the same bytes (checked). CPU time, the least of ``--repeat``.

    python bench/micro/train_bucket.py [--devices 156] [--rounds 40] [--batches 5]

Last line: {"cold_ms_per_device", "warm_ms_per_device", "cold_readings_per_cpu_s",
"warm_readings_per_cpu_s", "devices", "rounds", "fingerprint"}: the fingerprint is a digest of
every byte published (the publication time left out), so a change to the trainer that should not
change what it learns is checked by comparing it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from bench.micro.train_step import readings
from fleetwatch.models import params
from fleetwatch.models.registry import default_detector
from fleetwatch.streaming.trainer.bucket_state import WarmBuckets, decode, encode
from fleetwatch.streaming.trainer.expiry import note
from fleetwatch.streaming.trainer.processor import learn_bucket, new_batches
from fleetwatch.streaming.trainer.seen_state import decode_seen, encode_seen, new_seen


def packed(ids: list[str], start: int, rounds: int) -> pd.DataFrame:
    """One packed row per device (the processor's input), ``rounds`` readings each, numbered in
    order of event time, the device clock the event time."""
    frames = [readings(start, rounds, seed=k) for k in range(len(ids))]
    seq = np.repeat(np.arange(start, start + rounds, dtype=np.int64), 2)
    return pd.DataFrame(
        {
            "device_id": ids,
            "seq": [seq] * len(ids),
            "device_ms": [f["event_ms"].to_numpy() for f in frames],
            **{c: [f[c].to_numpy() for f in frames] for c in ("event_ms", "metric", "value")},
        }
    )


def run(state: str, chunks: list[pd.DataFrame], warm: bool) -> list[str]:
    """The batches in turn; the records published, without their publication time."""
    buckets = WarmBuckets()
    published: list[str] = []
    heard = encode_seen(new_seen())
    for chunk in chunks:
        seen = decode_seen(heard)
        batches = new_batches(seen, [chunk], 0)
        note(seen, ((d, int(batch.event_ms.max())) for d, batch in batches))
        if warm:
            bucket = buckets.take(0, state)
            rows = learn_bucket(bucket.texts, batches, bucket.detectors)
            state = encode(bucket.texts)
            buckets.keep(0, state, bucket)
        else:
            texts = decode(state)
            rows = learn_bucket(texts, batches)
            state = encode(texts)
        heard = encode_seen(seen)
        published += [v[: v.index(',"published_ms"')] for v in rows["value"]]
    return [*published, state]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=156, help="10,000 devices / 64 buckets")
    parser.add_argument("--warm", type=int, default=400, help="readings learned before timing")
    parser.add_argument("--rounds", type=int, default=40, help="readings per device per batch")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    ids = [f"dev-{k:05d}" for k in range(args.devices)]
    texts = {}
    for k, device_id in enumerate(ids):
        detector = default_detector()
        for lo in range(0, args.warm, 20):
            detector.learn(readings(lo, 20, seed=k))
        texts[device_id] = params.dumps(detector.to_params())
    state = encode(texts)
    chunks = [packed(ids, args.warm + b * args.rounds, args.rounds) for b in range(args.batches)]
    published = run(state, chunks, warm=False)
    if published != run(state, chunks, warm=True):
        raise SystemExit("warm and cold buckets published different parameters")
    fingerprint = hashlib.sha256("\n".join(published).encode()).hexdigest()[:16]

    figures: dict[str, float | str] = {}
    for mode in ("cold", "warm"):
        best = float("inf")
        for _ in range(args.repeat):
            began = time.process_time()
            run(state, chunks, warm=mode == "warm")
            best = min(best, time.process_time() - began)
        device_batches = args.devices * args.batches
        figures[f"{mode}_ms_per_device"] = round(best / device_batches * 1e3, 3)
        figures[f"{mode}_readings_per_cpu_s"] = round(device_batches * args.rounds / best)
    figures |= {"devices": args.devices, "rounds": args.rounds, "fingerprint": fingerprint}
    for name, value in figures.items():
        print(f"{name:>24}: {value}")
    print(json.dumps(figures))
    write_results(__file__, figures)


if __name__ == "__main__":
    main()
