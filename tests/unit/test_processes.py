import json
import os
import signal
import socket
from pathlib import Path

import pytest

from fleetwatch.contracts.settings import MqttSettings, Settings
from fleetwatch.stack.errors import StackError
from fleetwatch.stack.mosquitto import MosquittoBroker, mosquitto_binary
from fleetwatch.stack.processes import ManagedProcess, port_in_use


def test_a_managed_process_starts_and_stops_by_pid(tmp_path: Path) -> None:
    proc = ManagedProcess("sleeper", tmp_path)
    pid = proc.start(["sleep", "60"])
    assert proc.pid() == pid
    assert proc.stop(timeout_s=5)
    assert proc.pid() is None
    assert not proc.pid_file.exists()


def test_a_reused_pid_is_not_ours(tmp_path: Path) -> None:
    proc = ManagedProcess("sleeper", tmp_path)
    proc.start(["sleep", "60"])
    record = proc.pid_file.read_text().replace('"sleep"', '"something-else"')
    proc.pid_file.write_text(record)
    try:
        assert proc.pid() is None
        assert not proc.stop()
    finally:
        os.kill(json.loads(record)["pid"], signal.SIGKILL)


def test_a_port_in_use_is_detected() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert port_in_use("127.0.0.1", sock.getsockname()[1])


def test_a_busy_port_gives_a_one_line_reason_and_the_log(tmp_path: Path) -> None:
    assert mosquitto_binary() is not None, "make setup installs mosquitto"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        broker = MosquittoBroker(Settings(run_dir=tmp_path, mqtt=MqttSettings(port=port)))
        with pytest.raises(StackError) as caught:
            broker.start()
    message = str(caught.value)
    assert f"port {port} is already in use" in message
    assert "\n" not in message
    assert str(tmp_path / "logs" / "mosquitto.log") in message


def test_credentials_and_an_acl_make_the_broker_refuse_anonymous_clients(tmp_path: Path) -> None:
    mqtt = MqttSettings(password_file=tmp_path / "passwd", acl_file=tmp_path / "acl")
    config = MosquittoBroker(Settings(run_dir=tmp_path, mqtt=mqtt)).render_config().splitlines()
    assert "allow_anonymous false" in config
    assert f"password_file {tmp_path / 'passwd'}" in config
    assert f"acl_file {tmp_path / 'acl'}" in config
    secure = MosquittoBroker(Settings(run_dir=tmp_path)).render_config().splitlines()
    assert "allow_anonymous false" in secure  # the default: every client logs in
    assert f"password_file {tmp_path / 'mqtt' / 'passwd'}" in secure
    assert f"acl_file {tmp_path / 'mqtt' / 'acl'}" in secure
    open_broker = Settings(run_dir=tmp_path, mqtt=MqttSettings(allow_anonymous=True))
    assert "allow_anonymous true" in MosquittoBroker(open_broker).render_config()
