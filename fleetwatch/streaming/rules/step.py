"""One micro-batch of operator rules over one bucket of devices, pure: the bucket's state, the
readings' per-rule values and the watermark in; the rules' alert events and the new state out.
The Spark operator (:mod:`~fleetwatch.streaming.rules.processor`) and ``fleetwatch rules test``
(:mod:`~fleetwatch.streaming.rules.recording`) both run :func:`judge`.

A rule without a window is judged on each reading the gateway received since its version was
accepted (:attr:`~fleetwatch.streaming.rules.compiled.CompiledRule.since_ms`, as the real-time query
does, so both name an episode by the same first reading): an episode opens on the first reading
where the condition holds and resolves on the first where it is false (a null — a metric the reading
lacks — changes nothing). A windowed rule is judged once per window, when the watermark passes the
window's end (its readings are all in: a later one is late), over the window's panes
(:mod:`~fleetwatch.streaming.rules.panes`); a device's windows are judged even when it sent nothing
in them, which is how ``count(*) = 0`` sees a silent device. While an episode is open an ``update``
is sent when its value changed, at most once per :data:`UPDATE_EVERY_MS` of event time.

An episode's id is :func:`~fleetwatch.contracts.rules.rule_alert_id` of device, metric, rule and
the event time it opened (a window's end for a windowed rule): the same readings give the same ids
after a restart or a replay. A rule's new version closes the open episodes of the old one and
starts the device's windows afresh; a deleted rule's episodes resolve on the device's next
batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, cast

from fleetwatch.contracts.alerts import RULE_KIND, Alert, event_id
from fleetwatch.contracts.rules import rule_alert_id
from fleetwatch.streaming import seen
from fleetwatch.streaming.rules import having, panes
from fleetwatch.streaming.rules.compiled import CompiledRule

FIRST_AGGREGATE: having.Tree = ["agg", 0]
"""What a windowed rule without an evidence of its own shows: its first aggregate."""

UPDATE_EVERY_MS = 60_000
"""An open episode's value is refreshed at most once a minute of event time: what an operator's
dashboard or webhook can follow without one event per reading."""


class Episode(TypedDict):
    alert_id: str
    rule_id: str
    version: int
    metric: str
    severity: str
    start_ms: int
    revision: int
    value: float | None
    updated_ms: int


class RuleState(TypedDict):
    version: int
    panes: dict[int, panes.Packed]
    next_end: int | None
    """The end of the next window to judge (a windowed rule)."""
    episode: Episode | None


class DeviceRules(TypedDict):
    rules: dict[str, RuleState]
    """A windowed rule's state, and a rule without a window's while its episode is open."""
    seen_seqs: list[list[int]]
    """The ``[lowest seq, highest seq, newest event_ms]`` ranges of the sequence numbers seen
    within the watermark, sorted and disjoint."""
    last_ms: int


class BucketRules(TypedDict):
    devices: dict[str, DeviceRules]
    timer_ms: int | None
    rules_key: NotRequired[str]
    """:func:`rules_key` of the rules that judged the bucket last: while they stay the same,
    no device has state of a rule that is gone, replaced or no longer selects it."""


def new_bucket() -> BucketRules:
    return {"devices": {}, "timer_ms": None}


_KEYS: dict[int, tuple[Mapping[str, CompiledRule], str]] = {}
"""id(rules) → (the rules, their key): a query's rules are one mapping for its life."""


def rules_key(rules: Mapping[str, CompiledRule]) -> str:
    """A digest of every rule's id, version and devices, the same in every process."""
    held = _KEYS.get(id(rules))
    if held is not None and held[0] is rules:
        return held[1]
    digest = hashlib.sha256()
    for rule_id in sorted(rules):
        rule = rules[rule_id]
        devices = "*" if rule.devices is None else "\x1f".join(sorted(rule.devices))
        digest.update(f"{rule_id}\x1e{rule.version}\x1e{devices}\x1d".encode())
    key = digest.hexdigest()
    if len(_KEYS) >= 64:
        _KEYS.clear()
    _KEYS[id(rules)] = (rules, key)
    return key


@dataclass(frozen=True)
class Reading:
    device_id: str
    seq: int
    event_ms: int
    received_ms: int
    values: Mapping[str, tuple[bool | None, Sequence[float | None]]]
    """Rule id → (the condition per reading, or None for a windowed rule; the rule's values)."""


@dataclass
class Judged:
    alerts: list[tuple[str, Alert]] = field(default_factory=list)
    """(device id, event)."""
    late: int = 0
    repeats: int = 0


def judge(
    bucket: BucketRules,
    readings: Iterable[Reading],
    rules: Mapping[str, CompiledRule],
    watermark_ms: int,
    now_ms: int,
    expire_after_ms: int,
) -> Judged:
    """The bucket's readings, then every window the watermark has closed; ``bucket`` moves on
    (its ``timer_ms``: the earliest window end still to judge, for the caller to arm)."""
    out = Judged()
    devices = bucket["devices"]
    ordered = sorted(readings, key=lambda r: (r.device_id, r.event_ms, r.seq))
    for reading in ordered:
        if reading.event_ms < watermark_ms:
            out.late += 1
            continue
        device = devices.setdefault(
            reading.device_id, {"rules": {}, "seen_seqs": [], "last_ms": reading.event_ms}
        )
        if _repeated(device, reading):
            out.repeats += 1
            continue
        device["last_ms"] = max(device["last_ms"], reading.event_ms)
        held = device["rules"]
        for rule_id, (fired, values) in reading.values.items():
            rule = rules.get(rule_id)
            if rule is None or (rule.devices is not None and reading.device_id not in rule.devices):
                continue
            if rule.window_ms is None:
                if rule.since_ms is not None and reading.received_ms < rule.since_ms:
                    continue  # received before this version was accepted: not its to judge
                if not fired and rule_id not in held:
                    continue  # nothing open to resolve, nothing to open
                state = _rule_state(device, rule, reading.device_id, reading.event_ms, now_ms, out)
                value = values[0] if values else None
                _lifecycle(state, rule, reading.device_id, fired, value, reading, now_ms, out)
                if state["episode"] is None:
                    del held[rule_id]
            else:
                state = _rule_state(device, rule, reading.device_id, reading.event_ms, now_ms, out)
                _into_pane(state, rule, reading.event_ms, values)
    key = rules_key(rules)
    changed = bucket.get("rules_key") != key
    for device_id in sorted(devices):
        device = devices[device_id]
        device["seen_seqs"] = [r for r in _seen(device) if r[2] >= watermark_ms]
        cast(dict[str, Any], device).pop("seen", None)  # a state written before the ranges
        if changed:
            _retire(device, rules, device_id, watermark_ms, now_ms, out)
        for rule_id, state in device["rules"].items():
            rule = rules[rule_id]
            if rule.window_ms is not None:
                _close_windows(state, rule, device_id, watermark_ms, now_ms, out)
        if device["last_ms"] < watermark_ms - expire_after_ms and not _open(device):
            del devices[device_id]
    bucket["timer_ms"] = next_timer(bucket)
    bucket["rules_key"] = key
    return out


def next_timer(bucket: BucketRules) -> int | None:
    ends = [
        s["next_end"]
        for d in bucket["devices"].values()
        for s in d["rules"].values()
        if s["next_end"] is not None
    ]
    return min(ends, default=None)


def _seen(device: DeviceRules) -> seen.Ranges:
    # a state written before the ranges has none, and its readings' repeats soon fall behind
    # the watermark
    return device.setdefault("seen_seqs", [])


def _repeated(device: DeviceRules, reading: Reading) -> bool:
    """Whether ``reading`` was judged before: its sequence number is in a range seen, at an
    event time no later than the range's newest (the same number later is a device that
    restarted its numbering: the ranges start again). Ranges older than the watermark are
    dropped at the end of a batch: a repeat of their readings is late."""
    ranges = _seen(device)
    held = seen.find(ranges, reading.seq)
    if held is not None:
        if reading.event_ms <= held[2]:
            return True
        ranges.clear()
    seen.add(ranges, reading.seq, reading.event_ms)
    return False


def _open(device: DeviceRules) -> bool:
    return any(s["episode"] is not None for s in device["rules"].values())


def _rule_state(
    device: DeviceRules, rule: CompiledRule, device_id: str, event_ms: int, now_ms: int, out: Judged
) -> RuleState:
    state = device["rules"].get(rule.id)
    if state is not None and state["version"] == rule.version:
        return state
    if state is not None and state["episode"] is not None:
        reason = f"rule {rule.id} replaced by version {rule.version}"
        _resolve(state, device_id, event_ms, None, now_ms, out, reason)
    state = {"version": rule.version, "panes": {}, "next_end": None, "episode": None}
    device["rules"][rule.id] = state
    return state


def _retire(
    device: DeviceRules,
    rules: Mapping[str, CompiledRule],
    device_id: str,
    watermark_ms: int,
    now_ms: int,
    out: Judged,
) -> None:
    """Drop the state of rules that are gone, or no longer judge this device, resolving their
    open episodes; start afresh the state of a rule's new version the device has sent nothing
    under yet, its windows from now on (so that a silent device is still judged)."""
    at = max(watermark_ms, device["last_ms"])
    for rule_id in list(device["rules"]):
        rule = rules.get(rule_id)
        if rule is not None and (rule.devices is None or device_id in rule.devices):
            if device["rules"][rule_id]["version"] != rule.version:
                state = _rule_state(device, rule, device_id, at, now_ms, out)
                if rule.window_ms is None:
                    del device["rules"][rule_id]
                else:
                    size, slide = rule.window_ms
                    state["next_end"] = at - at % slide + size
            continue
        state = device["rules"].pop(rule_id)
        if state["episode"] is not None:
            reason = f"rule {rule_id} deleted" if rule is None else f"rule {rule_id} deselected"
            _resolve(state, device_id, at, None, now_ms, out, reason)


def _into_pane(
    state: RuleState, rule: CompiledRule, event_ms: int, values: Sequence[float | None]
) -> None:
    assert rule.window_ms is not None
    slide = rule.window_ms[1]
    start = event_ms - event_ms % slide
    held = state["panes"].get(start)
    pane = [panes.empty() for _ in rule.aggregates] if held is None else panes.unpack(held)
    for partial, value in zip(pane, values, strict=True):
        panes.add(partial, value)
    state["panes"][start] = panes.pack(pane)
    if state["next_end"] is None or start + slide < state["next_end"]:
        state["next_end"] = start + slide  # on time, so its windows are not judged yet


def _close_windows(
    state: RuleState,
    rule: CompiledRule,
    device_id: str,
    watermark_ms: int,
    now_ms: int,
    out: Judged,
) -> None:
    assert rule.window_ms is not None
    assert rule.having is not None
    size, slide = rule.window_ms
    end = state["next_end"]
    while end is not None and end <= watermark_ms:
        empty = not any(end - size <= s < end for s in state["panes"])
        values = panes.window_values(rule.aggregates, state["panes"], end - size, end)
        fired = having.fires(rule.having, values)
        shown = having.evaluate(rule.evidence or FIRST_AGGREGATE, values)
        value = None if shown is None else float(shown)
        at = Reading(device_id, -1, end, end, {})
        _lifecycle(state, rule, device_id, fired, value, at, now_ms, out)
        for start in [s for s in state["panes"] if s < end + slide - size]:
            del state["panes"][start]
        if empty:
            # the later windows up to the watermark and the next pane are empty too, and judged
            # the same, but for an update held back by UPDATE_EVERY_MS
            last = min([watermark_ms - watermark_ms % slide, *state["panes"]])
            episode = state["episode"]
            if episode is not None and episode["value"] != value:
                due = episode["updated_ms"] + UPDATE_EVERY_MS
                last = min(last, -(-due // slide) * slide - slide)
            end = max(end, last) + slide
        else:
            end += slide
    state["next_end"] = end


def _lifecycle(
    state: RuleState,
    rule: CompiledRule,
    device_id: str,
    fired: bool | None,
    value: float | None,
    reading: Reading,
    now_ms: int,
    out: Judged,
) -> None:
    episode = state["episode"]
    if fired is None:
        return
    if fired and episode is None:
        start = reading.event_ms
        ident = rule_alert_id(device_id, rule.metric, rule.id, start)
        state["episode"] = {
            "alert_id": ident,
            "rule_id": rule.id,
            "version": rule.version,
            "metric": rule.metric,
            "severity": rule.severity,
            "start_ms": start,
            "revision": 0,
            "value": value,
            "updated_ms": start,
        }
        out.alerts.append(
            (device_id, _event(state, device_id, "open", reading, now_ms, _why(rule)))
        )
    elif fired and episode is not None:
        changed = value != episode["value"]
        if changed and reading.event_ms - episode["updated_ms"] >= UPDATE_EVERY_MS:
            episode["revision"] += 1
            episode["value"], episode["updated_ms"] = value, reading.event_ms
            event = _event(state, device_id, "update", reading, now_ms, _why(rule))
            out.alerts.append((device_id, event))
    elif not fired and episode is not None:
        _resolve(state, device_id, reading.event_ms, value, now_ms, out, _why(rule))


def _resolve(
    state: RuleState,
    device_id: str,
    event_ms: int,
    value: float | None,
    now_ms: int,
    out: Judged,
    reason: str,
) -> None:
    episode = state["episode"]
    assert episode is not None
    episode["revision"] += 1
    episode["value"] = value
    at = Reading(device_id, -1, event_ms, event_ms, {})
    event = _event(state, device_id, "resolve", at, now_ms, reason)
    out.alerts.append((device_id, event.model_copy(update={"end_ms": event_ms})))
    state["episode"] = None


def _why(rule: CompiledRule) -> str:
    over = "" if rule.window_ms is None else f" over {rule.window_ms[0] // 1000} s"
    return f"rule {rule.id}: {rule.name} ({rule.when}{over})"


def _event(
    state: RuleState, device_id: str, status: Any, reading: Reading, now_ms: int, reason: str
) -> Alert:
    episode = state["episode"]
    assert episode is not None
    return Alert(
        alert_id=episode["alert_id"],
        device_id=device_id,
        metric=episode["metric"],
        status=status,
        detector=RULE_KIND,
        params_version=0,
        seq=max(reading.seq, 0),
        event_ms=reading.event_ms,
        received_ms=reading.received_ms,
        detected_ms=now_ms,
        value=episode["value"],
        expected=None,
        band=None,
        score=1.0,
        reason=reason,
        severity=episode["severity"],
        start_ms=episode["start_ms"],
        revision=episode["revision"],
        event_id=event_id(episode["alert_id"], episode["revision"]),
        rule_id=episode["rule_id"],
        rule_version=episode["version"],
    )
