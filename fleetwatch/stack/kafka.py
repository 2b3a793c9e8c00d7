"""The local single-node Kafka broker (KRaft, combined broker + controller) from Maven jars."""

from __future__ import annotations

import base64
import logging
import subprocess
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import client_config, jaas_config, quoted
from fleetwatch.stack.processes import ManagedProcess, port_in_use

logger = logging.getLogger(__name__)

JMX_AGENT = "jmx_prometheus_javaagent-*.jar"

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.server.name = kafka.server.BrokerServer
logger.server.level = INFO
logger.kafka.name = kafka.Kafka$
logger.kafka.level = INFO
"""


class KafkaBroker:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.proc = ManagedProcess("kafka", settings.run_path)
        self.dir = settings.run_path / "kafka"

    @property
    def classpath(self) -> Path:
        return self.settings.jvm_cache / "kafka"

    @property
    def config_file(self) -> Path:
        return self.dir / "server.properties"

    @property
    def metrics_agent(self) -> Path | None:
        """The Prometheus JMX exporter agent (``make setup``), if resolved."""
        found = sorted((self.settings.jvm_cache / "jmx-exporter").glob(JMX_AGENT))
        return found[-1] if found else None

    @property
    def metrics_rules(self) -> Path:
        return self.settings.home / "deploy" / "jvm" / "jmx-exporter" / "kafka.yml"

    def broker_command(self) -> list[str]:
        """The broker's command line: with the metrics agent on ``kafka.metrics_port`` (on
        loopback, like the listeners) when it is set and the agent is there."""
        agent, port = self.metrics_agent, self.settings.kafka.metrics_port
        options: list[str] = []
        if port and agent is not None:
            options.append(f"-javaagent:{agent}=127.0.0.1:{port}:{self.metrics_rules}")
        elif port:
            logger.warning(
                "no broker metrics: the JMX exporter agent is missing from %s; run `make setup`",
                self.settings.jvm_cache / "jmx-exporter",
            )
        return self._java("kafka.Kafka", str(self.config_file), options=options)

    def render_config(self) -> str:
        k = self.settings.kafka
        client = k.security_protocol  # PLAINTEXT, or SASL_PLAINTEXT (see start)
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.bootstrap.servers=127.0.0.1:{k.controller_port}",
                f"listeners={client}://127.0.0.1:{k.port},CONTROLLER://127.0.0.1:{k.controller_port}",
                f"advertised.listeners={client}://127.0.0.1:{k.port},CONTROLLER://127.0.0.1:{k.controller_port}",
                "controller.listener.names=CONTROLLER",
                f"inter.broker.listener.name={client}",
                f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,{client}:{client}",
                *self._sasl_config(),
                f"log.dirs={self.dir / 'data'}",
                f"num.partitions={k.partitions}",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=4",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=false",
                "log.cleaner.min.compaction.lag.ms=0",
                "",
            ]
        )

    def _sasl_config(self) -> list[str]:
        """With ``SASL_PLAINTEXT``: the PLAIN login, whose one account is the clients'
        (``kafka.sasl_username`` / ``sasl_password``), the broker's own included."""
        k = self.settings.kafka
        if not k.sasl:
            return []
        password = k.sasl_password.get_secret_value() if k.sasl_password else ""
        accounts = jaas_config(k).removesuffix(";") + f" user_{k.sasl_username}={quoted(password)};"
        return [
            "sasl.enabled.mechanisms=PLAIN",
            "sasl.mechanism.inter.broker.protocol=PLAIN",
            # a properties file reads a backslash as an escape: the JAAS text's are doubled
            "listener.name.sasl_plaintext.plain.sasl.jaas.config=" + accounts.replace("\\", "\\\\"),
        ]

    def _java(self, main: str, *args: str, options: list[str] | None = None) -> list[str]:
        return [
            "java",
            f"-Xmx{self.settings.kafka.heap}",
            "-Xms256m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
            *(options or []),
            "-cp",
            f"{self.classpath}/*",
            main,
            *args,
        ]

    def _format_storage(self) -> None:
        if (self.dir / "data" / "meta.properties").exists():
            return
        argv = self._java(
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            f"--cluster-id={new_cluster_id()}",
            f"--config={self.config_file}",
        )
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            self.proc.log_file.parent.mkdir(parents=True, exist_ok=True)
            self.proc.log_file.write_text(result.stdout + result.stderr)
            raise self.proc.fail(
                f"formatting the KRaft storage failed: {_cause(result.stderr + result.stdout)}"
            )

    def start(self) -> bool:
        """Start unless already running; returns whether it was started now."""
        if self.proc.running():
            return False
        k = self.settings.kafka
        if k.tls or (k.sasl and k.sasl_mechanism != "PLAIN"):
            asked = k.security_protocol + (f" with {k.sasl_mechanism}" if k.sasl else "")
            raise self.proc.fail(
                "the local broker listens in PLAINTEXT, or SASL_PLAINTEXT with PLAIN, not "
                f"{asked}: that is for a cluster of your own (kafka.bootstrap_servers), which "
                "the stages use without `fleetwatch stack`"
            )
        if not list(self.classpath.glob("kafka_2.13-*.jar")):
            raise self.proc.fail(
                f"the broker jars are missing from {self.classpath}; run `make setup`"
            )
        for port in (k.port, k.controller_port):
            if port_in_use("127.0.0.1", port):
                raise self.proc.fail(
                    f"port {port} is already in use by another process; "
                    "stop it or set FLEETWATCH_KAFKA__PORT / FLEETWATCH_KAFKA__CONTROLLER_PORT"
                )
        if k.metrics_port and port_in_use("127.0.0.1", k.metrics_port):
            raise self.proc.fail(
                f"port {k.metrics_port} (broker metrics) is already in use by another process; "
                "stop it or set FLEETWATCH_KAFKA__METRICS_PORT (0: no broker metrics)"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_file.touch(mode=0o600)  # with SASL, it holds the account's password
        self.config_file.chmod(0o600)
        self.config_file.write_text(self.render_config())
        (self.dir / "log4j2.properties").write_text(LOG4J2)
        self._format_storage()
        self.proc.start(self.broker_command())
        return True

    def ready(self) -> bool:
        admin = AdminClient(client_config(self.settings.kafka, {"log_level": 0}))
        try:
            admin.list_topics(timeout=1.0)
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False
        return True

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        self.proc.wait_ready(self.ready, timeout_s, 0.25)


def _cause(output: str) -> str:
    """The tool's own reason: its usage error or the message of its exception."""
    for line in (line.strip() for line in output.splitlines()):
        if line.startswith("kafka-storage: error:"):
            return line.removeprefix("kafka-storage: error:").strip()
        if line.startswith("Exception in thread"):
            return line.split(":", 1)[1].strip()
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def new_cluster_id() -> str:
    """A random cluster id in Kafka's form (URL-safe base64 of 16 bytes, no padding), never
    starting with ``-``, which the storage tool's argument parser would take for an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id
