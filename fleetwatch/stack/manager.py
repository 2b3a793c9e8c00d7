"""`fleetwatch stack up | down | status`: the two brokers and the topics, as one unit."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.topics import topic_specs
from fleetwatch.stack.kafka import KafkaBroker
from fleetwatch.stack.mosquitto import MosquittoBroker
from fleetwatch.stack.processes import ManagedProcess
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

    @property
    def processes(self) -> list[ManagedProcess]:
        return [self.kafka.proc, self.mosquitto.proc]

    def reload_credentials(self) -> bool:
        """Make the running broker read its password file and ACL again."""
        return self.mosquitto.reload()

    def up(self) -> float:
        """Start what is not running, wait until both brokers answer, create missing topics.
        Returns the seconds it took. Harmless when everything is up already."""
        started = time.monotonic()
        try:
            self.mosquitto.start()
            self.kafka.start()
            self.mosquitto.wait_ready()
            self.kafka.wait_ready()
        except Exception:
            self.down()  # leave nothing half-started behind
            raise
        k = self.settings.kafka
        ensure_topics(
            k.bootstrap_servers,
            topic_specs(self.settings.topics),
            k.partitions,
            k.replication_factor,
        )
        return time.monotonic() - started

    def down(self) -> list[str]:
        """Stop what `up` started (by pid file). Returns the names stopped."""
        return [p.name for p in (self.kafka.proc, self.mosquitto.proc) if p.stop()]

    def status(self) -> list[ComponentStatus]:
        s = self.settings
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
        ]
