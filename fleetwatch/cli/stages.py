"""The long-running stages: `fleetwatch gateway | score | train | api`."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import uvicorn
from uvicorn import server as uvicorn_server

from fleetwatch.cli import progress
from fleetwatch.cli.common import fail, load_settings
from fleetwatch.cli.preflight import require_kafka
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.contracts.settings import KafkaStage, Settings
from fleetwatch.runtime import on_stop_signal, stop_event
from fleetwatch.stack.credentials import login

if TYPE_CHECKING:
    from fleetwatch.streaming.trainer import job as training
    from fleetwatch.streaming.trainer.observer import TrainingObserver

# Each stage imports its own machinery when it runs: every `fleetwatch` process (a gateway
# worker, `devices add`, `stack up`) would otherwise load pandas, scipy, the detectors and both
# Spark jobs before its first line.

logger = logging.getLogger(__name__)


def gateway(
    workers: int | None = typer.Option(
        None, min=1, max=64, help="processes (default: settings gateway.workers)"
    ),
    worker_index: int | None = typer.Option(None, hidden=True),
) -> None:
    """MQTT telemetry and acks → Kafka; Kafka commands → MQTT; bad payloads → dead letters."""
    from fleetwatch.ingest.gateway import Gateway
    from fleetwatch.ingest.metrics import GatewayMetrics, exported
    from fleetwatch.ingest.workers import retire_surplus, supervise_exported, worker_client_id

    loaded = stage_settings("gateway")
    settings = loaded.model_copy(update={"mqtt": login(loaded, "gateway")})
    stop = stop_event()
    count = workers or settings.gateway.workers
    try:
        if worker_index is None:
            retire_surplus(settings, count, stop)
            if count > 1:
                supervise_exported(settings, count, stop)
                return
        client_id = worker_client_id(settings.gateway.client_id, worker_index or 0)
        metrics = GatewayMetrics()
        # a supervised worker counts into files its supervisor serves
        served = exported(settings, metrics.registry)
        with served if worker_index is None else contextlib.nullcontext():
            Gateway(settings, client_id=client_id, metrics=metrics).run(stop)
    except FleetwatchError as exc:
        fail(str(exc))


def score() -> None:
    """Spark Structured Streaming: telemetry.raw → alerts (checkpointed)."""
    from fleetwatch.streaming.scorer import job as scoring

    settings = stage_settings("scorer")
    require_kafka(settings.kafka)
    stop = stop_event()
    try:
        scoring.run(settings, stop)
    except FleetwatchError as exc:
        fail(str(exc))


def train(
    from_: Annotated[
        str | None,
        typer.Option("--from", help="backfill: first event time (ISO 8601 with a zone, e.g. …Z)"),
    ] = None,
    to: Annotated[
        str | None, typer.Option("--to", help="backfill: event times before this one")
    ] = None,
    files: Annotated[
        Path | None,
        typer.Option(
            "--files", exists=True, help="backfill: a file or folder of telemetry JSON lines"
        ),
    ] = None,
) -> None:
    """Spark Structured Streaming: telemetry.raw → per-device parameters → model.params.

    Live until SIGTERM; with --from/--to or --files, learns that range with the same plan, exits.
    """
    from fleetwatch.streaming.trainer import job as training
    from fleetwatch.streaming.trainer.observer import default_observer

    settings = stage_settings("trainer")
    backfill = None
    if from_ or to or files:
        backfill = training.Backfill(epoch_ms(from_), epoch_ms(to), files)
        lo, hi = backfill.from_ms, backfill.to_ms
        if lo is not None and hi is not None and lo >= hi:
            fail("--from must be before --to")
    require_kafka(settings.kafka)
    stop = stop_event()
    observer = default_observer(settings)
    try:
        if backfill is not None and progress.attached():
            _backfill_shown(settings, stop, observer, backfill)
        else:
            training.run(settings, stop, observer, backfill)
        if backfill is not None and settings.train.tracking and not stop.is_set():
            _register_fleet_models(settings, getattr(observer, "run_id", None))
    except FleetwatchError as exc:
        fail(str(exc))


def _backfill_shown(
    settings: Settings,
    stop: threading.Event,
    observer: TrainingObserver,
    backfill: training.Backfill,
) -> None:
    """A backfill with a bar: the trainer's progress reports, read back from its progress
    log (the setting's file, else one of its own in the run directory for the run)."""
    raw = settings.topics.telemetry_raw
    from fleetwatch.streaming.trainer import job as training

    log = settings.spark.progress_log
    own = log is None
    if log is None:
        log = settings.run_path / f"train-backfill-{os.getpid()}.progress.jsonl"
        settings = settings.model_copy(
            update={"spark": settings.spark.model_copy(update={"progress_log": log})}
        )
    total = None if backfill.files else progress.log_end(settings.kafka, raw)
    what = f"backfill {backfill.files}" if backfill.files else f"backfill {raw} (offsets)"
    with progress.bar(what, total) as update:
        follower = progress.ReportFollower(log, progress.reports_to(update, raw))
        follower.start()
        try:
            training.run(settings, stop, observer, backfill)
        finally:
            follower.stop()
            if own:
                log.unlink(missing_ok=True)


def _register_fleet_models(settings: Settings, run_id: str | None) -> None:
    """After a backfill: the fleet models of what it learned, as challengers in the registry."""
    from fleetwatch.fleet.publish import register_fleet_models

    for scope, version in register_fleet_models(settings, run_id=run_id).items():
        logger.info("fleet model for %s: version %d registered as challenger", scope, version)


def stage_settings(stage: KafkaStage) -> Settings:
    """The settings, with Kafka as ``stage`` logs in (its own account in kafka.logins)."""
    settings = load_settings()
    try:
        return settings.model_copy(update={"kafka": settings.kafka.for_stage(stage)})
    except FleetwatchError as exc:
        fail(str(exc))


def epoch_ms(iso: str | None) -> int | None:
    if iso is None:
        return None
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        fail(f"not an ISO 8601 time: {iso!r}")
    if moment.tzinfo is None:
        fail(f"give {iso!r} a time zone, e.g. 2025-01-01T00:00:00Z or ...+00:00")
    return int(moment.timestamp() * 1000)


def serve_api(settings: Settings, host: str, port: int) -> None:
    """The HTTP API (and its background workers) until SIGTERM; used by `fleetwatch api`."""
    from fleetwatch.serving.app import create_app  # lazy: FastAPI and SQLAlchemy for the API only

    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_config=None,
        access_log=settings.api.access_log,
    )
    server = _Server(config)
    on_stop_signal(lambda: setattr(server, "should_exit", True))
    try:
        server.run()
    except FleetwatchError as exc:
        fail(str(exc))
    if not server.started:
        fail(f"the API could not start on {config.host}:{config.port}")


class _Server(uvicorn_server.Server):
    """uvicorn re-raises SIGTERM after its graceful shutdown; fleetwatch stages stop on the
    signal and exit 0 like every other stage, so the handlers are ours."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
