"""What a simulated device does with a command, and the acknowledgement it sends back."""

from __future__ import annotations

import logging

from fleetwatch.contracts.commands import Command, CommandAck, parse_command
from fleetwatch.contracts.errors import PayloadError
from fleetwatch.simulator.engine import Fleet, Tick

logger = logging.getLogger(__name__)

MIN_INTERVAL_MS, MAX_INTERVAL_MS = 10, 24 * 3600 * 1000


def obey(fleet: Fleet, command: Command, now_ms: int, tick: Tick) -> CommandAck:
    """Apply ``command`` to its device; truth records it causes go to ``tick``."""
    p = fleet.position[command.device_id]
    device_ms = fleet.device_ms(p, now_ms)

    def ack(ok: bool, detail: str = "") -> CommandAck:
        status = "ok" if ok else "failed"
        return CommandAck(
            command_id=command.command_id, status=status, detail=detail, device_ms=device_ms
        )

    if command.name == "set_interval":
        interval = command.args.get("interval_ms")
        if not isinstance(interval, int) or isinstance(interval, bool):
            return ack(False, "set_interval needs an integer interval_ms")
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            return ack(False, f"interval_ms must be in [{MIN_INTERVAL_MS}, {MAX_INTERVAL_MS}]")
        fleet.set_interval(p, interval, now_ms)
        return ack(True, f"interval {interval} ms")
    if command.name == "reboot":
        silent_ms = round(fleet.scenario.reboot_s * 1000)
        fleet.reboot(p, now_ms, silent_ms)
        return ack(True, f"rebooting, back in {silent_ms} ms")
    if command.name == "calibrate":
        cleared = fleet.calibrate(p, tick)
        return ack(True, "drift cleared" if cleared else "nothing to correct")
    return ack(False, f"unknown command {command.name!r}")


def command_for(fleet: Fleet, device_id: str, payload: bytes) -> Command | None:
    """The command in a payload received on ``device_id``'s command topic, or None if unusable."""
    if device_id not in fleet.position:
        return None
    try:
        command = parse_command(payload)
    except PayloadError as exc:
        logger.warning("device %s ignores a malformed command: %s", device_id, exc)
        return None
    if command.device_id != device_id:
        logger.warning(
            "device %s ignores command %s addressed to %s",
            device_id,
            command.command_id,
            command.device_id,
        )
        return None
    return command
