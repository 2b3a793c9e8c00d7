"""Each simulated device logs in with its own credentials on a broker that requires them."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.stack.mosquitto import mosquitto_binary
from tests.integration.conftest import free_port
from tests.integration.mqtt_watch import Watcher
from tests.polling import wait_until

DEVICES = {"sec-0000": "first-secret", "sec-0001": "second-secret"}


@pytest.fixture
def secure_broker(tmp_path: Path) -> Iterator[int]:
    binary, passwd = mosquitto_binary(), shutil.which("mosquitto_passwd")
    if binary is None or passwd is None:
        pytest.skip("mosquitto and mosquitto_passwd are needed")
    accounts = {**DEVICES, "watcher": "watch-secret"}
    password_file = tmp_path / "passwd"
    password_file.write_text("".join(f"{u}:{p}\n" for u, p in accounts.items()))
    subprocess.run([passwd, "-U", str(password_file)], check=True)
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous false\npassword_file {password_file}\n"
        f"user {getpass.getuser()}\nlog_dest file {tmp_path / 'broker.log'}\n"
    )
    with (tmp_path / "mosquitto.log").open("wb") as log:
        proc = subprocess.Popen([binary, "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


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


def test_each_device_authenticates_with_its_own_credentials(
    secure_broker: int, tmp_path: Path
) -> None:
    port = secure_broker
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


def test_wrong_or_missing_credentials_are_refused(secure_broker: int, tmp_path: Path) -> None:
    wait_until(lambda: _connect(secure_broker), 10, "the broker to start")
    creds = tmp_path / "devices.txt"
    creds.write_text("sec-0000:first-secret\nsec-0001:wrong\n")
    wrong = sim(secure_broker, tmp_path, "--credentials", str(creds))
    assert wrong.returncode == 1
    assert "refused 'sec-0001'" in wrong.stderr
    anonymous = sim(secure_broker, tmp_path)
    assert anonymous.returncode == 1
    assert "refused" in anonymous.stderr


def _log(tmp_path: Path) -> str:
    path = tmp_path / "broker.log"
    return path.read_text() if path.exists() else ""


def _connect(port: int) -> Watcher | None:
    try:
        return Watcher(port, ["devices/+/telemetry"], "watcher", "watch-secret")
    except OSError:
        return None
