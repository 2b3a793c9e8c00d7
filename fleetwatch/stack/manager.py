"""`fleetwatch stack up | down | status`: the two brokers and the topics, as one unit, and
Prometheus beside them when asked for (``--with-prometheus``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.topics import topic_specs
from fleetwatch.stack.kafka import KafkaBroker
from fleetwatch.stack.mosquitto import MosquittoBroker
from fleetwatch.stack.processes import ManagedProcess
from fleetwatch.stack.prometheus import PrometheusServer
from fleetwatch.stack.topics import ensure_topics

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    address: str
    log: str


class Stack:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.kafka = KafkaBroker(settings)
        self.mosquitto = MosquittoBroker(settings)
        self.prometheus = PrometheusServer(settings)

    @property
    def processes(self) -> list[ManagedProcess]:
        return [self.kafka.proc, self.mosquitto.proc, self.prometheus.proc]

    def reload_credentials(self) -> bool:
        """Make the running broker read its password file and ACL again."""
        return self.mosquitto.reload()

    def up(self, with_prometheus: bool = False) -> float:
        """Start what is not running, wait until both brokers (and Prometheus, when asked for)
        answer, create missing topics (and, with SASL, the Kafka accounts and their ACLs).
        Returns the seconds it took. Harmless when everything is up already."""
        started = time.monotonic()
        try:
            self.mosquitto.start()
            self.kafka.start()
            if with_prometheus:
                self.prometheus.start()
            self.mosquitto.wait_ready()
            self.kafka.wait_ready()
            if with_prometheus:
                self.prometheus.wait_ready()
        except Exception:
            self.down()  # leave nothing half-started behind
            raise
        k = self.settings.kafka
        ensure_topics(
            self.kafka.admin_settings(),  # with SASL, as the broker's own account
            topic_specs(self.settings.topics),
            k.partitions,
            k.replication_factor,
        )
        self.kafka.provision()  # with SASL: the accounts and their ACLs
        return time.monotonic() - started

    def down(self) -> list[str]:
        """Stop what `up` started (by pid file). Returns the names stopped."""
        return [
            p.name for p in (self.prometheus.proc, self.kafka.proc, self.mosquitto.proc) if p.stop()
        ]

    def status(self) -> list[ComponentStatus]:
        """The brokers, and Prometheus when `up --with-prometheus` started it (its pid file is
        there: stopped on its own, it shows as stopped)."""
        s = self.settings
        optional = []
        if self.prometheus.proc.pid_file.exists():
            optional.append(
                ComponentStatus(
                    "prometheus",
                    self.prometheus.proc.pid(),
                    self.prometheus.url,
                    str(self.prometheus.proc.log_file),
                )
            )
        return [
            ComponentStatus(
                "kafka",
                self.kafka.proc.pid(),
                f"127.0.0.1:{s.kafka.port}",
                str(self.kafka.proc.log_file),
            ),
            ComponentStatus(
                "mosquitto",
                self.mosquitto.proc.pid(),
                f"127.0.0.1:{s.mqtt.port}",
                str(self.mosquitto.proc.log_file),
            ),
            *optional,
        ]
