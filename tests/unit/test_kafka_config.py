"""Kafka security as settings: what each protocol requires and refuses, the one rendering for
confluent-kafka (librdkafka) and the one for Spark's Kafka source and sink (the Java client),
and that every Kafka client of the package is configured through them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from pydantic import SecretStr, ValidationError

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.contracts.settings import KafkaSettings, Settings
from fleetwatch.kafka_config import client_config, jaas_config, spark_options
from fleetwatch.stack.errors import StackError
from fleetwatch.stack.kafka import KafkaBroker
from tests.tls_files import TestCA

PACKAGE = Path(__file__).resolve().parents[2] / "fleetwatch"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def client_pem(ca: TestCA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ca.client("fleetwatch").combined(tmp_path_factory.mktemp("client") / "client.pem")


def sasl_ssl(ca: TestCA, client_pem: Path | None = None, **changes: object) -> KafkaSettings:
    fields: dict[str, object] = {
        "bootstrap_servers": "k1:9093,k2:9093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "fleetwatch",
        "sasl_password": "s3cret",
        "ssl_ca_file": ca.cert,
        "ssl_client_cert_file": client_pem,
    }
    return KafkaSettings.model_validate(fields | changes)


def test_plaintext_renders_the_bootstrap_servers_alone_as_before() -> None:
    kafka = KafkaSettings()
    assert client_config(kafka) == {"bootstrap.servers": "127.0.0.1:9092"}
    assert client_config(kafka, {"group.id": "g", "acks": "all"}) == {
        "bootstrap.servers": "127.0.0.1:9092",
        "group.id": "g",
        "acks": "all",
    }
    assert spark_options(kafka) == {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_sasl_ssl_for_confluent_kafka(ca: TestCA, client_pem: Path) -> None:
    config = client_config(sasl_ssl(ca, client_pem), {"group.id": "g"})
    assert config == {
        "bootstrap.servers": "k1:9093,k2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "fleetwatch",
        "sasl.password": "s3cret",
        "ssl.ca.location": str(ca.cert),
        "ssl.certificate.location": str(client_pem),
        "ssl.key.location": str(client_pem),
        "group.id": "g",
    }


def test_sasl_ssl_for_spark(ca: TestCA, client_pem: Path) -> None:
    assert spark_options(sasl_ssl(ca, client_pem)) == {
        "kafka.bootstrap.servers": "k1:9093,k2:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="fleetwatch" password="s3cret";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca.cert),
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.location": str(client_pem),
    }


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
        ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
def test_each_mechanism_has_its_login_module(mechanism: str, module: str, ca: TestCA) -> None:
    kafka = sasl_ssl(ca, sasl_mechanism=mechanism)
    assert jaas_config(kafka).startswith(f"{module} required ")
    assert client_config(kafka)["sasl.mechanisms"] == mechanism
    assert spark_options(kafka)["kafka.sasl.mechanism"] == mechanism


def test_quotes_and_backslashes_in_the_account_are_escaped_for_jaas(ca: TestCA) -> None:
    kafka = sasl_ssl(ca, sasl_username='a"b', sasl_password='p\\w"d;')
    assert jaas_config(kafka).endswith(' required username="a\\"b" password="p\\\\w\\"d;";')


def test_sasl_plaintext_and_ssl_alone(ca: TestCA) -> None:
    plain = KafkaSettings(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="u",
        sasl_password=SecretStr("p"),
    )
    assert "ssl.ca.location" not in client_config(plain)
    assert spark_options(plain)["kafka.security.protocol"] == "SASL_PLAINTEXT"
    tls = KafkaSettings(security_protocol="SSL", ssl_ca_file=ca.cert)
    assert client_config(tls) == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca.cert),
    }
    assert "kafka.sasl.jaas.config" not in spark_options(tls)
    # no CA file: the system's trust store (librdkafka's, the JVM's)
    system = KafkaSettings(security_protocol="SSL")
    assert set(client_config(system)) == {"bootstrap.servers", "security.protocol"}
    assert set(spark_options(system)) == {"kafka.bootstrap.servers", "kafka.security.protocol"}


def test_librdkafka_takes_the_rendered_configuration(ca: TestCA, client_pem: Path) -> None:
    """Every key and value is one librdkafka knows: a client is built from it (which loads the
    CA and the client's certificate and key from the one PEM file); nothing is reachable at
    the address, and nothing needs to be."""
    kafka = sasl_ssl(ca, client_pem, bootstrap_servers="127.0.0.1:1")
    Producer(client_config(kafka, {"log_level": 0})).flush(0)
    Consumer(client_config(kafka, {"group.id": "g", "log_level": 0})).close()
    AdminClient(client_config(kafka, {"log_level": 0}))


def test_a_client_may_not_override_what_the_settings_decide() -> None:
    with pytest.raises(ValueError, match=r"security\.protocol"):
        client_config(KafkaSettings(security_protocol="SSL"), {"security.protocol": "PLAINTEXT"})
    with pytest.raises(ValueError, match=r"bootstrap\.servers"):
        client_config(KafkaSettings(), {"bootstrap.servers": "elsewhere:9092"})


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    kafka = KafkaSettings(security_protocol="SSL", ssl_ca_file=tmp_path / "nope.crt")
    with pytest.raises(ConfigurationError, match=r"kafka.ssl_ca_file .*nope.crt is not a file"):
        client_config(kafka)
    with pytest.raises(ConfigurationError, match=r"kafka\.ssl_ca_file"):
        spark_options(kafka)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"security_protocol": "SASL_SSL"}, "set kafka.sasl_username and kafka.sasl_password"),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_username": "u"},
            "set kafka.sasl_username and kafka.sasl_password",
        ),
        (
            {"sasl_username": "u", "sasl_password": "p"},
            "kafka.sasl_username is set but kafka.security_protocol PLAINTEXT sends no login",
        ),
        (
            {"security_protocol": "SSL", "sasl_password": "p"},
            "kafka.sasl_password is set but kafka.security_protocol SSL sends no login",
        ),
        ({"ssl_ca_file": "/ca.crt"}, "kafka.ssl_ca_file is set but .* PLAINTEXT does not use TLS"),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_username": "u",
                "sasl_password": "p",
                "ssl_client_cert_file": "/c.pem",
            },
            "kafka.ssl_client_cert_file is set but .* SASL_PLAINTEXT does not use TLS",
        ),
        ({"security_protocol": "TLS"}, "security_protocol"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "sasl_mechanism"),
    ],
)
def test_settings_that_cannot_work_are_refused_at_start(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        KafkaSettings.model_validate(fields)


def test_from_the_environment_and_the_password_stays_out_of_reprs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env
    for name, value in {
        "FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS": "kafka.example:9096",
        "FLEETWATCH_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "FLEETWATCH_KAFKA__SASL_MECHANISM": "PLAIN",
        "FLEETWATCH_KAFKA__SASL_USERNAME": "fleetwatch",
        "FLEETWATCH_KAFKA__SASL_PASSWORD": "s3cret",
    }.items():
        monkeypatch.setenv(name, value)
    kafka = Settings().kafka
    assert kafka.sasl
    assert kafka.tls
    assert client_config(kafka)["sasl.password"] == "s3cret"
    assert "s3cret" not in repr(Settings()) + str(kafka) + kafka.model_dump_json()


def test_every_kafka_client_of_the_package_is_configured_from_the_settings() -> None:
    """No module but :mod:`fleetwatch.kafka_config` names a client's bootstrap servers: a
    client configured anywhere else would leave the login and TLS out."""
    key = re.compile(r"""["'](kafka\.)?bootstrap\.servers["']""")
    naming = [
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if key.search(p.read_text())
    ]
    assert naming == ["kafka_config.py"]


@pytest.mark.parametrize(
    "fields",
    [
        {"security_protocol": "SSL"},
        {"security_protocol": "SASL_SSL", "sasl_username": "u", "sasl_password": "p"},
    ],
)
def test_the_local_broker_refuses_what_it_does_not_serve(
    fields: dict[str, object], tmp_path: Path
) -> None:
    """It listens in PLAINTEXT or SASL_PLAINTEXT (PLAIN or SCRAM): TLS is for a cluster of
    your own."""
    settings = Settings(run_dir=tmp_path, kafka=KafkaSettings.model_validate(fields))
    with pytest.raises(StackError, match="is for a cluster of your own"):
        KafkaBroker(settings).start()
    assert not (tmp_path / "pids").exists()  # nothing started


def test_the_local_broker_s_sasl_listener(tmp_path: Path) -> None:
    plain = KafkaBroker(Settings(run_dir=tmp_path)).render_config()
    assert "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in plain
    assert "sasl." not in plain
    kafka = KafkaSettings.model_validate(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "fleetwatch",
            "sasl_password": "pw",
        }
    )
    broker = KafkaBroker(Settings(run_dir=tmp_path, kafka=kafka))
    config = broker.render_config().splitlines()
    own = broker.broker_password()
    assert (broker.broker_secret_file.stat().st_mode & 0o777) == 0o600
    assert "listeners=SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in config
    assert "inter.broker.listener.name=SASL_PLAINTEXT" in config
    assert "sasl.mechanism.inter.broker.protocol=PLAIN" in config
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required "
    broker_login = f'username="broker" password="{own}" user_broker="{own}"'
    assert (
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={plain}{broker_login}"
        ' user_fleetwatch="pw";'
    ) in config
    # the controller's listener: the broker alone; the authorizer, the broker its super user
    assert (
        "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
        in config
    )
    assert f"listener.name.controller.plain.sasl.jaas.config={plain}{broker_login};" in config
    assert "sasl.mechanism.controller.protocol=PLAIN" in config
    assert "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" in config
    assert "super.users=User:broker" in config


def test_the_local_broker_s_scram_listener_keeps_no_account_in_its_file(tmp_path: Path) -> None:
    kafka = KafkaSettings.model_validate(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_username": "fleetwatch",
            "sasl_password": "pw",
            "logins": {"api": {"username": "fw-api", "password": "api-pw"}},
        }
    )
    broker = KafkaBroker(Settings(run_dir=tmp_path, kafka=kafka))
    config = broker.render_config()
    assert kafka.sasl_mechanism == "SCRAM-SHA-512"
    assert "sasl.enabled.mechanisms=SCRAM-SHA-512\n" in config
    assert "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512\n" in config
    assert (
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="broker" password="{broker.broker_password()}";\n'
    ) in config
    assert '"pw"' not in config  # in the metadata only
    assert "api-pw" not in config


@pytest.mark.parametrize(
    "fields",
    [
        {"sasl_username": "broker", "sasl_password": "p"},
        {"sasl_username": "u", "sasl_password": "p", "logins": {"api": {"username": "broker"}}},
    ],
)
def test_the_local_broker_keeps_its_own_account_to_itself(
    fields: dict[str, object], tmp_path: Path
) -> None:
    kafka = KafkaSettings.model_validate({"security_protocol": "SASL_PLAINTEXT", **fields})
    with pytest.raises(StackError, match="the local broker's own account"):
        KafkaBroker(Settings(run_dir=tmp_path, kafka=kafka)).start()
