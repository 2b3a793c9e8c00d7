"""Simulated devices obey their command topics on the real Mosquitto and ack with the id."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.contracts.commands import Command
from fleetwatch.stack.credentials import login
from tests.integration.conftest import Isolated
from tests.integration.mqtt_watch import Watcher
from tests.polling import wait_until


@pytest.fixture
def watcher(isolated: Isolated) -> Iterator[Watcher]:
    root = isolated.mqtt_root
    gateway = login(isolated.settings, "gateway")  # the account that may read telemetry
    w = Watcher(gateway, [f"{root}/+/acks", f"{root}/+/telemetry"])
    wait_until(w.subscribed.is_set, 10, "the watcher to subscribe")
    yield w
    w.close()


def test_devices_obey_commands_and_ack_them(
    isolated: Isolated, watcher: Watcher, tmp_path: Path
) -> None:
    scenario = tmp_path / "s.toml"
    # Gaussian noise: no sampling jitter, so readings come exactly at the interval set
    scenario.write_text('reboot_s = 1.5\nnoise = "gaussian"\n')
    device = f"c{isolated.tag}-0001"
    isolated.start(
        "sim",
        "sim",
        "run",
        "--scenario",
        str(scenario),
        "--devices",
        "2",
        "--rate",
        "2",
        "--prefix",
        f"c{isolated.tag}",
        "--quiet",
    )
    telemetry = f"/{device}/telemetry"
    wait_until(lambda: len(watcher.on(telemetry)) >= 2, 30, "the device to report")

    def send(name: str, **args: Any) -> dict[str, Any]:
        cmd = Command(command_id=f"id-{name}", device_id=device, name=name, args=args, issued_ms=1)
        watcher.publish(f"{isolated.mqtt_root}/{device}/commands", cmd.model_dump_json().encode())
        acks = wait_until(
            lambda: [
                m for _, m in watcher.on(f"/{device}/acks") if m["command_id"] == cmd.command_id
            ],
            20,
            f"the ack of {name}",
        )
        assert len(acks) == 1
        return acks[0]

    dance = send("dance")
    assert (dance["status"], dance["detail"]) == ("failed", "unknown command 'dance'")

    ack = send("set_interval", interval_ms=100)
    assert ack["status"] == "ok"

    def after(since: int) -> list[int]:
        return sorted(m["ts"] for _, m in watcher.on(telemetry) if m["ts"] > since)

    wait_until(lambda: len(after(ack["device_ms"])) >= 10, 20, "readings at the new interval")
    ts = after(ack["device_ms"])
    assert {b - a for a, b in itertools.pairwise(ts[1:])} == {100}

    reboot = send("reboot")
    assert reboot["status"] == "ok"
    wait_until(lambda: after(reboot["device_ms"]), 20, "the device to come back after rebooting")
    first_back = after(reboot["device_ms"])[0]
    assert first_back - reboot["device_ms"] >= 1500, "silent while rebooting"

    calibrate = send("calibrate")
    assert (calibrate["status"], calibrate["detail"]) == ("ok", "nothing to correct")
    other = f"/c{isolated.tag}-0000/acks"
    assert watcher.on(other) == [], "only the addressed device answers"
