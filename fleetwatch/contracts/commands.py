"""The command wire contract, version 1.

A command travels API → ``device.commands`` (Kafka, key = device id) → gateway →
``{root}/{device_id}/commands`` (MQTT, QoS 1) as::

    {"v": 1, "command_id": "c-7f3a", "device_id": "pump-7", "name": "set_interval",
     "args": {"interval_ms": 500}, "issued_ms": 1763750000000}

The device answers on ``{root}/{device_id}/acks`` and the gateway appends the answer to
``device.command-acks`` (key = device id)::

    {"v": 1, "command_id": "c-7f3a", "status": "ok", "detail": "", "device_ms": 1763750000120}

``status`` is ``ok`` or ``failed`` (``detail`` says why, e.g. ``unknown command 'dance'``).
Known names: ``set_interval`` (args ``interval_ms``), ``reboot``, ``calibrate``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fleetwatch.contracts.errors import PayloadError
from fleetwatch.contracts.identifiers import DeviceId
from fleetwatch.contracts.telemetry import EpochMs, first_problem

SCHEMA_VERSION = 1
KNOWN_COMMANDS = frozenset({"set_interval", "reboot", "calibrate"})

CommandId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]


class Command(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Annotated[int, Field(ge=1, le=SCHEMA_VERSION)] = SCHEMA_VERSION
    command_id: CommandId
    device_id: DeviceId
    name: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
    args: dict[str, Any] = {}
    issued_ms: EpochMs


class CommandAck(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Annotated[int, Field(ge=1, le=SCHEMA_VERSION)] = SCHEMA_VERSION
    command_id: CommandId
    status: Literal["ok", "failed"]
    detail: Annotated[str, StringConstraints(max_length=512)] = ""
    device_ms: EpochMs


def parse_command(payload: bytes | bytearray) -> Command:
    try:
        return Command.model_validate_json(payload)
    except ValidationError as exc:
        raise PayloadError(first_problem(exc)) from exc


def parse_ack(payload: bytes | bytearray) -> CommandAck:
    try:
        return CommandAck.model_validate_json(payload)
    except ValidationError as exc:
        raise PayloadError(first_problem(exc)) from exc
