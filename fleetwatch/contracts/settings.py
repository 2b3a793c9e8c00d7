"""Settings: one frozen object, read from the environment at a process's entry point only.

Every field has a documented default that runs the local stack on loopback. Override with
environment variables (``FLEETWATCH_`` prefix, ``__`` between nested names, e.g.
``FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS=broker:9092``) or a ``.env`` file in the working
directory. Library code takes the object (or a part of it) as an argument.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.contracts.telemetry import DEVICE_METRICS


def _project_home() -> Path:
    """The checkout this package runs from (editable install), else the working directory."""
    here = Path(__file__).resolve().parents[2]
    if (here / "deploy" / "jvm").is_dir():
        return here
    return Path.cwd()


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _whole_match(pattern: str, message: str) -> AfterValidator:
    """A text setting's check: the whole value matches ``pattern``, else ``message``."""

    def check(value: str) -> str:
        if not re.fullmatch(pattern, value):
            raise ValueError(message)
        return value

    return AfterValidator(check)


PlainName = Annotated[
    str,
    _whole_match(
        r"[A-Za-z0-9][A-Za-z0-9_.-]*", "mlflow.model_prefix must be letters, digits, '_', '.', '-'"
    ),
]
Duration = Annotated[
    str,
    _whole_match(
        r"[1-9][0-9]*(ms|s|m|h|d|w|y)",
        "prometheus.retention must be a duration such as 12h, 2d or 1w",
    ),
]


def _checkpoint_uri(value: str) -> str:
    """A Hadoop filesystem URI as it is, a local path made absolute."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", value)
    if scheme is None:
        return str(Path(value).expanduser().resolve())
    if scheme.group(1).lower() in ("s3", "s3n"):
        raise ValueError(f"spark.checkpoint_dir {value!r}: Hadoop reaches S3 as s3a://, not s3://")
    if not value.startswith(f"{scheme.group(1)}:/"):
        raise ValueError(f"spark.checkpoint_dir {value!r} is not a URI (scheme://…) nor a path")
    return value.rstrip("/")


CheckpointUri = Annotated[str, Field(min_length=1), AfterValidator(_checkpoint_uri)]


KafkaStage = Literal["gateway", "scorer", "trainer", "api"]
"""The stages that are Kafka clients, each of which may have an account of its own."""


class KafkaLogin(_Part):
    """A SASL account of one stage (``kafka.logins``)."""

    username: str = Field(min_length=1)
    password: SecretStr | None = None
    """Required of the stage that logs in with it; granting its rights
    (``fleetwatch topics acls``) needs the username alone."""


class KafkaSettings(_Part):
    bootstrap_servers: str = "127.0.0.1:9092"
    """Where clients connect. Point it at an existing cluster to skip the local broker."""
    port: int = Field(9092, ge=1, le=65535)
    """Local broker: client listener port."""
    controller_port: int = Field(9093, ge=1, le=65535)
    """Local broker: KRaft controller listener port."""
    heap: str = "1g"
    """Local broker: JVM heap (-Xmx)."""
    partitions: int = Field(4, ge=1)
    """Partitions of each topic the stack creates."""
    replication_factor: int = Field(1, ge=1)
    metrics_port: int = Field(9404, ge=0, le=65535)
    """Local broker: Prometheus JMX exporter port on loopback (``make setup`` fetches the
    agent; rules in ``deploy/jvm/jmx-exporter/kafka.yml``); 0: none."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """How every client talks to the cluster (Kafka's ``security.protocol``): ``PLAINTEXT``,
    ``SSL`` (TLS), ``SASL_SSL`` (TLS and a SASL login), ``SASL_PLAINTEXT`` (a SASL login on a
    plain connection: the data travels unencrypted). The stages' clients and Spark's are all
    configured from these settings (:mod:`fleetwatch.kafka_config`). The local broker speaks
    ``PLAINTEXT``, or ``SASL_PLAINTEXT`` with this mechanism, its accounts those set here and
    each with only its rights (:mod:`fleetwatch.stack.acls`)."""
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    """The SASL login (with a ``SASL_*`` protocol): ``PLAIN`` sends the password itself, so
    use it over ``SASL_SSL`` only; ``SCRAM-*`` proves it without sending it."""
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    """The SASL account; both required by a ``SASL_*`` protocol (unless every process here is a
    stage with an account in ``logins``) and refused by the others. The stages without an
    account in ``logins`` log in with it, and so do the tools."""
    logins: dict[KafkaStage, KafkaLogin] = {}
    """Each stage's own SASL account, by stage (``gateway``, ``scorer``, ``trainer``, ``api``;
    e.g. ``FLEETWATCH_KAFKA__LOGINS__GATEWAY__USERNAME`` / ``…__PASSWORD``): the stage logs in
    with it (:meth:`for_stage`), and the ACLs give it only that stage's rights
    (:mod:`fleetwatch.stack.acls`). With none, every stage shares ``sasl_username``."""
    ssl_ca_file: Path | None = None
    """With ``SSL`` / ``SASL_SSL``: PEM CA certificate(s) that verify the brokers (default: the
    system's trust store; the JVM's for Spark). The brokers' names are verified too."""
    ssl_client_cert_file: Path | None = None
    """With ``SSL`` / ``SASL_SSL``, for a cluster that requires client certificates: one PEM
    file with the client's certificate chain and its private key (PKCS#8, unencrypted: the
    form both librdkafka and Spark's Java client read)."""

    @model_validator(mode="after")
    def _listeners_differ(self) -> KafkaSettings:
        if self.port == self.controller_port:
            raise ValueError(
                f"kafka.port and kafka.controller_port are both {self.port}; "
                "the broker needs two different ports"
            )
        return self

    @model_validator(mode="after")
    def _security_is_complete(self) -> KafkaSettings:
        protocol = self.security_protocol
        login = [name for name in ("sasl_username", "sasl_password") if getattr(self, name)]
        files = [name for name in ("ssl_ca_file", "ssl_client_cert_file") if getattr(self, name)]
        if self.sasl and (len(login) == 1 or not (login or self.logins)):
            raise ValueError(
                f"kafka.security_protocol {protocol} logs in with SASL: "
                "set kafka.sasl_username and kafka.sasl_password (or kafka.logins)"
            )
        if not self.sasl and login:
            raise ValueError(
                f"kafka.{login[0]} is set but kafka.security_protocol {protocol} sends no "
                "login: use SASL_SSL (or SASL_PLAINTEXT)"
            )
        if not self.tls and files:
            raise ValueError(
                f"kafka.{files[0]} is set but kafka.security_protocol {protocol} does not use "
                "TLS: use SSL or SASL_SSL"
            )
        if not self.sasl and self.logins:
            raise ValueError(
                f"kafka.logins is set but kafka.security_protocol {protocol} sends no login: "
                "use SASL_SSL (or SASL_PLAINTEXT)"
            )
        return self

    def for_stage(self, stage: KafkaStage) -> KafkaSettings:
        """These settings as ``stage`` logs in: with its own account from ``logins`` when it
        has one, else as they are."""
        login = self.logins.get(stage)
        if login is None and self.sasl and self.sasl_username is None:
            raise ConfigurationError(
                f"the {stage} has no Kafka account: set kafka.logins.{stage} "
                "(or kafka.sasl_username)"
            )
        if login is None:
            return self
        if login.password is None:
            raise ConfigurationError(
                f"kafka.logins.{stage} has no password: set "
                f"FLEETWATCH_KAFKA__LOGINS__{stage.upper()}__PASSWORD"
            )
        return self.model_copy(
            update={"sasl_username": login.username, "sasl_password": login.password}
        )

    def principal(self, stage: KafkaStage) -> str | None:
        """The account ``stage`` logs in with (None without SASL)."""
        login = self.logins.get(stage)
        return login.username if login is not None else self.sasl_username

    @property
    def sasl(self) -> bool:
        """Whether clients log in with SASL."""
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        """Whether clients connect over TLS."""
        return self.security_protocol.endswith("SSL")


class MqttSettings(_Part):
    host: str = "127.0.0.1"
    port: int = Field(1883, ge=1, le=65535)
    """The devices' listener: a login's client id is its username there, so no device can
    present another client's id and take over its session."""
    service_port: int | None = Field(None, ge=1, le=65535)
    """The stages' listener (default ``port`` + 1): only service accounts log in there (the
    gateway, the stack's simulator account), with the client ids they choose."""
    root: str = "devices"
    """Topic root: devices publish to ``{root}/{device_id}/telemetry``."""
    username: str | None = None
    password: SecretStr | None = None
    keepalive_s: int = Field(30, ge=5)
    tls: bool = False
    """Connect over TLS (MQTT's 8883 by convention), verifying the broker's certificate against
    ``ca_file`` and its name against ``host``. The local broker's listener on ``port`` is then
    TLS too, with ``server_cert_file`` and ``server_key_file``. Every MQTT client of fleetwatch
    is set up from these settings (:mod:`fleetwatch.mqtt_config`)."""
    ca_file: Path | None = None
    """With ``tls``: PEM CA certificate(s) that verify the broker (default: the system's trust
    store)."""
    cert_file: Path | None = None
    """With ``tls``, for a broker that asks clients for certificates: the client's certificate
    (PEM) and, in ``key_file``, its private key; both or neither."""
    key_file: Path | None = None
    server_cert_file: Path | None = None
    """Local broker, with ``tls``: its certificate (chain, PEM), which must name ``host`` (e.g.
    a subject alternative name ``IP:127.0.0.1``) and be signed by a CA that ``ca_file`` holds."""
    server_key_file: Path | None = None
    """Local broker, with ``tls``: the private key of ``server_cert_file`` (PEM)."""
    allow_anonymous: bool = False
    """Local broker: let clients in without credentials (a development broker only). Off: every
    client logs in — devices with the credentials ``fleetwatch devices add`` issues, the stages
    with the service accounts the stack issues itself (:mod:`fleetwatch.stack.credentials`)."""
    credentials_dir: Path | None = None
    """Local broker: where its password file, ACL and service accounts are kept (default:
    ``{run_dir}/mqtt``); stages with a run directory of their own point here to log in."""
    password_file: Path | None = None
    """Local broker: a mosquitto_passwd file of your own (default: ``passwd`` in
    ``credentials_dir``, kept by ``fleetwatch devices``)."""
    acl_file: Path | None = None
    """Local broker: an ACL file of your own (default: one rendered from ``root``, see
    deploy/mosquitto/acl.example: devices write only as themselves, ``{root}/%u/...``)."""

    @field_validator("root")
    @classmethod
    def _root_has_no_wildcards(cls, value: str) -> str:
        if not value or any(c in value for c in "+#") or value.endswith("/"):
            raise ValueError(
                "mqtt.root must be a non-empty topic prefix without +, # or a trailing /"
            )
        return value

    @model_validator(mode="after")
    def _tls_is_complete(self) -> MqttSettings:
        files = ("ca_file", "cert_file", "key_file", "server_cert_file", "server_key_file")
        named = [name for name in files if getattr(self, name) is not None]
        if named and not self.tls:
            raise ValueError(
                f"mqtt.{named[0]} is set but mqtt.tls is off: set mqtt.tls (clients would "
                "connect without TLS)"
            )
        for pair in (("cert_file", "key_file"), ("server_cert_file", "server_key_file")):
            given = [name for name in pair if getattr(self, name) is not None]
            if len(given) == 1:
                raise ValueError(f"mqtt.{pair[0]} and mqtt.{pair[1]} go together: set both")
        return self

    @property
    def services_port(self) -> int:
        """The port of the stages' listener (``service_port``, else ``port`` + 1)."""
        return self.service_port or self.port + 1

    def as_account(self, username: str, password: str) -> MqttSettings:
        """These settings with another login (a device's, a stack service account's)."""
        return self.model_copy(update={"username": username, "password": SecretStr(password)})

    def telemetry_topic(self, device_id: str) -> str:
        return f"{self.root}/{device_id}/telemetry"

    def commands_topic(self, device_id: str) -> str:
        return f"{self.root}/{device_id}/commands"

    def acks_topic(self, device_id: str) -> str:
        return f"{self.root}/{device_id}/acks"

    @property
    def telemetry_filter(self) -> str:
        return f"{self.root}/+/telemetry"

    @property
    def acks_filter(self) -> str:
        return f"{self.root}/+/acks"


class TopicSettings(_Part):
    telemetry_raw: str = "telemetry.raw"
    telemetry_deadletter: str = "telemetry.deadletter"
    telemetry_late: str = "telemetry.late"
    model_params: str = "model.params"
    quarantine_lifts: str = "device.quarantine-lifts"
    """Quarantine lifts the API writes and the scorer reads: on a topic of their own, so that
    the API's login needs no right to write ``model.params``."""
    alerts: str = "alerts"
    device_state: str = "device.state"
    device_sessions: str = "device.sessions"
    device_commands: str = "device.commands"
    device_command_acks: str = "device.command-acks"
    rules: str = "rules"
    """Operators' rules (:mod:`fleetwatch.contracts.rules`): the API writes, the scorer follows."""
    alerts_fast: str = "alerts.fast"
    """Early ``open`` events of rules without a window, from the scorer's real-time query, one
    per firing reading: the API folds them into the episodes on ``alerts``."""


class SparkSettings(_Part):
    master: str = "local[2]"
    """``local[N]`` by default; a ``spark://`` or ``yarn`` master to run on a cluster."""
    shuffle_partitions: int = Field(2, ge=1)
    trigger_interval: str = "1 second"
    checkpoint_dir: CheckpointUri | None = None
    """Where the jobs keep their checkpoints (offsets, commits, state): a local path, or a
    Hadoop filesystem URI every executor reaches (``s3a://bucket/prefix`` with
    :class:`ObjectStoreSettings`, ``hdfs://namenode/path``, ``abfss://…``, ``file:///…``).
    Default: ``{run_dir}/checkpoints``."""
    jars_dir: Path | None = None
    """Default: ``{home}/.cache/jvm/spark-kafka`` (filled by ``make setup``)."""
    driver_memory: str = "1g"
    state_changelog: bool = True
    """RocksDB changelog checkpointing
    (``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled``): a state store
    commit writes only the keys changed in the micro-batch to the checkpoint, and full
    snapshots are made by the background maintenance task, instead of every micro-batch
    copying a RocksDB snapshot into the checkpoint. The commit is on every reading's path, so
    a smaller commit is a shorter micro-batch. The state and the alerts are the same either
    way; Spark reads a checkpoint written either way, so it can be switched on an existing
    one."""
    checkpoint_file_manager: str | None = (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    )
    """How Spark writes checkpoint files (``spark.sql.streaming.checkpointFileManagerClass``):
    the offset and commit logs and the state store's changelog files, each micro-batch, on
    every reading's path. Hadoop's FileSystem API (write to a temporary file, rename) is the
    cheaper of it and Spark's default, FileContext-based manager on a local disk; both are
    atomic by rename on a local or HDFS checkpoint. ``None`` leaves Spark's default. An
    ``s3a://`` checkpoint, where rename is a copy, gets Spark's abortable-stream manager instead
    (:mod:`fleetwatch.streaming.object_store`)."""
    local_file_system: str | None = "com.globalmentor.apache.hadoop.fs.BareLocalFileSystem"
    """Hadoop's ``FileSystem`` for ``file:`` paths (``spark.hadoop.fs.file.impl``), when the
    session launches its own JVM in local mode (not under ``spark-submit``, nor on a
    cluster). Without Hadoop's native library (the pyspark wheel has none), Hadoop's own sets
    the permissions of every file it creates by running ``chmod`` in a new process: each
    offset and commit log write and each state store changelog file, every micro-batch. This
    one (Maven ``com.globalmentor:hadoop-bare-naked-local-fs``, resolved by ``make setup`` into
    :attr:`jars_dir`) does the same through Java's file API, with no process per file.
    ``None`` keeps Hadoop's own."""
    java_options: str = "-XX:G1HeapRegionSize=8m"
    """JVM options of the driver and the executors (``spark.driver.extraJavaOptions``,
    ``spark.executor.extraJavaOptions``). G1's regions are 1 MB on a heap of up to 2 GB, and
    an object of half a region or more is *humongous*: allocated apart, and each allocation
    may start a young pause and a concurrent marking cycle. The scorer allocates such buffers
    every micro-batch (Kafka fetches, Arrow batches to and from its Python workers): with 1 MB
    regions they start most of its young pauses; 8 MB regions hold them as ordinary objects."""
    conf: dict[str, str] = {}
    """Further Spark confs for every session, set last (so they win over the ones above), e.g.
    ``{"spark.executor.memory": "4g"}`` on a cluster, or JVM options for the driver
    (``spark.driver.extraJavaOptions``) in local mode."""
    progress_log: Path | None = None
    """If set, every progress report of a job's query (one per micro-batch: its duration and
    parts, rows, state operators, sources, watermark) is appended to this file as one JSON
    line — a record of every batch to find a slow one by (Spark keeps only the last 100)."""


class ScoreSettings(_Part):
    """The scorer (``fleetwatch score``): event time, alert lifecycle and sessions."""

    baseline: dict[str, tuple[float, float]] = {"temperature": (21.0, 8.0)}
    """metric -> (center, tolerance): how a reading is scored that no learned detector of its
    device judges yet — no parameters on ``model.params``, parameters still warming up, a metric
    new to them (a reading is anomalous when ``|value - center| > tolerance``)."""
    dedup_window: str = "30 minutes"
    """The trainer's watermark delay: a reading older than the newest event time seen minus this
    is not learned, and within it a repeated (device_id, seq) is learned once (the same seq from
    a later device clock is a reboot, and learned)."""
    allowed_lateness: str = "2 minutes"
    """The scorer's watermark delay: a reading older than the latest event time seen minus this
    is late — written to ``telemetry.late`` and counted, not scored. Within it, out-of-order
    readings are scored and may correct alerts; repeats of a reading are dropped."""
    session_gap_s: int = Field(300, ge=1)
    """A device's activity session ends after this many seconds of event time without a
    reading (or at a reboot)."""
    clear_readings: int = Field(3, ge=1)
    """An open alert resolves after this many consecutive calm readings (hysteresis: a reading
    is calm only when clearly below the alert level)."""
    min_readings: int = Field(1, ge=1)
    """Anomalous readings in a row before an alert opens (1: at the first)."""
    trigger_interval: str = "500 milliseconds"
    """Micro-batch trigger of the scorer: a batch starts at most this often, and at once when
    the one before took longer (so at a high rate they run back to back). Half the latency
    objective (an alert within 1 s of its reading): a reading waits at most this long for its
    batch to start, and its batch and the Kafka hops have the other half. A micro-batch costs
    a few tenths of a core-second whatever its rows (planning, tasks, the state store's
    set-up): back to back (``0 seconds``) the scorer runs as many as the machine lets it, 3 a
    second at 1,000 readings/s at a load of 5 here (decision 0021)."""
    max_offsets_per_trigger: int | None = Field(None, ge=1)
    """Upper bound of Kafka records per micro-batch (``None``: everything available)."""
    rules_fast_path: bool = True
    """Rules without a window also run in a Spark Real-Time Mode query, for an early ``open``
    on ``alerts.fast`` within milliseconds (:mod:`fleetwatch.streaming.rules.fast`). It holds
    a task slot per partition of ``telemetry.raw`` while it runs: ``spark.master`` ``local[N]``
    needs N of at least those partitions plus ``spark.shuffle_partitions``."""
    code_generation: bool = False
    """Spark's code generation in the scoring query (whole-stage, and each expression's
    projections: ``spark.sql.codegen.wholeStage``, ``spark.sql.codegen.factoryMode``). A live
    micro-batch holds a few thousand rows, and its tasks build every projection again: the
    code is generated (and found compiled in a cache) per task, which costs more than running
    the same projections interpreted over so few rows. Off by default."""
    shuffle_partitions: int = Field(1, ge=1)
    """Shuffle partitions of the scoring query (its ``spark.sql.shuffle.partitions``, in place
    of ``spark.shuffle_partitions``): the tasks its stateful operator runs in each micro-batch.
    Each task sets the operator's state up again and has a Python worker of its own, a fixed
    cost every batch; one task pays it once, and bounds the operator to one core (decision
    0021). Spark keeps the count a checkpoint was started with: a new value takes effect on a
    new checkpoint only."""
    window_size_s: int = Field(60, ge=1)
    """Event-time windows of each device's metrics (count, mean, std, min, max): their size…"""
    window_slide_s: int = Field(60, ge=1)
    """…and how often one starts (equal to the size: tumbling; smaller: sliding). A window is
    final when the watermark passes its end; the newest one per metric is in
    ``device.state.windows``."""
    fleet_model: Literal["fallback", "always", "off"] = "fallback"
    """Where the multivariate detector is the ``champion`` fleet model of the device's scope
    (its metric set; ``fleetwatch models promote`` publishes it on ``model.params``):
    ``fallback`` for devices whose own multivariate model is still warming up (and those with
    no learned parameters yet), ``always`` for every device of the scope, ``off`` never."""
    metrics_port: int = Field(9102, ge=0, le=65535)
    """Prometheus metrics of the scorer; 0: none."""

    quarantine_after: int = Field(3, ge=1)
    """A device whose micro-batches fail this many times in a row is quarantined: its readings
    go to ``telemetry.deadletter`` unscored, and ``device.state`` says ``quarantined``."""
    quarantine_s: int = Field(3600, ge=1)
    """How long a quarantine lasts, unless lifted sooner (``POST
    /devices/{device_id}/quarantine/lift``)."""
    expire_after_s: int = Field(30 * 24 * 3600, ge=60)
    """A device silent this long in event time leaves the scorer's state (its next reading
    starts it afresh) and the trainer's, whose tombstone withdraws its parameters from
    ``model.params``."""
    max_metrics: int = Field(DEVICE_METRICS, ge=1)
    """Metric names a device may report; a reading's names beyond them are refused (dead
    letter, with the reason) and the rest of the reading is scored."""
    false_alerts_per_device_day: float = Field(1.0, gt=0)
    """The false-alert budget: on normal data however noisy (heavy tails, drift, regimes), each
    of the two calibrated members of a device's detector (seasonal, level) opens about this
    many alerts a day or fewer once it has learned the streams, so the device up to twice as
    many. It is a
    hyperparameter of the detector a device starts with (the trainer's, and ``fleetwatch
    detect``'s): a device keeps the one it started with."""
    device_calibration: bool = False
    """One calibrated decision per device (``models/device_tail.py``): the device's strongest
    evidence across its metrics and members judged against one tail that holds
    ``false_alerts_per_device_day`` for the device as a whole. Off: each member decides on its
    own. A hyperparameter of a new device's detector, as the budget is."""
    new_normal_after_s: float = Field(600.0, ge=0)
    """A metric's shift that lasts this long becomes its new normal: one alert at the change,
    none after (0: never; a lasting shift then stays an alert). A fault shorter than this
    stays an alert for as long as it lasts; one longer is taken as normal once it has lasted
    this long, and the return from it alerts again. A device keeps the value it started
    with."""

    @model_validator(mode="after")
    def _windows_fit(self) -> ScoreSettings:
        if self.window_slide_s > self.window_size_s:
            raise ValueError(
                f"score.window_slide_s ({self.window_slide_s}) must not exceed "
                f"score.window_size_s ({self.window_size_s})"
            )
        return self


class TrainSettings(_Part):
    """The online trainer (``fleetwatch train``). Readings are de-duplicated like the scorer's,
    with ``score.dedup_window``."""

    trigger_interval: str = "10 seconds"
    """How often a micro-batch of new readings is learned (and changed parameters published).
    When a batch takes longer than the interval, batches run back to back and a reading waits
    only for the batch in progress; a longer interval adds up to its length to that wait."""
    max_offsets_per_trigger: int | None = Field(None, ge=1)
    """Upper bound of Kafka records read per micro-batch (``None``: everything available)."""
    tracking: bool = True
    """Report runs to the tracking observer (MLflow) when it is installed."""
    metrics_port: int = Field(9103, ge=0, le=65535)
    """Prometheus metrics of the trainer; 0: none."""


class WebhookSettings(_Part):
    """Alert webhooks (``fleetwatch api``): delivery, retries and which targets are allowed."""

    enabled: bool = True
    """Run the dispatcher (consumes ``alerts``) and the delivery workers in the API process."""
    consumer_group: str | None = None
    """Default: ``{api.consumer_group}-webhooks``."""
    allow_private: bool = False
    """Allow loopback, private and link-local targets (refused by default: SSRF)."""
    timeout_s: float = Field(5.0, gt=0, le=60)
    """One delivery attempt's HTTP timeout."""
    backoff_base_s: float = Field(1.0, gt=0)
    """First retry delay; doubles per attempt, with full jitter, up to ``backoff_cap_s``."""
    backoff_cap_s: float = Field(300.0, gt=0)
    max_age_s: float = Field(24 * 3600.0, gt=0)
    """A delivery still failing this long after its event is dead-lettered (redrive by API)."""
    max_attempts: int = Field(100, ge=1)
    """...or after this many attempts, whichever comes first."""
    concurrency: int = Field(4, ge=1, le=64)
    """Deliveries in flight at once."""


class ApiSettings(_Part):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    database_url: str | None = None
    """SQLAlchemy URL; default: SQLite at ``{run_dir}/api.db``."""
    consumer_group: str = "fleetwatch-api"
    consumer_session_timeout_s: float = Field(45.0, ge=1, le=3600)
    """How long the broker waits for an API consumer that stopped heartbeating before it gives
    the consumer's partitions to another (Kafka's ``session.timeout.ms``; librdkafka's default,
    45 s), for the materialiser's group and the webhook dispatcher's. After a crash (``kill
    -9``, a lost host) nothing of those partitions is materialised or dispatched until then,
    whether by another replica or by the restarted API. Shorter hands over sooner; a process
    that stalls longer than it loses its partitions, and the broker refuses one below its
    ``group.min.session.timeout.ms`` (6 s by default)."""
    anonymous_read: bool = False
    """Requests without an API key get the ``read`` scope. Only on a loopback host (the demo)."""
    key_cache_s: float = Field(5.0, ge=0)
    """How long a checked API key is trusted without a database look-up (revocation delay)."""
    command_ttl_s: float = Field(300.0, gt=0)
    """Default time a command may wait for its acknowledgement before it is ``timed_out``."""
    telemetry_per_device: int = Field(500, ge=0)
    """Recent readings kept per device for ``/devices/{id}/telemetry``; 0: not materialised."""
    telemetry_retention_s: float = Field(7 * 86_400.0, gt=0)
    """How long (event time) a reading stays in the API's store, however few a device has; a
    device the trainer forgets (``score.expire_after_s`` of silence) loses its readings then."""
    max_body_bytes: int = Field(1024 * 1024, ge=1024)
    """The largest request body accepted (413 beyond it, before the body is parsed or the key
    checked)."""
    access_log: bool = False
    """uvicorn's log line per request (request latency by route is on ``/metrics`` either way;
    a line per request costs the server at hundreds of requests per second)."""
    webhooks: WebhookSettings = WebhookSettings()


class GatewaySettings(_Part):
    client_id: str = "fleetwatch-gateway"
    share_group: str = "fleetwatch"
    """MQTT v5 shared-subscription group, so several gateways split the load."""
    shared: bool = False
    """Subscribe through the shared group ``share_group``, for several gateway processes or
    replicas (always with ``workers`` > 1). Off, one gateway holds a plain subscription, which
    Mosquitto keeps in its persistence across its own restart: it does not keep a shared one
    (2.0), so until the gateways subscribe again after a broker restart it drops readings."""
    device_rate: float = Field(10.0, gt=0)
    """Telemetry messages a second one device may send on average, on its own clock (a token
    bucket per device, :mod:`fleetwatch.ingest.rate`): ten times a device that reports every
    second. A message beyond it and ``device_burst`` is dead-lettered with the reason."""
    device_burst: int = Field(100, ge=1)
    """Messages a device may send at once above its rate: a device back from an outage sends
    what it buffered in batch payloads (up to 1,000 readings each)."""
    device_backlog_s: float = Field(3600.0, ge=0)
    """The longest backlog (a gateway, Kafka or network outage the broker queued through)
    counted at the pace its devices published it rather than the pace it arrives at; it is also
    the most a device lying about its clock can gain: ``device_backlog_s * device_rate``
    messages, once."""
    max_payload_bytes: int = Field(256 * 1024, ge=256)
    """The largest telemetry payload the gateway accepts; a larger one is dead-lettered with
    its reason. The broker refuses outright a message over four times this
    (:data:`fleetwatch.stack.mosquitto.BROKER_PAYLOAD_FACTOR`)."""
    max_in_flight: int = Field(10_000, ge=1, le=65_535)
    """Unacknowledged MQTT messages at once (MQTT v5 receive-maximum): the backpressure bound."""
    linger_ms: int = Field(20, ge=0)
    """How long the Kafka producer gathers records into a request: 2 % of the one-second
    publish-to-alert objective, long enough that a request carries many readings at a few
    thousand a second (the producer's network thread costs per request, not per reading)."""
    producer_queue_messages: int = Field(100_000, ge=100)
    producer_queue_kbytes: int = Field(64 * 1024, ge=1024)
    workers: int = Field(1, ge=1, le=64)
    metrics_port: int = Field(9101, ge=0, le=65535)
    """Prometheus metrics of the gateway (with ``--workers N``, all workers' summed); 0: none."""


class MlflowSettings(_Part):
    """Where training runs are tracked and fleet models registered."""

    tracking_uri: str | None = None
    """An MLflow tracking server (``http://…``) or store URI. Default: a local SQLite store at
    ``{run_dir}/mlflow/mlflow.db`` (tracking and registry) with artifacts under
    ``{run_dir}/mlflow/artifacts``."""
    experiment: str = "fleetwatch-training"
    """The experiment every training run is logged in."""
    model_prefix: PlainName = "fleetwatch"
    """Registered fleet models are named ``{model_prefix}-{scope}``."""


class ObjectStoreSettings(_Part):
    """The S3-compatible store behind ``s3a://`` checkpoints (Hadoop's S3A connector)."""

    endpoint: str | None = None
    """The store's URL (``http://minio:9000``); unset for AWS S3 itself."""
    region: str | None = None
    """The buckets' region; unset lets the connector find it (AWS S3)."""
    path_style_access: bool = False
    """Address a bucket as ``{endpoint}/{bucket}`` instead of ``{bucket}.{endpoint}``: most
    S3-compatible servers need it."""
    access_key: SecretStr | None = None
    secret_key: SecretStr | None = None
    """The store's credentials, both or neither (from the environment or ``.env``, never the
    command line). Neither: the connector's own chain (``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY``, an instance or pod role)."""
    jars_dir: Path | None = None
    """hadoop-aws, its AWS SDK bundle and Spark's cloud checkpoint manager. Default:
    ``{home}/.cache/jvm/s3a`` (filled by ``make setup``)."""

    @model_validator(mode="after")
    def _both_keys_or_neither(self) -> ObjectStoreSettings:
        if (self.access_key is None) != (self.secret_key is None):
            raise ValueError(
                "object_store.access_key and object_store.secret_key go together: set both "
                "or neither"
            )
        return self


class PrometheusSettings(_Part):
    """The local Prometheus that ``fleetwatch stack up --with-prometheus`` runs (Debian's
    ``prometheus`` binary, config and data under ``{run_dir}/prometheus``)."""

    port: int = Field(9090, ge=1, le=65535)
    """Its HTTP port on loopback (queries, ``/-/ready``, the web UI)."""
    scrape_interval_s: int = Field(2, ge=1, le=300)
    """How often every target is scraped: short, so a fresh run shows data within seconds."""
    retention: Duration = "2d"
    """How long samples are kept (``--storage.tsdb.retention.time``)."""
    rules_dir: Path | None = None
    """The alerting rules it evaluates: every ``*.yml`` of this directory. Default:
    ``{home}/deploy/prometheus/rules``, the rules compose and Kubernetes load too."""


class Settings(BaseSettings):
    """Everything a fleetwatch process needs to know. Frozen after it is built."""

    model_config = SettingsConfigDict(
        env_prefix="FLEETWATCH_",
        env_nested_delimiter="__",
        env_parse_none_str="none",  # FLEETWATCH_X=none unsets an optional setting
        env_file=".env",
        extra="ignore",
        frozen=True,
    )

    home: Path = Field(default_factory=_project_home)
    run_dir: Path | None = None
    """Data dirs, logs, pid files and checkpoints. Default: ``{home}/.run``."""
    log_level: str = "INFO"

    kafka: KafkaSettings = KafkaSettings()
    mqtt: MqttSettings = MqttSettings()
    topics: TopicSettings = TopicSettings()
    spark: SparkSettings = SparkSettings()
    score: ScoreSettings = ScoreSettings()
    train: TrainSettings = TrainSettings()
    api: ApiSettings = ApiSettings()
    gateway: GatewaySettings = GatewaySettings()
    mlflow: MlflowSettings = MlflowSettings()
    prometheus: PrometheusSettings = PrometheusSettings()
    object_store: ObjectStoreSettings = ObjectStoreSettings()

    @property
    def run_path(self) -> Path:
        return (self.run_dir or self.home / ".run").resolve()

    @property
    def jvm_cache(self) -> Path:
        return self.home / ".cache" / "jvm"

    @property
    def spark_jars_dir(self) -> Path:
        return self.spark.jars_dir or self.jvm_cache / "spark-kafka"

    @property
    def checkpoint_root(self) -> str:
        """The checkpoints' root: a Hadoop filesystem URI, or an absolute local path."""
        return self.spark.checkpoint_dir or str(self.run_path / "checkpoints")

    @property
    def s3a_jars_dir(self) -> Path:
        return self.object_store.jars_dir or self.jvm_cache / "s3a"

    @property
    def database_url(self) -> str:
        return self.api.database_url or f"sqlite:///{self.run_path / 'api.db'}"

    @property
    def mlflow_local(self) -> bool:
        """Whether MLflow is the embedded store in the run directory (no tracking URI set)."""
        return self.mlflow.tracking_uri is None

    @property
    def mlflow_tracking_uri(self) -> str:
        if self.mlflow.tracking_uri is not None:
            return self.mlflow.tracking_uri
        return f"sqlite:///{self.run_path / 'mlflow' / 'mlflow.db'}"

    @property
    def mlflow_artifacts(self) -> Path:
        """Where the embedded store keeps artifacts (a server decides for itself)."""
        return self.run_path / "mlflow" / "artifacts"
