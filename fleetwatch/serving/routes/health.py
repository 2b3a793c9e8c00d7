"""Liveness, readiness and metrics: open to all (no fleet data), for probes and Prometheus."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError

from fleetwatch.serving.deps import ServicesDep

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    database: str
    kafka: str
    degraded: list[str] = []
    """What does not work while Kafka is unreachable (reads from the database do)."""


KAFKA_DEPENDENT = ("commands", "quarantine lifts", "materialiser")
"""What needs Kafka: sending a command, lifting a quarantine, and the materialiser that brings
new alerts, states and sessions into the database (reads answer, from what it has)."""


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process answers."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "the database is unreachable"}},
)
def readyz(services: ServicesDep) -> JSONResponse:
    """Ready for reads when the database answers. Kafka unreachable leaves the API ready,
    with ``kafka: "unreachable"`` and what does not work in ``degraded``."""
    try:
        services.store.ping()
        database = "ok"
    except SQLAlchemyError as exc:
        database = f"unreachable: {type(exc).__name__}"
    kafka = "ok" if services.publisher.reachable() else "unreachable"
    degraded: list[str] = []
    if kafka != "ok":
        degraded += KAFKA_DEPENDENT
        if services.settings.api.webhooks.enabled:
            degraded.append("webhooks")
    ready = database == "ok"
    body = Readiness(
        status="ready" if ready else "not ready", database=database, kafka=kafka, degraded=degraded
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get("/metrics", response_class=Response)
def metrics(services: ServicesDep) -> Response:
    """Prometheus text format."""
    return Response(generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)
