"""Prometheus metrics of the gateway, served on ``gateway.metrics_port``.

Every label has a bounded set of values: the kind of a rejection (:data:`DEAD_LETTER_REASONS`),
librdkafka's error names; never a device id, a topic of a device or a reason's free text. Which
devices are over their rate is in the dead letters (and the API's device); here, how many
(:class:`OverRate`).

With ``--workers N`` every worker process counts into files of its own
(prometheus-client's multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR`` set by the supervisor)
and the supervisor serves their sum (:func:`supervisor_registry`); the gauges add up the live
workers' values. With one worker the process serves its own registry.
"""

from __future__ import annotations

import shutil
import threading
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from fleetwatch.contracts.deadletter import RATE_LIMITED_RUN_S
from fleetwatch.contracts.settings import Settings
from fleetwatch.ingest.accept import Outcome
from fleetwatch.ingest.broker_stats import SysBridge
from fleetwatch.ingest.errors import RejectKind
from fleetwatch.ingest.readiness import gateway_readiness
from fleetwatch.runtime import serve_metrics

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message

KAFKA_REFUSED = "kafka_refused"
"""The dead-letter reason of a record Kafka refused for good (its error name is counted in
``fleetwatch_gateway_kafka_delivery_errors_total``)."""
DEAD_LETTER_REASONS: tuple[str, ...] = (*get_args(RejectKind), KAFKA_REFUSED)

PRODUCE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0)
"""Seconds from a record handed to the producer to its delivery report (``linger.ms`` is 5 ms;
while Kafka is away a record waits for as long as that lasts)."""
OFFSET_BUCKETS = (0.01, 0.05, 0.25, 1.0, 5.0, 30.0, 120.0, 600.0, 3600.0, 6 * 3600.0, 86400.0)
"""Seconds of clock offset: network delay only at the bottom, devices whose clock is minutes,
hours or days off further up (the gateway accepts up to 7 days)."""

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.messages = Counter(
            "fleetwatch_gateway_mqtt_messages",
            "MQTT messages received (telemetry and command acks)",
            registry=r,
        )
        self.accepted = Counter(
            "fleetwatch_gateway_readings_accepted",
            "Readings accepted and handed to Kafka for the raw telemetry topic",
            registry=r,
        )
        self.acks_forwarded = Counter(
            "fleetwatch_gateway_command_acks_forwarded",
            "Device acknowledgements of commands handed to Kafka",
            registry=r,
        )
        self.dead_lettered = Counter(
            "fleetwatch_gateway_dead_lettered",
            "Readings and command acks sent to the dead-letter topic, by the kind of reason",
            ["reason"],
            registry=r,
        )
        self.clamped = Counter(
            "fleetwatch_gateway_clamped_event_times",
            "Accepted readings whose corrected event time was clamped to their arrival "
            "(a device clock that jumped ahead)",
            registry=r,
        )
        self.clock_offset = Histogram(
            "fleetwatch_gateway_clock_offset_seconds",
            "Absolute clock offset applied to each accepted reading's device time",
            buckets=OFFSET_BUCKETS,
            registry=r,
        )
        self.produce_latency = Histogram(
            "fleetwatch_gateway_produce_latency_seconds",
            "From a record handed to the Kafka producer to its delivery report (delivered)",
            buckets=PRODUCE_BUCKETS,
            registry=r,
        )
        self.delivery_errors = Counter(
            "fleetwatch_gateway_kafka_delivery_errors",
            "Delivery reports with an error, by librdkafka error name",
            ["error"],
            registry=r,
        )
        self.in_flight = Gauge(
            "fleetwatch_gateway_in_flight_messages",
            "MQTT messages whose records Kafka has not all confirmed yet (unacknowledged)",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.producer_queue = Gauge(
            "fleetwatch_gateway_producer_queue_records",
            "Records in the Kafka producer's queue, waiting to be sent or confirmed",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.mqtt_connected = Gauge(
            "fleetwatch_gateway_mqtt_connected",
            "Gateway processes connected to the MQTT broker",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.mqtt_reconnects = Counter(
            "fleetwatch_gateway_mqtt_reconnects",
            "Connections to the MQTT broker after a process's first",
            registry=r,
        )
        self.commands_relayed = Counter(
            "fleetwatch_gateway_commands_relayed",
            "Commands published to devices over MQTT and acknowledged by the broker",
            registry=r,
        )
        self.commands_invalid = Counter(
            "fleetwatch_gateway_commands_invalid",
            "Records of the commands topic that are not a valid command (skipped)",
            registry=r,
        )
        self.rate_limited_devices = Gauge(
            "fleetwatch_gateway_rate_limited_devices",
            f"Devices with a message dead-lettered for their rate in the last "
            f"{RATE_LIMITED_RUN_S} s (summed over workers: a device whose messages a shared "
            f"subscription spreads over two counts in each)",
            registry=r,
            multiprocess_mode="livesum",
        )
        self._dead = {reason: self.dead_lettered.labels(reason) for reason in DEAD_LETTER_REASONS}
        # counted per message and record in plain integers, published by :meth:`flush`
        self._offsets = _Buckets(self.clock_offset)
        self._latencies = _Buckets(self.produce_latency)
        self._from_mqtt = _Counts()
        """Counted on MQTT's thread (:meth:`handled`)."""
        self._from_kafka = _Counts()
        """Counted on the main thread (:meth:`delivered`, :meth:`settled`)."""
        self._opened = self._settled = 0

    def handled(self, outcome: Outcome, telemetry: bool) -> None:
        """One MQTT message's outcome: what was accepted, clamped, dead-lettered and why. The
        message is in flight until :meth:`settled`."""
        counts = self._from_mqtt.pending
        counts[self.messages] += 1
        self._opened += 1
        accepted = outcome.accepted
        if accepted:
            if telemetry:
                counts[self.accepted] += len(accepted)
                clamped = 0
                for ok in accepted:
                    self._offsets.observe(counts, abs(ok.clock_offset_ms) / 1000)
                    clamped += ok.clamped
                if clamped:
                    counts[self.clamped] += clamped
            else:
                counts[self.acks_forwarded] += len(accepted)
        for dl in outcome.rejected:
            for kind, readings in dl.kinds.items():
                counts[self._dead[kind]] += readings

    def delivered(self, err: KafkaError | None, record: Message) -> None:
        """A delivery report: its latency, or its error."""
        if err is not None:
            self.delivery_errors.labels(err.name()).inc()
            return
        latency = record.latency()
        if latency is not None:
            self._latencies.observe(self._from_kafka.pending, latency)

    def settled(self) -> None:
        """Every record of a message :meth:`handled` has its delivery report."""
        self._settled += 1

    def refused(self) -> None:
        """A record Kafka refused for good goes to the dead-letter topic instead."""
        self._dead[KAFKA_REFUSED].inc()

    def flush(self) -> None:
        """Publish what was counted since the last flush (from the main loop, a few times a
        second): a Prometheus counter costs a lock, and a file write in multiprocess mode, per
        increment, so messages and records are counted in plain integers and added here."""
        for counts in (self._from_mqtt, self._from_kafka):
            for target, added in counts.added():
                target.inc(added)
        self.in_flight.set(self._opened - self._settled)


class _Counts:
    """Amounts one thread adds to (``pending[target] += n``) and :meth:`added` hands to
    another, by what they are to be added to (a counter, a histogram's bucket or sum). No
    lock: only the counting thread writes ``pending``, and copying it is atomic."""

    __slots__ = ("_published", "pending")

    def __init__(self) -> None:
        self.pending: defaultdict[Any, float] = defaultdict(int)
        self._published: dict[Any, float] = {}

    def added(self) -> list[tuple[Any, float]]:
        """What was added since the last call."""
        now = self.pending.copy()
        published = self._published
        self._published = now
        return [(t, n - published.get(t, 0)) for t, n in now.items() if n != published.get(t, 0)]


class _Buckets:
    """Where an observation of ``histogram`` goes: its bucket and its sum, to add to later
    (:class:`_Counts`), as ``Histogram.observe`` would add at once."""

    __slots__ = ("_bounds", "_buckets", "_sum")

    def __init__(self, histogram: Histogram) -> None:
        # prometheus_client's own bucket values (the last is +Inf) and sum; the unit tests
        # hold a flushed histogram to one observed value by value
        self._buckets: list[Any] = histogram._buckets
        self._sum: Any = histogram._sum
        self._bounds = histogram._upper_bounds

    def observe(self, counts: defaultdict[Any, float], value: float) -> None:
        counts[self._buckets[bisect_left(self._bounds, value)]] += 1
        counts[self._sum] += value


class OverRate:
    """The devices over their rate: those with a message dead-lettered for it in the last
    ``window_s`` (``clock``: the gateway's, in seconds). Their number is the gauge ``gauge``,
    whatever the fleet's size; a device leaves ``window_s`` after its last such message, so
    memory follows the devices over their rate. Thread-safe: MQTT's thread counts, the main
    loop sweeps."""

    def __init__(
        self,
        gauge: Gauge,
        window_s: float = RATE_LIMITED_RUN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gauge = gauge
        self.window_s = window_s
        self.clock = clock
        self._devices: dict[str, tuple[float, float]] = {}
        """Device → (when it was last warned of, its last message over its rate)."""
        self._lock = threading.Lock()

    def hit(self, device_id: str) -> bool:
        """A message of ``device_id`` over its rate; ``True`` when it is to be logged: its
        first in ``window_s``, then once every ``window_s`` while it lasts."""
        now = self.clock()
        with self._lock:
            seen = self._devices.get(device_id)
            warn = seen is None or now - seen[0] >= self.window_s
            self._devices[device_id] = (now if seen is None or warn else seen[0], now)
            self.gauge.set(len(self._devices))
        return warn

    def sweep(self) -> None:
        """Devices with no message over their rate for ``window_s`` leave the count."""
        now = self.clock()
        with self._lock:
            self._devices = {
                d: seen for d, seen in self._devices.items() if now - seen[1] < self.window_s
            }
            self.gauge.set(len(self._devices))

    def __len__(self) -> int:
        return len(self._devices)


@contextmanager
def exported(settings: Settings, registry: CollectorRegistry, workers: int = 1) -> Iterator[None]:
    """Serve ``registry`` and the MQTT broker's own figures (:mod:`broker_stats`) on
    ``gateway.metrics_port`` while the block runs (nothing when it is 0), with ``/healthz``
    and ``/readyz``: ready when the ``workers`` counting into ``registry`` are all connected
    and subscribed and Kafka answers (:mod:`~fleetwatch.ingest.readiness`)."""
    port = settings.gateway.metrics_port
    ready = gateway_readiness(settings, registry, workers)
    with serve_metrics(registry, port, "FLEETWATCH_GATEWAY__METRICS_PORT", ready):
        if port == 0:
            yield
            return
        bridge = SysBridge(settings, registry)
        bridge.start()
        try:
            yield
        finally:
            bridge.stop()


def metrics_dir(settings: Settings) -> Path:
    """Where supervised workers keep their figures (emptied when a supervisor starts)."""
    return settings.run_path / "gateway" / "metrics"


def supervisor_registry(path: Path) -> CollectorRegistry:
    """A registry of the sum of every worker's figures kept under ``path`` (emptied now: a
    previous run's files would be added to this one's)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))  # type: ignore[no-untyped-call]
    return registry


def worker_gone(pid: int, path: Path) -> None:
    """A worker exited: its gauges no longer count (its counters still do)."""
    mark_process_dead(pid, str(path))  # type: ignore[no-untyped-call]
