from typing import Literal

from fleetwatch.contracts.errors import FleetwatchError, PayloadError

RejectKind = Literal[
    "topic",
    "empty",
    "too_large",
    "json",
    "schema",
    "device_mismatch",
    "sent_before_event",
    "buffered_too_long",
    "clock_skew",
    "too_early",
    "ack_invalid",
    "rate_limited",
]
"""Why a reading or command ack was rejected, in a word: the dead-letter counter's label (a
bounded set; the reason itself, with the details, is in the dead letter's headers)."""


class IngestError(FleetwatchError):
    """The gateway cannot run (broker unreachable at start, bad configuration)."""


class PayloadRejected(PayloadError):
    """A message the gateway will not accept; it goes to the dead-letter topic with this reason."""

    def __init__(self, reason: str, kind: RejectKind) -> None:
        super().__init__(reason)
        self.kind: RejectKind = kind
