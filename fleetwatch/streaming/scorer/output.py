"""What the scorer's per-device step writes: records by role (the output topic each is for),
tombstones, and the counts of what it did with the readings."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """Which output topic a record is for (the job maps them to the configured topic names)."""

    ALERTS = "alerts"
    STATE = "state"
    """The device's state record (``device.state``), not the device-wide alert kind."""
    SESSIONS = "sessions"
    LATE = "late"
    DEADLETTER = "deadletter"


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""``json.dumps(value, separators=(",", ":"), allow_nan=False)`` without building an encoder
per record (``json.dumps`` builds one whenever it is given options)."""


@dataclass
class Output:
    records: list[tuple[Role, str]] = field(default_factory=list)
    """(role, JSON value); key = device id."""
    tombstones: list[Role] = field(default_factory=list)
    """The compacted topics (by role) that get a tombstone for the device: its id as the key,
    no value (:meth:`forget`)."""
    late: int = 0
    duplicates: int = 0
    scored: int = 0

    def add(self, role: Role, value: dict[str, Any]) -> None:
        self.records.append((role, _ENCODER.encode(value)))

    def add_all(self, role: Role, values: Iterable[dict[str, Any]]) -> None:
        for value in values:
            self.add(role, value)

    def forget(self, *roles: Role) -> None:
        """The device leaves the topics of ``roles``: a tombstone each."""
        self.tombstones.extend(roles)
