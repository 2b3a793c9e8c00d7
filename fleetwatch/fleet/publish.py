"""Fleet models from the parameter table: ``model.params`` (compacted, one record per device)
→ the devices' PCA moments and their members' tails pooled per scope → a new registered MLflow
model version per scope (alias ``challenger``; ``fleetwatch models promote`` makes it the
champion).

A scope is the set of metrics a device reports (``humidity_temperature``): devices that measure
the same things are pooled. Run at the end of a backfill, or on a schedule with
``fleetwatch models register-fleet``.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Producer

from fleetwatch.contracts import model_params
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.errors import ParamsRecordError
from fleetwatch.contracts.fleet import fleet_key, fleet_scope, scope_of_metrics
from fleetwatch.contracts.settings import Settings
from fleetwatch.fleet.model import compose
from fleetwatch.fleet.pca import pool_detectors
from fleetwatch.fleet.tails import Members, members_of, pool_members, streams_of
from fleetwatch.kafka_config import client_config
from fleetwatch.kafka_topic import read_to_end
from fleetwatch.models.errors import FleetModelError, ModelError
from fleetwatch.models.multivariate import PcaDetector

logger = logging.getLogger(__name__)


def read_table(settings: Settings, timeout_s: float = 30.0) -> dict[str, model_params.ParamsRecord]:
    """The latest record per key — devices, and the fleet champions' ``fleet:{scope}`` — read
    from the start of ``model.params`` to its current end (later records of a key replace
    earlier ones, as compaction will, and a tombstone removes its key; records that break the
    contract are logged and skipped, so a key keeps its latest good record).
    No topic yet: an empty table."""
    topic = settings.topics.model_params
    try:
        records = read_to_end(settings.kafka, topic, "fleetwatch-fleet-models", timeout_s)
    except LookupError:
        return {}
    return latest_records(topic, records)


def latest_records(
    topic: str, records: Iterable[tuple[bytes | None, bytes | None]]
) -> dict[str, model_params.ParamsRecord]:
    """:func:`read_table`'s table from ``topic``'s ``(key, value)`` records in their order.

    Until compaction runs, the topic holds every version a device ever published (a live fleet
    publishes one a device every few seconds), and only the newest good one of each key is
    wanted: each key's values are kept undecoded and decoded newest first, down to the first
    good one or a tombstone. A record without a key is named by its content, so it is decoded
    where it stands."""
    history: dict[str, list[bytes | model_params.ParamsRecord | None]] = defaultdict(list)
    for key, value in records:
        if key:
            history[key.decode(errors="replace")].append(value)
            continue
        if not value:
            continue
        record = _decoded(topic, value, key)
        if record is not None:
            history[model_params.key_of(record)].append(record)
    table: dict[str, model_params.ParamsRecord] = {}
    for name, values in history.items():
        for value in reversed(values):
            if value is None:
                break  # a tombstone: the device forgotten
            record = _decoded(topic, value, name.encode()) if isinstance(value, bytes) else value
            if record is not None:
                table[name] = record
                break
    return table


def _decoded(topic: str, value: bytes, key: bytes | None) -> model_params.ParamsRecord | None:
    """The record ``value`` holds; ``None`` (logged) when it is empty or breaks the contract."""
    if not value:
        return None
    try:
        return model_params.decode(value, key)
    except ParamsRecordError as exc:
        logger.warning("%s: skipping the record of %r: %s", topic, key, exc)
        return None


def pooled_by_scope(
    table: Mapping[str, Mapping[str, Any]],
) -> dict[str, tuple[dict[str, Any], int]]:
    """``{scope: (fleet model parameters, devices pooled)}`` from a parameter table (the fleet
    champions' own records in it are left out), in :mod:`~fleetwatch.fleet.model`'s shape.

    A device whose multivariate member has learned is in the scope of that member's metrics,
    and its moments are pooled (:func:`~fleetwatch.fleet.pca.pool_detectors`); any other device that
    has learned a stream (one of a single metric, which has no joint model) is in the scope of
    its streams' metrics (:func:`~fleetwatch.fleet.tails.streams_of`). Every device of a scope
    adds its level and seasonal tails (:func:`~fleetwatch.fleet.tails.pool_members`); a scope
    without a device's moments has no PCA part, and its tails carry the states its devices
    hold (:mod:`~fleetwatch.models.states`). A scope with neither moments nor a tail to pool
    has no model. Nothing is weighed by readings: each device counts as at most the median
    device, and the most outlying are shrunk or left out (:mod:`~fleetwatch.fleet.pca`), so
    one fast, noisy device cannot widen its scope's thresholds. A device whose parameters do not
    load is left out, logged, and a scope's moments are pooled from the
    devices of its most common settings (:func:`_pooled_moments`): one device stops neither its
    scope nor the fleet."""
    moments: dict[str, dict[str, PcaDetector]] = defaultdict(dict)
    whole: dict[str, list[Members]] = defaultdict(list)
    for device_id, record in table.items():
        if fleet_scope(device_id) is not None:
            continue
        try:
            members = members_of(record.get("params", {}))
        except (ModelError, AttributeError, KeyError, TypeError, ValueError) as exc:
            logger.warning(
                "not pooling device %r: its parameters do not load (%s: %s)",
                device_id,
                type(exc).__name__,
                exc,
            )
            continue
        pca = members.get(PcaDetector.kind)
        if isinstance(pca, PcaDetector) and pca.count > 0:  # has learned
            scope = scope_of_metrics(pca.metrics)
            moments[scope][device_id] = pca
        else:
            streams = streams_of(members)
            if not streams:
                continue
            scope = scope_of_metrics(streams)
        whole[scope].append(members)
    pooled = {}
    for scope, devices in whole.items():
        pca_part = _pooled_moments(scope, moments[scope]) if moments[scope] else None
        # the states its devices hold: told by the PCA part where there is one (its
        # ``familiar_times``), else carried by the pooled tails of the scope's one metric
        tails = pool_members(devices, states=not moments[scope])
        if pca_part is not None or any(tails.values()):
            pooled[scope] = (compose(pca_part, tails), len(devices))
    return pooled


def _pooled_moments(scope: str, devices: Mapping[str, PcaDetector]) -> dict[str, Any] | None:
    """The scope's pooled PCA parameters from the devices of its most common hyperparameters
    (a fleet part-way through a change of settings pools the setting most of it runs; the
    others are left out, logged); ``None`` (logged) when they cannot be pooled."""
    by_setting: dict[str, dict[str, PcaDetector]] = defaultdict(dict)
    for device_id, pca in devices.items():
        by_setting[json.dumps(pca.hyperparameters(), sort_keys=True)][device_id] = pca
    # the most devices; a tie goes to the first setting in sorted order, whatever the table's
    chosen = max((by_setting[k] for k in sorted(by_setting)), key=len)
    if len(chosen) < len(devices):
        others = sorted(set(devices) - set(chosen))
        logger.warning(
            "scope %s: %d device(s) with other PCA settings left out of the pool: %s",
            scope,
            len(others),
            ", ".join(others[:10]),
        )
    try:
        return pool_detectors(chosen)
    except FleetModelError as exc:
        logger.warning("scope %s: no pooled PCA part: %s", scope, exc)
        return None


def register_fleet_models(settings: Settings, run_id: str | None = None) -> dict[str, int]:
    """Pool and register one new version per scope; returns ``{scope: version}``."""
    from fleetwatch.fleet.registry import ModelRegistry  # lazy: mlflow takes a second to import

    registry = ModelRegistry(settings)
    registered = {}
    for scope, (params, devices) in sorted(pooled_by_scope(read_table(settings)).items()):
        info = registry.register(scope, params, run_id=run_id, devices=devices)
        logger.info(
            "registered fleet model %s v%s from %d devices", info.name, info.version, devices
        )
        registered[scope] = int(info.version)
    return registered


def publish_champion(settings: Settings, scope: str) -> tuple[str, int] | None:
    """Publish the champion of ``scope`` to ``model.params`` under ``fleet:{scope}``, so that
    the scorer follows it; returns ``(model name, model version)``, ``None`` when the scope has
    no champion. The record's version is one above the key's latest on the topic."""
    from fleetwatch.fleet.registry import champion  # lazy: mlflow takes a second to import

    found = champion(settings, scope)
    if found is None:
        return None
    key = fleet_key(scope)
    previous = read_table(settings).get(key)
    version = 1 if previous is None else previous["version"] + 1
    value = model_params.encode_champion(
        scope, found.name, found.version, found.params, version, now_ms()
    )
    producer = Producer(client_config(settings.kafka, {"acks": "all", "log_level": 3}))
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer.produce(
        settings.topics.model_params, value.encode(), key.encode(), on_delivery=delivered
    )
    left = producer.flush(30)
    if left or failures:
        raise FleetModelError(
            f"{settings.topics.model_params}: the champion of {scope} was not written: "
            f"{failures[0] if failures else 'no acknowledgement within 30 s'}"
        )
    logger.info("published %s v%s as %s", found.name, found.version, key)
    return found.name, found.version
