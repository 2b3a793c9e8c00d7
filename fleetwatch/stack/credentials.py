"""MQTT credentials of the local broker: per-device accounts, the stages' service accounts, the
ACL, and telling a running broker about changes.

The local Mosquitto refuses anonymous clients unless ``mqtt.allow_anonymous`` is set. Its files
live in ``mqtt.credentials_dir`` (default ``{run_dir}/mqtt/``; ``mqtt.password_file`` and
``mqtt.acl_file`` name files of your own instead):

- ``passwd``: one ``user:$7$…`` line per device, Mosquitto's own PBKDF2-SHA512 format
  (:func:`hash_password`, checked against ``mosquitto_passwd`` in the tests); a device's
  password is printed once when issued and kept nowhere in plain text. The devices' listener
  reads it, and makes each login's client id its username;
- ``services.passwd``: the same for the service accounts, read by the stages' listener
  (``mqtt.services_port``) alone, so that no device can log in where client ids are chosen;
- ``acl``: rendered from the topic root (:func:`render_acl`): a device may publish only its own
  telemetry and acks and read only its own commands; only the gateway's account may read
  telemetry;
- ``accounts.json`` (mode 0600): the passwords of the two service accounts the local stack
  issues itself, :data:`GATEWAY` (reads telemetry, acks and ``$SYS``, writes commands) and
  :data:`SIMULATOR` (the simulator's shared connection and local tools: writes telemetry and
  acks, reads commands — a load generator's account, for a development stack; a fleet
  in production has device accounts only).

``fleetwatch devices add | list | revoke | rotate`` changes the files and sends the running
broker ``SIGHUP``, which makes Mosquitto read them again without dropping connections (a revoked
device is refused at its next connection).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fleetwatch.contracts.identifiers import is_device_id
from fleetwatch.contracts.settings import MqttSettings, Settings
from fleetwatch.stack.errors import StackError

GATEWAY = "fleetwatch-gateway"
SIMULATOR = "fleetwatch-sim"
SERVICES = (GATEWAY, SIMULATOR)
Role = Literal["gateway", "sim"]
_ACCOUNT: dict[Role, str] = {"gateway": GATEWAY, "sim": SIMULATOR}
ITERATIONS = 101
"""Mosquitto's own default for ``$7$`` (PBKDF2-SHA512) hashes."""


def hash_password(password: str, salt: bytes | None = None) -> str:
    """A ``passwd`` line's hash, as ``mosquitto_passwd`` writes it: ``$7$iterations$salt$hash``."""
    salt = secrets.token_bytes(12) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, ITERATIONS, 64)
    return f"$7${ITERATIONS}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def render_acl(root: str) -> str:
    """The ACL for topic root ``root``, and any root of one or two levels, so that
    environments (and the integration tests) can share a broker under roots of their own, such
    as ``staging/devices``."""
    roots = list(dict.fromkeys([root, "+", "+/+"]))
    lines = ["# rendered by fleetwatch from mqtt.root; edits are overwritten", ""]
    lines += [f"user {GATEWAY}", "topic read $SYS/#"]
    for r in roots:
        lines += [f"topic read {r}/+/telemetry", f"topic read {r}/+/acks"]
        lines += [f"topic write {r}/+/commands"]
    lines += ["", f"user {SIMULATOR}"]
    for r in roots:
        lines += [f"topic write {r}/+/telemetry", f"topic write {r}/+/acks"]
        lines += [f"topic read {r}/+/commands"]
    lines += ["", "# every device, as itself"]
    for r in roots:
        lines += [f"pattern write {r}/%u/telemetry", f"pattern write {r}/%u/acks"]
        lines += [f"pattern read {r}/%u/commands"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Issued:
    """What a device needs to connect."""

    device_id: str
    password: str
    host: str
    port: int
    telemetry_topic: str
    commands_topic: str
    acks_topic: str
    tls: bool
    """Whether the broker's listener is TLS: the device verifies it with the CA of ``ca_file``."""
    ca_file: str | None


class Credentials:
    """The local broker's credential files (see the module's docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        m = settings.mqtt
        self.dir = m.credentials_dir or settings.run_path / "mqtt"
        self.passwd = m.password_file or self.dir / "passwd"
        self.services_passwd = m.password_file or self.dir / "services.passwd"
        self.acl = m.acl_file or self.dir / "acl"
        self.accounts = self.dir / "accounts.json"

    @property
    def managed(self) -> bool:
        """Whether the password file is fleetwatch's own (not ``mqtt.password_file``)."""
        return self.settings.mqtt.password_file is None

    def ensure(self) -> None:
        """The service accounts and the ACL exist (the broker's start calls this). A password
        file of your own is left alone: the stages then log in with ``mqtt.username``."""
        if not self.managed:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        held = self.service_passwords()
        services = _read_lines(self.services_passwd)
        changed = False
        for user in SERVICES:
            if user not in held or user not in services:
                held[user] = secrets.token_urlsafe(24)
                services[user] = hash_password(held[user])
                changed = True
        if changed:
            self._write_accounts(held)
            _write_lines(self.services_passwd, services)
        devices = self._lines()
        if any(user in devices for user in SERVICES):  # a run dir of one password file for all
            _write_lines(self.passwd, {u: h for u, h in devices.items() if u not in SERVICES})
        elif not self.passwd.exists():
            _write_lines(self.passwd, {})
        if self.settings.mqtt.acl_file is None:
            _write_private(self.acl, render_acl(self.settings.mqtt.root))

    def service_passwords(self) -> dict[str, str]:
        try:
            held = json.loads(self.accounts.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise StackError(f"{self.accounts} is not JSON: {exc}") from exc
        return {str(k): str(v) for k, v in held.items()}

    def devices(self) -> list[str]:
        return sorted(u for u in self._lines() if u not in SERVICES)

    def add(self, device_id: str) -> Issued:
        _check_device(device_id)
        lines = self._lines()
        if device_id in lines:
            raise StackError(f"device {device_id!r} has credentials already; use rotate")
        return self._issue(device_id, lines)

    def rotate(self, device_id: str) -> Issued:
        _check_device(device_id)
        lines = self._lines()
        if device_id not in lines:
            raise StackError(f"device {device_id!r} has no credentials; use add")
        return self._issue(device_id, lines)

    def revoke(self, device_id: str) -> None:
        _check_device(device_id)
        lines = self._lines()
        if lines.pop(device_id, None) is None:
            raise StackError(f"device {device_id!r} has no credentials")
        self._write_lines(lines)

    def issue_file(self, device_ids: list[str], path: Path) -> Path:
        """Fresh credentials for ``device_ids`` (issued, or rotated when they have some), written
        to ``path`` (mode 0600) as the ``device_id:password`` lines ``fleetwatch sim run
        --credentials`` reads: a simulated fleet that logs in as real devices do."""
        lines = self._lines()
        issued = []
        for device_id in device_ids:
            _check_device(device_id)
            password = secrets.token_urlsafe(24)
            lines[device_id] = hash_password(password)
            issued.append(f"{device_id}:{password}\n")
        self._write_lines(lines)
        _write_private(path, "".join(issued))
        return path

    def _issue(self, device_id: str, lines: dict[str, str]) -> Issued:
        password = secrets.token_urlsafe(24)
        lines[device_id] = hash_password(password)
        self._write_lines(lines)
        m = self.settings.mqtt
        return Issued(
            device_id,
            password,
            m.host,
            m.port,
            m.telemetry_topic(device_id),
            m.commands_topic(device_id),
            m.acks_topic(device_id),
            m.tls,
            str(m.ca_file) if m.ca_file else None,
        )

    def _lines(self) -> dict[str, str]:
        return _read_lines(self.passwd)

    def _write_lines(self, lines: dict[str, str]) -> None:
        _write_lines(self.passwd, lines)

    def _write_accounts(self, held: dict[str, str]) -> None:
        _write_private(self.accounts, json.dumps(held, indent=1, sort_keys=True) + "\n")


def login(settings: Settings, role: Role) -> MqttSettings:
    """``settings.mqtt`` with the credentials a stage logs in with: its own when set
    (``mqtt.username`` / ``mqtt.password``), else the local stack's account for ``role`` on the
    stages' listener (``mqtt.services_port``), else none (an anonymous broker). A client is
    given them, and TLS, by :func:`fleetwatch.mqtt_config.configure`."""
    m = settings.mqtt
    if m.username:
        return m
    password = Credentials(settings).service_passwords().get(_ACCOUNT[role])
    if password is None:
        return m
    account = m.as_account(_ACCOUNT[role], password)
    return account.model_copy(update={"port": m.services_port})


def reload_broker(pid: int | None) -> bool:
    """Tell a running broker to read its password file and ACL again (``SIGHUP``)."""
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        return False
    return True


def _check_device(device_id: str) -> None:
    if not is_device_id(device_id):
        raise StackError(f"{device_id!r} is not a valid device id")
    if device_id in SERVICES:
        raise StackError(f"{device_id!r} is a service account's name")


def _read_lines(path: Path) -> dict[str, str]:
    """A password file's ``user`` → hash."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        user, sep, hashed = line.partition(":")
        if sep and user and not user.startswith("#"):
            out[user] = hashed
    return out


def _write_lines(path: Path, lines: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, "".join(f"{u}:{h}\n" for u, h in sorted(lines.items())))


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by its owner only, replacing the file whole."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
