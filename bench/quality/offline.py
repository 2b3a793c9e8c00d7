"""Detection quality without the stack: a simulator recording replayed through the pure
functions the pipeline runs, scored like ``fleetwatch sim eval``.

Each recorded message goes, at its recorded arrival time, through the gateway's accept step
(:func:`fleetwatch.ingest.accept.handle`, one :class:`ClockOffsets` for the fleet). The
accepted readings are cut into scorer micro-batches of ``--batch-ms`` of arrival time; each
batch is scored as the scorer's operator scores a bucket's, by
:func:`fleetwatch.streaming.scorer.bucket_step.score_bucket` (``policy_of(Settings())``, every
device in one bucket) under the watermark the scorer would have — the newest event time of the
earlier batches minus ``score.allowed_lateness`` — and devices whose event-time timer the
watermark passed fall silent (:func:`~fleetwatch.streaming.scorer.bucket_step.expire_bucket`).
Every ``--train-s`` of arrival time, each device's readings since the previous step,
de-duplicated by sequence number as the trainer does, are learned with
:func:`fleetwatch.streaming.trainer.learning.learn_device`; the new parameters' ``model.params``
records reach the next scorer batch. At ``--fleet-s`` of arrival time (default 120 s) each
scope's fleet model is pooled from the devices' parameters and its champion record put before
the scorer, as ``fleetwatch models register-fleet`` and ``promote`` would. No broker, Kafka or
Spark: what differs from a live run (``bench/quality/live.py``) is mainly timing — the real
batches' lengths and the parameters' publication delay.

Without ``--recording``, the scenario (default ``deploy/scenarios/eval-500.toml``, cut to 100
devices and 12 minutes) is recorded first into a temporary directory, starting now, as
``fleetwatch sim record`` does; the seasonal detectors see the hour of day, so pass the kept
recording back with ``--recording`` to compare runs on the same input.

    python bench/quality/offline.py [--recording FILE | --scenario FILE --devices N --minutes M]
        [--train-s S] [--batch-ms MS] [--fleet-s S] [--tolerance S] [--alerts FILE]

Prints progress and a per-kind table on stderr, then a last line: {"f1", "precision",
"recall", "anomalies", "alerts", "false_alerts", "devices", "minutes", "readings", "seconds"
(the replay's wall time), "by_kind": {kind: {"recall", "precision", "delay_p50_s",
"delay_p95_s", "anomalies"}}, "false_by_detector": {"detector/metric": false alerts, top 15}}
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from fleetwatch.contracts.fleet import fleet_key
from fleetwatch.contracts.model_params import encode_champion, encode_device
from fleetwatch.contracts.settings import Settings
from fleetwatch.ingest.accept import handle
from fleetwatch.ingest.clock import ClockOffsets
from fleetwatch.models.fleet_publish import pooled_by_scope
from fleetwatch.simulator import evaluate as ev
from fleetwatch.simulator.errors import SimulatorError
from fleetwatch.simulator.recording import read_header, record, recorded
from fleetwatch.simulator.scenario import Scenario, load_scenario
from fleetwatch.streaming.scorer.bucket_step import (
    BucketBatch,
    BucketOutput,
    BucketState,
    MemoryStore,
    expire_bucket,
    new_bucket,
    score_bucket,
)
from fleetwatch.streaming.scorer.device_step import Role
from fleetwatch.streaming.scorer.processor import policy_of
from fleetwatch.streaming.scorer.readings import COLUMNS, Rows, by_device
from fleetwatch.streaming.trainer.learning import learn_device

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE_S = 30.0
"""``fleetwatch sim eval --tolerance``'s default."""
DEFAULT_DEVICES, DEFAULT_MINUTES = 100, 12.0
TOP_FALSE = 15
FLEET_S = 120.0
"""When the fleet models are pooled, as an operator registers them once devices have learned."""

_UNIT_MS = {
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
}


def interval_ms(text: str) -> int:
    """A Spark interval of the settings (``2 minutes``, ``1 hour 30 minutes``) in ms."""
    words = text.lower().removeprefix("interval").split()
    if not words or len(words) % 2:
        raise SystemExit(f"bench: cannot read the interval {text!r}")
    total = 0.0
    for amount, unit in zip(words[::2], words[1::2], strict=True):
        if unit.rstrip("s") not in _UNIT_MS:
            raise SystemExit(f"bench: unknown unit {unit!r} in the interval {text!r}")
        total += float(amount) * _UNIT_MS[unit.rstrip("s")]
    return round(total)


# ---- the recording -------------------------------------------------------------------------


def scenario_of(args: argparse.Namespace) -> Scenario:
    """The scenario file with this bench's overrides (``fleetwatch sim record``'s way)."""
    devices = DEFAULT_DEVICES if args.devices is None else args.devices
    minutes = DEFAULT_MINUTES if args.minutes is None else args.minutes
    return load_scenario(args.scenario).with_overrides(devices=devices, duration_s=minutes * 60)


def make_recording(scenario: Scenario) -> Path:
    path = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-quality-offline-")) / "recording.jsonl"
    started = time.monotonic()
    messages, truths = record(scenario, path, time.time_ns() // 1_000_000)
    print(
        f"quality_offline: recorded {messages:,} messages and {truths} truth records "
        f"in {time.monotonic() - started:.0f} s to {path}",
        file=sys.stderr,
        flush=True,
    )
    return path


# ---- the pipeline --------------------------------------------------------------------------


def long_rows(device_id: str, reading: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """A ``telemetry.raw`` record → the scorer's input rows (one per metric, with the
    defaults the scorer's parse step fills in), device id first."""
    event_ms = reading["event_ms"]
    device_event_ms = reading.get("device_event_ms", event_ms)
    head = (
        device_id,
        reading["seq"],
        event_ms,
        device_event_ms,
        reading.get("device_sent_ms", device_event_ms),
        reading.get("received_ms", event_ms),
        reading.get("clock_offset_ms", 0),
        reading.get("firmware"),
        reading.get("status"),
    )
    for metric, value in reading["metrics"].items():
        yield (*head, metric, value)


@dataclass
class Trainer:
    """The trainer's step: each device learns its new, de-duplicated readings."""

    dedup_ms: int
    params: dict[str, str] = field(default_factory=dict)
    pending: dict[str, list[tuple[int, str, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    seen: set[tuple[str, int]] = field(default_factory=set)
    order: deque[tuple[int, tuple[str, int]]] = field(default_factory=deque)
    """(event_ms, key) of ``seen`` in arrival order, to forget keys out of the window."""
    newest_ms: int = 0

    def add(self, device_id: str, reading: dict[str, Any]) -> None:
        """A reading (a repeat of a ``(device_id, seq)`` within the window is dropped)."""
        key, event_ms = (device_id, reading["seq"]), reading["event_ms"]
        if key in self.seen:
            return
        self.seen.add(key)
        self.order.append((event_ms, key))
        self.newest_ms = max(self.newest_ms, event_ms)
        rows = self.pending[device_id]
        rows.extend((event_ms, m, v) for m, v in reading["metrics"].items())

    def learn(self) -> dict[str, int]:
        """Learn what is pending; the new parameter version of each device that changed."""
        changed = {}
        for device_id, rows in self.pending.items():
            frame = pd.DataFrame(rows, columns=["event_ms", "metric", "value"])
            new = learn_device(self.params.get(device_id), frame)
            if new is not None:
                self.params[device_id] = new
                changed[device_id] = int(json.loads(new)["version"])
        self.pending.clear()
        horizon = self.newest_ms - self.dedup_ms
        while self.order and self.order[0][0] < horizon:
            self.seen.discard(self.order.popleft()[1])
        return changed


@dataclass
class Scorer:
    """The scorer's operator over one bucket of every device: each micro-batch, with the
    ``model.params`` records published since the last one, then the timers the watermark passed
    (:mod:`fleetwatch.streaming.scorer.bucket_step`)."""

    settings: Settings
    lateness_ms: int
    bucket: BucketState = field(default_factory=new_bucket)
    store: MemoryStore = field(default_factory=MemoryStore)
    published: list[tuple[str, str]] = field(default_factory=list)
    """``model.params`` records (key, value) for the next micro-batch."""
    newest_ms: int | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)
    fleet: bool = False
    """Whether the fleet champions were published (:meth:`publish_champions`)."""

    def __post_init__(self) -> None:
        self.policy = policy_of(self.settings)

    def watermark(self) -> int:
        return 0 if self.newest_ms is None else self.newest_ms - self.lateness_ms

    def batch(self, rows: list[tuple[Any, ...]], now_ms: int) -> None:
        watermark = self.watermark()
        readings: dict[str, Rows] = {}
        if rows:
            frame = pd.DataFrame(rows, columns=["device_id", *COLUMNS])
            readings = dict(by_device(frame))
            newest = int(frame["event_ms"].max())
            self.newest_ms = newest if self.newest_ms is None else max(self.newest_ms, newest)
        batch = BucketBatch.of(readings, self.published)
        self.published = []
        self._keep(score_bucket(self.bucket, batch, watermark, now_ms, self.policy, self.store))
        self._keep(expire_bucket(self.bucket, watermark, now_ms, self.policy, self.store))

    def publish(self, versions: dict[str, int], params: dict[str, str], now_ms: int) -> None:
        """New parameters on ``model.params``: used from the next micro-batch on."""
        for device_id in versions:
            self.published.append((device_id, encode_device(device_id, params[device_id], now_ms)))

    def publish_champions(self, params: dict[str, str], now_ms: int) -> None:
        """Each scope's fleet model pooled from the devices' parameters, as ``fleetwatch models
        register-fleet`` and ``promote`` make it and put it on ``model.params``."""
        table = {device: {"params": json.loads(text)} for device, text in params.items()}
        for scope, (pooled, _) in pooled_by_scope(table).items():
            value = encode_champion(scope, f"fleet-{scope}", 1, pooled, 1, now_ms)
            self.published.append((fleet_key(scope), value))
        self.fleet = True

    def _keep(self, out: BucketOutput) -> None:
        self.alerts.extend(
            json.loads(value) for _, role, value in out.records if role == Role.ALERTS
        )


@dataclass
class Replay:
    alerts: list[dict[str, Any]]
    truth: list[dict[str, Any]]
    readings: int
    span_ms: int
    """From the recording's start to its last message."""
    seconds: float


def replay(
    path: Path, settings: Settings, train_ms: int, batch_ms: int, fleet_ms: int | None
) -> Replay:
    """The recording through gateway → trainer and scorer, in arrival-time order; the fleet
    models are pooled and put before the scorer at the first training step ``fleet_ms`` of
    arrival time after the start (``None``: never)."""
    _, start_ms = read_header(path)
    clocks = ClockOffsets()
    trainer = Trainer(interval_ms(settings.score.dedup_window))
    scorer = Scorer(settings, interval_ms(settings.score.allowed_lateness))
    truth: list[dict[str, Any]] = []
    rows: list[tuple[Any, ...]] = []
    readings, received_ms = 0, start_ms
    batch_end: int | None = None
    next_train = start_ms + train_ms
    started = time.monotonic()
    for item in recorded(path):
        if isinstance(item, dict):
            truth.append(item)
            continue
        received_ms = start_ms + item.at_ms
        batch_end = received_ms + batch_ms if batch_end is None else batch_end
        while received_ms >= batch_end:
            scorer.batch(rows, batch_end)
            rows = []
            if batch_end >= next_train:
                scorer.publish(trainer.learn(), trainer.params, batch_end)
                next_train += train_ms
                if fleet_ms is not None and not scorer.fleet and batch_end >= start_ms + fleet_ms:
                    scorer.publish_champions(trainer.params, batch_end)
            batch_end += batch_ms
        topic = settings.mqtt.telemetry_topic(item.device_id)
        limit = settings.gateway.max_payload_bytes
        outcome = handle(topic, item.payload, received_ms, settings.mqtt.root, limit, clocks)
        for accepted in outcome.accepted:
            reading = json.loads(accepted.value)
            rows.extend(long_rows(item.device_id, reading))
            trainer.add(item.device_id, reading)
            readings += 1
    if batch_end is not None:
        scorer.batch(rows, batch_end)
    seconds = time.monotonic() - started
    return Replay(scorer.alerts, truth, readings, received_ms - start_ms, seconds)


# ---- the figures ---------------------------------------------------------------------------


def opened(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The alert records ``sim eval`` counts: those that open, each alert id once."""
    seen: set[str] = set()
    out = []
    for a in alerts:
        key = a.get("alert_id") or f"{a['device_id']}/{a.get('metric')}/{a['event_ms']}"
        if a.get("status", "open") == "open" and key not in seen:
            seen.add(key)
            out.append(a)
    return out


def false_by_detector(
    alerts: list[dict[str, Any]], truth: list[ev.TruthEvent], tolerance_ms: int
) -> dict[str, int]:
    """False alerts (matching no anomaly) by ``detector/metric``, the most frequent first."""
    by_device: dict[str, list[ev.TruthEvent]] = defaultdict(list)
    for event in truth:
        by_device[event.device_id].append(event)
    false: Counter[str] = Counter()
    for raw, alert in zip(alerts, ev.alert_events(alerts), strict=True):
        if not any(ev.matches(alert, e, tolerance_ms) for e in by_device[alert.device_id]):
            false[f"{raw['detector']}/{alert.metric}"] += 1
    return dict(false.most_common(TOP_FALSE))


def summary(run: Replay, scenario: Scenario, tolerance_s: float) -> dict[str, Any]:
    tolerance_ms = round(tolerance_s * 1000)
    truth = ev.truth_events(run.truth)
    alerts = opened(run.alerts)
    minutes = run.span_ms / 60_000 if scenario.duration_s is None else scenario.duration_s / 60
    device_days = scenario.devices * minutes * 60_000 / ev.DAY_MS
    report = ev.evaluate(truth, ev.alert_events(alerts), tolerance_ms, device_days)
    out = {k: report[k] for k in ("f1", "precision", "recall", "anomalies", "alerts")}
    out |= {
        "false_alerts": report["false_alerts"],
        "devices": scenario.devices,
        "minutes": round(minutes, 2),
        "readings": run.readings,
        "seconds": round(run.seconds, 1),
    }
    keep = ("recall", "precision", "delay_p50_s", "delay_p95_s", "anomalies")
    out["by_kind"] = {kind: {k: r[k] for k in keep} for kind, r in report["by_kind"].items()}
    out["false_by_detector"] = false_by_detector(alerts, truth, tolerance_ms)
    return out


def show(report: dict[str, Any]) -> None:
    print(
        f"quality_offline: {report['readings']:,} readings from {report['devices']} devices "
        f"over {report['minutes']} min replayed in {report['seconds']:.0f} s\n"
        f"anomalies {report['anomalies']}, alerts {report['alerts']}, "
        f"false alerts {report['false_alerts']}; precision {report['precision']:.3f}, "
        f"recall {report['recall']:.3f}, f1 {report['f1']:.3f}",
        file=sys.stderr,
    )
    print(f"{'kind':<14}{'precision':>10}{'recall':>8}{'n':>5}{'p50 delay':>11}", file=sys.stderr)
    for kind, r in report["by_kind"].items():
        p50 = "-" if r["delay_p50_s"] is None else f"{r['delay_p50_s']:.1f}s"
        print(
            f"{kind:<14}{r['precision']:>10.3f}{r['recall']:>8.3f}{r['anomalies']:>5}{p50:>11}",
            file=sys.stderr,
        )
    top = ", ".join(f"{k} {n}" for k, n in report["false_by_detector"].items())
    print(f"false alerts by detector/metric: {top or 'none'}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", type=Path, help="a `fleetwatch sim record` file")
    parser.add_argument("--scenario", type=Path, default=ROOT / "deploy/scenarios/eval-500.toml")
    parser.add_argument("--devices", type=int, help=f"default {DEFAULT_DEVICES}")
    parser.add_argument("--minutes", type=float, help=f"default {DEFAULT_MINUTES:g}")
    parser.add_argument("--train-s", type=float, default=10.0, help="trainer step (arrival time)")
    parser.add_argument("--batch-ms", type=int, default=1000, help="scorer batch (arrival time)")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE_S, help="sim eval's")
    parser.add_argument(
        "--fleet-s",
        type=float,
        default=FLEET_S,
        help="pool the fleet models this many seconds in (negative: never)",
    )
    parser.add_argument("--alerts", type=Path, help="also write the alert events here (JSONL)")
    args = parser.parse_args()
    if args.recording and (args.devices is not None or args.minutes is not None):
        parser.error("--devices and --minutes apply to a new recording, not to --recording")
    try:
        path = args.recording or make_recording(scenario_of(args))
        scenario, _ = read_header(path)
    except (SimulatorError, OSError, ValueError) as exc:
        raise SystemExit(f"bench: {exc}") from exc
    fleet_ms = None if args.fleet_s < 0 else round(args.fleet_s * 1000)
    run = replay(path, Settings(), round(args.train_s * 1000), args.batch_ms, fleet_ms)
    if args.alerts:
        args.alerts.write_text("".join(json.dumps(a) + "\n" for a in run.alerts))
    report = summary(run, scenario, args.tolerance)
    show(report)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
