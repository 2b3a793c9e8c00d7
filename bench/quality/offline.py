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
Every ``--train-s`` of arrival time, each device's new readings since the previous step
(repeats and readings behind the watermark left out as the trainer leaves them out) are
learned with
:func:`fleetwatch.streaming.trainer.learning.learn_update`; the new parameters' ``model.params``
records reach the next scorer batch. At ``--fleet-s`` of arrival time (default 120 s), and
every ``--fleet-every-s`` after (default 60 s; negative: once), each scope's fleet model is
pooled from the devices' parameters and its champion record put before the scorer, as a
scheduled ``fleetwatch models register-fleet`` and ``promote`` would. No broker, Kafka or
Spark: what differs from a live run (``bench/quality/live.py``) is mainly timing — the real
batches' lengths and the parameters' publication delay.

Without ``--recording``, the scenario (default ``deploy/scenarios/eval-500.toml``, cut to 100
devices and 12 minutes) is recorded first into a temporary directory, starting now (or at
``--start``), as ``fleetwatch sim record`` does; the seasonal detectors see the hour of day, so
pass the kept recording back with ``--recording``, or give the same ``--start``, to compare
runs on the same input. ``--noise gaussian`` records the scenario with the simulator's plain
Gaussian noise instead of its realistic noise (``--noise realistic``; default: the scenario's).
``--seed N`` records it with another seed: the scenario's own is the one detection was tuned
on, so another is held out.

    python bench/quality/offline.py [--recording FILE | --scenario FILE --devices N --minutes M
        --noise gaussian|realistic --seed N --start ISO] [--train-s S] [--batch-ms MS] [--fleet-s S]
        [--fleet-every-s S] [--tolerance S] [--alerts FILE]

Prints progress and tables per anomaly kind and per device kind on stderr, then a last line:
{"f1", "precision", "recall", "anomalies", "alerts", "false_alerts",
"false_alerts_per_device_day", "devices", "minutes", "readings", "seconds" (the replay's wall
time), "by_kind": {anomaly kind: {"f1", "recall", "precision", "delay_p50_s", "delay_p95_s",
"anomalies"}}, "by_device_kind": {device kind: {"devices", "f1", "precision", "recall",
"anomalies", "alerts", "false_alerts", "false_alerts_per_device_day", "delay_p50_s",
"delay_p95_s"}}, "false_by_detector": {"detector/metric": false alerts, top 15},
"false_near_benign": {benign kind: false alerts on a device during one of its labelled normal
events (``"class": "normal"``: a level change or a burst) or within the tolerance after it}}
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from fleetwatch.contracts.fleet import fleet_key
from fleetwatch.contracts.model_params import encode_champion, encode_device
from fleetwatch.contracts.settings import Settings
from fleetwatch.fleet.publish import pooled_by_scope
from fleetwatch.ingest.accept import handle
from fleetwatch.ingest.clock import ClockOffsets
from fleetwatch.models.registry import DEFAULT_TUNING, Tuning
from fleetwatch.simulator import evaluate as ev
from fleetwatch.simulator.errors import SimulatorError
from fleetwatch.simulator.kinds import KINDS
from fleetwatch.simulator.recording import read_header, record, recorded
from fleetwatch.simulator.scenario import NOISE_MODELS, Scenario, load_scenario
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
from fleetwatch.streaming.scorer.policy import policy_of
from fleetwatch.streaming.scorer.readings import COLUMNS, Rows, by_device
from fleetwatch.streaming.trainer.device_rows import DeviceRows
from fleetwatch.streaming.trainer.learning import detector_of, learn_update
from fleetwatch.streaming.trainer.repeats import RepeatState, new_readings

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE_S = 30.0
"""``fleetwatch sim eval --tolerance``'s default."""
DEFAULT_DEVICES, DEFAULT_MINUTES = 100, 12.0
TOP_FALSE = 15
FLEET_S = 120.0
"""When the fleet models are pooled, as an operator registers them once devices have learned."""
FLEET_EVERY_S = 60.0
"""How often they are pooled again after, as a scheduled ``register-fleet`` and ``promote``
would: the pooled tails (:mod:`fleetwatch.fleet.tails`) hold the devices' young
streams to what the older ones have seen."""

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
    return load_scenario(args.scenario).with_overrides(
        devices=devices, duration_s=minutes * 60, noise=args.noise, seed=args.seed
    )


def start_ms_of(text: str | None) -> int:
    """``--start`` (ISO-8601; UTC when it names no zone) in epoch ms, or now."""
    if text is None:
        return time.time_ns() // 1_000_000
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise SystemExit(f"bench: --start {text!r} is not an ISO-8601 time") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return round(when.timestamp() * 1000)


def make_recording(scenario: Scenario, start_ms: int) -> Path:
    path = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-quality-offline-")) / "recording.jsonl"
    started = time.monotonic()
    messages, truths = record(scenario, path, start_ms)
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
    """The trainer's step: each device learns its new readings within the watermark, repeats
    told apart as the trainer's processor tells them
    (:func:`fleetwatch.streaming.trainer.repeats.new_readings`)."""

    dedup_ms: int
    tuning: Tuning = DEFAULT_TUNING
    """What a new device's detector starts with (the trainer job's ``Tuning.of(score)``)."""
    params: dict[str, str] = field(default_factory=dict)
    pending: dict[str, list[tuple[int, int, int, str, float | None]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    held: dict[str, RepeatState] = field(default_factory=dict)
    """Per device, the sequence numbers it sent within the lateness (the bucket state's)."""
    newest_ms: int = 0
    watermark_ms: int = 0
    """The newest event time of the earlier steps minus ``dedup_ms``, as Spark's watermark."""

    def add(self, device_id: str, reading: dict[str, Any]) -> None:
        """A reading, learned at the next step unless it is a repeat or behind the watermark."""
        seq, event_ms, clock = reading["seq"], reading["event_ms"], reading["device_event_ms"]
        self.newest_ms = max(self.newest_ms, event_ms)
        rows = self.pending[device_id]
        rows.extend((seq, clock, event_ms, m, v) for m, v in reading["metrics"].items())

    def learn(self) -> dict[str, int]:
        """Learn what is pending; the new parameter version of each device that changed."""
        changed = {}
        for device_id, rows in self.pending.items():
            seq, clock, event_ms, metric, value = zip(*rows, strict=True)
            given = DeviceRows(
                np.asarray(seq, np.int64),
                np.asarray(clock, np.int64),
                np.asarray(event_ms, np.int64),
                np.asarray(metric, dtype=object),
                np.asarray(value, np.float64),
            )
            batch, self.held[device_id] = new_readings(
                given, self.held.get(device_id), self.watermark_ms
            )
            if not len(batch):
                continue
            previous = self.params.get(device_id)
            update = learn_update(previous, batch, detector_of(previous, self.tuning))
            if update is not None:
                self.params[device_id] = update.params_json
                changed[device_id] = int(update.header["version"])
        self.pending.clear()
        self.watermark_ms = max(self.watermark_ms, self.newest_ms - self.dedup_ms)
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
    pooled: int = 0
    """How many times the fleet champions were published (:meth:`publish_champions`)."""

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
        self.pooled += 1
        for scope, (pooled, _) in pooled_by_scope(table).items():
            name, version = f"fleet-{scope}", self.pooled
            value = encode_champion(scope, name, version, pooled, version, now_ms)
            self.published.append((fleet_key(scope), value))

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
    device_kinds: dict[str, str] = field(default_factory=dict)
    """Each device's kind, known by the metrics it sent."""


KIND_OF_METRIC = {m: kind.name for kind in KINDS.values() for m in kind.metrics}


def replay(
    path: Path,
    settings: Settings,
    train_ms: int,
    batch_ms: int,
    fleet_ms: int | None,
    fleet_every_ms: int | None = None,
) -> Replay:
    """The recording through gateway → trainer and scorer, in arrival-time order; the fleet
    models are pooled and put before the scorer at the first training step ``fleet_ms`` of
    arrival time after the start (``None``: never), and again every ``fleet_every_ms`` after
    (``None``: once)."""
    _, start_ms = read_header(path)
    clocks = ClockOffsets()
    trainer = Trainer(interval_ms(settings.score.dedup_window), Tuning.of(settings.score))
    scorer = Scorer(settings, interval_ms(settings.score.allowed_lateness))
    truth: list[dict[str, Any]] = []
    kinds: dict[str, str] = {}
    rows: list[tuple[Any, ...]] = []
    readings, received_ms = 0, start_ms
    batch_end: int | None = None
    next_train = start_ms + train_ms
    next_fleet = None if fleet_ms is None else start_ms + fleet_ms
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
                if next_fleet is not None and batch_end >= next_fleet:
                    scorer.publish_champions(trainer.params, batch_end)
                    next_fleet = None if fleet_every_ms is None else batch_end + fleet_every_ms
            batch_end += batch_ms
        topic = settings.mqtt.telemetry_topic(item.device_id)
        limit = settings.gateway.max_payload_bytes
        outcome = handle(topic, item.payload, received_ms, settings.mqtt.root, limit, clocks)
        for accepted in outcome.accepted:
            reading = json.loads(accepted.value)
            if item.device_id not in kinds:
                names = [KIND_OF_METRIC[m] for m in reading["metrics"] if m in KIND_OF_METRIC]
                kinds[item.device_id] = names[0] if names else "unknown"
            rows.extend(long_rows(item.device_id, reading))
            trainer.add(item.device_id, reading)
            readings += 1
    if batch_end is not None:
        scorer.batch(rows, batch_end)
    seconds = time.monotonic() - started
    return Replay(scorer.alerts, truth, readings, received_ms - start_ms, seconds, kinds)


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


def false_near_benign(
    alerts: list[dict[str, Any]], run: Replay, tolerance_ms: int
) -> dict[str, int]:
    """False alerts opened on a device during one of its labelled normal events (a benign
    level change or burst) or within ``tolerance_ms`` after it, by the event's kind."""
    truth = ev.truth_events(run.truth)
    benign = [
        ev.TruthEvent(r["device_id"], r["kind"], (), r["start_ms"], r["end_ms"])
        for r in run.truth
        if r.get("class") == "normal"
    ]
    by_device: dict[str, list[ev.TruthEvent]] = defaultdict(list)
    for event in truth:
        by_device[event.device_id].append(event)
    near: dict[str, list[ev.TruthEvent]] = defaultdict(list)
    for event in benign:
        near[event.device_id].append(event)
    counts: Counter[str] = Counter({e.kind: 0 for e in benign})
    for alert in ev.alert_events(alerts):
        if any(ev.matches(alert, e, tolerance_ms) for e in by_device[alert.device_id]):
            continue
        kinds = {e.kind for e in near[alert.device_id] if ev.matches(alert, e, tolerance_ms)}
        counts.update(kinds)
    return dict(counts)


def by_device_kind(
    run: Replay, alerts: list[dict[str, Any]], minutes: float, tolerance_ms: int
) -> dict[str, dict[str, Any]]:
    """The figures of each device kind's devices on their own."""
    out = {}
    truth = ev.truth_events(run.truth)
    events = ev.alert_events(alerts)
    for kind in sorted(set(run.device_kinds.values())):
        mine = {d for d, k in run.device_kinds.items() if k == kind}
        device_days = len(mine) * minutes * 60_000 / ev.DAY_MS
        report = ev.evaluate(
            [e for e in truth if e.device_id in mine],
            [a for a in events if a.device_id in mine],
            tolerance_ms,
            device_days,
        )
        keep = ("f1", "precision", "recall", "anomalies", "alerts", "false_alerts")
        out[kind] = {"devices": len(mine), **{k: report[k] for k in keep}}
        out[kind] |= {
            k: report[k] for k in ("false_alerts_per_device_day", "delay_p50_s", "delay_p95_s")
        }
    return out


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
        "false_alerts_per_device_day": report["false_alerts_per_device_day"],
        "devices": scenario.devices,
        "minutes": round(minutes, 2),
        "readings": run.readings,
        "seconds": round(run.seconds, 1),
    }
    keep = ("f1", "recall", "precision", "delay_p50_s", "delay_p95_s", "anomalies")
    out["by_kind"] = {kind: {k: r[k] for k in keep} for kind, r in report["by_kind"].items()}
    out["by_device_kind"] = by_device_kind(run, alerts, minutes, tolerance_ms)
    out["false_by_detector"] = false_by_detector(alerts, truth, tolerance_ms)
    out["false_near_benign"] = false_near_benign(alerts, run, tolerance_ms)
    return out


def _delay(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def show(report: dict[str, Any]) -> None:
    print(
        f"quality_offline: {report['readings']:,} readings from {report['devices']} devices "
        f"over {report['minutes']} min replayed in {report['seconds']:.0f} s\n"
        f"anomalies {report['anomalies']}, alerts {report['alerts']}, "
        f"false alerts {report['false_alerts']} "
        f"({report['false_alerts_per_device_day']:.1f} per device-day); "
        f"precision {report['precision']:.3f}, recall {report['recall']:.3f}, "
        f"f1 {report['f1']:.3f}",
        file=sys.stderr,
    )
    head = f"{'precision':>10}{'recall':>8}{'f1':>7}{'n':>5}{'p50 delay':>11}{'p95':>8}"
    print(f"{'anomaly kind':<14}{head}", file=sys.stderr)
    for kind, r in report["by_kind"].items():
        print(
            f"{kind:<14}{r['precision']:>10.3f}{r['recall']:>8.3f}{r['f1']:>7.3f}"
            f"{r['anomalies']:>5}{_delay(r['delay_p50_s']):>11}{_delay(r['delay_p95_s']):>8}",
            file=sys.stderr,
        )
    print(f"{'device kind':<14}{head}{'false':>7}{'/dev-day':>10}", file=sys.stderr)
    for kind, r in report["by_device_kind"].items():
        print(
            f"{kind:<14}{r['precision']:>10.3f}{r['recall']:>8.3f}{r['f1']:>7.3f}"
            f"{r['anomalies']:>5}{_delay(r['delay_p50_s']):>11}{_delay(r['delay_p95_s']):>8}"
            f"{r['false_alerts']:>7}{r['false_alerts_per_device_day']:>10.1f}",
            file=sys.stderr,
        )
    top = ", ".join(f"{k} {n}" for k, n in report["false_by_detector"].items())
    print(f"false alerts by detector/metric: {top or 'none'}", file=sys.stderr)
    near = ", ".join(f"{k} {n}" for k, n in report["false_near_benign"].items())
    print(f"false alerts at benign events: {near or 'none labelled'}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", type=Path, help="a `fleetwatch sim record` file")
    parser.add_argument("--scenario", type=Path, default=ROOT / "deploy/scenarios/eval-500.toml")
    parser.add_argument("--devices", type=int, help=f"default {DEFAULT_DEVICES}")
    parser.add_argument("--minutes", type=float, help=f"default {DEFAULT_MINUTES:g}")
    parser.add_argument(
        "--noise", choices=NOISE_MODELS, help="the simulator's noise (default: the scenario's)"
    )
    parser.add_argument(
        "--seed", type=int, help="the simulator's seed (default: the scenario's, tuned on)"
    )
    parser.add_argument("--start", help="a new recording's start, ISO-8601 (default: now)")
    parser.add_argument("--train-s", type=float, default=10.0, help="trainer step (arrival time)")
    parser.add_argument("--batch-ms", type=int, default=1000, help="scorer batch (arrival time)")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE_S, help="sim eval's")
    parser.add_argument(
        "--fleet-s",
        type=float,
        default=FLEET_S,
        help="pool the fleet models this many seconds in (negative: never)",
    )
    parser.add_argument(
        "--fleet-every-s",
        type=float,
        default=FLEET_EVERY_S,
        help="pool them again this often after (negative: once)",
    )
    parser.add_argument("--alerts", type=Path, help="also write the alert events here (JSONL)")
    args = parser.parse_args()
    fresh = (args.devices, args.minutes, args.noise, args.seed, args.start)
    if args.recording and any(option is not None for option in fresh):
        parser.error(
            "--devices, --minutes, --noise, --seed and --start apply to a new recording, "
            "not to --recording"
        )
    try:
        path = args.recording or make_recording(scenario_of(args), start_ms_of(args.start))
        scenario, _ = read_header(path)
    except (SimulatorError, OSError, ValueError) as exc:
        raise SystemExit(f"bench: {exc}") from exc
    fleet_ms = None if args.fleet_s < 0 else round(args.fleet_s * 1000)
    every_ms = None if args.fleet_every_s < 0 else round(args.fleet_every_s * 1000)
    train_ms = round(args.train_s * 1000)
    run = replay(path, Settings(), train_ms, args.batch_ms, fleet_ms, every_ms)
    if args.alerts:
        args.alerts.write_text("".join(json.dumps(a) + "\n" for a in run.alerts))
    report = summary(run, scenario, args.tolerance)
    show(report)
    print(json.dumps(report))
    write_results(__file__, report)


if __name__ == "__main__":
    main()
