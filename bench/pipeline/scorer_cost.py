"""What the scorer alone costs, idle and at a steady rate: a ``fleetwatch score`` process fed
straight into Kafka (no MQTT, no gateway), its CPU split into driver, JVM (JIT and GC threads
apart) and Python workers, for A/B comparisons of its settings on a shared machine. The bench
brings up brokers of its own (free ports, a temporary directory): a running stack is left alone.

A run: a fresh scorer with the environment's settings plus a variant's overrides
(``--variant NAME=K=V;K=V``, e.g. ``FLEETWATCH_SCORE__TRIGGER_INTERVAL=0 seconds``) on its own
topics; :class:`~bench.pipeline.score_anatomy.Load` at 1,000 readings/s for ``--warmup`` s
(as ``under_load.py``'s warm-up), then one phase per ``--rates`` entry of ``--seconds`` each
(``0`` is an idle phase: the probes only). Each phase gives the scorer's cores and CPU µs per
reading, the probe spikes' latency (produce → ``open`` alert), the batches and their p50, and
the 1-minute load average at its start and end, and the CPU per batch (``cpu_ms_per_batch``:
a batch's fixed cost dominates at low rates). Several ``--variant`` run interleaved (ABAB…),
``--repeat`` rounds: on a shared machine compare CPU per reading and per batch, not latency.
To compare code, give a variant ``PYTHONPATH=`` another tree (a ``git worktree``, with a link
to this one's ``.cache``, where the Spark jars are) and run the bench from a directory holding
no ``fleetwatch`` package: the scorer and its Python workers import the project from that tree,
the other variants from the installed one.
A rate given more than once is one phase each (``1000``, ``1000#2``, …).

The JVM is young in the first phases: its JIT compiles the same code at rising tiers for
minutes (no class is generated per batch; Spark's generated code is compiled in the first
batch and then found in its cache). Issue 71, 1,000/s after a 15 s warm-up, load 4-9: the JIT
took 0.33, 0.19, 0.10, 0.09, 0.06, 0.05, 0.04, 0.04 of a core in minutes 1-8 (330, 42, 25,
13, 9, 6.5, 5, 4 compilations a batch) and the scorer 0.87 → 0.48-0.52 of a core. Each phase
gives the JVM's age (``jvm_age_s``, from the scorer's start) and its classes loaded and JIT
compilations per batch (``classes_per_batch``, ``compiles_per_batch``, from the JVM's perf
counters); to compare settings at the scorer's steady state, warm up for minutes
(``--warmup 300``), or compare the same phase of interleaved runs.

The parts of a batch (``parts_p50_ms``) are the progress reports' wall-clock times: on a
loaded machine they grow with the load, not with the work. ``queryPlanning`` (the batch's plan
analysed, optimized and planned again, as Spark does every micro-batch) is 15-20 ms in a JVM
past its first minutes on a quiet machine, and several times that at a load of 4 or more. Its
cost by Catalyst rule is Spark's own metering, read in the scorer's JVM through py4j
(``RuleExecutor.resetMetrics()``, then ``RuleExecutor.dumpTimeSpent()`` some batches later;
each batch's ``lastExecution.tracker().phases()`` splits it into analysis, optimization and
physical planning): this bench does not report it.

``--jfr DIR`` records a JFR profile (``jcmd JFR.start``) of the JVM and ``--py-spy DIR`` a
py-spy profile of each Python worker, during each phase (``pip install py-spy`` into the
virtualenv first: it is not among the project's dependencies). py-spy samples only the thread
holding the GIL (``--gil``): on a loaded machine a worker that has just woken the JVM with a
state call and waits, runnable, for a core counts as active otherwise, and its socket calls look
like work. With ``--jfr`` the scorer's JVM starts with a one-second recording
(``-XX:StartFlightRecording``): the first recording in a JVM instruments a few JDK classes
(JVMTI redefinition), which on JDK 17 throws away all the JVM's compiled code; started in a
running scorer, that was some 24,000 methods, compiled again during the recording (0.35-0.62 of
a core of JIT in the phase), at launch nearly none. Read a recording with ``jfr print --json
--stack-depth 200 --events jdk.ExecutionSample`` (by thread: the stream execution thread plans
each batch, ``stateConnectionListenerThread`` serves the Python workers' state calls) and ``jfr
summary`` / ``jdk.CompilerStatistics`` for the JIT.

    python bench/pipeline/scorer_cost.py [--rates 1000,0] [--seconds 60] [--warmup 15]
        [--variant NAME=K=V[;K=V...]]... [--repeat N] [--jfr DIR] [--py-spy DIR]

Last line: one JSON object, per variant the list of its runs' phases.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import (
    CpuShares,
    comm,
    isolated_env,
    load_avg_1m,
    percentile,
    stage,
    tree,
    wait,
    write_results,
)
from bench.micro.gateway import private_stack
from bench.pipeline.latency_anatomy import Batch, batches
from bench.pipeline.score_anatomy import Alerts, Load
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.settings import Settings
from fleetwatch.stack.topics import delete_topics

PY_SPY = Path(sys.executable).with_name("py-spy")
if not PY_SPY.exists() and (found := shutil.which("py-spy")):
    PY_SPY = Path(found)
"""py-spy in the interpreter's environment (``pip install py-spy``) or else on ``PATH``, for
``--py-spy``."""


def profile(pid: int, seconds: int, jfr: Path | None, spy: Path | None, tag: str) -> list[Any]:
    """Start a JFR recording of the scorer's JVM and py-spy on each Python worker for
    ``seconds``; the py-spy processes are returned to be waited on."""
    procs: list[Any] = []
    for p in tree(pid):
        name = comm(p)
        if name == "java" and jfr is not None:
            jfr.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["jcmd", str(p), "JFR.start", "name=cost", "settings=profile",
                 f"duration={seconds}s", f"filename={jfr / f'{tag}.jfr'}"],
                check=False, capture_output=True,
            )  # fmt: skip
        elif p != pid and name.startswith("python") and spy is not None and PY_SPY.exists():
            spy.mkdir(parents=True, exist_ok=True)
            procs.append(
                subprocess.Popen(
                    [str(PY_SPY), "record", "-p", str(p), "-d", str(seconds), "-r", "50", "--gil",
                     "-f", "raw", "-o", str(spy / f"{tag}-{p}.txt"), "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
    return procs


JVM_COUNTERS = {"java.cls.loadedClasses": "classes", "sun.ci.totalCompiles": "compiles"}
"""The JVM's perf counters (``jcmd PerfCounter.print``) a phase counts per batch."""


def jvm_of(pid: int) -> int | None:
    """The scorer's JVM: the ``java`` process in its tree."""
    return next((p for p in tree(pid) if comm(p) == "java"), None)


def jvm_counters(pid: int | None) -> dict[str, int]:
    """:data:`JVM_COUNTERS` of a JVM now (empty when it cannot be read)."""
    if pid is None:
        return {}
    done = subprocess.run(
        ["jcmd", str(pid), "PerfCounter.print"], check=False, capture_output=True, text=True
    )
    out: dict[str, int] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key in JVM_COUNTERS and value.strip().isdigit():
            out[JVM_COUNTERS[key]] = int(value)
    return out


def jfr_at_launch(env: dict[str, str], settings: Settings, jfr: Path, what: str) -> None:
    """Start the scorer's JVM with a one-second recording into ``jfr``: JFR's instrumentation
    of JDK classes is done then, not when a phase's recording starts (see the docstring)."""
    jfr.mkdir(parents=True, exist_ok=True)
    key = "FLEETWATCH_SPARK__JAVA_OPTIONS"
    options = env.get(key, settings.spark.java_options)
    boot = f"-XX:StartFlightRecording=duration=1s,filename={jfr / f'{what}-launch.jfr'}"
    env[key] = f"{options} {boot}".strip()


def parts_p50(phase: list[Batch]) -> dict[str, float | None]:
    """The p50 of each part of the phase's batches (``durationMs``, and the state operator's
    commit)."""
    parts: dict[str, list[float]] = {}
    for b in phase:
        for k, v in (b.report.get("durationMs") or {}).items():
            parts.setdefault(k, []).append(float(v))
        for op in b.report.get("stateOperators") or []:
            parts.setdefault("stateCommit", []).append(float(op.get("commitTimeMs", 0)))
    return {k: percentile(v, 50) for k, v in parts.items()}


def first_commit(checkpoints: Path) -> bool:
    """Whether the scorer's checkpoint (whatever its plan version: a variant may run other
    code) has committed its first batch."""
    return any(checkpoints.glob("score-v*/commits/0"))


def one_run(
    settings: Settings, base_env: dict[str, str], name: str, env_over: dict[str, str], args: Any
) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    run_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-cost-"))
    topics, env = isolated_env(settings, tag, run_dir)
    env["FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS"] = base_env["FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS"]
    progress = run_dir / "progress.jsonl"
    env["FLEETWATCH_SPARK__PROGRESS_LOG"] = str(progress)
    env.update(env_over)
    progress = Path(env["FLEETWATCH_SPARK__PROGRESS_LOG"])  # a variant's own, kept after the run
    if args.jfr is not None:
        jfr_at_launch(env, settings, args.jfr, f"{name}-{tag}")
    kafka = settings.kafka
    load, alerts = Load(kafka, topics.telemetry_raw), Alerts(kafka, topics.alerts)
    scorer = stage(env, run_dir, "score", "score")
    out: dict[str, Any] = {"variant": name, "env": env_over, "phases": {}}
    try:
        started = time.monotonic()
        wait(lambda: first_commit(run_dir / "checkpoints"), 180, "the scorer's first batch")
        out["first_batch_s"] = round(time.monotonic() - started, 1)
        load.start()
        alerts.start()
        load.rate = 1000.0
        time.sleep(args.warmup)
        jvm = jvm_of(scorer.pid)
        for rate in (float(r) for r in args.rates.split(",")):
            load.rate = rate
            shares = CpuShares({"scorer": scorer.pid}, ["scorer"])
            shares.start()
            label = f"{int(rate)}"
            if label in out["phases"]:  # a rate given again: a phase of its own
                label += f"#{sum(1 for k in out['phases'] if k.split('#')[0] == label) + 1}"
            what = f"{name}-{tag}-{label}".replace("#", "_")
            age_s = round(time.monotonic() - started)
            spies = profile(scorer.pid, args.seconds, args.jfr, args.py_spy, what)
            counters = jvm_counters(jvm)
            lo, load1 = now_ms(), load_avg_1m()
            time.sleep(args.seconds)
            hi, cores, cpu = now_ms(), shares.cores(), shares.seconds()
            load2 = load_avg_1m()
            counted = {k: v - counters[k] for k, v in jvm_counters(jvm).items() if k in counters}
            for s in spies:
                s.wait(30)
            time.sleep(3)  # the phase's last alerts arrive
            sent = {k: t for k, t in list(load.sent.items()) if lo <= t <= hi - 2000}
            lat = [float(alerts.opened[k] - t) for k, t in sent.items() if k in alerts.opened]
            phase = [b for b in batches(progress) if lo <= b.start_ms <= hi]
            readings = rate * args.seconds + 20 * args.seconds  # the load and the probes
            total = sum(v for k, v in cpu.items() if k.startswith("scorer") and "_jvm_" not in k)
            out["phases"][label] = {
                "cores": cores,
                "scorer_cores": round(total / (args.seconds), 3),
                "us_per_reading": round(total * 1e6 / readings, 1),
                "jvm_us": round(cpu.get("scorer_jvm", 0) * 1e6 / readings, 1),
                "workers_us": round(cpu.get("scorer_workers", 0) * 1e6 / readings, 1),
                "p50_ms": percentile(lat, 50),
                "p99_ms": percentile(lat, 99),
                "spikes": len(sent),
                "missed": len(sent) - len(lat),
                "batches": len(phase),
                "cpu_ms_per_batch": round(total * 1e3 / max(1, len(phase)), 1),
                "jvm_age_s": age_s,
                **{
                    f"{k}_per_batch": round(v / max(1, len(phase)), 1)
                    for k, v in sorted(counted.items())
                },
                "empty_batches": sum(1 for b in phase if b.rows == 0),
                "batch_p50_ms": percentile([float(b.duration_ms) for b in phase], 50),
                "parts_p50_ms": parts_p50(phase),
                "load": [load1, load2],
            }
            print(f"{name} {label}/s: {out['phases'][label]}", flush=True)
    finally:
        load.stop.set()
        alerts.stop.set()
        if scorer.poll() is None:
            scorer.send_signal(signal.SIGTERM)
            scorer.wait(120)
        delete_topics(kafka, topics.model_dump().values())
        shutil.rmtree(run_dir, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,0", help="readings/s per phase (0: idle)")
    parser.add_argument("--seconds", type=int, default=60, help="length of each phase")
    parser.add_argument("--warmup", type=int, default=15, help="seconds at 1,000/s first")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME=K=V;K=V... (repeatable; none: the settings as they are, 'base')",
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the variants, ABAB")
    parser.add_argument("--jfr", type=Path, default=None, help="JFR recordings here")
    parser.add_argument("--py-spy", type=Path, default=None, help="py-spy profiles here")
    args = parser.parse_args()
    if args.py_spy is not None and not PY_SPY.exists():
        parser.error(f"--py-spy needs {PY_SPY}: pip install py-spy")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the scorer and topics go too
    variants: list[tuple[str, dict[str, str]]] = []
    for v in args.variant or ["base="]:
        name, _, rest = v.partition("=")
        variants.append((name, dict(kv.split("=", 1) for kv in rest.split(";") if kv)))
    results: dict[str, list[Any]] = {name: [] for name, _ in variants}
    with private_stack() as (_, settings, base_env):
        for i in range(args.repeat):
            for name, env_over in variants:
                print(f"round {i + 1}, {name} (load {load_avg_1m()})", flush=True)
                results[name].append(one_run(settings, base_env, name, env_over, args))
    for name, runs in results.items():
        for label in runs[0]["phases"]:
            row = [(r["phases"][label]["us_per_reading"], r["phases"][label]["load"]) for r in runs]
            print(f"{name} {label}/s µs per reading (load): {row}")
    print(json.dumps(results))
    write_results(__file__, {"rates": args.rates, "results": results})


if __name__ == "__main__":
    main()
