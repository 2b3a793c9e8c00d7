"""Spark's Real-Time Mode (``trigger(realTime=…)``) against back-to-back micro-batches
(``trigger(processingTime="0 seconds")``) on a Kafka → Kafka scoring path.

What runs where, found by running it: each query is started under Real-Time Mode on topics of
its own, and either its latency is measured or Spark's error is recorded. The queries:

- ``sql``: ``from_json`` → a fixed-threshold ``where`` (``|temperature - 21| > 8``, the fixed
  baseline) → ``to_json``; measured under both triggers, the micro-batch run is the baseline;
- ``python_udf`` / ``pandas_udf`` / ``map_in_arrow``: the same threshold computed in Python
  (a row-at-a-time ``udf``, a ``pandas_udf``, ``mapInArrow`` — the first scorer's operator);
- ``dedup`` (``dropDuplicatesWithinWatermark``, the trainer's de-duplication) and ``tws``
  (``transformWithStateInPandas``, the scorer's operator) — the stateful steps.

A case refused by Spark's Real-Time Mode allowlist is tried once more with
``spark.sql.streaming.realTimeMode.allowlistCheck=false`` (Spark's own escape hatch, "at your
own risk"), to tell an allowlist refusal from an engine that cannot run the operator. Also
tried: a real-time interval under the 5 s floor, append output mode, ``mapInArrow`` with Arrow
batches of 10 records, and the stateful queries as micro-batches (so that their failure under
Real-Time Mode is Real-Time Mode's). A case without latency phases (``measure``) reports
whether it runs and its p50 at 100 readings/s; ``--measure-python`` measures every rtm case.

Latency: a producer sends small readings (``{"device_id", "seq", "event_ms", "metrics":
{"temperature"}}``, ``event_ms`` = the produce time) at a fixed rate to the query's input topic,
one in ``SPIKE_EVERY`` out of the baseline's band; a consumer of the output topic takes
arrival - ``event_ms`` of each alert (of readings sent within the phase, given 5 s to arrive).
Phases of ``--seconds`` at each ``--rates`` after a warm-up; the 1-minute load average is noted
with each figure (the machine is shared).

Real-Time Mode runs one long-running task per input partition for the length of each
real-time batch, so the session runs on ``local[--slots]`` (task threads, not cores) with
``--slots`` ≥ ``--partitions`` (plus the shuffle partitions for a stateful step). With fewer
slots nothing fails: a partition's records wait for a slot (``--slots 1``: about half the
alerts arrive late).

Last line: {"master", "partitions", "rtm_sql_{p50,p95,p99}_ms_{1k,5k}", "rtm_sql_load1_{1k,5k}",
"mb_sql_…" (the same), and per other case (``CASES``) its figures, "runs: …" or the error text
(followed by what happens with the allowlist check off)}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
from confluent_kafka import Consumer, Producer

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.topics import TopicSpec
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.topics import delete_topics, ensure_topics
from fleetwatch.streaming.spark_session import build_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

SPIKE_EVERY, DEVICES, CENTRE, BAND = 10, 200, 21.0, 8.0
READING_SCHEMA = "device_id STRING, seq BIGINT, event_ms BIGINT, metrics MAP<STRING, DOUBLE>"
ALERT_SCHEMA = "device_id STRING, seq BIGINT, event_ms BIGINT, temperature DOUBLE"
ALLOWLIST_CHECK = "spark.sql.streaming.realTimeMode.allowlistCheck"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else float("nan")


# ---------------------------------------------------------------- the queries


def parsed(raw: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return raw.select(F.from_json(F.col("value").cast("string"), READING_SCHEMA).alias("r")).select(
        "r.device_id", "r.seq", "r.event_ms", F.col("r.metrics")["temperature"].alias("temperature")
    )


def to_kafka(alerts: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return alerts.select(
        F.col("device_id").alias("key"),
        F.to_json(F.struct("device_id", "seq", "event_ms", "temperature")).alias("value"),
    )


def sql_query(raw: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    readings = parsed(raw)
    return to_kafka(readings.where(F.abs(F.col("temperature") - F.lit(CENTRE)) > F.lit(BAND)))


def python_udf_query(raw: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    @F.udf("boolean", useArrow=False)  # row at a time (BatchEvalPythonExec)
    def anomalous(value: float | None) -> bool:
        return value is not None and abs(value - CENTRE) > BAND

    readings = parsed(raw)
    return to_kafka(readings.where(anomalous("temperature")))


def pandas_udf_query(raw: DataFrame) -> DataFrame:
    from pyspark.sql.pandas.functions import pandas_udf

    @pandas_udf("boolean")  # type: ignore[call-overload, untyped-decorator]
    def anomalous(values: pd.Series) -> pd.Series:
        return (values - CENTRE).abs() > BAND

    readings = parsed(raw)
    return to_kafka(readings.where(anomalous("temperature")))


def _keep_anomalous(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyarrow.compute as pc

    for batch in batches:
        off = pc.abs(pc.subtract(batch.column("temperature"), CENTRE))
        yield batch.filter(pc.fill_null(pc.greater(off, BAND), False))


def map_in_arrow_query(raw: DataFrame) -> DataFrame:
    return to_kafka(parsed(raw).mapInArrow(_keep_anomalous, ALERT_SCHEMA))


def dedup_query(raw: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    readings = (
        parsed(raw)
        .withColumn("event_time", F.timestamp_millis("event_ms"))
        .withWatermark("event_time", "2 minutes")
        .dropDuplicatesWithinWatermark(["device_id", "seq"])
    )
    return to_kafka(readings.where(F.abs(F.col("temperature") - F.lit(CENTRE)) > F.lit(BAND)))


def _threshold_processor() -> Any:
    """A per-device processor in the scorer's shape (one ``ValueState``), alerting on the
    fixed threshold and counting the device's readings."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class Threshold(StatefulProcessor):
        def init(self, handle: Any) -> None:
            schema = StructType([StructField("count", LongType())])
            self.count = handle.getValueState("count", schema)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
            seen = self.count.get()[0] if self.count.exists() else 0
            for frame in rows:
                seen += len(frame)
                yield frame[(frame["temperature"] - CENTRE).abs() > BAND][
                    ["device_id", "seq", "event_ms", "temperature"]
                ]
            self.count.update((seen,))

        def close(self) -> None:
            pass

    return Threshold()


def tws_query(raw: DataFrame) -> DataFrame:
    alerts = (
        parsed(raw)
        .groupBy("device_id")
        .transformWithStateInPandas(
            statefulProcessor=_threshold_processor(),
            outputStructType=ALERT_SCHEMA,
            outputMode="Update",
            timeMode="None",
        )
    )
    return to_kafka(alerts)


QUERIES: dict[str, Callable[[DataFrame], DataFrame]] = {
    "sql": sql_query,
    "python_udf": python_udf_query,
    "pandas_udf": pandas_udf_query,
    "map_in_arrow": map_in_arrow_query,
    "dedup": dedup_query,
    "tws": tws_query,
}


# ---------------------------------------------------------------- load and measurement


class Send(threading.Thread):
    """Readings at ``rate``/s to ``topic`` (paced every 5 ms), ``event_ms`` = produce time."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "1", "log_level": 3}
        )
        self.topic, self.rate, self.seq, self.sent = topic, 0.0, 0, 0
        self.stop = threading.Event()

    def run(self) -> None:
        start, owed = time.monotonic(), 0.0
        tick = 0.005
        while not self.stop.is_set():
            owed += self.rate * tick
            while owed >= 1:
                owed -= 1
                device = f"d{self.seq % DEVICES}"
                spike = self.seq % SPIKE_EVERY == 0
                value = {
                    "device_id": device,
                    "seq": self.seq,
                    "event_ms": now_ms(),
                    "metrics": {"temperature": 60.0 if spike else CENTRE},
                }
                self.producer.produce(self.topic, json.dumps(value).encode(), device.encode())
                self.seq += 1
                self.sent += 1
            self.producer.poll(0)
            start += tick
            time.sleep(max(0.0, start - time.monotonic()))
        self.producer.flush(10)


class Watch(threading.Thread):
    """(event_ms, arrival ms) of every record on ``topic``."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-rtm-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 5,
                "log_level": 3,
            }
        )
        self.consumer.subscribe([topic])
        self.samples: list[tuple[int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for msg in self.consumer.consume(1000, timeout=0.05):
                if msg.error() is not None:
                    continue
                arrived = now_ms()
                self.samples.append((json.loads(msg.value() or b"{}")["event_ms"], arrived))
        self.consumer.close()

    def sent_between(self, lo: int, hi: int) -> list[float]:
        """Latencies of the records sent within [lo, hi]."""
        return [float(at - sent) for sent, at in self.samples if lo <= sent <= hi]


def figures(values: list[float], sent: int, seconds: float) -> dict[str, Any]:
    return {
        "alerts": len(values),
        "expected": sent // SPIKE_EVERY,
        "p50_ms": pct(values, 50),
        "p95_ms": pct(values, 95),
        "p99_ms": pct(values, 99),
        "max_ms": round(max(values), 1) if values else float("nan"),
        "rate": round(sent / seconds),
    }


def short_error(exc: BaseException | str) -> str:
    text = str(exc).strip()
    for marker in ("\nJVM stacktrace", "\n\tat ", "\n=== Streaming Query"):
        text = text.split(marker)[0]
    return " ".join(text.split())[:700]


TUNABLE = {"spark.sql.execution.arrow.maxRecordsPerBatch": "10000"}
"""Session settings a case may change, and the value every other case runs with."""


@dataclass(frozen=True)
class Case:
    key: str
    query: str
    mode: str  # "rtm" (trigger(realTime=…)) or "mb" (trigger(processingTime="0 seconds"))
    measure: bool = False
    """Latency phases at every rate; otherwise: does it run, latency at 100 readings/s."""
    output_mode: str = "update"
    real_time: str | None = None
    allowlist_check: bool = True
    confs: dict[str, str] = field(default_factory=dict)


CASES = [
    # the baseline and the candidate, one after the other on the same machine
    Case("rtm_sql", "sql", "rtm", measure=True),
    Case("mb_sql", "sql", "mb", measure=True),
    # what Real-Time Mode refuses: the interval floor and the output mode
    Case("rtm_sql_1s", "sql", "rtm", real_time="1 second"),
    Case("rtm_sql_append", "sql", "rtm", output_mode="append"),
    # Python steps and stateful steps
    Case("rtm_python_udf", "python_udf", "rtm"),
    Case("rtm_pandas_udf", "pandas_udf", "rtm"),
    Case("rtm_map_in_arrow", "map_in_arrow", "rtm"),
    # the same Arrow step, past the allowlist, with Arrow batches of 10 records
    Case(
        "rtm_map_in_arrow_batch10",
        "map_in_arrow",
        "rtm",
        allowlist_check=False,
        confs={"spark.sql.execution.arrow.maxRecordsPerBatch": "10"},
    ),
    Case("rtm_stateful_dedup", "dedup", "rtm"),
    Case("rtm_stateful_tws", "tws", "rtm"),
    # its failure is not the allowlist's: the same without the check
    Case("rtm_stateful_tws_unchecked", "tws", "rtm", allowlist_check=False),
    # the stateful queries run as micro-batches (so a failure above is Real-Time Mode's)
    Case("mb_stateful_dedup", "dedup", "mb"),
    Case("mb_stateful_tws", "tws", "mb"),
]


class Bench:
    def __init__(self, spark: SparkSession, settings: Settings, args: argparse.Namespace) -> None:
        self.spark, self.settings, self.args = spark, settings, args
        self.bootstrap = settings.kafka.bootstrap_servers
        self.work = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-rtm-"))
        self.topics: list[str] = []

    def close(self) -> None:
        if self.topics:
            delete_topics(self.bootstrap, self.topics)
        shutil.rmtree(self.work, ignore_errors=True)

    def start(self, case: Case, allowlist_check: bool) -> tuple[StreamingQuery, str, str]:
        name, mode = case.query, case.mode
        tag = f"{name}-{mode}-{uuid.uuid4().hex[:6]}"
        source, sink = f"bench.rtm.in.{tag}", f"bench.rtm.out.{tag}"
        ensure_topics(
            self.bootstrap,
            [TopicSpec(source, "device_id"), TopicSpec(sink, "device_id")],
            self.args.partitions,
        )
        self.topics += [source, sink]
        self.spark.conf.set(ALLOWLIST_CHECK, str(allowlist_check).lower())
        for key, default in TUNABLE.items():
            self.spark.conf.set(key, case.confs.get(key, default))
        raw = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .load()
        )
        writer = (
            QUERIES[name](raw)
            .writeStream.format("kafka")
            .queryName(tag)
            .outputMode(case.output_mode)
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("kafka.linger.ms", "0")
            .option("topic", sink)
            .option("checkpointLocation", str(self.work / tag))
        )
        if mode == "rtm":
            every = case.real_time or self.args.real_time
            writer = writer.trigger(realTime=every)  # type: ignore[call-overload]
        else:
            writer = writer.trigger(processingTime="0 seconds")
        return writer.start(), source, sink

    def case(self, case: Case) -> dict[str, Any]:
        """Run one query; its figures, or ``{"error": …}`` (and a retry without the
        allowlist check when that is what refused it)."""
        out = self._case(case, case.allowlist_check)
        if "OPERATOR_OR_SINK_NOT_IN_ALLOWLIST" in out.get("error", ""):
            out["without_allowlist_check"] = self._case(case, False)
        return out

    def _case(self, case: Case, allowlist_check: bool) -> dict[str, Any]:
        label = case.key + ("" if allowlist_check else " (allowlistCheck=false)")
        measure = case.measure or (self.args.measure_python and case.mode == "rtm")
        print(f"-- {label}: starting (load {load1()})", flush=True)
        try:
            query, source, sink = self.start(case, allowlist_check)
        except Exception as exc:  # noqa: BLE001 (Spark's refusal at start is the finding)
            print(f"   {label}: refused at start: {short_error(exc)}", flush=True)
            return {"error": short_error(exc), "at": "start"}
        send, watch = Send(self.bootstrap, source), Watch(self.bootstrap, sink)
        watch.start()
        send.rate = 100.0
        send.start()
        try:
            # running = alerts arrive; an error = the query ended (or never produced)
            deadline = time.monotonic() + self.args.start_timeout
            while not watch.samples:
                if not query.isActive or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            if not watch.samples:
                failed = query.exception()
                error = short_error(failed) if failed is not None else "no output"
                if failed is None:
                    error += f" within {self.args.start_timeout}s (status {query.status})"
                print(f"   {label}: {error}", flush=True)
                return {"error": error, "at": "run"}
            print(f"   {label}: first alert after start", flush=True)
            if not measure:
                lo = now_ms()
                time.sleep(10)
                lat = watch.sent_between(lo, now_ms() - 3000)
                return {"runs": True, "p50_ms_at_100rps": pct(lat, 50), "load1": load1()}
            send.rate = float(self.args.rates[0])
            time.sleep(self.args.warmup)
            result: dict[str, Any] = {}
            for rate in self.args.rates:
                send.rate, sent0, lo = float(rate), send.sent, now_ms()
                time.sleep(self.args.seconds)
                hi, sent = now_ms(), send.sent - sent0
                # alerts of readings sent within the phase, give them 5 s to arrive
                time.sleep(5)
                values = watch.sent_between(lo, hi)
                phase = figures(values, sent, (hi - lo) / 1000) | {"load1": load1()}
                if not query.isActive:
                    phase["error"] = short_error(query.exception() or "query stopped")
                print(f"   {label} @ {rate}/s: {json.dumps(phase)}", flush=True)
                result[f"{rate // 1000}k" if rate >= 1000 else str(rate)] = phase
            return result
        finally:
            send.stop.set()
            send.join(15)
            watch.stop.set()
            watch.join(5)
            if query.isActive:
                query.stop()


def summary(result: dict[str, Any]) -> Any:
    """One value for the last line: figures, "runs, …" or the error (and what happens past
    the allowlist)."""
    if "error" in result:
        text = result["error"]
        past = result.get("without_allowlist_check")
        if past is not None:
            text += f" || with allowlistCheck=false: {summary(past)}"
        return text
    if result.get("runs"):
        return (
            f"runs: p50 {result['p50_ms_at_100rps']} ms at 100 readings/s (load {result['load1']})"
        )
    return {
        phase: {k: fig[k] for k in ("p50_ms", "p95_ms", "p99_ms", "load1")}
        for phase, fig in result.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=30, help="length of each phase")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--partitions", type=int, default=2, help="of each input topic")
    parser.add_argument("--slots", type=int, default=4, help="local[N] task slots")
    parser.add_argument("--real-time", default="5 seconds", help="trigger(realTime=…)")
    parser.add_argument("--start-timeout", type=int, default=120)
    parser.add_argument(
        "--cases", nargs="+", default=[c.key for c in CASES], choices=[c.key for c in CASES]
    )
    parser.add_argument(
        "--measure-python", action="store_true", help="latency phases for every rtm case"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    settings = Settings()
    settings = settings.model_copy(
        update={"spark": settings.spark.model_copy(update={"master": f"local[{args.slots}]"})}
    )
    stack = Stack(settings)
    was_up = all(c.pid for c in stack.status())
    stack.up()
    spark = build_session(settings, "fleetwatch-bench-realtime")
    bench = Bench(spark, settings, args)
    results: dict[str, Any] = {}
    try:
        by_key = {case.key: case for case in CASES}
        for key in args.cases:  # in the order given
            results[key] = bench.case(by_key[key])
    finally:
        spark.stop()  # first: its cached Kafka consumers would complain of deleted topics
        bench.close()
        if not was_up:
            stack.down()
    print(json.dumps(results))
    last: dict[str, Any] = {"master": f"local[{args.slots}]", "partitions": args.partitions}
    for mode in ("rtm", "mb"):
        for phase, fig in results.get(f"{mode}_sql", {}).items():
            if isinstance(fig, dict):
                for q in ("p50", "p95", "p99"):
                    last[f"{mode}_sql_{q}_ms_{phase}"] = fig[f"{q}_ms"]
                last[f"{mode}_sql_load1_{phase}"] = fig["load1"]
    for key, result in results.items():
        if key not in ("rtm_sql", "mb_sql") or "error" in result:
            last[key] = summary(result)
    print(json.dumps(last))


if __name__ == "__main__":
    main()
