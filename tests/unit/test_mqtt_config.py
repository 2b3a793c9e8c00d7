"""MQTT TLS as settings: what they require and refuse, the one function that gives any paho
client its login and TLS, the local broker's TLS listener as the stack renders it, and that
every MQTT client of the package is set up through that function."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from pydantic import SecretStr, ValidationError

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.contracts.settings import MqttSettings, Settings
from fleetwatch.ingest.mqtt_client import BufferedClient
from fleetwatch.mqtt_config import configure, connect_failure, tls_context
from fleetwatch.stack.errors import StackError
from fleetwatch.stack.mosquitto import MosquittoBroker
from tests.tls_files import TestCA

PACKAGE = Path(__file__).resolve().parents[2] / "fleetwatch"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


def client() -> mqtt.Client:
    return mqtt.Client(CallbackAPIVersion.VERSION2, client_id="c", protocol=mqtt.MQTTv5)


def test_without_tls_a_client_gets_the_login_only() -> None:
    c = client()
    configure(c, MqttSettings().as_account("pump-7", "pw"))
    assert (c.username, c.password) == ("pump-7", "pw")
    assert not c._ssl
    anonymous = client()
    configure(anonymous, MqttSettings())
    assert anonymous.username is None
    assert not anonymous._ssl


def test_with_tls_a_client_verifies_the_broker_with_the_ca(ca: TestCA) -> None:
    settings = MqttSettings(tls=True, ca_file=ca.cert, port=8883).as_account("pump-7", "pw")
    c = BufferedClient(CallbackAPIVersion.VERSION2, client_id="c", protocol=mqtt.MQTTv5)
    configure(c, settings)
    assert c._ssl
    context = c._ssl_context
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert [cert["subject"] for cert in context.get_ca_certs()] == [
        ((("commonName", "fleetwatch test CA"),),)
    ]
    # one context per set of files, shared by every connection (the simulator opens many)
    other = client()
    configure(other, settings)
    assert other._ssl_context is context
    assert tls_context(MqttSettings(tls=True)) is not context  # the system's trust store


def test_a_client_certificate_is_loaded_with_its_key(ca: TestCA) -> None:
    issued = ca.client("pump-7")
    settings = MqttSettings(tls=True, ca_file=ca.cert, cert_file=issued.cert, key_file=issued.key)
    configure(client(), settings)  # loads and checks that the key is the certificate's
    wrong = ca.client("pump-8")
    mismatched = settings.model_copy(update={"key_file": wrong.key})
    with pytest.raises(ConfigurationError, match="mqtt TLS files unusable"):
        configure(client(), mismatched)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    settings = MqttSettings(tls=True, ca_file=tmp_path / "ca.crt")
    with pytest.raises(ConfigurationError, match=r"mqtt.ca_file .*ca.crt is not a file"):
        configure(client(), settings)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"ca_file": "/ca.crt"}, "mqtt.ca_file is set but mqtt.tls is off"),
        ({"server_cert_file": "/s.crt"}, "mqtt.server_cert_file is set but mqtt.tls is off"),
        ({"tls": True, "cert_file": "/c.crt"}, "mqtt.cert_file and mqtt.key_file go together"),
        (
            {"tls": True, "server_key_file": "/s.key"},
            "mqtt.server_cert_file and mqtt.server_key_file go together",
        ),
    ],
)
def test_settings_that_cannot_work_are_refused_at_start(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        MqttSettings.model_validate(fields)


def test_the_password_is_a_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLEETWATCH_MQTT__USERNAME", "fleetwatch-gateway")
    monkeypatch.setenv("FLEETWATCH_MQTT__PASSWORD", "s3cret")
    m = Settings().mqtt
    assert isinstance(m.password, SecretStr)
    assert "s3cret" not in repr(m) + m.model_dump_json()
    c = client()
    configure(c, m)
    assert c.password == "s3cret"


def test_a_broker_tls_refuses_is_named(ca: TestCA) -> None:
    settings = MqttSettings(host="broker.example", port=8883, tls=True, ca_file=ca.cert)
    untrusted = ssl.SSLCertVerificationError(1, "certificate verify failed")
    untrusted.verify_message = "unable to get local issuer certificate"
    said = connect_failure(untrusted, settings)
    assert "broker.example:8883 is not trusted" in said
    assert "unable to get local issuer certificate" in said
    assert str(ca.cert) in said
    no_ca = connect_failure(untrusted, MqttSettings(tls=True))
    assert "set mqtt.ca_file to the CA that signed it" in no_ca
    plain = connect_failure(ssl.SSLError(1, "[SSL] record layer failure"), settings)
    assert "is that port a TLS listener?" in plain
    refused = connect_failure(ConnectionRefusedError(111, "Connection refused"), settings)
    assert refused == "cannot reach MQTT at broker.example:8883: [Errno 111] Connection refused"


def test_the_local_broker_s_listener_is_tls_with_its_certificate(
    ca: TestCA, tmp_path: Path
) -> None:
    server = ca.server("broker", ["127.0.0.1", "localhost"])
    mqtt_settings = MqttSettings(
        port=8883,
        tls=True,
        ca_file=ca.cert,
        server_cert_file=server.cert,
        server_key_file=server.key,
    )
    lines = MosquittoBroker(Settings(run_dir=tmp_path, mqtt=mqtt_settings)).render_config()
    config = lines.splitlines()
    for port in (8883, 8884):  # the devices' listener and the stages'
        at = config.index(f"listener {port} 127.0.0.1")
        assert config[at + 1 : at + 3] == [
            f"certfile {server.cert.resolve()}",
            f"keyfile {server.key.resolve()}",
        ]
    plain = MosquittoBroker(Settings(run_dir=tmp_path)).render_config()
    assert "certfile" not in plain
    assert "keyfile" not in plain


def test_the_local_broker_will_not_start_tls_without_its_certificate(tmp_path: Path) -> None:
    broker = MosquittoBroker(Settings(run_dir=tmp_path, mqtt=MqttSettings(tls=True)))
    with pytest.raises(StackError, match=r"needs mqtt\.server_cert_file and mqtt\.server_key_file"):
        broker.start()
    missing = MqttSettings(
        tls=True, server_cert_file=tmp_path / "s.crt", server_key_file=tmp_path / "s.key"
    )
    with pytest.raises(StackError, match=r"mqtt.server_cert_file .*s.crt is not a file"):
        MosquittoBroker(Settings(run_dir=tmp_path, mqtt=missing)).start()
    assert not (tmp_path / "pids").exists()  # nothing started


def test_every_mqtt_client_of_the_package_is_set_up_from_the_settings() -> None:
    """A module that makes a paho client also calls :func:`configure` (the only place that
    sets a login or TLS): a client made without it would connect without either."""
    makes = re.compile(r"(mqtt\.Client|BufferedClient)\(\s*CallbackAPIVersion")
    sets_up_itself = re.compile(r"username_pw_set|tls_set")
    makers = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        name = path.relative_to(PACKAGE).as_posix()
        if name != "mqtt_config.py":
            assert not sets_up_itself.search(text), name
        if makes.search(text):
            makers.append(name)
            assert "configure(" in text, name
    assert sorted(makers) == [
        "ingest/broker_stats.py",
        "ingest/gateway.py",
        "simulator/publisher.py",
        "stack/mosquitto.py",
    ]
