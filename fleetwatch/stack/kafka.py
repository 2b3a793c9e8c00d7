"""The local single-node Kafka broker (KRaft, combined broker + controller) from Maven jars.

With ``SASL_PLAINTEXT`` the broker authorizes every request (``StandardAuthorizer``): its own
account, ``broker`` (a password made at the first start, in the run directory), is the one
super user; the settings' accounts get the rights :mod:`fleetwatch.stack.acls` gives them
(:meth:`KafkaBroker.provision`). The client listener takes the settings' mechanism: with
``PLAIN`` its accounts are in its JAAS configuration; with ``SCRAM-*`` they live in the
cluster's metadata, the broker's own written when the storage is formatted
(``--add-scram``), the others by the Admin API. The controller listener (loopback, the broker
alone) logs the broker in with ``PLAIN``: KRaft controllers cannot check SCRAM logins, whose
credentials are in the metadata they serve."""

from __future__ import annotations

import base64
import logging
import secrets
import subprocess
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient
from pydantic import SecretStr

from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.kafka_config import LOGIN_MODULES, client_config, quoted
from fleetwatch.stack.acls import apply_acls, bindings, scram_accounts, upsert_scram_accounts
from fleetwatch.stack.processes import StackService, port_in_use

logger = logging.getLogger(__name__)

JMX_AGENT = "jmx_prometheus_javaagent-*.jar"

BROKER_ACCOUNT = "broker"
"""The broker's own SASL account: between brokers, to the controller, and the stack's admin."""

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


class KafkaBroker(StackService):
    name = "kafka"
    config_name = "server.properties"

    @property
    def classpath(self) -> Path:
        return self.settings.jvm_cache / "kafka"

    @property
    def broker_secret_file(self) -> Path:
        """The broker account's password (SASL only), made when the storage is formatted."""
        return self.dir / "broker.secret"

    def broker_password(self) -> str:
        if not self.broker_secret_file.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            self.broker_secret_file.touch(mode=0o600)
            self.broker_secret_file.write_text(secrets.token_urlsafe(24))
        return self.broker_secret_file.read_text().strip()

    def admin_settings(self) -> KafkaSettings:
        """The settings' cluster as the broker's own account logs in (with SASL; else the
        settings as they are): what the stack creates topics, accounts and ACLs with."""
        k = self.settings.kafka
        if not k.sasl:
            return k
        return k.model_copy(
            update={
                "sasl_username": BROKER_ACCOUNT,
                "sasl_password": SecretStr(self.broker_password()),
                "logins": {},
            }
        )

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
        controller = "SASL_PLAINTEXT" if k.sasl else "PLAINTEXT"
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.bootstrap.servers=127.0.0.1:{k.controller_port}",
                f"listeners={client}://127.0.0.1:{k.port},CONTROLLER://127.0.0.1:{k.controller_port}",
                f"advertised.listeners={client}://127.0.0.1:{k.port},CONTROLLER://127.0.0.1:{k.controller_port}",
                "controller.listener.names=CONTROLLER",
                f"inter.broker.listener.name={client}",
                f"listener.security.protocol.map=CONTROLLER:{controller},{client}:{client}",
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
        """With ``SASL_PLAINTEXT``: the client listener's mechanism (the settings') and
        accounts, the controller listener's PLAIN login of the broker alone, the authorizer
        with the broker as its super user."""
        k = self.settings.kafka
        if not k.sasl:
            return []
        mechanism = k.sasl_mechanism
        own = self._jaas(LOGIN_MODULES["PLAIN"], {BROKER_ACCOUNT: self.broker_password()})
        accounts = {BROKER_ACCOUNT: self.broker_password()}
        if mechanism == "PLAIN":  # with SCRAM they are in the metadata (provision)
            accounts |= scram_accounts(k)
        client = self._jaas(LOGIN_MODULES[mechanism], accounts if mechanism == "PLAIN" else {})
        return [
            f"sasl.enabled.mechanisms={mechanism}",
            f"sasl.mechanism.inter.broker.protocol={mechanism}",
            f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config={client}",
            "sasl.mechanism.controller.protocol=PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
            f"listener.name.controller.plain.sasl.jaas.config={own}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            f"super.users=User:{BROKER_ACCOUNT}",
        ]

    def _jaas(self, module: str, accounts: dict[str, str]) -> str:
        """A listener's JAAS configuration: the broker logs in as itself; with PLAIN,
        ``user_NAME`` are the accounts it accepts. Escaped for a properties file, which reads
        a backslash as an escape."""
        password = quoted(self.broker_password())
        users = "".join(f" user_{name}={quoted(pw)}" for name, pw in accounts.items())
        text = f"{module} required username={quoted(BROKER_ACCOUNT)} password={password}{users};"
        return text.replace("\\", "\\\\")

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
        k = self.settings.kafka
        if (self.dir / "data" / "meta.properties").exists():
            return
        scram = []
        if k.sasl and k.sasl_mechanism != "PLAIN":
            # the broker's own SCRAM account must exist before it can log in to itself
            scram = [
                f"--add-scram={k.sasl_mechanism}=[name={BROKER_ACCOUNT},password="
                f"{self.broker_password()}]"
            ]
        argv = self._java(
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            f"--cluster-id={new_cluster_id()}",
            f"--config={self.config_file}",
            *scram,
        )
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if scram and result.returncode == 0:
            self._scram_file.write_text(k.sasl_mechanism)
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
        if k.tls:
            raise self.proc.fail(
                "the local broker listens in PLAINTEXT or SASL_PLAINTEXT, not "
                f"{k.security_protocol}: that is for a cluster of your own "
                "(kafka.bootstrap_servers), which the stages use without `fleetwatch stack`"
            )
        if k.sasl:
            self._check_accounts()
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
        self.config_file.touch(mode=0o600)  # with SASL, it holds the accounts' passwords
        self.config_file.chmod(0o600)
        self.config_file.write_text(self.render_config())
        (self.dir / "log4j2.properties").write_text(LOG4J2)
        self._format_storage()
        self.proc.start(self.broker_command())
        return True

    def _check_accounts(self) -> None:
        k = self.settings.kafka
        if BROKER_ACCOUNT in {k.sasl_username, *(login.username for login in k.logins.values())}:
            raise self.proc.fail(
                f"{BROKER_ACCOUNT!r} is the local broker's own account; "
                "give kafka.sasl_username and kafka.logins other names"
            )
        formatted = (self.dir / "data" / "meta.properties").exists()
        with_scram = self._scram_file.read_text() if self._scram_file.exists() else "none"
        if formatted and k.sasl_mechanism != "PLAIN" and with_scram != k.sasl_mechanism:
            raise self.proc.fail(
                f"the broker's storage in {self.dir} was formatted without its own "
                f"{k.sasl_mechanism} account (with {with_scram}): `fleetwatch stack down`, "
                "remove that directory and start again"
            )

    @property
    def _scram_file(self) -> Path:
        """The SCRAM mechanism the broker's own account was formatted with."""
        return self.dir / "broker.scram"

    def provision(self) -> None:
        """With SASL: the settings' SCRAM accounts (created, or their passwords set again)
        and each account's ACLs, as the broker's own account. Harmless when done already."""
        k = self.settings.kafka
        if not k.sasl:
            return
        admin = self.admin_settings()
        if k.sasl_mechanism != "PLAIN":
            upsert_scram_accounts(admin, scram_accounts(k))
        apply_acls(admin, bindings(self.settings))

    def ready(self) -> bool:
        admin = AdminClient(client_config(self.admin_settings(), {"log_level": 0}))
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
