"""The local broker's command line: the Prometheus JMX exporter agent with the rules file on
``kafka.metrics_port`` when the agent has been resolved, nothing otherwise."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetwatch.contracts.settings import KafkaSettings, Settings
from fleetwatch.stack.kafka import KafkaBroker

RULES = Path(__file__).resolve().parents[2] / "deploy" / "jvm" / "jmx-exporter" / "kafka.yml"


def broker(home: Path, metrics_port: int, agent: bool) -> KafkaBroker:
    if agent:
        jar = home / ".cache" / "jvm" / "jmx-exporter" / "jmx_prometheus_javaagent-1.0.1.jar"
        jar.parent.mkdir(parents=True)
        jar.write_bytes(b"")
    settings = Settings(
        home=home, run_dir=home / "run", kafka=KafkaSettings(metrics_port=metrics_port)
    )
    return KafkaBroker(settings)


def test_the_broker_runs_with_the_agent_when_it_is_there(tmp_path: Path) -> None:
    argv = broker(tmp_path, 9555, agent=True).broker_command()
    jar = tmp_path / ".cache/jvm/jmx-exporter/jmx_prometheus_javaagent-1.0.1.jar"
    rules = tmp_path / "deploy/jvm/jmx-exporter/kafka.yml"
    expected = f"-javaagent:{jar}=127.0.0.1:9555:{rules}"
    assert expected in argv
    assert argv.index(expected) < argv.index("-cp"), "a JVM option, before the class path"
    assert argv[-2:] == ["kafka.Kafka", str(tmp_path / "run" / "kafka" / "server.properties")]


def test_no_agent_without_a_port_or_without_the_jar(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    off = broker(tmp_path / "off", 0, agent=True).broker_command()
    assert not [a for a in off if a.startswith("-javaagent")]
    missing = broker(tmp_path / "missing", 9555, agent=False).broker_command()
    assert not [a for a in missing if a.startswith("-javaagent")]
    assert "run `make setup`" in caplog.text


def test_the_storage_tool_never_gets_the_agent(tmp_path: Path) -> None:
    kafka = broker(tmp_path, 9555, agent=True)
    assert not [a for a in kafka._java("kafka.tools.StorageTool") if a.startswith("-javaagent")]


def test_the_rules_file_keeps_labels_bounded() -> None:
    text = RULES.read_text()
    assert "lowercaseOutputName: true" in text
    for excluded in ("kafka.server:client-id=*,*", "kafka.server:user=*,*"):
        assert f'  - "{excluded}"' in text, "MBeans keyed by a client or a user are left out"
    label_keys = re.findall(r"^ {6}(\S+):", text, flags=re.MULTILINE)
    assert label_keys, "the rules name their labels"
    assert not {"clientid", "clientId", "user", "client-id"} & {k.strip('"') for k in label_keys}
