"""One micro-batch of one bucket of devices in the scorer, pure: the bucket's state, its
readings by device, the ``model.params`` records it got and the watermark in; the new state,
the output records and counts out. The Spark operator
(:mod:`~fleetwatch.streaming.scorer.processor`) is glue around :func:`score_bucket`,
:func:`expire_bucket` and :func:`arm_timer`, which run the same without Spark (the tests, the
offline quality bench).

Per batch (:func:`score_bucket`):

1. a scope's newest champion record (``fleet:{scope}``) replaces the bucket's champion of the
   scope, kept in the :class:`ParamsStore` and parsed into this worker's
   :data:`~fleetwatch.streaming.scorer.detectors.CHAMPIONS`;
2. per device, in device order: its newest ``model.params`` record replaces its parameters
   (kept in the store; a parameter version at most the one in use is ignored), then its
   readings are scored (:func:`~fleetwatch.streaming.scorer.device_step.process`) with its
   parameters — parsed once per version and worker
   (:data:`~fleetwatch.streaming.scorer.detectors.CACHE`), read back from the store on a miss —
   and its event-time timer is armed (:func:`~fleetwatch.streaming.scorer.expiry.wants_timer`).
   A tombstone (the trainer forgot the device, :mod:`fleetwatch.streaming.trainer.expiry`)
   drops its parameters first: it is scored by the baseline until the trainer publishes again,
   from version 1.

When the bucket's timer fires, :func:`expire_bucket` lets the devices that are due fall silent;
:func:`arm_timer` says which timer to register next (the earliest device's).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import numpy as np

from fleetwatch.contracts import wire
from fleetwatch.contracts.fleet import fleet_scope
from fleetwatch.streaming.scorer import quarantine
from fleetwatch.streaming.scorer.bucket_value import BucketState as BucketState
from fleetwatch.streaming.scorer.bucket_value import Devices, dump_bucket, load_bucket
from fleetwatch.streaming.scorer.detectors import (
    CACHE,
    CHAMPIONS,
    best_params,
    bucket_champion,
    fleet_model,
    fleet_params,
)
from fleetwatch.streaming.scorer.device_state import DeviceScoringState, new_state, state_record
from fleetwatch.streaming.scorer.device_step import process
from fleetwatch.streaming.scorer.expiry import expire, forgotten, wants_timer
from fleetwatch.streaming.scorer.output import Output, Role
from fleetwatch.streaming.scorer.policy import Policy
from fleetwatch.streaming.scorer.readings import Record, Refused, Rows

logger = logging.getLogger(__name__)


def new_bucket() -> BucketState:
    return {"devices": Devices(), "timer_ms": None, "fleet": {}}


class ParamsStore(Protocol):
    """Where a bucket's newest parameters and champions are kept between batches (the
    operator's ``MapState`` s; a dict offline): read only when this worker has not parsed them."""

    def params(self, device_id: str) -> str | None:
        """The device's newest parameters (JSON), if any."""
        ...

    def save_params(self, device_id: str, params_json: str, version: int) -> None: ...

    def forget(self, device_id: str) -> None:
        """Drop the device's parameters (it expired)."""
        ...

    def champion(self, scope: str) -> tuple[str, str] | None:
        """The scope's champion: its parameters (JSON) and label (``name/version``), if any."""
        ...

    def save_champion(self, scope: str, params_json: str, version: int, label: str) -> None: ...


@dataclass
class MemoryStore:
    """A :class:`ParamsStore` in memory (the offline quality bench, tests)."""

    device_params: dict[str, tuple[str, int]] = field(default_factory=dict)
    champions: dict[str, tuple[str, int, str]] = field(default_factory=dict)

    def params(self, device_id: str) -> str | None:
        stored = self.device_params.get(device_id)
        return None if stored is None else stored[0]

    def save_params(self, device_id: str, params_json: str, version: int) -> None:
        self.device_params[device_id] = (params_json, version)

    def forget(self, device_id: str) -> None:
        self.device_params.pop(device_id, None)

    def champion(self, scope: str) -> tuple[str, str] | None:
        stored = self.champions.get(scope)
        return None if stored is None else (stored[0], stored[2])

    def save_champion(self, scope: str, params_json: str, version: int, label: str) -> None:
        self.champions[scope] = (params_json, version, label)


@dataclass(frozen=True)
class BucketBatch:
    """One micro-batch of a bucket: its readings by device and its ``model.params`` records."""

    readings: Mapping[str, Rows] = field(default_factory=dict)
    params: Mapping[str, list[str]] = field(default_factory=dict)
    """Device id → the values of its ``model.params`` records in the batch."""
    champions: Mapping[str, list[str]] = field(default_factory=dict)
    """Scope → the values of its champion's records (``fleet:{scope}``) in the batch."""
    lifts: Mapping[str, list[str]] = field(default_factory=dict)
    """Device id → the values of its quarantine-lift records (``quarantine:{device_id}``)."""
    sources: Mapping[str, list[Record]] = field(default_factory=dict)
    """Device id → its ``telemetry.raw`` records in the batch (what a dead letter carries)."""
    forgets: frozenset[str] = frozenset()
    """Devices whose parameters the trainer withdrew (a tombstone: it forgot them); their
    records in :attr:`params` are those after the tombstone."""

    @classmethod
    def of(
        cls,
        readings: Mapping[str, Rows],
        records: Iterable[tuple[str, str | None]] = (),
        sources: Mapping[str, list[Record]] | None = None,
    ) -> BucketBatch:
        """``records``: ``model.params`` records as (key, value), in offset order: a device's
        parameters or its tombstone (value ``None``), a champion's or a quarantine lift."""
        params: dict[str, list[str]] = {}
        champions: dict[str, list[str]] = {}
        lifts: dict[str, list[str]] = {}
        forgets: set[str] = set()
        for key, value in records:
            scope = fleet_scope(key)
            lifted = quarantine.lifted_device(key)
            if value is None:
                if scope is None and lifted is None:
                    forgets.add(key)
                    params[key] = []  # what came before the tombstone is withdrawn
            elif scope is not None:
                champions.setdefault(scope, []).append(value)
            elif lifted is not None:
                lifts.setdefault(lifted, []).append(value)
            else:
                params.setdefault(key, []).append(value)
        return cls(readings, params, champions, lifts, sources or {}, frozenset(forgets))


@dataclass
class BucketOutput:
    records: list[tuple[str, Role, str]] = field(default_factory=list)
    """(device id, role, JSON value), in device order."""
    tombstones: list[tuple[str, Role]] = field(default_factory=list)
    """(device id, role): the device leaves that compacted topic."""
    dead: list[Refused] = field(default_factory=list)
    """Records that go to ``telemetry.deadletter``, each with the device and the reason."""
    late: int = 0
    duplicates: int = 0
    scored: int = 0
    failed: int = 0
    """Devices whose batch failed (their state is as before it; their records are in
    :attr:`dead`)."""
    held: int = 0
    """Readings of quarantined devices (in :attr:`dead`, unscored)."""
    forgotten: int = 0
    """Devices silent for ``expire_after`` that left the state."""

    def add(self, device_id: str, out: Output) -> None:
        if out.records:
            self.records.extend((device_id, role, value) for role, value in out.records)
        if out.tombstones:
            self.tombstones.extend((device_id, role) for role in out.tombstones)
        self.late += out.late
        self.duplicates += out.duplicates
        self.scored += out.scored


def score_bucket(
    bucket: BucketState,
    batch: BucketBatch,
    watermark_ms: int,
    now_ms: int,
    policy: Policy,
    store: ParamsStore,
    saved: bytes | None = None,
) -> BucketOutput:
    """A micro-batch of the bucket (see the module's docstring); ``bucket`` is updated.

    One device's failure never fails the bucket: a device whose batch raises gets its state
    back as it was before the batch (from ``saved``, the bucket's state as stored —
    :func:`~fleetwatch.streaming.scorer.bucket_value.dump_bucket` here when not given), its
    records go to the dead letters with the reason, and repeated failures quarantine it
    (:mod:`~fleetwatch.streaming.scorer.quarantine`)."""
    _new_champions(bucket, batch.champions, store)
    fleet = partial(bucket_champion, bucket["fleet"], store) if bucket["fleet"] else None
    devices = bucket["devices"]
    out = BucketOutput()
    before = _Before(saved if saved is not None else dump_bucket(bucket))
    wanted = batch.params.keys() | batch.readings.keys() | batch.lifts.keys()
    for device_id in sorted(wanted):
        state = devices.get(device_id)
        lifts = batch.lifts.get(device_id)
        if state is not None and lifts:
            _lift(device_id, state, lifts, now_ms, out)
        if device_id in batch.forgets:
            store.forget(device_id)  # the trainer forgot it: scored by the baseline again
            CACHE.drop(device_id)
            if state is not None:
                state["params_version"] = 0
        version = 0 if state is None else int(state["params_version"])
        params_json: str | None = None
        updates = batch.params.get(device_id)
        if updates:
            best = best_params(updates)
            if best is not None and best[0] > version:
                version, params_json = best
                store.save_params(device_id, params_json, version)
        if params_json is None and version > 0 and CACHE.get(device_id, version) is None:
            params_json = store.params(device_id)
        if state is not None:
            state["params_version"] = version
        elif version > 0:
            state = new_state()
            state["params_version"] = version
        rows = batch.readings.get(device_id)
        records = batch.sources.get(device_id, [])
        if rows is not None and state is not None and quarantine.held(state, now_ms):
            reason = f"device quarantined: {state['quarantine_reason']}"
            out.dead.extend(Refused(device_id, record, reason) for record in records)
            out.held += len(records)
        elif rows is not None:
            rows = _known_metrics(device_id, state, rows, records, policy.max_metrics, out)
            kept = quarantine.snapshot(state)  # lifts and time-outs of this batch stay
            try:
                scored, device_out = process(
                    device_id, state, params_json, rows, watermark_ms, now_ms, policy, fleet
                )
            except Exception as exc:  # noqa: BLE001 - one device never fails the bucket
                state = _failed(device_id, before, kept, exc, records, now_ms, policy, out)
                state["params_version"] = version
            else:
                state = scored
                quarantine.succeeded(state)
                out.add(device_id, device_out)
        if state is not None:
            wants_timer(state, policy, watermark_ms)  # every device held, whatever its batch
            devices[device_id] = state
    return out


def _known_metrics(
    device_id: str,
    state: DeviceScoringState | None,
    rows: Rows,
    records: list[Record],
    limit: int,
    out: BucketOutput,
) -> Rows:
    """The device's rows of at most ``limit`` metric names (those it has reported, then new
    ones in the order they come); the records holding names beyond them go to the dead letters
    with the reason, and the rest of their readings is scored."""
    names = rows["metric"]
    held = 0 if state is None else len(state["recent_values"]) + len(state["last_values"])
    if held + len(names) <= limit:
        return rows  # fewer names than the limit, however many are new
    given = set(names.tolist())
    known = set() if state is None else set(state["recent_values"]) | set(state["last_values"])
    if len(known | given) <= limit:
        return rows
    allowed = set(known)
    for name in dict.fromkeys(names.tolist()):
        if len(allowed) < limit:
            allowed.add(name)
    excess = sorted(given - allowed)
    keep = np.fromiter((n in allowed for n in names.tolist()), bool, len(names))
    seqs = set(rows["seq"][~keep].tolist())
    shown = ", ".join(excess[:5]) + (", …" if len(excess) > 5 else "")
    reason = f"metric names beyond the {limit} a device may report (score.max_metrics): {shown}"
    out.dead.extend(Refused(device_id, r, reason) for r in records if _seq_of(r) in seqs)
    return rows.where(keep)


def _seq_of(record: Record) -> object:
    try:
        return wire.loads(record.text).get("seq")
    except (wire.RecordRejected, AttributeError):
        return None


class _Before:
    """The bucket's devices as they were before the batch, read on the first failure."""

    def __init__(self, saved: bytes) -> None:
        self.saved = saved
        self.devices: Devices | None = None

    def state(self, device_id: str) -> DeviceScoringState | None:
        if self.devices is None:
            self.devices = load_bucket(self.saved)["devices"]
        state: DeviceScoringState | None = self.devices.get(device_id)
        return state


def _failed(
    device_id: str,
    before: _Before,
    kept: quarantine.Snapshot | None,
    exc: Exception,
    records: list[Record],
    now_ms: int,
    policy: Policy,
    out: BucketOutput,
) -> DeviceScoringState:
    """A device's batch raised: its state as before the batch, the failure counted, its
    records to the dead letters with the reason."""
    reason = quarantine.reason_of(exc)
    logger.exception("device %s: %s; %d records dead-lettered", device_id, reason, len(records))
    state = before.state(device_id) or new_state()
    quarantine.restore(state, kept)
    out.failed += 1
    out.dead.extend(Refused(device_id, record, reason) for record in records)
    if quarantine.failed(state, reason, now_ms, policy.quarantine):
        until = state["quarantined_until_ms"]
        logger.error("device %s quarantined until %s: %s", device_id, until, reason)
        _publish_state(device_id, state, now_ms, out)
    return state


def _lift(
    device_id: str, state: DeviceScoringState, lifts: list[str], now_ms: int, out: BucketOutput
) -> None:
    lifted = quarantine.newest_lift(lifts)
    if lifted is not None and quarantine.lift(state, lifted):
        logger.info("device %s: quarantine lifted", device_id)
        _publish_state(device_id, state, now_ms, out)


def _publish_state(
    device_id: str, state: DeviceScoringState, now_ms: int, out: BucketOutput
) -> None:
    if state["last_seen_ms"] is None:
        return  # nothing to say of a device never scored (the contract needs a last reading)
    open_ids = sorted(e["alert_id"] for e in state["episodes"] if e["opened"])
    device_out = Output()
    device_out.add(Role.STATE, state_record(device_id, state, open_ids, now_ms))
    out.add(device_id, device_out)


def expire_bucket(
    bucket: BucketState, watermark_ms: int, now_ms: int, policy: Policy, store: ParamsStore
) -> BucketOutput:
    """The bucket's timer fired: the devices due by ``watermark_ms`` fall silent
    (:func:`~fleetwatch.streaming.scorer.expiry.expire`), those silent for
    ``expire_after`` are forgotten (with their parameters), the others' timers re-arm."""
    bucket["timer_ms"] = None
    out = BucketOutput()
    devices = bucket["devices"]
    for device_id, timer_ms in sorted(devices.timers().items()):
        if timer_ms > watermark_ms:
            continue
        state = devices[device_id]
        try:
            expired, device_out, again = expire(device_id, state, watermark_ms, now_ms, policy)
        except Exception:
            logger.exception("device %s: its silence could not be processed", device_id)
            state["timer_ms"] = None
            out.failed += 1
            continue
        out.add(device_id, device_out)
        if again is None and forgotten(expired, watermark_ms, policy):
            del bucket["devices"][device_id]
            store.forget(device_id)
            out.forgotten += 1
        else:
            expired["timer_ms"] = again
    return out


def arm_timer(bucket: BucketState) -> int | None:
    """The timer to register for the bucket: its earliest device's, when earlier than the one
    registered (``None``: none to register)."""
    earliest = min(bucket["devices"].timers().values(), default=None)
    if earliest is None or (bucket["timer_ms"] is not None and earliest >= bucket["timer_ms"]):
        return None
    bucket["timer_ms"] = earliest
    return earliest


def _new_champions(
    bucket: BucketState, updates: Mapping[str, list[str]], store: ParamsStore
) -> None:
    """New champions (``fleet:{scope}`` records) into the store, the bucket and this worker."""
    for scope, values in updates.items():
        best = fleet_params(values)
        if best is None or best[0] <= int(bucket["fleet"].get(scope, 0)):
            continue
        version, params_json, label = best
        store.save_champion(scope, params_json, version, label)
        bucket["fleet"][scope] = version
        CHAMPIONS[scope] = (version, fleet_model(label, params_json))
