"""Operator rules: what an operator writes, and a rule's record on the ``rules`` topic.

A rule is a condition in Spark SQL over a device's readings, with a name, a severity and a
device selector. Without a window it is judged on every reading (``temperature > 80``); with
one, over the device's readings in each event-time window (``avg(vibration) > 7`` over 5
minutes, sliding every minute; ``count(*) = 0`` over 10 minutes for a device gone silent). A
bare name in the condition is a metric of the reading (``metrics[name]``); ``device_id``,
``seq``, ``firmware`` and ``status`` are the reading's own fields.

The ``rules`` topic is compacted, keyed ``rule:{id}``: a rule's newest record is its current
version, a tombstone deletes it. The API writes it (every change a new ``version``); the
scorer follows it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from fleetwatch.contracts import wire
from fleetwatch.contracts.alerts import Severity
from fleetwatch.contracts.identifiers import DeviceId

RULE_KEY_PREFIX = "rule:"
RULE_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
RuleId = Annotated[str, StringConstraints(pattern=RULE_ID_PATTERN)]
MAX_CONDITION_CHARS = 4_000
"""A condition longer than this is refused: a rule is one readable expression, not a program."""
MIN_WINDOW_MS = 1_000
MAX_WINDOW_MS = 24 * 3_600_000
"""A window holds its device's partial aggregates for each slide in it: a day at the finest
slide (one second) is the most a device's state carries per rule."""
MAX_PANES = 1_440
"""Slides per window at the most (a day by the minute, an hour by the 2.5 s): what a device's
state holds per windowed rule."""

_UNITS_MS = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1_000,
    "sec": 1_000,
    "second": 1_000,
    "seconds": 1_000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
}
_DURATION = re.compile(r"^\s*(\d{1,9})\s*([a-z]+)\s*$")


def duration_ms(text: str) -> int:
    """``"5 minutes"``, ``"30 s"``, ``"1500 ms"``, ``"2h"`` → milliseconds."""
    match = _DURATION.match(text.lower())
    if match is None or match.group(2) not in _UNITS_MS:
        raise ValueError(
            f"{text!r} is not a duration: a whole number and a unit "
            f"(ms, s, seconds, m, minutes, h, hours), e.g. '5 minutes'"
        )
    return int(match.group(1)) * _UNITS_MS[match.group(2)]


class RuleWindow(BaseModel):
    """An event-time window: tumbling when ``slide`` is not given, else sliding by ``slide``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: str
    slide: str | None = None

    @field_validator("size", "slide")
    @classmethod
    def _is_duration(cls, value: str | None) -> str | None:
        if value is not None:
            ms = duration_ms(value)
            if not MIN_WINDOW_MS <= ms <= MAX_WINDOW_MS:
                raise ValueError(f"{value!r}: a window and its slide are 1 second to 24 hours")
        return value

    @property
    def size_ms(self) -> int:
        return duration_ms(self.size)

    @property
    def slide_ms(self) -> int:
        return self.size_ms if self.slide is None else duration_ms(self.slide)

    @model_validator(mode="after")
    def _slides_divide(self) -> RuleWindow:
        size, slide = self.size_ms, self.slide_ms
        if slide > size or size % slide:
            raise ValueError(f"the slide ({self.slide}) must divide the window ({self.size})")
        if size // slide > MAX_PANES:
            raise ValueError(
                f"a window of {self.size} sliding by {self.slide} has {size // slide} slides; "
                f"at most {MAX_PANES}"
            )
        return self


class RuleSelector(BaseModel):
    """Which devices a rule judges: those listed, or of the kinds, or with any of the tags (the
    API's registry); every device when all three are empty."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    devices: list[DeviceId] = Field(default_factory=list, max_length=10_000)
    kinds: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=100
    )
    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=100
    )

    @property
    def everyone(self) -> bool:
        return not (self.devices or self.kinds or self.tags)


class RuleSpec(BaseModel):
    """A rule as an operator writes it (the API's body, a ``rules apply`` file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: RuleId
    name: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    severity: Severity = "warning"
    select: RuleSelector = Field(default_factory=RuleSelector)
    when: Annotated[str, StringConstraints(min_length=1, max_length=MAX_CONDITION_CHARS)]
    """The condition, in Spark SQL: a boolean over one reading, or over the window's readings
    (aggregates) when :attr:`window` is set."""
    window: RuleWindow | None = None
    description: Annotated[str, StringConstraints(max_length=2_000)] = ""


class RuleRecord(RuleSpec):
    """A rule's version on the ``rules`` topic."""

    version: int = Field(ge=1)
    updated_ms: int
    devices: list[DeviceId] | None = None
    """The selection resolved by the API against its registry when it published this record:
    the devices judged, or ``None`` for every device."""


def rule_alert_id(device_id: str, metric: str, rule_id: str, start_ms: int) -> str:
    """The id of a rule's episode on a device from ``start_ms``: SHA-256 of the four, as hex,
    the first 24 digits — what Spark's ``sha2`` gives too, so the real-time query
    (:mod:`fleetwatch.streaming.rules.fast`) names the episode it opens as the scorer does."""
    key = "\x1f".join((device_id, metric, f"rule:{rule_id}", str(start_ms)))
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def rule_key(rule_id: str) -> str:
    return f"{RULE_KEY_PREFIX}{rule_id}"


def encode(record: RuleRecord) -> bytes:
    return record.model_dump_json(exclude_none=False).encode()


def decode(value: bytes | str) -> RuleRecord:
    """A ``rules`` record's value → the rule (bounded decoding; ``ValueError`` with the reason
    on a record that breaks the contract)."""
    return RuleRecord.model_validate(wire.loads(value))
