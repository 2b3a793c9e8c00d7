"""Where a scorer micro-batch's time goes: the scorer's own plan, in this process, fed
straight into Kafka (no MQTT, no gateway) at a fixed rate, with Spark's progress per batch
and the Python side of the stateful operator timed per call.

Load: ``DEVICES`` devices at ``--rate`` readings/s in total (temperature 21 ± 0.5, the fixed
baseline's 21 ± 8), plus ``PROBES`` probe devices at 1 reading/s whose every
``PROBE_SPIKE_EVERY``-th reading is a spike (60): latency = the spike's produce time to its
``open`` alert arriving at a consumer of ``alerts`` (the scorer's hop alone).

Per micro-batch, from ``query.recentProgress``: ``durationMs`` (latestOffset, getBatch,
queryPlanning, walCommit, addBatch, commitOffsets, triggerExecution), input rows, and the
state operator's commit time and custom metrics. Per call of ``handleInputRows`` in the Python
workers (a wrapper around the scorer's processor): wall time, time in state calls (the
``live`` value state's get/update), rows. Calls are assigned to the batch whose trigger
interval contains them.

``--buckets N`` keys the state by N buckets of devices instead of the plan's 16 (an
experiment: the live scorer's checkpoint is keyed by its own). ``--conf k=v`` sets Spark SQL
confs before the query starts; ``--source k=v`` / ``--sink k=v`` add options to the Kafka
reader of ``telemetry.raw`` / the Kafka writer. The session is the scorer's own
(:func:`~fleetwatch.streaming.spark_session.build_session`), so the settings' confs hold unless
overridden (the pre-changelog baseline:
``--conf spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=false``). Each
run has its own topics and a fresh checkpoint. Prints a summary per phase and, last, one JSON
line.

    python bench/pipeline/score_anatomy.py [--rates 1000,5000] [--seconds 40] [--buckets N]
        [--conf k=v] [--source k=v] [--sink k=v] [--label L] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import (
    CpuShares,
    isolated_env,
    load_avg_1m,
    percentile,
    percentiles,
    write_results,
)
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.settings import KafkaSettings, Settings
from fleetwatch.kafka_config import client_config, spark_options
from fleetwatch.stack.topics import delete_topics

DEVICES, PROBES, PROBE_SPIKE_EVERY = 1000, 20, 5
PHASES_MS = (
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


class Load(threading.Thread):
    """``rate`` readings/s over DEVICES devices, plus the probes; spike produce times."""

    def __init__(self, kafka: KafkaSettings, topic: str, linger_ms: int = 5) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(client_config(kafka, {"linger.ms": linger_ms}))
        self.topic = topic
        self.rate = 0.0
        self.sent: dict[tuple[str, int], int] = {}
        self.stop = threading.Event()
        self.seq: dict[str, int] = {}

    def _send(self, device: str, value: float) -> int:
        seq = self.seq.get(device, 0)
        self.seq[device] = seq + 1
        at = now_ms()
        record = {
            "v": 1,
            "device_id": device,
            "seq": seq,
            "event_ms": at,
            "device_event_ms": at,
            "device_sent_ms": at,
            "received_ms": at,
            "clock_offset_ms": 0,
            "metrics": {"temperature": value},
        }
        self.producer.produce(
            self.topic, json.dumps(record).encode(), key=device.encode(), timestamp=at
        )
        return seq

    def run(self) -> None:
        rng = np.random.default_rng(3)
        tick, next_probe, i = 0.01, time.monotonic(), 0
        carry = 0.0
        probe_round = 0
        while not self.stop.is_set():
            t = time.monotonic()
            carry += self.rate * tick
            n, carry = int(carry), carry - int(carry)
            values = 21.0 + rng.normal(0, 0.5, n)
            for v in values:
                self._send(f"d{i % DEVICES}", float(v))
                i += 1
            if t >= next_probe:
                for p in range(PROBES):
                    device = f"probe{p}"
                    spike = (probe_round + p) % PROBE_SPIKE_EVERY == 0
                    at = now_ms()
                    seq = self._send(device, 60.0 if spike else 21.0)
                    if spike:
                        self.sent[(device, seq)] = at
                probe_round += 1
                next_probe += 1.0
            self.producer.poll(0)
            self.stop.wait(max(0.0, tick - (time.monotonic() - t)))
        self.producer.flush(10)


class Alerts(threading.Thread):
    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            client_config(
                kafka,
                {
                    "group.id": f"anatomy-{uuid.uuid4().hex[:8]}",
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 10,
                },
            )
        )
        self.consumer.subscribe([topic])
        self.opened: dict[tuple[str, int], int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for msg in self.consumer.consume(1000, timeout=0.05):
                if msg.error() is not None:
                    continue
                arrived = now_ms()
                value = json.loads(msg.value() or b"{}")
                if value.get("status") == "open":
                    self.opened[(value["device_id"], value["seq"])] = arrived
        self.consumer.close()


def timed_processor(inner: Any, log_path: str) -> Any:
    """A processor that runs ``inner`` and appends one line per call to ``log_path``:
    kind, start ms, end ms, rows, ms in ``live`` state calls."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Timed(StatefulProcessor):
        def init(self, handle: Any) -> None:
            inner.init(handle)
            self.state_ms = 0.0
            live = inner.live
            outer = self

            class LiveProxy:
                def get(self) -> Any:
                    t = time.perf_counter()
                    try:
                        return live.get()
                    finally:
                        outer.state_ms += (time.perf_counter() - t) * 1000

                def update(self, value: Any) -> None:
                    t = time.perf_counter()
                    try:
                        live.update(value)
                    finally:
                        outer.state_ms += (time.perf_counter() - t) * 1000

            inner.live = LiveProxy()
            self.log = open(f"{log_path}.{os.getpid()}", "a", buffering=1)  # noqa: SIM115

        def _timed(self, kind: str, gen: Any, rows: int) -> Any:
            self.state_ms = 0.0
            t0 = time.time() * 1000
            out = list(gen)
            t1 = time.time() * 1000
            self.log.write(f"{kind} {t0:.1f} {t1:.1f} {rows} {self.state_ms:.2f}\n")
            return out

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            chunks = list(rows)
            n = sum(len(c) for c in chunks)
            yield from self._timed("rows", inner.handleInputRows(key, iter(chunks), timerValues), n)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:
            yield from self._timed(
                "timer", inner.handleExpiredTimer(key, timerValues, expiredTimerInfo), 0
            )

        def close(self) -> None:
            inner.close()

    return Timed()


def start(
    spark: Any,
    settings: Settings,
    log_path: str,
    source: dict[str, str],
    sink: dict[str, str],
    checkpoint: Path,
    no_counts: bool = False,
) -> Any:
    from pyspark.sql import functions as F

    from fleetwatch.streaming.kafka_io import kafka_stream
    from fleetwatch.streaming.scorer.batch_counts import counted
    from fleetwatch.streaming.scorer.job import (
        OUTPUT_SCHEMA,
        kafka_rows,
        params_stream,
        scorer_input,
    )
    from fleetwatch.streaming.scorer.processor import device_scorer

    topics = settings.topics
    raw = kafka_stream(spark, settings, topics.telemetry_raw, options=source)
    params = params_stream(spark, settings)
    inputs = scorer_input(raw, params, settings.score.allowed_lateness, topics.quarantine_lifts)
    out = inputs.groupBy("bucket").transformWithStateInPandas(
        statefulProcessor=timed_processor(device_scorer(settings), log_path),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
    )
    # the scorer's plan: its count rows summed and dropped before the sink (or only dropped)
    out = out.where(F.col("role") != "count") if no_counts else counted(out)
    writer = (
        kafka_rows(out)
        .writeStream.format("kafka")
        .queryName("anatomy")
        .options(**spark_options(settings.kafka))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=settings.score.trigger_interval)
    )
    for k, v in sink.items():
        writer = writer.option(k, v)
    return writer.start()


def codegen(spark: Any) -> tuple[int, int]:
    """Whole-JVM counts of generated classes compiled (Janino) and of sources generated so
    far (Spark's ``CodegenMetrics``)."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return (
        int(metrics.METRIC_COMPILATION_TIME().getCount()),
        int(metrics.METRIC_SOURCE_CODE_SIZE().getCount()),
    )


def pcts(values: list[float]) -> dict[str, float | None]:
    return {**percentiles(values, 50, 90), "n": len(values)}


def python_calls(log_path: str) -> list[tuple[str, float, float, int, float]]:
    calls = []
    for f in Path(log_path).parent.glob(Path(log_path).name + ".*"):
        for line in f.read_text().splitlines():
            kind, t0, t1, rows, st = line.split()
            calls.append((kind, float(t0), float(t1), int(rows), float(st)))
    return calls


def summarise(
    progress: list[dict[str, Any]], calls: list[tuple[str, float, float, int, float]]
) -> dict[str, Any]:
    from datetime import datetime

    batches = []
    for p in progress:
        start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
        d = p.get("durationMs", {})
        end = start + d.get("triggerExecution", 0)
        mine = [c for c in calls if start <= c[1] <= end]
        ops = p.get("stateOperators") or [{}]
        op = ops[0]
        custom = op.get("customMetrics", {})
        batches.append(
            {
                "id": p["batchId"],
                "rows": p.get("numInputRows", 0),
                **{k: d.get(k, 0) for k in PHASES_MS},
                "commitTimeMs": op.get("commitTimeMs", 0),
                "allUpdatesTimeMs": op.get("allUpdatesTimeMs", 0),
                "rocksdbCommitCheckpointLatency": custom.get("rocksdbCommitCheckpointLatency", 0),
                "rocksdbCommitFlushLatency": custom.get("rocksdbCommitFlushLatency", 0),
                "rocksdbCommitCompactLatency": custom.get("rocksdbCommitCompactLatency", 0),
                "rocksdbCommitFileSyncLatencyMs": custom.get("rocksdbCommitFileSyncLatencyMs", 0),
                "py_calls": len(mine),
                "py_sum_ms": sum(c[2] - c[1] for c in mine),
                "py_span_ms": (max(c[2] for c in mine) - min(c[1] for c in mine)) if mine else 0,
                "py_state_ms": sum(c[4] for c in mine),
            }
        )
    data = [b for b in batches if b["rows"] > 0]
    nodata = [b for b in batches if b["rows"] == 0]
    keys = [k for k in batches[0] if k not in ("id",)] if batches else []
    return {
        "batches": len(batches),
        "data_batches": len(data),
        "nodata_batches": len(nodata),
        "data": {k: pcts([float(b[k]) for b in data]) for k in keys},
        "nodata": {
            k: pcts([float(b[k]) for b in nodata])
            for k in ("triggerExecution", "addBatch", "walCommit", "commitOffsets", "py_calls")
        },
        "raw": batches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,5000", help="readings/s per phase")
    parser.add_argument("--seconds", type=int, default=40, help="length of each phase")
    parser.add_argument("--warmup", type=int, default=25)
    parser.add_argument("--conf", action="append", default=[], help="spark SQL conf k=v")
    parser.add_argument("--source", action="append", default=[], help="kafka reader option k=v")
    parser.add_argument("--sink", action="append", default=[], help="kafka writer option k=v")
    parser.add_argument(
        "--buckets", type=int, default=None, help="state keys (default: buckets.BUCKETS)"
    )
    parser.add_argument(
        "--no-counts", action="store_true", help="drop the count rows without summing them"
    )
    parser.add_argument("--label", default="run")
    parser.add_argument("--out", default=None, help="write the full JSON here")
    args = parser.parse_args()

    from fleetwatch.streaming.spark_session import build_session

    if args.buckets is not None:
        from fleetwatch.streaming import buckets

        buckets.BUCKETS = args.buckets  # read by scorer_input when the plan is built

    settings = Settings()
    tag = uuid.uuid4().hex[:8]
    run_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-anatomy-", dir=settings.run_path))
    topics, _ = isolated_env(settings, tag, run_dir)
    settings = settings.model_copy(update={"topics": topics, "run_dir": run_dir})
    log_path = str(run_dir / "pycalls")
    spark = build_session(settings, "anatomy")
    from fleetwatch.streaming.scorer.job import query_confs

    for key, value in query_confs(settings).items():  # as the scorer's own query starts
        spark.conf.set(key, value)
    for kv in args.conf:
        k, v = kv.split("=", 1)
        spark.conf.set(k, v)
    kv_source = dict(kv.split("=", 1) for kv in args.source)
    kv_sink = dict(kv.split("=", 1) for kv in args.sink)
    kafka = settings.kafka
    load = Load(kafka, topics.telemetry_raw)
    alerts = Alerts(kafka, topics.alerts)
    load.start()
    alerts.start()
    query = start(
        spark, settings, log_path, kv_source, kv_sink, run_dir / "checkpoint", args.no_counts
    )
    out: dict[str, Any] = {"label": args.label, "conf": args.conf, "source": kv_source}
    out["sink"] = kv_sink
    try:
        load.rate = 1000.0  # every device has state before the first phase
        time.sleep(args.warmup)
        for rate in (float(r) for r in args.rates.split(",")):
            load.rate = rate
            time.sleep(5)  # settle at the new rate
            seen = {p["batchId"] for p in query.recentProgress}
            compiled = codegen(spark)
            shares = CpuShares({"spark": os.getpid()}, ["spark"])
            shares.start()
            lo = now_ms()
            load1 = load_avg_1m()
            time.sleep(args.seconds)
            hi = now_ms()
            cores = shares.cores()
            load2 = load_avg_1m()
            time.sleep(3)
            progress = [json.loads(p.json) for p in query.recentProgress]
            compiles = codegen(spark)[0] - compiled[0], codegen(spark)[1] - compiled[1]
            progress = [p for p in progress if p["batchId"] not in seen]
            summary = summarise(progress, python_calls(log_path))
            sent = {k: t for k, t in list(load.sent.items()) if lo <= t <= hi}
            lat = [float(alerts.opened[k] - t) for k, t in sent.items() if k in alerts.opened]
            phase = {
                "cores": cores,
                "codegen_compiles": compiles[0],
                "codegen_compiled_sources": compiles[1],
                "rate": rate,
                "load_avg_1m": [load1, load2],
                "spikes": len(sent),
                "missed": len(sent) - len(lat),
                "lat_p50": percentile(lat, 50),
                "lat_p90": percentile(lat, 90),
                "lat_p99": percentile(lat, 99),
                **summary,
            }
            out[str(int(rate))] = phase
            short = {k: v for k, v in phase.items() if k not in ("raw", "data", "nodata")}
            print(f"{args.label} @ {int(rate)}/s: {short}", flush=True)
            for k, v in phase["data"].items():
                print(f"   data   {k:32s} p50 {v['p50']!s:>8} p90 {v['p90']!s:>8} (n={v['n']})")
            for k, v in phase["nodata"].items():
                print(f"   nodata {k:32s} p50 {v['p50']!s:>8} p90 {v['p90']!s:>8} (n={v['n']})")
    finally:
        load.stop.set()
        alerts.stop.set()
        query.stop()
        spark.stop()
        delete_topics(kafka, topics.model_dump().values())
    if args.out:
        Path(args.out).write_text(json.dumps(out))
    short_all = {
        r: {k: out[r][k] for k in ("lat_p50", "lat_p99", "load_avg_1m")} for r in out if r.isdigit()
    }
    figures = {"label": args.label, **short_all}
    print(json.dumps(figures))
    write_results(__file__, figures)


if __name__ == "__main__":
    main()
