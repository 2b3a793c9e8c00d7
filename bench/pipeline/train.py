"""Parameter freshness and training throughput of the live trainer, on brokers of its own.

The bench brings up its own Kafka and Mosquitto (:func:`bench.micro.gateway.private_stack`:
free ports, a temporary run dir; a running stack is left alone) and takes them down at the end.
``--devices`` simulated devices send readings (temperature and humidity) straight to
``telemetry.raw`` at ``--rate`` readings/s in rounds (one reading per device per round; event
time = the wall clock at sending = the Kafka timestamp). ``fleetwatch train`` runs as a
subprocess on those topics.

1. Warm-up: one round, then wait until every device has parameters (the JVM start and the first
   batch are not measured).
2. Steady phase, ``--duration`` seconds at ``--rate``; then up to ``--drain`` seconds for the
   trainer to catch up.
3. SIGTERM to the trainer (expect exit 0).
4. Baseline, in the same run: the trainer's input plan (records parsed and packed per device,
   ``mapInArrow``) over the same ``telemetry.raw`` on local Spark (``availableNow``).

Freshness, per steady-phase reading: the Kafka timestamp of the first ``model.params`` record
of its device that covers it (``trained_to_ms`` at or after it) - the reading's Kafka timestamp
(its arrival). Readings never covered are counted apart (``uncovered_readings``). Its median
over the first and over the last fifth of the steady phase tells whether the trainer keeps up
(a lag that does not grow) or falls behind. The
``newest_freshness_*`` figures are per device-batch instead, for the newest reading a record
covers (record timestamp - ``trained_to_ms``): the best case of each batch.

Throughput: steady-phase readings covered by published parameters, divided
by the time from the start of the steady phase to the last of those publications (so a trainer
that keeps up at the offered rate with a lag of L seconds shows ``rate · D / (D + L)`` for a
steady phase of D seconds: it reaches the rate only as the lag goes to 0). Peak RSS:
the trainer's process tree (CLI + JVM + Python workers), sampled every second from /proc; at
its peak, split by class of process (``peak_rss_by_process_mb``: the JVM, the Python workers,
the driver), and the most Python worker processes alive at once (``most_python_workers``,
pyspark's daemon counted).

    python bench/pipeline/train.py [--devices 10000] [--rate 20000] [--duration 180]

Last line: {"freshness_p50_s", "freshness_p95_s", "freshness_p50_first_fifth_s",
"freshness_p50_last_fifth_s", "throughput_rps", "devices", "peak_rss_mb",
"peak_rss_by_process_mb", "most_python_workers",
"rate_rps", "trigger", "steady_readings", "uncovered_readings", "device_batches",
"newest_freshness_p50_s", "newest_freshness_p95_s", "trainer_exit", "baseline_throughput_rps",
"cpu_s", "loadavg_1m"}

``cpu_s``: CPU seconds of the trainer's JVM, its Python workers and its driver process from
the start of the steady phase to the end of the drain; ``loadavg_1m``: the machine's 1-minute
load average at those two moments (the machine may be shared). ``baseline_throughput_rps``:
the trainer's input alone (parse and pack, no learning) over the same topic afterwards.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import (
    cpu_s,
    isolated_env,
    load_avg_1m,
    percentile,
    rss_mb,
    tree,
    write_results,
)
from bench.micro.gateway import private_stack
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.settings import KafkaSettings, Settings
from fleetwatch.contracts.telemetry import SCHEMA_VERSION, TelemetryRecord
from fleetwatch.kafka_config import client_config
from fleetwatch.stack.topics import delete_topics

TEMPLATE = (
    '{{"v":{v},"device_id":"{d}","seq":{s},"event_ms":{t},"device_event_ms":{t},'
    '"device_sent_ms":{t},"received_ms":{t},"clock_offset_ms":0,'
    '"metrics":{{"temperature":{a:.3f},"humidity":{b:.3f}}}}}'
)


def process_class(pid: int) -> str:
    """``jvm``, ``python_workers`` or ``driver`` (``gone`` when the process has exited)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "gone"
    if b"pyspark.daemon" in cmdline or b"pyspark.worker" in cmdline:
        return "python_workers"
    return "jvm" if b"java" in cmdline else "driver"


class PeakRss:
    """Samples the tree's total RSS every ``interval_s`` in a thread; :attr:`peak_mb`, and at
    that peak the RSS per class of process (:attr:`at_peak_mb`); the most Python worker
    processes seen at once (:attr:`most_workers`, the daemon counted). Also the CPU time of each
    process of the tree, last seen (:meth:`cpu_s`: a Python worker that exits between two
    samples loses at most one interval of it)."""

    def __init__(self, pid: int, interval_s: float = 1.0) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self.at_peak_mb: dict[str, float] = {}
        self.most_workers = 0
        self._cpu: dict[int, tuple[str, float]] = {}
        self._cpu_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample_rss()
            self._sample_cpu()
            self._stop.wait(self.interval_s)

    def _sample_rss(self) -> None:
        by_class = {"jvm": 0.0, "python_workers": 0.0, "driver": 0.0}
        workers = 0
        for p in tree(self.pid):
            what = process_class(p)
            if what != "gone":
                by_class[what] += rss_mb(p)
                workers += what == "python_workers"
        self.most_workers = max(self.most_workers, workers)
        if sum(by_class.values()) > self.peak_mb:
            self.peak_mb = sum(by_class.values())
            self.at_peak_mb = {k: round(v) for k, v in by_class.items()}

    def _sample_cpu(self) -> None:
        for p in tree(self.pid):
            what, seconds = process_class(p), cpu_s(p)
            if what != "gone":
                with self._cpu_lock:
                    self._cpu[p] = (what, seconds)

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds used so far by the trainer's processes, per class of process."""
        self._sample_cpu()
        out = {"jvm": 0.0, "python_workers": 0.0, "driver": 0.0}
        with self._cpu_lock:
            for what, seconds in self._cpu.values():
                out[what] += seconds
        return out


class Fleet:
    """Sends rounds of readings; remembers each round's event times per device."""

    def __init__(self, kafka: KafkaSettings, topic: str, devices: int) -> None:
        self.topic = topic
        self.ids = [f"dev-{d:05d}" for d in range(devices)]
        self.phase = np.arange(devices, dtype=np.float64)
        self.rng = np.random.default_rng(0)
        self.rounds: list[np.ndarray] = []
        self.producer = Producer(
            client_config(
                kafka,
                {
                    "linger.ms": 20,
                    "queue.buffering.max.messages": 1_000_000,
                },
            )
        )

    def send_round(self) -> None:
        seq = len(self.rounds)
        n = len(self.ids)
        daily = np.sin(2 * np.pi * seq / 2880 + self.phase)
        factor = self.rng.normal(0.0, 1.0, n)
        temp = 21.0 + 2.0 * daily + 0.8 * factor + self.rng.normal(0.0, 0.3, n)
        hum = 50.0 - 3.0 * daily - 2.0 * factor + self.rng.normal(0.0, 0.5, n)
        times = np.empty(n, np.int64)
        for lo in range(0, n, 500):  # the clock read once per 500 readings
            t = now_ms()
            times[lo : lo + 500] = t
            for i in range(lo, min(lo + 500, n)):
                device = self.ids[i]
                value = TEMPLATE.format(v=SCHEMA_VERSION, d=device, s=seq, t=t, a=temp[i], b=hum[i])
                self.producer.produce(self.topic, value, device, timestamp=t)
        self.producer.poll(0)
        self.rounds.append(times)

    def flush(self) -> None:
        self.producer.flush(30)

    def freshness_s(
        self, records: list[tuple[str, int, int]], first_round: int, end_round: int | None = None
    ) -> list[float]:
        """Per reading of rounds ``first_round..end_round`` covered by a record: the time from
        its arrival to the first record of its device that covers it."""
        times = np.stack(self.rounds[first_round:end_round])  # (rounds, devices)
        by_device: dict[str, list[tuple[int, int]]] = {}
        for device, ts, to_ms in records:
            by_device.setdefault(device, []).append((ts, to_ms))
        out: list[np.ndarray] = []
        for d, device in enumerate(self.ids):
            published = sorted(by_device.get(device, []))
            if not published:
                continue
            stamps = np.array([p[0] for p in published], dtype=np.int64)
            reach = np.maximum.accumulate(np.array([p[1] for p in published], dtype=np.int64))
            at = np.searchsorted(reach, times[:, d], side="left")
            hit = at < reach.size
            out.append((stamps[at[hit]] - times[hit, d]) / 1e3)
        return np.concatenate(out).tolist() if out else []

    def covered(self, trained_to: dict[str, int], first_round: int) -> int:
        """Readings of rounds ``first_round..`` at or before each device's ``trained_to_ms``."""
        times = np.stack(self.rounds[first_round:])  # (rounds, devices)
        upto = np.array([trained_to.get(d, -1) for d in self.ids], dtype=np.int64)
        return int((times <= upto[None, :]).sum())


class ParamsWatch:
    """Reads ``model.params`` in a thread: (device, record timestamp ms, trained_to_ms)."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.records: list[tuple[str, int, int]] = []
        self.consumer = Consumer(
            client_config(
                kafka,
                {
                    "group.id": f"bench-train-{uuid.uuid4().hex[:8]}",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                },
            )
        )
        self.consumer.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        marker = b',"trained_to_ms":'
        while not self._stop.is_set():
            for msg in self.consumer.consume(1000, timeout=0.5):
                value, key = msg.value(), msg.key()
                if msg.error() is not None or not value or not key:
                    continue
                at = value.rindex(marker) + len(marker)  # the header's, after "params"
                to_ms = int(value[at : value.index(b",", at)])
                self.records.append((key.decode(), msg.timestamp()[1], to_ms))

    def devices(self) -> int:
        return len({r[0] for r in list(self.records)})

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.consumer.close()


def wait_for(
    condition: Any, timeout_s: float, what: str, proc: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            print(log.read_text()[-4000:], file=sys.stderr)
            raise SystemExit(f"the trainer exited {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(1.0)


def steady(fleet: Fleet, rate: float, duration: float) -> None:
    """Rounds at ``rate`` readings/s for ``duration`` seconds."""
    period = len(fleet.ids) / rate
    began = time.monotonic()
    k = 0
    while time.monotonic() - began < duration:
        fleet.send_round()
        k += 1
        time.sleep(max(0.0, began + k * period - time.monotonic()))
    fleet.flush()


def baseline_rps(settings: Settings, topic: str, run_dir: Path) -> float:
    """The trainer's input alone over the whole topic (parse and pack per device, no learning;
    availableNow, memory sink): readings/s."""
    from fleetwatch.streaming.kafka_io import kafka_stream
    from fleetwatch.streaming.spark_session import build_session
    from fleetwatch.streaming.trainer.processor import readings_frame

    spark = build_session(settings, "fleetwatch-bench-train-baseline")
    try:
        raw = kafka_stream(spark, settings, topic)
        out = readings_frame(raw, settings.score.dedup_window).select("device_id", "seq")
        began = time.perf_counter()
        query = (
            out.writeStream.format("memory")
            .queryName(f"baseline_{uuid.uuid4().hex[:8]}")
            .option("checkpointLocation", str(run_dir / "baseline"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        wall = time.perf_counter() - began
        rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    finally:
        spark.stop()
    return rows / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=20_000.0, help="readings/s offered")
    parser.add_argument("--duration", type=float, default=180.0, help="steady phase, s")
    parser.add_argument("--drain", type=float, default=60.0, help="catch-up allowed, s")
    parser.add_argument("--trigger", default="10 seconds")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--keep-log", type=Path, help="copy the trainer's log here")
    args = parser.parse_args()
    with private_stack() as (run_dir, settings, stack_env):  # SIGTERM: the brokers go too
        kafka = settings.kafka
        topics, env = isolated_env(settings, uuid.uuid4().hex[:8], run_dir)
        env.update({k: v for k, v in stack_env.items() if k.startswith("FLEETWATCH_")})
        env["FLEETWATCH_TRAIN__TRACKING"] = "false"
        env["FLEETWATCH_TRAIN__TRIGGER_INTERVAL"] = args.trigger
        fleet = Fleet(kafka, topics.telemetry_raw, args.devices)
        watch = ParamsWatch(kafka, topics.model_params)
        try:
            fleet.send_round()
            fleet.flush()
            sample = TEMPLATE.format(v=SCHEMA_VERSION, d="dev-0", s=0, t=1, a=1.0, b=2.0)
            TelemetryRecord.model_validate_json(sample)
            with (run_dir / "train.log").open("wb") as log:
                trainer = subprocess.Popen(
                    [sys.executable, "-m", "fleetwatch.cli.main", "train"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            with PeakRss(trainer.pid) as rss:
                wait_for(
                    lambda: watch.devices() >= args.devices,
                    600,
                    "warm-up",
                    trainer,
                    run_dir / "train.log",
                )
                print(f"warm: {args.devices} devices have parameters", flush=True)
                first_round = len(fleet.rounds)
                load_from = load_avg_1m()
                cpu_from = rss.cpu_s()
                steady_from = now_ms()
                steady(fleet, args.rate, args.duration)
                steady_to = now_ms()
                produced = (len(fleet.rounds) - first_round) * args.devices
                print(f"steady: {produced} readings in {(steady_to - steady_from) / 1e3:.0f} s")
                last = {d: int(t) for d, t in zip(fleet.ids, fleet.rounds[-1], strict=True)}

                def caught_up() -> bool:
                    latest: dict[str, int] = {}
                    for d, _, to_ms in list(watch.records):
                        latest[d] = max(latest.get(d, 0), to_ms)
                    return all(latest.get(d, 0) >= t for d, t in last.items())

                deadline = time.monotonic() + args.drain
                while time.monotonic() < deadline and not caught_up():
                    time.sleep(1.0)
                cpu_to = rss.cpu_s()
                load_to = load_avg_1m()
                trainer.send_signal(signal.SIGTERM)
                try:
                    code: int | None = trainer.wait(timeout=180)
                except subprocess.TimeoutExpired:
                    code = None
                    trainer.kill()
            watch.close()
            records = list(watch.records)
            newest = [
                (ts - to_ms) / 1e3 for _, ts, to_ms in records if steady_from <= to_ms <= steady_to
            ]
            fresh = fleet.freshness_s(records, first_round)
            fifth = max(1, (len(fleet.rounds) - first_round) // 5)
            early = fleet.freshness_s(records, first_round, first_round + fifth)
            late = fleet.freshness_s(records, len(fleet.rounds) - fifth)
            final: dict[str, int] = {}
            for d, _, to_ms in records:
                final[d] = max(final.get(d, 0), to_ms)
            learned = fleet.covered(final, first_round)
            uncovered = produced - learned
            done_ms = max((ts for _, ts, to_ms in records if to_ms >= steady_from), default=0)
            throughput = learned / max((done_ms - steady_from) / 1e3, 1e-3)
            print(f"trainer: {throughput:,.0f} readings/s, exit {code}")
            if code != 0:
                print((run_dir / "train.log").read_text()[-4000:], file=sys.stderr)
            if args.keep_log is not None:
                shutil.copyfile(run_dir / "train.log", args.keep_log)
            base = (
                None if args.no_baseline else baseline_rps(settings, topics.telemetry_raw, run_dir)
            )
        finally:
            watch._stop.set()
            delete_topics(kafka, topics.model_dump().values())
    figures = {
        "freshness_p50_s": percentile(fresh, 50, 2),
        "freshness_p95_s": percentile(fresh, 95, 2),
        "freshness_p50_first_fifth_s": percentile(early, 50, 2),
        "freshness_p50_last_fifth_s": percentile(late, 50, 2),
        "throughput_rps": round(throughput),
        "devices": args.devices,
        "peak_rss_mb": round(rss.peak_mb),
        "peak_rss_by_process_mb": rss.at_peak_mb,
        "most_python_workers": rss.most_workers,
        "rate_rps": args.rate,
        "trigger": args.trigger,
        "steady_readings": produced,
        "uncovered_readings": uncovered,
        "device_batches": len(newest),
        "newest_freshness_p50_s": percentile(newest, 50, 2),
        "newest_freshness_p95_s": percentile(newest, 95, 2),
        "trainer_exit": code,
        "baseline_throughput_rps": None if base is None else round(base),
        "cpu_s": {k: round(cpu_to[k] - cpu_from[k], 1) for k in cpu_to},
        "loadavg_1m": [load_from, load_to],
    }
    print(json.dumps(figures))
    write_results(__file__, figures)


if __name__ == "__main__":
    main()
