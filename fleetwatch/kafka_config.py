"""Every Kafka client of fleetwatch is configured here, from :class:`KafkaSettings`: the
stages' own (confluent-kafka's Producer, Consumer and AdminClient, i.e. librdkafka) with
:func:`client_config`, Spark's Kafka source and sink (the Java client) with
:func:`spark_options`. Both render the same settings — where the cluster is, its security
protocol, the SASL login, the CA and client certificate — in each client's own keys, so no
client can leave the login or TLS out.

With ``PLAINTEXT`` (the default, the local broker) both render the bootstrap servers alone:
the clients' own defaults are a plain connection without a login.

librdkafka's keys: ``security.protocol``, ``sasl.mechanisms``, ``sasl.username``,
``sasl.password``, ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``.
The Java client's (as Spark options, each prefixed ``kafka.``): ``security.protocol``,
``sasl.mechanism``, ``sasl.jaas.config`` (the login module of the mechanism, with the
account), ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` and
``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (PEM files, read by Kafka clients
since 2.7). Spark redacts option values that contain ``password`` from its logs and UI.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.contracts.settings import KafkaSettings

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
"""The Java client's JAAS login module for each SASL mechanism."""


def client_config(kafka: KafkaSettings, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A confluent-kafka client's configuration: where the cluster is and how to log in and
    encrypt (from ``kafka``), with the client's own ``extra`` keys (group id, acks, …), which
    may not set any of the former."""
    config: dict[str, Any] = {"bootstrap.servers": kafka.bootstrap_servers}
    if kafka.security_protocol != "PLAINTEXT":
        config["security.protocol"] = kafka.security_protocol
    if kafka.sasl:
        config["sasl.mechanisms"] = kafka.sasl_mechanism
        config["sasl.username"] = kafka.sasl_username
        config["sasl.password"] = _password(kafka)
    if kafka.ssl_ca_file is not None:
        config["ssl.ca.location"] = str(_file(kafka.ssl_ca_file, "kafka.ssl_ca_file"))
    if kafka.ssl_client_cert_file is not None:
        pem = str(_file(kafka.ssl_client_cert_file, "kafka.ssl_client_cert_file"))
        config["ssl.certificate.location"] = pem
        config["ssl.key.location"] = pem
    clash = sorted(set(config) & set(extra or {}))
    if clash:
        raise ValueError(f"{clash} come from the Kafka settings, not from a client's own keys")
    return config | dict(extra or {})


def spark_options(kafka: KafkaSettings) -> dict[str, str]:
    """Spark's Kafka source and sink options (``kafka.``-prefixed Java client keys) for the
    same cluster, login and TLS as :func:`client_config`."""
    options = {"bootstrap.servers": kafka.bootstrap_servers}
    if kafka.security_protocol != "PLAINTEXT":
        options["security.protocol"] = kafka.security_protocol
    if kafka.sasl:
        options["sasl.mechanism"] = kafka.sasl_mechanism
        options["sasl.jaas.config"] = jaas_config(kafka)
    if kafka.ssl_ca_file is not None:
        options["ssl.truststore.type"] = "PEM"
        options["ssl.truststore.location"] = str(_file(kafka.ssl_ca_file, "kafka.ssl_ca_file"))
    if kafka.ssl_client_cert_file is not None:
        options["ssl.keystore.type"] = "PEM"
        options["ssl.keystore.location"] = str(
            _file(kafka.ssl_client_cert_file, "kafka.ssl_client_cert_file")
        )
    return {f"kafka.{key}": value for key, value in options.items()}


def jaas_config(kafka: KafkaSettings) -> str:
    """The Java client's ``sasl.jaas.config``: the mechanism's login module with the account
    (quotes and backslashes escaped as JAAS reads them)."""
    module = LOGIN_MODULES[kafka.sasl_mechanism]
    user, password = quoted(kafka.sasl_username or ""), quoted(_password(kafka))
    return f"{module} required username={user} password={password};"


def quoted(value: str) -> str:
    """``value`` as a JAAS option's quoted value."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _password(kafka: KafkaSettings) -> str:
    if kafka.sasl_username is None:  # a stage's own account only (kafka.logins), not taken
        raise ConfigurationError(
            "no Kafka account to log in with: set kafka.sasl_username and kafka.sasl_password, "
            "or run a stage, which takes its own from kafka.logins"
        )
    return kafka.sasl_password.get_secret_value() if kafka.sasl_password else ""


def _file(path: Path, name: str) -> Path:
    """``path``, absolute (symbolic links kept: a mounted secret's file is one, and its target
    changes when the secret does), once it is known to be a file."""
    if not path.is_file():
        raise ConfigurationError(f"{name} {path} is not a file")
    return path.absolute()
