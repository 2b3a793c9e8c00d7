"""Each simulated device logs in with its own credentials on a broker that requires them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.contracts.settings import MqttSettings
from tests.integration.mqtt_watch import Watcher
from tests.integration.secure_broker import secure_broker
from tests.polling import wait_until

DEVICES = {"sec-0000": "first-secret", "sec-0001": "second-secret"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[int]:
    with secure_broker(tmp_path, {**DEVICES, "watcher": "watch-secret"}) as port:
        yield port


def sim(port: int, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update({"FLEETWATCH_MQTT__PORT": str(port), "FLEETWATCH_RUN_DIR": str(tmp_path)})
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetwatch.cli.main",
            "sim",
            "run",
            "--devices",
            "2",
            "--count",
            "5",
            "--rate",
            "20",
            "--prefix",
            "sec",
            "--quiet",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_each_device_authenticates_with_its_own_credentials(broker: int, tmp_path: Path) -> None:
    port = broker
    watcher = wait_until(
        lambda: _connect(port), 10, "the broker to accept the watcher's credentials"
    )
    assert watcher is not None
    try:
        wait_until(watcher.subscribed.is_set, 10, "the watcher to subscribe")
        creds = tmp_path / "devices.txt"
        creds.write_text("".join(f"{u}:{p}\n" for u, p in DEVICES.items()))
        result = sim(port, tmp_path, "--credentials", str(creds))
        assert result.returncode == 0, result.stderr
        wait_until(lambda: len(watcher.on("/telemetry")) == 10, 10, "10 readings")
        assert {t.split("/")[1] for t, _ in watcher.on("/telemetry")} == set(DEVICES)
        for user in DEVICES:  # the broker logs each login: client id and username
            wait_until(
                lambda u=user: f"as {u} (p2, c1, k30, u'{u}')" in _log(tmp_path),  # type: ignore[misc]
                10,
                f"{user} to log in as itself",
            )
    finally:
        watcher.close()


def test_wrong_or_missing_credentials_are_refused(broker: int, tmp_path: Path) -> None:
    wait_until(lambda: _connect(broker), 10, "the broker to start")
    creds = tmp_path / "devices.txt"
    creds.write_text("sec-0000:first-secret\nsec-0001:wrong\n")
    wrong = sim(broker, tmp_path, "--credentials", str(creds))
    assert wrong.returncode == 1
    assert "refused 'sec-0001'" in wrong.stderr
    anonymous = sim(broker, tmp_path)
    assert anonymous.returncode == 1
    assert "refused" in anonymous.stderr


def _log(tmp_path: Path) -> str:
    path = tmp_path / "run" / "logs" / "mosquitto.log"  # the stack's broker logs logins
    return path.read_text() if path.exists() else ""


def _connect(port: int) -> Watcher | None:
    try:
        watcher = MqttSettings(port=port).as_account("watcher", "watch-secret")
        return Watcher(watcher, ["devices/+/telemetry"])
    except OSError:
        return None
