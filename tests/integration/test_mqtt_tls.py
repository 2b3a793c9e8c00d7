"""MQTT over TLS, end to end, on a broker of the stack's own configuration with a TLS listener
(a CA and a server certificate for 127.0.0.1 and localhost, made for the test): a device with
the CA and its credentials publishes over TLS and the gateway, configured for TLS, delivers the
reading to Kafka; a client without the CA is refused with an error that says why; a plain MQTT
connection to the TLS port gets nowhere."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from fleetwatch.contracts.settings import MqttSettings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.mqtt_config import configure, connect_failure
from fleetwatch.stack.credentials import GATEWAY, render_acl
from tests.integration.conftest import Isolated, fleetwatch, free_port
from tests.integration.secure_broker import secure_broker
from tests.polling import wait_until
from tests.tls_files import TestCA

DEVICE, DEVICE_PASSWORD = "tls-0000", "device-secret"
"""A device of the simulator (prefix ``tls``)."""
PROBE = "tls-probe"
"""A device of the test's own, with the same password."""
GATEWAY_PASSWORD = "gateway-secret"


@dataclass(frozen=True)
class TlsBroker:
    port: int
    ca: TestCA
    services_port: int
    """The stages' listener, where the gateway logs in (on the devices' listener a login's
    client id is its username, which the gateway's workers and its broker-stats client share)."""

    def device(self, root: str, device_id: str = DEVICE) -> MqttSettings:
        """A device's settings: TLS with the test CA, its own login."""
        mqtt_settings = MqttSettings(port=self.port, root=root, tls=True, ca_file=self.ca.cert)
        return mqtt_settings.as_account(device_id, DEVICE_PASSWORD)

    def env(self, isolated: Isolated, **changes: str) -> dict[str, str]:
        """The isolated test's environment, for a gateway of this broker (TLS, the CA)."""
        env = isolated.env | {
            "FLEETWATCH_MQTT__PORT": str(self.services_port),
            "FLEETWATCH_MQTT__TLS": "true",
            "FLEETWATCH_MQTT__CA_FILE": str(self.ca.cert),
            "FLEETWATCH_MQTT__USERNAME": GATEWAY,
            "FLEETWATCH_MQTT__PASSWORD": GATEWAY_PASSWORD,
        }
        return env | changes


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[TlsBroker]:
    ca = TestCA(tmp_path / "ca")
    server = ca.server("mosquitto", ["127.0.0.1", "localhost"])
    acl = tmp_path / "acl"
    acl.write_text(render_acl("devices"))  # and every root of two levels: the tests' own
    accounts = {DEVICE: DEVICE_PASSWORD, PROBE: DEVICE_PASSWORD, GATEWAY: GATEWAY_PASSWORD}
    (tmp_path / "broker").mkdir()
    services = free_port()
    with secure_broker(
        tmp_path / "broker",
        accounts,
        acl,
        service_port=services,
        tls=True,
        ca_file=ca.cert,
        server_cert_file=server.cert,
        server_key_file=server.key,
    ) as port:
        yield TlsBroker(port, ca, services)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_devices_publish_over_tls_and_the_gateway_delivers_to_kafka(
    isolated: Isolated, tls_broker: TlsBroker, tmp_path: Path
) -> None:
    isolated.start("gateway", "gateway", env=tls_broker.env(isolated))
    raw = isolated.topics.telemetry_raw
    kafka = isolated.consumer()
    kafka.subscribe([raw])
    readings: list[dict[str, Any]] = []

    def arrived(device_id: str) -> int:
        readings.extend(json.loads(m.value() or b"") for m in kafka.consume(100, timeout=0.5))
        return sum(1 for r in readings if r["device_id"] == device_id)

    # a device of its own (paho, set up by configure): it publishes until the gateway is
    # subscribed (the broker drops what has no subscriber yet)
    device = tls_broker.device(isolated.mqtt_root, PROBE)
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=PROBE, protocol=mqtt.MQTTv5)
    configure(client, device)
    client.connect(device.host, device.port)
    client.loop_start()

    def delivered() -> int:
        now = now_ms()
        reading = reading_payload(now, now, now, {"t": 21.5})
        client.publish(device.telemetry_topic(PROBE), reading, qos=1).wait_for_publish(10)
        return arrived(PROBE)

    try:
        wait_until(delivered, 60, "a reading over TLS to reach Kafka", interval_s=0.5)
        connection = client.socket()
        assert isinstance(connection, ssl.SSLSocket)
        assert connection.version() in {"TLSv1.2", "TLSv1.3"}
    finally:
        client.disconnect()
        client.loop_stop()

    # the simulator's devices too: a connection each, driven by the publishing loop
    credentials = tmp_path / "devices.txt"
    credentials.write_text(f"{DEVICE}:{DEVICE_PASSWORD}\n")
    sim = fleetwatch(
        "sim",
        "run",
        *("--devices", "1", "--count", "5", "--rate", "20", "--prefix", "tls", "--quiet"),
        *("--credentials", str(credentials)),
        env=tls_broker.env(isolated, FLEETWATCH_MQTT__PORT=str(tls_broker.port)),  # a device's
        timeout=60,
    )
    assert sim.returncode == 0, sim.stderr
    try:
        wait_until(lambda: arrived(DEVICE) >= 5, 30, "the simulated readings to reach Kafka")
        assert arrived(DEVICE) == 5
    finally:
        kafka.close()
    assert {r["device_id"] for r in readings} == {PROBE, DEVICE}
    assert all(r["metrics"] == {"t": 21.5} for r in readings if r["device_id"] == PROBE)
    dead = isolated.topics.telemetry_deadletter
    assert sum(isolated.end_offsets(dead).values()) == 0


def test_a_client_without_the_ca_is_refused_with_a_clear_error(
    isolated: Isolated, tls_broker: TlsBroker, tmp_path: Path
) -> None:
    # TLS, but with the system's trust store: the test CA is not in it
    untrusting = tls_broker.device(isolated.mqtt_root).model_copy(update={"ca_file": None})
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=DEVICE, protocol=mqtt.MQTTv5)
    configure(client, untrusting)
    with pytest.raises(ssl.SSLCertVerificationError) as refused:
        client.connect(untrusting.host, untrusting.port)
    said = connect_failure(refused.value, untrusting)
    where = f"127.0.0.1:{tls_broker.port}"
    assert f"the MQTT broker at {where} is not trusted" in said
    assert "set mqtt.ca_file to the CA that signed it" in said

    # as an operator meets it: the gateway, and a device of the simulator, stop at start
    no_ca = {"FLEETWATCH_MQTT__CA_FILE": "none", "FLEETWATCH_GATEWAY__METRICS_PORT": "0"}
    gateway = fleetwatch("gateway", env=tls_broker.env(isolated, **no_ca), timeout=60)
    assert gateway.returncode == 1, gateway.stderr
    stages = f"127.0.0.1:{tls_broker.services_port}"  # the gateway's listener
    assert f"the MQTT broker at {stages} is not trusted" in gateway.stderr
    assert "unable to get local issuer certificate" in gateway.stderr
    credentials = tmp_path / "devices.txt"
    credentials.write_text(f"{DEVICE}:{DEVICE_PASSWORD}\n")
    args = ("--devices", "1", "--count", "1", "--prefix", "tls", "--quiet")
    device = fleetwatch(
        "sim",
        "run",
        *args,
        "--credentials",
        str(credentials),
        env=tls_broker.env(isolated, FLEETWATCH_MQTT__PORT=str(tls_broker.port), **no_ca),
        timeout=60,
    )
    assert device.returncode == 1, device.stderr
    assert f"the MQTT broker at {where} is not trusted" in device.stderr


def test_plain_mqtt_to_the_tls_port_gets_nowhere(tls_broker: TlsBroker) -> None:
    plain = MqttSettings(port=tls_broker.port).as_account(DEVICE, DEVICE_PASSWORD)
    answered, dropped = threading.Event(), threading.Event()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=DEVICE, protocol=mqtt.MQTTv5)
    configure(client, plain)

    def on_connect(*_: Any) -> None:
        answered.set()

    def on_disconnect(*_: Any) -> None:
        dropped.set()

    client.on_connect = on_connect
    client.on_disconnect = on_disconnect
    client.connect(plain.host, plain.port)  # TCP is accepted; MQTT in the clear is not
    client.loop_start()
    try:
        wait_until(dropped.is_set, 10, "the broker to drop the plain connection")
        assert not answered.is_set()  # no CONNACK, not even a refusal
    finally:
        client.loop_stop()
