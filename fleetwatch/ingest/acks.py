"""Device acknowledgements of commands (MQTT ``{root}/{id}/acks``) → ``device.command-acks``."""

from __future__ import annotations

import json

from fleetwatch.contracts.commands import parse_ack
from fleetwatch.contracts.errors import PayloadError
from fleetwatch.ingest.accept import Accepted, DeadLetter, Outcome, dead_letter, device_from_topic
from fleetwatch.ingest.errors import PayloadRejected, RejectKind


def handle_ack(topic: str, payload: bytes | bytearray, received_ms: int, root: str) -> Outcome:
    """A valid ack becomes a record keyed by device id, stamped with the gateway receive time."""
    outcome = Outcome()
    try:
        device_id = device_from_topic(topic, root, channel="acks")
        ack = parse_ack(payload)
    except (PayloadRejected, PayloadError) as exc:
        kind: RejectKind = exc.kind if isinstance(exc, PayloadRejected) else "ack_invalid"
        reason = f"command ack: {exc}"
        dl: DeadLetter = dead_letter(topic, payload, received_ms, reason, root, {kind: 1})
        outcome.rejected.append(dl)
        return outcome
    body = {**ack.model_dump(), "device_id": device_id, "received_ms": received_ms}
    value = json.dumps(body, separators=(",", ":")).encode()
    outcome.accepted.append(Accepted(device_id.encode(), value, received_ms, 0))
    return outcome
