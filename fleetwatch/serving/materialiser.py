"""Kafka → the API's store: ``alerts``, ``device.state``, ``device.sessions``,
``device.command-acks``, ``model.params``, (bounded per device) ``telemetry.raw`` and, from
``telemetry.deadletter``, each device's latest run of messages the gateway refused for its rate;
and the rules' early opens from ``alerts.fast`` (:mod:`~fleetwatch.serving.store.early`).

Each poll is written in one database transaction, and the Kafka offsets are committed only
after it: a crash repeats at most the last batch, and every write is an idempotent upsert, so a
restart neither loses nor doubles anything. A tombstone (a key, no value) removes what its key
held: on ``model.params`` the device's model and readings (the trainer forgot it), on
``device.state`` its state, on ``device.sessions`` a device's sessions (the scorer forgot it; a
session id's key: that session). A record that breaks its contract is logged,
counted (``skipped``, its topic as the label) and left out. A record that decodes but the
database refuses (a value out of its range, a character it cannot store) fails the poll's
transaction; the poll is then written record by record, each in its own transaction, and a
record refused on its own is logged, counted (``skipped``, topic label ``unwritable:<kind>``)
and left out, so one record never stalls the rest. Either way the record goes to the
dead-letter topic as it was (but a ``telemetry.raw`` record, which the scorer refuses and
dead-letters), with the reason and its place (``fw.stage`` ``api``,
:mod:`fleetwatch.contracts.deadletter`), and the poll's offsets are committed once the dead
letters are in Kafka. Any other failure (the database unreachable, Kafka not taking the dead
letters) rewinds the poll to be tried again."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.orm import Session

from fleetwatch.contracts.deadletter import source_headers
from fleetwatch.contracts.fleet import fleet_scope
from fleetwatch.contracts.identifiers import QUARANTINE_KEY_PREFIX
from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import client_config
from fleetwatch.serving import decode
from fleetwatch.serving.kafka import consumer_config, poll, rewind, where
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.store import Store, now_ms
from fleetwatch.serving.store.early import fold_early, withdraw_unconfirmed
from fleetwatch.serving.store.ingest import AckOutcome, Batch, prune_readings, write
from fleetwatch.serving.webhooks.dispatch import owe
from fleetwatch.serving.worker import Worker

logger = logging.getLogger(__name__)

LAG_EVERY_S = 5.0
PRUNE_EVERY_S = 10.0
REFUSED = (DataError, IntegrityError, OverflowError, ValueError)
"""What the database (or its driver) raises for a record it will not store, whenever it is
tried: unlike a lost connection, trying it again cannot help."""


Refuse = Callable[[Message, str], None]
"""Told of a record the materialiser leaves out, and why."""


def batch_of(
    messages: list[Message],
    kinds: dict[str, str],
    refuse: Refuse,
    sources: dict[int, Message] | None = None,
) -> Batch:
    """Decode a poll into a :class:`Batch`; ``kinds`` maps topic name → record kind. A record
    that breaks its contract goes to ``refuse``; ``sources`` (when given) maps each decoded
    record (by ``id``) to its message."""
    batch = Batch()
    for msg in messages:
        topic = msg.topic() or ""
        kind = kinds.get(topic)
        record: object = None  # the record decoded, if any (a tombstone or a champion: none)
        try:
            gone = decode.tombstone_key(msg.key(), msg.value())
            if kind == "alerts":
                batch.alerts.append(record := decode.decode_alert(msg.value()))
            elif kind == "early":
                batch.early.append(record := decode.decode_alert(msg.value()))
            elif kind == "state" and gone is not None:
                batch.forget_state(gone)  # a tombstone: the scorer forgot the device
            elif kind == "state":
                batch.states.append(record := decode.decode_state(msg.value()))
            elif kind == "sessions" and gone is not None:
                batch.forget_sessions(gone)  # the scorer forgot the device (or the session)
            elif kind == "sessions":
                batch.sessions.append(record := decode.decode_session(msg.value()))
            elif kind == "acks":
                batch.acks.append(record := decode.decode_ack(msg.value()))
            elif kind == "models":
                key = (msg.key() or b"").decode(errors="replace")
                if fleet_scope(key) is not None:
                    pass  # a fleet champion's record is the registry's, not a device's model
                elif msg.value() is None and key and not key.startswith(QUARANTINE_KEY_PREFIX):
                    batch.forget_model(key)  # a tombstone: the trainer forgot the device
                else:
                    batch.models.append(record := decode.decode_model(msg.key(), msg.value()))
            elif kind == "telemetry":
                batch.readings.append(record := decode.decode_reading(msg.value()))
            elif kind == "deadletters":
                _, ts = msg.timestamp()
                place = (msg.partition() or 0, msg.offset() or 0)
                hit = decode.rate_limited(msg.key(), msg.headers(), ts, *place)
                if hit is not None:  # only the gateway's rate-limited ones are kept
                    batch.rate_limited.append(record := hit)
        except Exception as exc:  # noqa: BLE001 - a record is data: any failure refuses it alone
            logger.warning("skipping a %s record at %s: %s", kind, where(msg), exc)
            refuse(msg, f"not a valid {kind} record: {first_line(exc)}")
            continue
        if sources is not None and record is not None:
            sources[id(record)] = msg
    return batch


def first_line(exc: BaseException) -> str:
    """An exception's type and first line, short enough for a header."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


class DeadLetters:
    """Records the materialiser leaves out, to the dead-letter topic as they were, with the
    reason and their place; :meth:`flush` before the poll's offsets are committed."""

    def __init__(self, settings: Settings) -> None:
        self.topic = settings.topics.telemetry_deadletter
        self.producer = Producer(client_config(settings.kafka, {"enable.idempotence": True}))
        self.pending = 0

    def __call__(self, msg: Message, reason: str) -> None:
        place = (msg.topic() or "", msg.partition() or 0, msg.offset() or 0)
        headers: list[tuple[str, str | bytes | None]] = [
            (k, v) for k, v in source_headers("api", reason, *place)
        ]
        self.producer.produce(self.topic, msg.value(), msg.key(), headers=headers)
        self.pending += 1

    def flush(self, timeout_s: float = 30.0) -> None:
        if self.pending:
            left = self.producer.flush(timeout_s)
            if left:
                raise KafkaException(f"{left} dead letters not delivered in {timeout_s} s")
            self.pending = 0


def write_all(session: Session, batch: Batch, now: int) -> list[AckOutcome]:
    """:func:`~fleetwatch.serving.store.ingest.write`, then the early opens of rules folded in
    (:mod:`~fleetwatch.serving.store.early`): those that start an episode, and the withdrawal of
    those the scorer did not confirm, owed to the webhooks in the same transaction."""
    outcomes = write(session, batch, now)
    withdrawn = withdraw_unconfirmed(session, batch.alerts, now)
    owe(session, [*withdrawn, *fold_early(session, batch.early, now)], now)
    return outcomes


class Materialiser(Worker):
    name = "materialiser"

    def __init__(self, store: Store, settings: Settings, metrics: Metrics) -> None:
        super().__init__(store)
        self.metrics = metrics
        self.keep_readings = settings.api.telemetry_per_device
        self.retention_s = settings.api.telemetry_retention_s
        t = settings.topics
        self.kinds = {
            t.alerts: "alerts",
            t.alerts_fast: "early",
            t.device_state: "state",
            t.device_sessions: "sessions",
            t.device_command_acks: "acks",
            t.model_params: "models",
        }
        if self.keep_readings > 0:
            self.kinds[t.telemetry_raw] = "telemetry"
        self.kinds[t.telemetry_deadletter] = "deadletters"
        self.consumer = Consumer(
            consumer_config(
                settings.kafka,
                settings.api.consumer_group,
                settings.api.consumer_session_timeout_s,
            )
        )
        self.dead = DeadLetters(settings)
        self.consumer.subscribe(sorted(self.kinds))
        self.stored = 0
        self._touched: set[str] = set()
        self._next_prune = time.monotonic() + PRUNE_EVERY_S
        self._next_lag = time.monotonic()
        self._latest_ts: dict[str, int] = {}

    def step(self) -> float:
        self._housekeeping()
        messages = poll(self.consumer)
        if not messages:
            return 0
        sources: dict[int, Message] = {}
        batch = batch_of(messages, self.kinds, self._refused, sources)
        try:
            outcomes = self._write(batch, sources)
            self.dead.flush()
        except Exception:
            rewind(self.consumer, messages)
            raise
        self.consumer.commit(asynchronous=False)
        self.stored += len(batch)
        self._touched.update(r.device_id for r in batch.readings)
        for outcome in outcomes:
            label = "late_ack" if outcome.status == "late" else outcome.status
            self.metrics.commands.labels(outcome=label).inc()
        for msg in messages:
            topic = msg.topic() or ""
            self.metrics.materialised.labels(topic=topic).inc()
            _, ts = msg.timestamp()
            if ts > 0:
                self._latest_ts[topic] = max(self._latest_ts.get(topic, 0), ts)
        return 0

    def _refused(self, msg: Message, reason: str) -> None:
        topic = msg.topic() or ""
        self.metrics.skipped.labels(topic=topic).inc()
        if self.kinds.get(topic) not in ("telemetry", "deadletters"):
            # a telemetry.raw record that is not a reading is the scorer's to dead-letter:
            # it reads the same record, and one dead letter per bad record is the contract;
            # a dead letter is never dead-lettered again
            self.dead(msg, reason)

    def _write(self, batch: Batch, sources: dict[int, Message] | None = None) -> list[AckOutcome]:
        """The poll in one transaction, or record by record when the database refuses it; a
        record refused on its own goes to the dead letters (its message from ``sources``)."""
        try:
            with self.store.session() as session, session.begin():
                return write_all(session, batch, now_ms())
        except REFUSED as exc:
            logger.warning(
                "a poll of %d records was refused (%s); writing them one by one",
                len(batch),
                type(exc).__name__,
            )
        outcomes: list[AckOutcome] = []
        for kind, single in batch.each():
            try:
                with self.store.session() as session, session.begin():
                    outcomes += write_all(session, single, now_ms())
            except REFUSED as exc:
                self.metrics.skipped.labels(topic=f"unwritable:{kind}").inc()
                logger.error("skipping a %s record the store refuses: %s", kind, first_line(exc))
                msg = (sources or {}).get(id(getattr(single, kind)[0]))
                if msg is not None:
                    self.dead(msg, f"the store refuses it: {first_line(exc)}")
        return outcomes

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now >= self._next_lag:
            self._next_lag = now + LAG_EVERY_S
            self._measure_lag()
        if now >= self._next_prune and self._touched:
            self._next_prune = now + PRUNE_EVERY_S
            devices, self._touched = sorted(self._touched), set()
            with self.store.session() as session, session.begin():
                oldest = now_ms() - int(self.retention_s * 1000)
                pruned = prune_readings(session, devices, self.keep_readings, oldest)
            if pruned:
                logger.debug("pruned %d old readings of %d devices", pruned, len(devices))

    def _measure_lag(self) -> None:
        """Records behind, from the high watermarks the fetches brought (no broker round trip)."""
        wall_ms = now_ms()
        for topic, ts in self._latest_ts.items():
            self.metrics.lag_seconds.labels(topic=topic).set(max(0.0, (wall_ms - ts) / 1000))
        try:
            assigned = self.consumer.assignment()
            if not assigned:
                return
            lag: dict[str, int] = {}
            for tp in self.consumer.position(assigned):
                _, high = self.consumer.get_watermark_offsets(
                    TopicPartition(tp.topic, tp.partition), cached=True
                )
                if high < 0:  # nothing fetched from this partition yet
                    continue
                behind = high - tp.offset if tp.offset >= 0 else high
                lag[tp.topic] = lag.get(tp.topic, 0) + max(0, behind)
        except KafkaException as exc:
            logger.debug("materialiser lag not measured: %s", exc)
            return
        for topic, behind in lag.items():
            self.metrics.lag_records.labels(topic=topic).set(behind)

    def close(self) -> None:
        self.dead.producer.flush(10)
        self.consumer.close()
