"""Fleet models from the parameter table: ``model.params`` (compacted, one record per device)
→ the devices' PCA moments pooled per scope → a new registered MLflow model version per scope
(alias ``challenger``; ``fleetwatch models promote`` makes it the champion).

A scope is the set of metrics a device reports (``humidity_temperature``): devices that measure
the same things are pooled. Run at the end of a backfill, or on a schedule with
``fleetwatch models register-fleet``.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from fleetwatch.contracts.fleet import fleet_key, fleet_scope, scope_of_metrics
from fleetwatch.contracts.settings import Settings
from fleetwatch.models.errors import FleetModelError
from fleetwatch.models.fleet import pool_pca

logger = logging.getLogger(__name__)


def read_table(settings: Settings, timeout_s: float = 30.0) -> dict[str, dict[str, Any]]:
    """The latest record per key — devices, and the fleet champions' ``fleet:{scope}`` — read
    from the start of ``model.params`` to its current end (later records of a key replace
    earlier ones, as compaction will)."""
    topic = settings.topics.model_params
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka.bootstrap_servers,
            "group.id": "fleetwatch-fleet-models",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    table: dict[str, dict[str, Any]] = {}
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        while todo:
            batch = consumer.consume(1000, timeout=timeout_s)
            if not batch:
                raise TimeoutError(
                    f"{topic}: no records within {timeout_s:.0f}s, {len(todo)} partitions unread"
                )
            for msg in batch:
                if msg.error() is not None:
                    continue
                if msg.value():
                    record = json.loads(msg.value() or b"{}")
                    key = msg.key()
                    table[key.decode() if key else str(record.get("device_id"))] = record
                if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                    todo.discard(msg.partition() or 0)
    finally:
        consumer.close()
    return table


def pca_params(params: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A device's PCA parameters: the detector itself, or the PCA member of a combined one."""
    if params.get("kind") == "pca":
        return params
    for member in params.get("state", {}).get("members", []):
        if member.get("kind") == "pca":
            return member  # type: ignore[no-any-return]
    return None


def scope_of(pca: Mapping[str, Any]) -> str:
    return scope_of_metrics(pca.get("state", {}).get("metrics", []))


def pooled_by_scope(
    table: Mapping[str, Mapping[str, Any]],
) -> dict[str, tuple[dict[str, Any], int]]:
    """``{scope: (pooled PCA params, devices pooled)}`` from a parameter table (the fleet
    champions' own records in it are left out)."""
    groups: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for device_id, record in table.items():
        if fleet_scope(device_id) is not None:
            continue
        pca = pca_params(record.get("params", {}))
        if pca is not None and pca.get("state", {}).get("count", 0) > 0:  # has learned
            groups[scope_of(pca)][device_id] = pca
    return {scope: (pool_pca(devices), len(devices)) for scope, devices in groups.items()}


def register_fleet_models(settings: Settings, run_id: str | None = None) -> dict[str, int]:
    """Pool and register one new version per scope; returns ``{scope: version}``."""
    from fleetwatch.models.mlflow_registry import ModelRegistry

    registry = ModelRegistry(settings)
    registered = {}
    for scope, (params, devices) in sorted(pooled_by_scope(read_table(settings)).items()):
        info = registry.register(scope, params, run_id=run_id, devices=devices)
        logger.info(
            "registered fleet model %s v%s from %d devices", info.name, info.version, devices
        )
        registered[scope] = int(info.version)
    return registered


def champion_record(
    scope: str, model: str, model_version: int, params: Mapping[str, Any], version: int, now_ms: int
) -> str:
    """The value of a ``fleet:{scope}`` record (:mod:`fleetwatch.contracts.fleet`)."""
    record = {
        "scope": scope,
        "model": model,
        "model_version": model_version,
        "kind": params["kind"],
        "schema": params["schema"],
        "version": version,
        "params": dict(params),
        "published_ms": now_ms,
    }
    return json.dumps(record, sort_keys=True, allow_nan=False, separators=(",", ":"))


def publish_champion(settings: Settings, scope: str) -> tuple[str, int] | None:
    """Publish the champion of ``scope`` to ``model.params`` under ``fleet:{scope}``, so that
    the scorer follows it; returns ``(model name, model version)``, ``None`` when the scope has
    no champion. The record's version is one above the key's latest on the topic."""
    from confluent_kafka import Producer

    from fleetwatch.models.mlflow_registry import champion

    found = champion(settings, scope)
    if found is None:
        return None
    key = fleet_key(scope)
    previous = read_table(settings).get(key, {}).get("version", 0)
    value = champion_record(
        scope, found.name, found.version, found.params, int(previous) + 1, int(time.time() * 1000)
    )
    producer = Producer(
        {"bootstrap.servers": settings.kafka.bootstrap_servers, "acks": "all", "log_level": 3}
    )
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
