"""What several benchmarks share: percentiles and the load average their figures are made of,
resident memory and CPU time of process trees, free ports, a private stack's settings, isolated
topics, the stages run as processes, and the results file each bench writes. (The clock is the
wire's: :func:`fleetwatch.contracts.clock.now_ms`.)

A bench script is run as ``python bench/<group>/<name>.py`` from anywhere: Python then puts
only the script's own folder on ``sys.path``, so a script that imports from ``bench`` first
inserts the repository root (one line after its standard-library imports, the same in each)
and imports ``bench.common`` and its siblings by their package names, as mypy sees them."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from fleetwatch.contracts.settings import KafkaSettings, MqttSettings, Settings, TopicSettings
from fleetwatch.contracts.topics import topic_specs
from fleetwatch.mqtt_config import configure
from fleetwatch.stack.credentials import Credentials, login
from fleetwatch.stack.topics import ensure_topics

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root."""

RESULTS = ROOT / "bench" / "results"
"""Where each bench writes its results file, ``<group>-<name>.json``; ``bench/report.py``
renders the README's figures table from them."""

_STARTED = (datetime.now(UTC), os.getloadavg())
"""When this module was first imported, and the load average then: every bench imports it at
its top, so this is the start of the bench."""


def percentile(values: Sequence[float] | np.ndarray, q: float, digits: int = 1) -> float | None:
    """The ``q``-th percentile of ``values`` rounded to ``digits`` decimals; ``None`` (``null``
    in a JSON line) when there are none."""
    if len(values) == 0:
        return None
    return round(float(np.percentile(values, q)), digits)


def percentiles(values: Sequence[float] | np.ndarray, *qs: float) -> dict[str, float | None]:
    """``{"p50": …, "p95": …}`` for each of ``qs`` (``"max"`` for 100), one decimal."""
    return {("max" if q == 100 else f"p{q:g}"): percentile(values, q) for q in qs}


def load_avg_1m() -> float:
    """The machine's 1-minute load average (noted beside timings: the machine may be shared)."""
    return round(os.getloadavg()[0], 2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> float:
    """Resident memory of one process in MiB (0 when it is gone or a zombie)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants alive now."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
    return found


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants, in MiB."""
    return sum(rss_mb(p) for p in tree(pid))


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) one process used so far (0 when it is gone)."""
    return cpu_s_of(Path(f"/proc/{pid}"))


def cpu_s_of(proc: Path) -> float:
    """CPU seconds (user + system) of a ``/proc`` process or thread directory (0 when gone)."""
    try:
        stat = (proc / "stat").read_text()
    except OSError:
        return 0.0
    ticks = sum(int(f) for f in stat[stat.rindex(")") + 2 :].split()[11:13])
    return ticks / os.sysconf("SC_CLK_TCK")


JVM_THREADS = {"jit": ("C1 CompilerThre", "C2 CompilerThre"), "gc": ("GC Thread", "G1 ")}
"""Threads of a JVM counted apart by :class:`CpuShares` (by ``/proc`` thread name): the JIT
compilers, and the garbage collector's own threads (its pauses stop the others)."""


def jvm_thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds each group of :data:`JVM_THREADS` of a JVM used so far (its threads alive
    now)."""
    out = dict.fromkeys(JVM_THREADS, 0.0)
    for task in Path(f"/proc/{pid}/task").glob("*"):
        name = comm_of(task)
        group = next((g for g, names in JVM_THREADS.items() if name.startswith(names)), None)
        if group is not None:
            out[group] += cpu_s_of(task)
    return out


def tree_cpu_s(pid: int) -> float:
    """CPU seconds used so far by a process and its descendants alive now."""
    return sum(cpu_s(p) for p in tree(pid))


def private_stack_settings(run_dir: Path) -> Settings:
    """A stack of its own (free ports, its own run dir), so a running stack is left alone."""
    port = free_port()
    return Settings(
        run_dir=run_dir,
        kafka=KafkaSettings(
            port=port,
            controller_port=free_port(),
            bootstrap_servers=f"127.0.0.1:{port}",
            metrics_port=free_port(),
        ),
        mqtt=MqttSettings(port=free_port()),
    )


def stage(env: dict[str, str], run_dir: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "fleetwatch.cli.main", *args],
        env=env,
        stdout=(run_dir / f"{name}.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


def wait(probe: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(0.2)


def isolated_env(
    settings: Settings, tag: str, run_dir: Path
) -> tuple[TopicSettings, dict[str, str]]:
    topics = TopicSettings(**{k: f"{v}.b{tag}" for k, v in TopicSettings().model_dump().items()})
    ensure_topics(settings.kafka, topic_specs(topics), settings.kafka.partitions)
    env = dict(os.environ)
    env.update({f"FLEETWATCH_TOPICS__{k.upper()}": v for k, v in topics.model_dump().items()})
    env.update(
        {
            "FLEETWATCH_RUN_DIR": str(run_dir),
            "FLEETWATCH_MQTT__ROOT": f"b{tag}/devices",
            "FLEETWATCH_GATEWAY__CLIENT_ID": f"gateway-{tag}",
            "FLEETWATCH_GATEWAY__SHARE_GROUP": f"share-{tag}",
            "FLEETWATCH_MQTT__CREDENTIALS_DIR": str(Credentials(settings).dir.resolve()),
            # metrics served as in production, on ports no running demo holds
            "FLEETWATCH_GATEWAY__METRICS_PORT": str(free_port()),
            "FLEETWATCH_SCORE__METRICS_PORT": str(free_port()),
            "FLEETWATCH_TRAIN__METRICS_PORT": str(free_port()),
        }
    )
    return topics, env


def end_gateway_session(settings: Settings, env: dict[str, str]) -> None:
    """End the persistent MQTT session a bench's gateway (one worker, the client id of
    :func:`isolated_env`) leaves behind once it has stopped: each run has its own client id, so
    on a long-lived stack the sessions (7-day expiry) and whatever reached them after the stop
    would pile up in the broker's persistence, which it rewrites every autosave."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    from fleetwatch.ingest.workers import worker_client_id

    client_id = worker_client_id(env["FLEETWATCH_GATEWAY__CLIENT_ID"], 0)
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    configure(client, login(settings, "gateway"))
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = 0
    connected: list[bool] = []
    client.on_connect = lambda *args: connected.append(True)
    try:
        client.connect(
            settings.mqtt.host, settings.mqtt.services_port, clean_start=True, properties=props
        )
    except OSError:
        return
    deadline = time.monotonic() + 10
    while not connected and time.monotonic() < deadline:
        client.loop(timeout=0.1)
    client.disconnect()


def comm(pid: int) -> str:
    """A process's command name ('' when it is gone)."""
    return comm_of(Path(f"/proc/{pid}"))


def comm_of(proc: Path) -> str:
    """The name of a ``/proc`` process or thread directory ('' when it is gone)."""
    try:
        return (proc / "comm").read_text().strip()
    except OSError:
        return ""


class CpuShares:
    """CPU seconds of named process trees between two samples, as cores: ``stages`` names a
    tree each (a Spark job's tree is split into its driver, its JVM and its Python workers,
    and the JVM's JIT compiler and GC threads are also given apart, as ``{name}_jvm_jit`` and
    ``{name}_jvm_gc``: part of ``{name}_jvm``), and ``bench`` is this process's own tree less
    those (the bench's publishers and consumers)."""

    def __init__(self, stages: dict[str, int], spark: Sequence[str] = ()) -> None:
        self.stages, self.spark = stages, set(spark)
        self._at: tuple[float, dict[str, float]] | None = None

    def _sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        owned: set[int] = set()
        for name, pid in self.stages.items():
            pids = tree(pid)
            owned.update(pids)
            if name not in self.spark:
                out[name] = sum(cpu_s(p) for p in pids)
                continue
            for p in pids:
                part = "driver" if p == pid else ("jvm" if comm(p) == "java" else "workers")
                out[f"{name}_{part}"] = out.get(f"{name}_{part}", 0.0) + cpu_s(p)
                if part == "jvm":
                    for group, seconds in jvm_thread_cpu_s(p).items():
                        key = f"{name}_jvm_{group}"
                        out[key] = out.get(key, 0.0) + seconds
        out["bench"] = sum(cpu_s(p) for p in tree(os.getpid()) if p not in owned)
        return out

    def start(self) -> None:
        self._at = (time.monotonic(), self._sample())

    def cores(self) -> dict[str, float]:
        """Cores each used since :meth:`start`."""
        assert self._at is not None, "start() first"
        t0, before = self._at
        elapsed, now = time.monotonic() - t0, self._sample()
        return {k: round((v - before.get(k, 0.0)) / elapsed, 2) for k, v in now.items()}

    def seconds(self) -> dict[str, float]:
        """CPU seconds each used since :meth:`start`."""
        assert self._at is not None, "start() first"
        before = self._at[1]
        return {k: v - before.get(k, 0.0) for k, v in self._sample().items()}


def bench_name(script: str | Path) -> str:
    """A bench's name from its script's path: ``bench/quality/realdata.py`` gives
    ``quality-realdata``."""
    path = Path(script).resolve()
    return f"{path.parent.name}-{path.stem}"


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _command(script: Path, args: Sequence[str]) -> str:
    """The command that ran a bench, the script relative to the repository's root."""
    try:
        shown = str(script.resolve().relative_to(ROOT))
    except ValueError:
        shown = str(script)
    return shlex.join(["python", shown, *args])


def write_results(
    script: str | Path,
    figures: Mapping[str, Any],
    results_dir: Path = RESULTS,
    argv: Sequence[str] | None = None,
) -> Path:
    """Write a bench's figures to ``{results_dir}/{bench_name(script)}.json``, replacing the
    file of its previous run, with what they were measured on: the command line, the start and
    end times (UTC), the 1-, 5- and 15-minute load averages at the start (when the bench
    imported this module) and at the end, the CPUs, the git revision and whether the code it
    runs (``fleetwatch/``, ``bench/``, ``deploy/``) had changes not committed. A bench calls it
    once, with the figures of its last JSON line. Returns the file's path."""
    started, load_start = _STARTED
    status = _git(
        "status", "--porcelain", "--untracked-files=no", "--", "fleetwatch", "bench", "deploy"
    )
    record = {
        "bench": bench_name(script),
        "command": _command(Path(script), sys.argv[1:] if argv is None else argv),
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_avg_start": [round(v, 2) for v in load_start],
        "load_avg_end": [round(v, 2) for v in os.getloadavg()],
        "cpus": os.cpu_count(),
        "git_revision": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "figures": dict(figures),
    }
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{record['bench']}.json"
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    partial.replace(path)
    return path
