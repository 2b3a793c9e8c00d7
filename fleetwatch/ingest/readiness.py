"""The gateway's readiness (``/readyz``): every worker connected to MQTT and subscribed, and
Kafka answering for ``telemetry.raw``.

MQTT from the workers' own gauge, ``fleetwatch_gateway_mqtt_connected`` (set when a worker has
connected and subscribed, cleared when it loses the connection), summed over the workers as
the metrics endpoint serves it. Kafka from a metadata request for the raw topic with a short
timeout, its answer kept for a few seconds so that probes do not each ask the broker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import client_config
from fleetwatch.runtime import Readiness

CONNECTED = "fleetwatch_gateway_mqtt_connected"
METADATA_TIMEOUT_S = 2.0
CACHE_S = 5.0
"""How long a Kafka answer (either way) stands: probes come every 10 to 15 s, Prometheus' scrape
does not ask."""


class KafkaTopicCheck:
    """``"ok"`` when Kafka answers a metadata request for ``topic`` within ``timeout_s``,
    else what went wrong; an answer is reused for ``cache_s``. Thread-safe: concurrent probes
    wait for the one request under way."""

    def __init__(
        self,
        admin: Callable[[], Any],
        topic: str,
        timeout_s: float = METADATA_TIMEOUT_S,
        cache_s: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._admin_factory = admin
        self._admin: Any = None
        self.topic, self.timeout_s, self.cache_s, self.clock = topic, timeout_s, cache_s, clock
        self._lock = threading.Lock()
        self._answer: tuple[float, str] | None = None

    def __call__(self) -> str:
        with self._lock:
            now = self.clock()
            if self._answer is not None and now - self._answer[0] < self.cache_s:
                return self._answer[1]
            answer = self._ask()
            self._answer = (self.clock(), answer)
            return answer

    def _ask(self) -> str:
        if self._admin is None:
            self._admin = self._admin_factory()
        try:
            metadata = self._admin.list_topics(self.topic, timeout=self.timeout_s)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            return f"unreachable: {error.str() if isinstance(error, KafkaError) else exc}"
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            why = "absent" if topic is None else topic.error.str()
            return f"no topic {self.topic}: {why}"
        return "ok"


class GatewayReadiness:
    """Ready when ``workers`` workers are connected and subscribed (the gauge of
    ``registry``, summed) and :class:`KafkaTopicCheck` says ``"ok"``."""

    def __init__(self, registry: CollectorRegistry, workers: int, kafka: Callable[[], str]):
        self.registry, self.workers, self.kafka = registry, workers, kafka

    def __call__(self) -> Readiness:
        connected = int(self.registry.get_sample_value(CONNECTED) or 0)
        kafka = self.kafka()
        ready = connected >= self.workers and kafka == "ok"
        mqtt = f"{connected}/{self.workers} workers connected and subscribed"
        return Readiness(ready, {"mqtt": mqtt, "kafka": kafka})


def gateway_readiness(
    settings: Settings, registry: CollectorRegistry, workers: int
) -> GatewayReadiness:
    """The gateway's readiness check, asking Kafka as the gateway's own login (an admin
    client made at the first probe)."""
    g = settings.gateway

    def admin() -> AdminClient:
        # critical only: the gateway's producer already logs a broker it cannot reach, and
        # /readyz says why
        extra = {"client.id": f"{g.client_id}-readiness", "log_level": 2}
        return AdminClient(client_config(settings.kafka, extra))

    return GatewayReadiness(
        registry, workers, KafkaTopicCheck(admin, settings.topics.telemetry_raw)
    )
