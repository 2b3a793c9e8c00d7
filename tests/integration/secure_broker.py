"""A Mosquitto of the stack's own configuration that requires credentials (and an ACL)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fleetwatch.contracts.settings import MqttSettings, Settings
from fleetwatch.stack.mosquitto import MosquittoBroker
from tests.integration.conftest import free_port

ACL_EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "mosquitto" / "acl.example"


@contextmanager
def secure_broker(
    tmp_path: Path, accounts: Mapping[str, str], acl: Path | None = None, **mqtt_fields: Any
) -> Iterator[int]:
    """Yields the port of a broker that knows only ``accounts`` (user -> password);
    ``mqtt_fields``: further settings of it (its TLS listeners': ``tls``, ``ca_file``,
    ``server_cert_file``, ``server_key_file``; the stages' listener: ``service_port``)."""
    passwd = shutil.which("mosquitto_passwd")
    assert passwd is not None, "mosquitto_passwd comes with the mosquitto package (make setup)"
    password_file = tmp_path / "passwd"
    password_file.write_text("".join(f"{u}:{p}\n" for u, p in accounts.items()))
    subprocess.run([passwd, "-U", str(password_file)], check=True)
    mqtt = MqttSettings(
        port=free_port(),
        service_port=mqtt_fields.pop("service_port", None) or free_port(),
        password_file=password_file,
        acl_file=acl,
        **mqtt_fields,
    )
    broker = MosquittoBroker(Settings(run_dir=tmp_path / "run", mqtt=mqtt))
    broker.start()
    try:
        broker.wait_ready()
        yield mqtt.port
    finally:
        broker.proc.stop()
