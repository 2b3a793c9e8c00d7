"""The local Mosquitto broker (Debian package) on loopback."""

from __future__ import annotations

import getpass
import shutil
import ssl
import threading
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from fleetwatch.contracts.settings import Settings
from fleetwatch.mqtt_config import configure, connect_failure
from fleetwatch.stack.credentials import Credentials, login, reload_broker
from fleetwatch.stack.processes import StackService, port_in_use

BROKER_PAYLOAD_FACTOR = 4
"""The broker's ``max_packet_size`` is this many times ``gateway.max_payload_bytes``. Below it
an oversized payload still reaches the gateway, which dead-letters it with its device and
reason where the operator sees it; above it (1 MiB by default) the broker disconnects the
publisher with reason 0x95 "packet too large" (MQTT v5 clients are told the limit when they
connect), so no one message holds more of the broker's or the gateway's memory."""
MAX_QUEUED_MESSAGES = 1_000_000
"""QoS 1 messages the broker queues for one client (the gateway, behind a Kafka outage)."""
MAX_QUEUED_BYTES = 256 * 1024 * 1024
"""Bytes the broker queues for one client: a quarter of the broker's memory limit (1 GiB in
deploy/k8s/mosquitto.yaml) for the gateway's one session, the rest for devices' sessions and
messages in flight. A million readings (120-250 bytes each) fit; a flood of padded messages
stops here instead of at the broker's memory. Run more gateway workers, give the broker more."""


def max_packet_size(settings: Settings) -> int:
    return BROKER_PAYLOAD_FACTOR * settings.gateway.max_payload_bytes


def mosquitto_binary() -> str | None:
    found = shutil.which("mosquitto")
    if found:
        return found
    return "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None


class MosquittoBroker(StackService):
    name = "mosquitto"
    config_name = "mosquitto.conf"

    def render_config(self) -> str:
        """Two listeners on loopback: the devices' on ``mqtt.port``, where a login's client id
        is its username (no device can present a stage's client id and take its session), and
        the stages' on ``mqtt.services_port``, where only the service accounts log in. Queues
        are sized so that a slow gateway loses nothing a device sent at QoS 1; persistence
        keeps the gateway's persistent session across a broker restart."""
        m = self.settings.mqtt
        # with mqtt.tls, both listeners are TLS (1.2 and later, Mosquitto's default) and ask
        # clients for no certificate
        tls = [f"{key} {path}" for key, path in self._tls_files().items()]
        devices, services = ["allow_anonymous true"], ["allow_anonymous true"]
        if not m.allow_anonymous:
            files = Credentials(self.settings)
            acl = [f"acl_file {files.acl.resolve()}"] if files.managed or m.acl_file else []
            devices = [
                "use_username_as_clientid true",
                "allow_anonymous false",
                f"password_file {files.passwd.resolve()}",
                *acl,
            ]
            services = [
                "allow_anonymous false",
                f"password_file {files.services_passwd.resolve()}",
                *acl,
            ]
        return "\n".join(
            [
                "per_listener_settings true",
                f"listener {m.port} 127.0.0.1",
                *tls,
                *devices,
                f"listener {m.services_port} 127.0.0.1",
                *tls,
                *services,
                f"user {getpass.getuser()}",
                "persistence true",
                f"persistence_location {self.dir}/",
                "autosave_interval 10",
                # its own log file: stdout is block-buffered when not a terminal
                f"log_dest file {self.proc.log_file}",
                "log_type error",
                "log_type warning",
                "log_type notice",
                "log_timestamp_format %Y-%m-%dT%H:%M:%S",
                f"max_packet_size {max_packet_size(self.settings)}",
                f"max_queued_messages {MAX_QUEUED_MESSAGES}",
                f"max_queued_bytes {MAX_QUEUED_BYTES}",
                "max_inflight_messages 1000",
                "persistent_client_expiration 7d",
                "",
            ]
        )

    def _tls_files(self) -> dict[str, Path]:
        """Mosquitto's ``certfile`` and ``keyfile`` with ``mqtt.tls`` (none without)."""
        m = self.settings.mqtt
        if not m.tls:
            return {}
        if m.server_cert_file is None or m.server_key_file is None:
            raise self.proc.fail(
                "mqtt.tls: the local broker's TLS listener needs mqtt.server_cert_file and "
                f"mqtt.server_key_file (a certificate for {m.host}); or point mqtt.host at a "
                "broker of your own"
            )
        for name, path in (
            ("server_cert_file", m.server_cert_file),
            ("server_key_file", m.server_key_file),
        ):
            if not path.is_file():
                raise self.proc.fail(f"mqtt.{name} {path} is not a file")
        return {"certfile": m.server_cert_file.resolve(), "keyfile": m.server_key_file.resolve()}

    def start(self) -> bool:
        if self.proc.running():
            return False
        binary = mosquitto_binary()
        if binary is None:
            raise self.proc.fail(
                "mosquitto is not installed; run `make setup` (apt-get install mosquitto)"
            )
        self._tls_files()  # refused before anything starts
        m = self.settings.mqtt
        for port, name in ((m.port, "PORT"), (m.services_port, "SERVICE_PORT")):
            if port_in_use("127.0.0.1", port):
                raise self.proc.fail(
                    f"port {port} is already in use by another process; "
                    f"stop it or set FLEETWATCH_MQTT__{name}"
                )
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.settings.mqtt.allow_anonymous:
            Credentials(self.settings).ensure()
        self.config_file.write_text(self.render_config())
        self.proc.start([binary, "-c", str(self.config_file)])
        return True

    def reload(self) -> bool:
        """Make the running broker read its password file and ACL again."""
        return reload_broker(self.proc.pid())

    def ready(self) -> bool:
        """Whether the broker answers a connection (with the gateway's account when the stack
        issued one; a refusal is an answer too: a broker of your own password file)."""
        connected = threading.Event()
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="", protocol=mqtt.MQTTv5)
        m = login(self.settings, "gateway")
        configure(client, m)
        client.on_connect = lambda *args: connected.set()
        try:
            client.connect(m.host, m.port, keepalive=5)
        except ssl.SSLCertVerificationError as exc:
            raise self.proc.fail(connect_failure(exc, m)) from exc  # no retry mends it
        except (TimeoutError, OSError):
            return False
        client.loop_start()
        try:
            return connected.wait(2.0)
        finally:
            client.disconnect()
            client.loop_stop()

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        self.proc.wait_ready(self.ready, timeout_s, 0.2)
