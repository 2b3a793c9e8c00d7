"""Kafka ``alerts`` → the API's store. Offsets are committed only after the rows are stored;
a redelivered alert has a known id and is skipped, so replays are harmless."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message
from pydantic import ValidationError

from fleetwatch.contracts.alerts import Alert
from fleetwatch.serving.store import AlertStore

logger = logging.getLogger(__name__)


def consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    }


def decode_alerts(messages: list[Message]) -> tuple[list[Alert], int]:
    """Valid alerts, and how many records were not alerts (logged and skipped, never fatal)."""
    alerts: list[Alert] = []
    bad = 0
    for msg in messages:
        try:
            alerts.append(Alert.model_validate(json.loads(msg.value() or b"")))
        except (ValueError, ValidationError) as exc:
            bad += 1
            logger.warning(
                "skipping a record that is not an alert at %s[%s]@%s: %s",
                msg.topic(),
                msg.partition(),
                msg.offset(),
                exc,
            )
    return alerts, bad


class AlertMaterialiser:
    def __init__(self, store: AlertStore, bootstrap: str, topic: str, group: str) -> None:
        self.store = store
        self.topic = topic
        self.consumer = Consumer(consumer_config(bootstrap, group))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alert-materialiser")
        self.stored = 0

    def start(self) -> None:
        self.consumer.subscribe([self.topic])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self.consumer.consume(num_messages=500, timeout=0.2)
                good = [m for m in batch if m.error() is None]
                for m in batch:
                    if (err := m.error()) is not None and err.code() != KafkaError._PARTITION_EOF:
                        logger.warning("Kafka consumer error: %s", err)
                if not good:
                    continue
                alerts, _ = decode_alerts(good)
                self.stored += self.store.add(alerts, stored_ms=time.time_ns() // 1_000_000)
                self.consumer.commit(asynchronous=False)
        except Exception:
            logger.exception("the alert materialiser stopped on an error")
            raise
        finally:
            self.consumer.close()
