"""Gateway throughput and its memory bound under backpressure, on a private stack.

Publishing from one Python process is slower than the gateway, so throughput is measured on a
backlog: the burst is published while the consumer is away (its persistent session queues it
at the broker), then the consumer connects and the drain is timed.

1. Baseline: a bare MQTT subscriber (QoS 1, auto-ack, no Kafka) draining the burst — what the
   broker and one Python MQTT client deliver without any gateway work.
2. The gateway with 1 and 2 workers draining a burst of readings from 1,000 devices into
   ``telemetry.raw`` (every message acknowledged only after Kafka confirmed it).
3. Backpressure: the Kafka broker is stopped, a burst is published, the gateway's resident
   memory is sampled (it must plateau: at most ``max_in_flight`` messages unacknowledged), then
   Kafka is started and the time to catch up is measured.

    python bench/micro/gateway.py

Last line: {"baseline_mqtt_rps", "baseline_cpu_us_per_msg", "gateway_rps": {"1": .., "2": ..},
"gateway_cpu_us_per_msg": {"1": .., "2": ..}, "gateway_cpu_vs_baseline": {"1": .., "2": ..},
"backpressure": {...}}
(CPU: user + system seconds of the draining process tree, over the drain, per message.)

A steady rate instead of a backlog: the simulated fleet of ``DEVICES`` devices publishes (QoS 1)
``RATE`` readings a second for ``SECONDS``, first to a bare subscriber (its own process, QoS 1,
auto-ack, no Kafka), then to the gateway (one worker); each after a warm-up at the same rate.
At a steady rate a process wakes for a few messages at a time, so what it does per wake-up
counts beside what it does per message. Its figures are printed, not written to
``bench/results`` (they are the drain's):

    python bench/micro/gateway.py --rate RATE [--seconds 60]

Last line: {"rate", "seconds", "load_avg_1m", "bare_cpu_us_per_msg", "gateway_cpu_us_per_msg",
"gateway_cpu_vs_bare"} (CPU: user + system seconds of the process over the phase, from its first
reading published to its last delivered, per reading).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import paho.mqtt.client as mqtt
from confluent_kafka import KafkaException
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import (
    free_port,
    load_avg_1m,
    private_stack_settings,
    rss_mb,
    tree_cpu_s,
    write_results,
)
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.kafka_topic import end_offsets
from fleetwatch.mqtt_config import configure
from fleetwatch.simulator.runner import run as run_fleet
from fleetwatch.simulator.scenario import Scenario
from fleetwatch.stack.credentials import login
from fleetwatch.stack.kafka import KafkaBroker
from fleetwatch.stack.manager import Stack

BURST, DEVICES, BACKLOG = 60_000, 1_000, 100_000
WARMUP_S = 10


def payloads(settings: Settings, n: int, offset: int = 0) -> list[tuple[str, bytes]]:
    now = now_ms()
    return [
        (
            settings.mqtt.telemetry_topic(f"g{i % DEVICES}"),
            reading_payload(
                offset + i // DEVICES, now, now, {"temperature": 21.0, "humidity": 40.0}
            ),
        )
        for i in range(n)
    ]


def publish(settings: Settings, messages: list[tuple[str, bytes]]) -> float:
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=f"bench-pub-{time.monotonic_ns()}",
        protocol=mqtt.MQTTv5,
    )
    client.max_inflight_messages_set(2000)
    client.max_queued_messages_set(0)
    configure(client, login(settings, "sim"))
    client.connect(settings.mqtt.host, settings.mqtt.services_port)
    client.loop_start()
    started = time.monotonic()
    for chunk in range(0, len(messages), 20_000):  # MQTT message ids are 16-bit: bound what is open
        infos = [
            client.publish(topic, body, qos=1) for topic, body in messages[chunk : chunk + 20_000]
        ]
        for info in infos:
            info.wait_for_publish(120)
    elapsed = time.monotonic() - started
    client.disconnect()
    client.loop_stop()
    return elapsed


def raw_count(settings: Settings) -> int:
    """Records on ``telemetry.raw`` so far (0 while Kafka cannot say: a broker that has just
    come back may not lead its partitions yet)."""
    try:
        return sum(end_offsets(settings.kafka, settings.topics.telemetry_raw).values())
    except KafkaException:
        return 0


def wait_for(probe, timeout_s: float) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > timeout_s:
            raise SystemExit("bench: timed out")
        time.sleep(0.05)
    return time.monotonic() - started


def baseline(settings: Settings) -> tuple[float, float]:
    """A bare subscriber (persistent session, QoS 1, auto-ack) draining the same backlog: its
    messages a second and CPU µs a message."""
    received = 0
    done = threading.Event()

    def on_message(client: mqtt.Client, userdata: object, msg: mqtt.MQTTMessage) -> None:
        nonlocal received
        received += 1
        if received == BURST:
            done.set()

    def connect(clean: bool) -> mqtt.Client:
        sub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="bench-sub", protocol=mqtt.MQTTv5)
        sub.on_message = on_message
        configure(sub, login(settings, "gateway"))
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = 3600
        sub.connect(
            settings.mqtt.host, settings.mqtt.services_port, clean_start=clean, properties=props
        )
        return sub

    sub = connect(clean=True)  # a fresh session that outlives the connection (expiry 1 h)
    sub.loop_start()
    # the broker handles SUBSCRIBE before the DISCONNECT sent after it on the same connection
    sub.subscribe(f"$share/bench/{settings.mqtt.telemetry_filter}", qos=1)
    sub.disconnect()
    sub.loop_stop()
    publish(settings, payloads(settings, BURST))
    sub = connect(clean=False)
    started, cpu = time.monotonic(), time.process_time()
    sub.loop_start()
    done.wait(300)
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    sub.disconnect()
    sub.loop_stop()
    props = Properties(PacketTypes.DISCONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = 0  # end the session so it queues nothing more
    last = connect(clean=True)
    last.disconnect(properties=props)
    return BURST / elapsed, cpu / BURST * 1e6


def gateway(env: dict[str, str], log: Path, workers: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "fleetwatch.cli.main", "gateway", "--workers", str(workers)]
    return subprocess.Popen(argv, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)


def subscriber(count_file: str) -> None:
    """A bare subscriber (clean session, QoS 1, auto-ack) of every device's telemetry: writes
    how many messages it has received to ``count_file`` twice a second, until SIGTERM."""
    settings = Settings()
    received = 0

    def on_message(client: mqtt.Client, userdata: object, msg: mqtt.MQTTMessage) -> None:
        nonlocal received
        received += 1

    sub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="bench-bare", protocol=mqtt.MQTTv5)
    sub.on_message = on_message
    sub.on_connect = lambda c, *_: c.subscribe(settings.mqtt.telemetry_filter, qos=1)
    sub.on_subscribe = lambda *_: print("subscribed to", settings.mqtt.telemetry_filter, flush=True)
    configure(sub, login(settings, "gateway"))
    sub.connect(settings.mqtt.host, settings.mqtt.services_port)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    sub.loop_start()
    count, partial = Path(count_file), Path(f"{count_file}.partial")

    def write() -> None:
        partial.write_text(str(received))
        partial.replace(count)  # whole, for a reader at any moment

    while not stopping.wait(0.5):
        write()
    sub.disconnect()
    sub.loop_stop()
    write()


def steady_cpu_us(
    settings: Settings,
    proc: subprocess.Popen[bytes],
    delivered: Callable[[], int],
    rate: float,
    seconds: int,
) -> float:
    """CPU µs a reading of ``proc`` while the fleet publishes ``rate`` readings a second for
    ``seconds`` (after a warm-up as long as ``WARMUP_S``); ``delivered()``: readings it has
    passed on so far."""
    per_device = rate / DEVICES
    sim = login(settings, "sim")

    def publish(for_s: int) -> int:
        scenario = Scenario(
            devices=DEVICES, rate=per_device, count=round(per_device * for_s), seed=11, qos=1
        )
        return run_fleet(scenario, sim, threading.Event()).sent

    warm = publish(WARMUP_S)
    wait_for(lambda: delivered() >= warm, 120)
    before, cpu = delivered(), tree_cpu_s(proc.pid)
    sent = publish(seconds)
    wait_for(lambda: delivered() >= before + sent, 120)
    return (tree_cpu_s(proc.pid) - cpu) / (delivered() - before) * 1e6


@contextmanager
def private_stack() -> Iterator[tuple[Path, Settings, dict[str, str]]]:
    """The bench's own brokers in a temporary directory, up for the ``with`` block: its
    directory, settings and the environment of the processes it starts. SIGTERM ends the
    block, so the brokers are stopped and the directory removed."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="fleetwatch-bench-") as tmp:
        settings = private_stack_settings(Path(tmp))
        env = private_env(tmp, settings)
        stack = Stack(settings)
        stack.up()
        try:
            yield Path(tmp), settings, env
        finally:
            stack.down()


def private_env(tmp: str, settings: Settings) -> dict[str, str]:
    """The environment of a gateway or subscriber process on the bench's private stack."""
    env = dict(os.environ)
    env.update(
        {
            "FLEETWATCH_RUN_DIR": tmp,
            "FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
            "FLEETWATCH_MQTT__PORT": str(settings.mqtt.port),
            "FLEETWATCH_GATEWAY__METRICS_PORT": str(free_port()),
        }
    )
    return env


def steady(rate: float, seconds: int) -> None:
    """The steady-rate mode (see the module's docstring)."""
    with private_stack() as (tmp, settings, env):
        log = tmp / "gateway.log"
        count = tmp / "bare.count"
        load = load_avg_1m()
        argv = [sys.executable, __file__, "--subscriber", str(count)]
        bare = subprocess.Popen(argv, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: "subscribed to" in log.read_text(), 30)

            def received() -> int:
                return int(count.read_text()) if count.exists() else 0

            bare_us = steady_cpu_us(settings, bare, received, rate, seconds)
        finally:
            stop(bare)
        print(f"bare subscriber at {rate:,.0f}/s: {bare_us:.1f} µs CPU a message")
        proc = gateway(env, log, 1)
        try:
            wait_for(lambda: log.read_text().count("subscribed to") >= 2, 30)
            gateway_us = steady_cpu_us(settings, proc, lambda: raw_count(settings), rate, seconds)
        finally:
            stop(proc)
        print(f"gateway x1 at {rate:,.0f}/s: {gateway_us:.1f} µs CPU a reading")
    figures = {
        "rate": rate,
        "seconds": seconds,
        "load_avg_1m": [load, load_avg_1m()],
        "bare_cpu_us_per_msg": round(bare_us, 1),
        "gateway_cpu_us_per_msg": round(gateway_us, 1),
        "gateway_cpu_vs_bare": round(gateway_us / bare_us, 2),
    }
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, help="readings a second: the steady-rate mode")
    parser.add_argument("--seconds", type=int, default=60, help="of the steady-rate phases")
    args = parser.parse_args()
    if args.rate:
        steady(args.rate, args.seconds)
        return
    with private_stack() as (tmp, settings, env):
        log = tmp / "gateway.log"
        base, base_cpu = baseline(settings)
        print(
            f"baseline: one bare MQTT subscriber drains {base:,.0f} msg/s, "
            f"{base_cpu:.0f} µs CPU a message"
        )
        rates: dict[str, float] = {}
        cpus: dict[str, float] = {}
        total = 0
        connects = 0
        for workers in (1, 2):
            # sessions exist, gateway away: a backlog builds at the broker, then is drained
            proc = gateway(env, log, workers)
            connects += workers
            wait_for(lambda c=connects: log.read_text().count("subscribed to") >= c, 30)
            stop(proc)
            publish(settings, payloads(settings, BURST, offset=total))
            total += BURST
            proc = gateway(env, log, workers)
            connects += workers
            wait_for(lambda c=connects: log.read_text().count("subscribed to") >= c, 30)
            started, cpu = time.monotonic(), tree_cpu_s(proc.pid)
            wait_for(lambda t=total: raw_count(settings) >= t, 300)
            rates[str(workers)] = BURST / (time.monotonic() - started)
            cpus[str(workers)] = (tree_cpu_s(proc.pid) - cpu) / BURST * 1e6
            rate, used = rates[str(workers)], cpus[str(workers)]
            print(
                f"gateway x{workers}: drains {rate:,.0f} readings/s into Kafka (QoS 1), "
                f"{used:.0f} µs CPU a reading"
            )
            stop(proc)

        proc = gateway(env, log, 1)
        connects += 1
        wait_for(lambda: log.read_text().count("subscribed to") >= connects, 30)
        idle = rss_mb(proc.pid)
        broker = KafkaBroker(settings)
        broker.proc.stop()
        peak = idle
        sampling = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not sampling.wait(0.2):
                peak = max(peak, rss_mb(proc.pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            publish(settings, payloads(settings, BACKLOG, offset=total))
            time.sleep(5)  # let the gateway take all it will take while Kafka is away
            held = rss_mb(proc.pid)
            broker.start()
            broker.wait_ready()
            catch_up = wait_for(lambda: raw_count(settings) >= total + BACKLOG, 600)
        finally:
            sampling.set()
            sampler.join()
        stop(proc)
        pressure = {
            "backlog": BACKLOG,
            "idle_rss_mb": round(idle, 1),
            "peak_rss_mb": round(peak, 1),
            "rss_while_kafka_down_mb": round(held, 1),
            "catch_up_s": round(catch_up, 1),
        }
        print(f"backpressure: {BACKLOG:,} readings while Kafka was down")
        print(f"  gateway RSS idle {idle:.0f} MB, peak {peak:.0f} MB, held {held:.0f} MB")
        print(f"  caught up in {catch_up:.1f}s after Kafka returned")
    figures = {
        "baseline_mqtt_rps": round(base),
        "baseline_cpu_us_per_msg": round(base_cpu, 1),
        "gateway_rps": {k: round(v) for k, v in rates.items()},
        "gateway_cpu_us_per_msg": {k: round(v, 1) for k, v in cpus.items()},
        "gateway_cpu_vs_baseline": {k: round(v / base_cpu, 2) for k, v in cpus.items()},
        "backpressure": pressure,
    }
    print(json.dumps(figures))
    write_results(__file__, figures)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--subscriber":
        subscriber(sys.argv[2])
    else:
        main()
