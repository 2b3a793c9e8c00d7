"""One micro-batch of one bucket of devices in the scorer, pure: the bucket's state, its
readings by device, the ``model.params`` records it got and the watermark in; the new state,
the output records and counts out. The Spark operator
(:mod:`~fleetwatch.streaming.scorer.processor`) is glue around :func:`score_bucket`,
:func:`expire_bucket` and :func:`arm_timer`; the offline quality bench
(``bench/quality/offline.py``) runs the same functions without Spark.

Per batch (:func:`score_bucket`):

1. a scope's newest champion record (``fleet:{scope}``) replaces the bucket's champion of the
   scope, kept in the :class:`ParamsStore` and parsed into this worker's
   :data:`~fleetwatch.streaming.scorer.detectors.CHAMPIONS`;
2. per device, in device order: its newest ``model.params`` record replaces its parameters
   (kept in the store; a parameter version at most the one in use is ignored), then its
   readings are scored (:func:`~fleetwatch.streaming.scorer.device_step.process`) with its
   parameters — parsed once per version and worker
   (:data:`~fleetwatch.streaming.scorer.detectors.CACHE`), read back from the store on a miss —
   and its event-time timer is armed (:func:`~fleetwatch.streaming.scorer.device_step.wants_timer`).

When the bucket's timer fires, :func:`expire_bucket` lets the devices that are due fall silent;
:func:`arm_timer` says which timer to register next (the earliest device's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypedDict

from fleetwatch.contracts.fleet import fleet_scope
from fleetwatch.streaming.scorer.detectors import (
    CACHE,
    CHAMPIONS,
    FleetModel,
    best_params,
    fleet_model,
    fleet_params,
)
from fleetwatch.streaming.scorer.device_state import DeviceScoringState, new_state
from fleetwatch.streaming.scorer.device_step import (
    Output,
    Policy,
    Role,
    expire,
    process,
    wants_timer,
)
from fleetwatch.streaming.scorer.readings import Rows


class BucketState(TypedDict):
    """What the scorer keeps of a bucket of devices (one value, pickled: JSON's types only)."""

    devices: dict[str, DeviceScoringState]
    timer_ms: int | None
    """The event-time timer registered for the bucket (the earliest device's when set)."""
    fleet: dict[str, int]
    """Scope → the version of its champion held in the store."""


def new_bucket() -> BucketState:
    return {"devices": {}, "timer_ms": None, "fleet": {}}


class ParamsStore(Protocol):
    """Where a bucket's newest parameters and champions are kept between batches (the
    operator's ``MapState`` s; a dict offline): read only when this worker has not parsed them."""

    def params(self, device_id: str) -> str | None:
        """The device's newest parameters (JSON), if any."""
        ...

    def save_params(self, device_id: str, params_json: str, version: int) -> None: ...

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

    @classmethod
    def of(
        cls, readings: Mapping[str, Rows], records: Iterable[tuple[str, str]] = ()
    ) -> BucketBatch:
        """``records``: ``model.params`` records as (key, value), a device's or a champion's."""
        params: dict[str, list[str]] = {}
        champions: dict[str, list[str]] = {}
        for key, value in records:
            scope = fleet_scope(key)
            if scope is None:
                params.setdefault(key, []).append(value)
            else:
                champions.setdefault(scope, []).append(value)
        return cls(readings, params, champions)


@dataclass
class BucketOutput:
    records: list[tuple[str, Role, str]] = field(default_factory=list)
    """(device id, role, JSON value), in device order."""
    late: int = 0
    duplicates: int = 0
    scored: int = 0

    def add(self, device_id: str, out: Output) -> None:
        self.records.extend((device_id, role, value) for role, value in out.records)
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
) -> BucketOutput:
    """A micro-batch of the bucket (see the module's docstring); ``bucket`` is updated."""
    _new_champions(bucket, batch.champions, store)
    fleet = partial(_champion, bucket, store) if bucket["fleet"] else None
    devices = bucket["devices"]
    out = BucketOutput()
    for device_id in sorted(batch.params.keys() | batch.readings.keys()):
        state = devices.get(device_id)
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
        if rows is not None:
            state, device_out = process(
                device_id, state, params_json, rows, watermark_ms, now_ms, policy, fleet
            )
            wants_timer(state, policy)
            out.add(device_id, device_out)
        if state is not None:
            devices[device_id] = state
    return out


def expire_bucket(
    bucket: BucketState, watermark_ms: int, now_ms: int, policy: Policy
) -> BucketOutput:
    """The bucket's timer fired: the devices due by ``watermark_ms`` fall silent
    (:func:`~fleetwatch.streaming.scorer.device_step.expire`), the others' timers re-arm."""
    bucket["timer_ms"] = None
    out = BucketOutput()
    for device_id, state in sorted(bucket["devices"].items()):
        if state["timer_ms"] is None or int(state["timer_ms"]) > watermark_ms:
            continue
        state, device_out, again = expire(device_id, state, watermark_ms, now_ms, policy)
        state["timer_ms"] = again
        out.add(device_id, device_out)
    return out


def arm_timer(bucket: BucketState) -> int | None:
    """The timer to register for the bucket: its earliest device's, when earlier than the one
    registered (``None``: none to register)."""
    due = [int(st["timer_ms"]) for st in bucket["devices"].values() if st["timer_ms"] is not None]
    earliest = min(due) if due else None
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


def _champion(bucket: BucketState, store: ParamsStore, scope: str) -> FleetModel | None:
    version = bucket["fleet"].get(scope)
    if version is None:
        return None
    cached = CHAMPIONS.get(scope)
    if cached is not None and cached[0] == int(version):
        return cached[1]
    stored = store.champion(scope)
    found = None if stored is None else fleet_model(stored[1], stored[0])
    CHAMPIONS[scope] = (int(version), found)
    return found
