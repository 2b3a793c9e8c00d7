"""The topics of DESIGN.md: name, key and config, in one table the stack creates them from."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetwatch.contracts.settings import TopicSettings

_DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class TopicSpec:
    name: str
    key: str
    config: dict[str, str] = field(default_factory=dict)


def topic_specs(topics: TopicSettings) -> list[TopicSpec]:
    """Every topic fleetwatch uses, with its cleanup policy and retention."""
    compact = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
    return [
        TopicSpec(topics.telemetry_raw, "device_id", {"retention.ms": str(30 * _DAY_MS)}),
        TopicSpec(
            topics.telemetry_deadletter, "device_id or ''", {"retention.ms": str(14 * _DAY_MS)}
        ),
        TopicSpec(topics.telemetry_late, "device_id", {"retention.ms": str(14 * _DAY_MS)}),
        TopicSpec(topics.model_params, "device_id", compact),
        TopicSpec(topics.quarantine_lifts, "quarantine:{device_id}", compact),
        TopicSpec(topics.alerts, "device_id", {"retention.ms": str(90 * _DAY_MS)}),
        TopicSpec(topics.device_state, "device_id", compact),
        # sessions are history, keyed by session: compacted to each session's last record, and
        # deleted after as long as the alerts they explain are kept (a forgotten device's too)
        TopicSpec(
            topics.device_sessions,
            "session_id",
            {**compact, "cleanup.policy": "compact,delete", "retention.ms": str(90 * _DAY_MS)},
        ),
        TopicSpec(topics.device_commands, "device_id", {"retention.ms": str(7 * _DAY_MS)}),
        TopicSpec(topics.device_command_acks, "device_id", {"retention.ms": str(7 * _DAY_MS)}),
        TopicSpec(topics.rules, "rule:{rule_id}", compact),
        TopicSpec(topics.alerts_fast, "device_id", {"retention.ms": str(7 * _DAY_MS)}),
    ]
