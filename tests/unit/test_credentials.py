"""The local broker's credentials: Mosquitto's own hash format, the rendered ACL, issuing,
rotating and revoking device credentials, the service accounts, and who logs in as what."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from fleetwatch.cli.main import app
from fleetwatch.contracts.settings import MqttSettings, Settings
from fleetwatch.stack.credentials import (
    GATEWAY,
    SIMULATOR,
    Credentials,
    hash_password,
    login,
    render_acl,
)
from fleetwatch.stack.errors import StackError


def verify(hashed: str, password: str) -> bool:
    _, seven, iterations, salt, digest = hashed.split("$")
    assert seven == "7"
    again = hashlib.pbkdf2_hmac(
        "sha512", password.encode(), base64.b64decode(salt), int(iterations), 64
    )
    return base64.b64encode(again).decode() == digest


def test_a_hash_is_mosquitto_passwd_s_own_format(tmp_path: Path) -> None:
    binary = shutil.which("mosquitto_passwd")
    assert binary is not None, "mosquitto_passwd comes with the mosquitto package (make setup)"
    passwd = tmp_path / "passwd"
    passwd.touch()
    subprocess.run([binary, "-b", str(passwd), "alice", "s3cret"], check=True)
    theirs = passwd.read_text().strip().split(":", 1)[1]
    salt = base64.b64decode(theirs.split("$")[3])
    assert hash_password("s3cret", salt) == theirs
    assert verify(hash_password("other"), "other")
    assert not verify(hash_password("other"), "Other")


def test_the_acl_lets_devices_act_only_as_themselves_and_only_the_gateway_read_telemetry() -> None:
    acl = render_acl("devices").splitlines()
    gateway = acl[acl.index(f"user {GATEWAY}") : acl.index(f"user {SIMULATOR}")]
    sim = acl[acl.index(f"user {SIMULATOR}") : acl.index("# every device, as itself")]
    assert "topic read devices/+/telemetry" in gateway
    assert "topic read $SYS/#" in gateway
    assert "topic write devices/+/commands" in gateway
    assert not [line for line in sim if "read" in line and "telemetry" in line]
    assert "topic write devices/+/telemetry" in sim
    assert "pattern write devices/%u/telemetry" in acl
    assert "pattern read devices/%u/commands" in acl
    assert "pattern write +/+/%u/telemetry" in acl  # two-level roots too
    assert not [line for line in acl if line.startswith("pattern read") and "telemetry" in line]


def settings_in(tmp_path: Path) -> Settings:
    return Settings(_env_file=None, run_dir=tmp_path)


def test_issuing_rotating_and_revoking_a_device(tmp_path: Path) -> None:
    creds = Credentials(settings_in(tmp_path))
    creds.ensure()
    issued = creds.add("pump-7")
    assert issued.telemetry_topic == "devices/pump-7/telemetry"
    assert issued.commands_topic == "devices/pump-7/commands"
    lines = dict(line.split(":", 1) for line in creds.passwd.read_text().splitlines())
    assert set(lines) == {"pump-7"}  # the devices' listener knows no service account
    services = creds.services_passwd.read_text().splitlines()
    assert {line.split(":", 1)[0] for line in services} == {GATEWAY, SIMULATOR}
    assert verify(lines["pump-7"], issued.password)
    assert issued.password not in creds.passwd.read_text()  # kept hashed only
    with pytest.raises(StackError, match="has credentials already"):
        creds.add("pump-7")

    rotated = creds.rotate("pump-7")
    lines = dict(line.split(":", 1) for line in creds.passwd.read_text().splitlines())
    assert verify(lines["pump-7"], rotated.password)
    assert not verify(lines["pump-7"], issued.password)
    assert creds.devices() == ["pump-7"]

    creds.revoke("pump-7")
    assert creds.devices() == []
    for bad, match in (("pump-7", "has no credentials"), ("a/b", "not a valid device id")):
        with pytest.raises(StackError, match=match):
            creds.revoke(bad)
    with pytest.raises(StackError, match="service account"):
        creds.add(GATEWAY)
    for path in (creds.passwd, creds.services_passwd, creds.acl, creds.accounts):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_service_accounts_are_made_once_and_the_stages_log_in_with_them(
    tmp_path: Path,
) -> None:
    settings = settings_in(tmp_path)
    assert login(settings, "gateway").username is None  # no stack yet: anonymous
    creds = Credentials(settings)
    creds.ensure()
    first = json.loads(creds.accounts.read_text())
    creds.ensure()
    assert json.loads(creds.accounts.read_text()) == first
    gateway, sim = login(settings, "gateway"), login(settings, "sim")
    assert (gateway.username, gateway.password) == (GATEWAY, SecretStr(first[GATEWAY]))
    assert (sim.username, sim.password) == (SIMULATOR, SecretStr(first[SIMULATOR]))
    own = Settings(_env_file=None, run_dir=tmp_path, mqtt=MqttSettings(username="me", password="x"))
    assert (gateway.port, sim.port) == (1884, 1884)  # the stages' listener, port + 1
    assert login(own, "gateway").username == "me"
    assert login(own, "gateway").port == 1883  # a login of your own: the port you set
    elsewhere = MqttSettings(credentials_dir=creds.dir)
    other_run = Settings(_env_file=None, run_dir=tmp_path / "other", mqtt=elsewhere)
    assert login(other_run, "sim").password == SecretStr(first[SIMULATOR])


def test_a_run_dir_with_one_password_file_for_all_is_split(tmp_path: Path) -> None:
    creds = Credentials(settings_in(tmp_path))
    creds.dir.mkdir(parents=True)
    creds.passwd.write_text(f"{GATEWAY}:$7$101$x$y\n{SIMULATOR}:$7$101$x$z\npump-7:$7$101$a$b\n")
    creds.ensure()
    assert creds.passwd.read_text() == "pump-7:$7$101$a$b\n"
    services = creds.services_passwd.read_text()
    assert {line.split(":", 1)[0] for line in services.splitlines()} == {GATEWAY, SIMULATOR}


def test_a_password_file_of_your_own_is_left_alone(tmp_path: Path) -> None:
    own = tmp_path / "mine"
    own.write_text("dev-1:$7$101$x$y\n")
    settings = Settings(_env_file=None, run_dir=tmp_path, mqtt=MqttSettings(password_file=own))
    Credentials(settings).ensure()
    assert own.read_text() == "dev-1:$7$101$x$y\n"


def test_the_devices_command_issues_lists_rotates_and_revokes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(tmp_path))
    runner = CliRunner()
    added = runner.invoke(app, ["devices", "add", "pump-7", "--json"])
    assert added.exit_code == 0, added.output
    issued = json.loads(added.output.strip().splitlines()[-1])
    assert issued["device_id"] == "pump-7"
    assert issued["telemetry_topic"] == "devices/pump-7/telemetry"
    listed = runner.invoke(app, ["devices", "list"])
    assert listed.output.split() == ["pump-7"]
    again = runner.invoke(app, ["devices", "add", "pump-7"])
    assert again.exit_code == 1
    assert "use rotate" in again.output
    rotated = runner.invoke(app, ["devices", "rotate", "pump-7"])
    assert rotated.exit_code == 0
    assert "password" in rotated.output
    assert runner.invoke(app, ["devices", "revoke", "pump-7"]).exit_code == 0
    assert runner.invoke(app, ["devices", "list"]).output.split() == []
