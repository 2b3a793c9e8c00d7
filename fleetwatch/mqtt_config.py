"""Every MQTT client of fleetwatch is set up here, from :class:`MqttSettings`: its login and,
with ``mqtt.tls``, TLS that verifies the broker. The gateway, its broker-figures connection,
the simulator, the local stack's readiness probe, the benches and the tests all call
:func:`configure` before they connect, so none of them can connect without TLS when the
settings ask for it.

TLS is Python's ``ssl`` with its defaults for a client (``ssl.create_default_context``): TLS
1.2 or later, the broker's certificate checked against ``mqtt.ca_file`` (or the system's trust
store) and its name against ``mqtt.host``. One context per set of files is built once per process
and shared by every connection (the simulator opens one per device).
"""

from __future__ import annotations

import functools
import ssl
from pathlib import Path

import paho.mqtt.client as mqtt

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.contracts.settings import MqttSettings


def configure(client: mqtt.Client, settings: MqttSettings) -> None:
    """Give a paho client (not yet connected) the login and the TLS of ``settings``."""
    if settings.username:
        password = settings.password.get_secret_value() if settings.password else None
        client.username_pw_set(settings.username, password)
    if settings.tls:
        client.tls_set_context(tls_context(settings))


def tls_context(settings: MqttSettings) -> ssl.SSLContext:
    """The client TLS context of ``settings`` (shared: built once per set of files)."""
    return _context(settings.ca_file, settings.cert_file, settings.key_file)


@functools.cache
def _context(ca_file: Path | None, cert_file: Path | None, key_file: Path | None) -> ssl.SSLContext:
    named = (("mqtt.ca_file", ca_file), ("mqtt.cert_file", cert_file), ("mqtt.key_file", key_file))
    for name, path in named:
        if path is not None and not path.is_file():
            raise ConfigurationError(f"{name} {path} is not a file")
    try:
        context = ssl.create_default_context(cafile=ca_file)
        if cert_file is not None:
            context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as exc:
        raise ConfigurationError(
            f"mqtt TLS files unusable (ca_file {ca_file}, cert_file {cert_file}): {exc}"
        ) from exc
    return context


def connect_failure(exc: OSError, settings: MqttSettings) -> str:
    """Why connecting to the broker failed, in words an operator can act on."""
    where = f"{settings.host}:{settings.port}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        trust = (
            f"the CA of mqtt.ca_file ({settings.ca_file})"
            if settings.ca_file
            else "the system's trust store (set mqtt.ca_file to the CA that signed it)"
        )
        return (
            f"the MQTT broker at {where} is not trusted: its certificate failed TLS "
            f"verification ({exc.verify_message}) against {trust}"
        )
    if isinstance(exc, ssl.SSLError):
        return (
            f"TLS with the MQTT broker at {where} failed ({getattr(exc, 'reason', None) or exc}); "
            "is that port a TLS listener?"
        )
    return f"cannot reach MQTT at {where}: {exc}"
