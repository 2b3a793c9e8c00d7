"""Real-world misbehaviour, each labelled: clock skew, offline buffering, duplicates, garbage.

Labels are truth records with ``"class": "misbehaviour"`` so that evaluation can tell them
apart from anomalies. Event times in labels are true times; a skewed device's payloads carry
its own (wrong) clock, and the label says by how much.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetwatch.simulator.randomness import device_uniform, uniform
from fleetwatch.simulator.scenario import MisbehaviourSpec

# random streams
_SKEWED, _SKEW, _SKEW_SIGN, _OFF_GAP, _OFF_LEN, _DUP, _BAD, _BAD_KIND = range(201, 209)

MALFORMED_VARIANTS = ("truncated", "not_json", "no_metrics", "string_value", "unknown_field")


def label(kind: str, device_id: str, start_ms: int, end_ms: int, **params: Any) -> dict[str, Any]:
    return {
        "class": "misbehaviour",
        "device_id": device_id,
        "kind": kind,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "params": params,
    }


def skew_ms(spec: MisbehaviourSpec, seed: int, device: int) -> int:
    """The device's clock offset (device clock minus true time), 0 for most devices."""
    if device_uniform(seed, _SKEWED, device) >= spec.skewed_fraction:
        return 0
    low, high = spec.skew_s
    seconds = low + (high - low) * device_uniform(seed, _SKEW, device)
    sign = -1 if device_uniform(seed, _SKEW_SIGN, device) < 0.5 else 1
    return sign * round(seconds * 1000)


def per_reading_flags(
    spec: MisbehaviourSpec, seed: int, devices: np.ndarray, seqs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Which readings are sent twice and which are replaced by a malformed payload."""
    dup = uniform(seed, _DUP, devices, seqs) < spec.duplicate_rate
    bad = uniform(seed, _BAD, devices, seqs) < spec.malformed_rate
    return dup, bad


def malformed(seed: int, device: int, seq: int, ts: int, sent: int) -> tuple[str, bytes]:
    """A payload that breaks the wire contract in one of several ways, and which way."""
    u = float(uniform(seed, _BAD_KIND, np.array([device]), np.array([seq]))[0])
    variant = MALFORMED_VARIANTS[int(u * len(MALFORMED_VARIANTS))]
    head = f'{{"v":1,"seq":{seq},"ts":{ts},"sent":{sent},"metrics":'
    body = {
        "truncated": head + '{"temperature":2',
        "not_json": f"seq={seq} ts={ts} status=ok",
        "no_metrics": head + "{}}",
        "string_value": head + '{"temperature":"NaN"}}',
        "unknown_field": head + '{"temperature":21.0},"colour":"blue"}',
    }[variant]
    return variant, body.encode()


@dataclass
class Offline:
    """A device that lost its connection: readings pile up and go out late and shuffled."""

    start_seq: int
    end_seq: int
    rows: list[tuple[bytes, tuple[Any, ...]]] = field(default_factory=list)
    first_ts: int | None = None
    last_ts: int | None = None

    def buffer(self, template: bytes, row: tuple[Any, ...], ts: int) -> None:
        self.rows.append((template, row))
        self.first_ts = ts if self.first_ts is None else self.first_ts
        self.last_ts = ts

    def flush(self, seed: int, device: int, sent: int) -> list[bytes]:
        """The buffered readings, re-stamped with the send time of the flush, out of order."""
        rows = list(self.rows)
        random.Random(seed * 1_000_003 + device * 7 + self.start_seq).shuffle(rows)
        return [t % (r[0], r[1], sent, *r[3:]) for t, r in rows]


class OfflinePlanner:
    def __init__(self, spec: MisbehaviourSpec, seed: int, interval_ms: int) -> None:
        self.spec = spec
        self.seed = seed
        self.interval_ms = interval_ms
        self.p = min(spec.offline_per_device_hour * interval_ms / 3_600_000, 0.5)

    def next_start(self, device: int, n: int, after_seq: int) -> int:
        if self.p <= 0:
            return 2**62
        u = device_uniform(self.seed, _OFF_GAP * 1_000_003 + n, device)
        return after_seq + max(1, math.ceil(math.log(u) / math.log1p(-self.p)))

    def window(self, device: int, n: int, start_seq: int) -> Offline:
        low, high = self.spec.offline_s
        seconds = low + (high - low) * device_uniform(self.seed, _OFF_LEN * 1_000_003 + n, device)
        readings = max(1, round(seconds * 1000 / self.interval_ms))
        return Offline(start_seq, start_seq + readings - 1)
