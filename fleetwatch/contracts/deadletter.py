"""The dead-letter topic's headers (``telemetry.deadletter``): what every stage that refuses a
record it read from a topic writes beside it, so that an operator can tell who refused it, why,
and where it came from.

``fw.reason`` the refusal, specific; ``fw.stage`` the stage (``gateway``, ``score``, ``api``);
``fw.source_topic``, ``fw.source_partition``, ``fw.source_offset`` the record's place (the
gateway, which reads MQTT, names the MQTT topic instead, with headers of its own); ``fw.kind``,
where a reader acts on the kind of refusal: the gateway's :data:`RATE_LIMITED`.
"""

from __future__ import annotations

REASON = "fw.reason"
STAGE = "fw.stage"
KIND = "fw.kind"
RATE_LIMITED = "rate_limited"
"""The kind of a message the gateway dead-lettered because its device is over its rate."""
RATE_LIMITED_RUN_S = 60
"""A device's rate-limited dead letters less than this apart are one run of them, and a device
whose latest is younger than this is being rate-limited (the gateway's gauge, the API)."""


def source_headers(
    stage: str, reason: str, topic: str, partition: int, offset: int
) -> list[tuple[str, str]]:
    """The headers of a dead letter for a record read from ``topic`` at ``partition`` and
    ``offset``."""
    return [
        (REASON, reason),
        (STAGE, stage),
        ("fw.source_topic", topic),
        ("fw.source_partition", str(partition)),
        ("fw.source_offset", str(offset)),
    ]
