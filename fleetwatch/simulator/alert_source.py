"""Reading every alert event currently on the ``alerts`` topic (for ``sim eval``)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_topic import read_to_end
from fleetwatch.simulator.errors import SimulatorError


def read_alerts(settings: Settings, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """All records from the beginning of the alerts topic up to its end when called."""
    topic = settings.topics.alerts
    group = f"fleetwatch-sim-eval-{uuid.uuid4().hex[:8]}"
    try:
        records = read_to_end(settings.kafka, topic, group, timeout_s)
    except LookupError as exc:
        raise SimulatorError(f"no topic {topic!r} at {settings.kafka.bootstrap_servers}") from exc
    try:
        return [json.loads(value or b"{}") for _, value in records]
    except TimeoutError as exc:
        raise SimulatorError(f"timed out reading {topic!r}") from exc
