"""Scoring alerts against the simulator's truth, event by event.

An anomaly is *detected* when an alert opens for its device (and one of its metrics, when the
alert names a metric the anomaly does not list it is no match; a device-wide alert, metric
``*`` as the scorer's dropout alerts have, names none) with an event time inside
``[start_ms, end_ms + tolerance]``. An opened alert is a *true* alert when it matches at least
one anomaly, else a *false* alert. Detection delay is the event time of the first matching
alert minus the anomaly's start (event time, so replays score the same as live runs).

Per kind: recall over that kind's anomalies; precision over the alerts matching that kind plus
every false alert (a false alert counts against every kind).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

DAY_MS = 24 * 3600 * 1000
DEVICE_WIDE = ("", "*")
"""Alert metrics that name no single metric: the alert is about the device as a whole."""


@dataclass(frozen=True)
class TruthEvent:
    device_id: str
    kind: str
    metrics: tuple[str, ...]
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class AlertEvent:
    device_id: str
    metric: str
    event_ms: int


@dataclass
class KindScore:
    anomalies: int = 0
    detected: int = 0
    true_alerts: int = 0
    delays_s: list[float] = field(default_factory=list)


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def _f1(p: float, r: float) -> float:
    return _ratio(2 * p * r, p + r)


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def matches(alert: AlertEvent, event: TruthEvent, tolerance_ms: int) -> bool:
    return (
        alert.device_id == event.device_id
        and (alert.metric in DEVICE_WIDE or not event.metrics or alert.metric in event.metrics)
        and event.start_ms <= alert.event_ms <= event.end_ms + tolerance_ms
    )


def evaluate(
    truth: list[TruthEvent],
    alerts: list[AlertEvent],
    tolerance_ms: int,
    device_days: float,
) -> dict[str, Any]:
    by_device: dict[str, list[TruthEvent]] = {}
    for event in truth:
        by_device.setdefault(event.device_id, []).append(event)
    kinds: dict[str, KindScore] = {}
    for event in truth:
        kinds.setdefault(event.kind, KindScore()).anomalies += 1
    first_alert: dict[TruthEvent, int] = {}
    false_alerts = 0
    for alert in alerts:
        hit = [e for e in by_device.get(alert.device_id, []) if matches(alert, e, tolerance_ms)]
        if not hit:
            false_alerts += 1
        for kind in {e.kind for e in hit}:
            kinds[kind].true_alerts += 1
        for event in hit:
            if alert.event_ms < first_alert.get(event, math.inf):
                first_alert[event] = alert.event_ms
    for event, when in first_alert.items():
        score = kinds[event.kind]
        score.detected += 1
        score.delays_s.append((when - event.start_ms) / 1000)
    true_alerts = len(alerts) - false_alerts
    delays = [d for s in kinds.values() for d in s.delays_s]
    precision = _ratio(true_alerts, len(alerts))
    recall = _ratio(len(first_alert), len(truth))
    by_kind = {}
    for name, s in sorted(kinds.items()):
        p, r = _ratio(s.true_alerts, s.true_alerts + false_alerts), _ratio(s.detected, s.anomalies)
        by_kind[name] = {
            "anomalies": s.anomalies,
            "detected": s.detected,
            "precision": p,
            "recall": r,
            "f1": _f1(p, r),
            "delay_p50_s": _percentile(s.delays_s, 50),
            "delay_p95_s": _percentile(s.delays_s, 95),
        }
    return {
        "precision": precision,
        "recall": recall,
        "f1": _f1(precision, recall),
        "delay_p50_s": _percentile(delays, 50),
        "delay_p95_s": _percentile(delays, 95),
        "false_alerts_per_device_day": _ratio(false_alerts, device_days),
        "anomalies": len(truth),
        "alerts": len(alerts),
        "false_alerts": false_alerts,
        "device_days": device_days,
        "by_kind": by_kind,
    }


def truth_events(records: Iterable[dict[str, Any]]) -> list[TruthEvent]:
    """The anomalies of a truth file (misbehaviour labels are not anomalies to detect)."""
    return [
        TruthEvent(
            r["device_id"], r["kind"], tuple(r.get("metrics") or ()), r["start_ms"], r["end_ms"]
        )
        for r in records
        if r.get("class", "anomaly") == "anomaly"
    ]


def alert_events(records: Iterable[dict[str, Any]]) -> list[AlertEvent]:
    """Alerts that open (status ``open``), each alert id counted once."""
    seen: set[str] = set()
    out = []
    for r in records:
        if r.get("status", "open") != "open":
            continue
        key = r.get("alert_id") or f"{r['device_id']}/{r.get('metric')}/{r['event_ms']}"
        if key in seen:
            continue
        seen.add(key)
        out.append(AlertEvent(r["device_id"], r.get("metric") or "", int(r["event_ms"])))
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def device_days_of(run: dict[str, Any]) -> float:
    """Device-days of a run sidecar (devices x duration)."""
    return float(run["scenario"]["devices"] * max(run["end_ms"] - run["start_ms"], 0) / DAY_MS)
