"""Before a stage starts Spark or uvicorn: can it reach Kafka (and the API its database)?

Spark takes tens of seconds to start and then retries a missing broker quietly; a stage
started against nothing should say so at once, in one line."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from fleetwatch.cli.common import fail
from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.kafka_config import client_config

TIMEOUT_S = 5.0
"""How long a check waits for an answer."""


def require_kafka(kafka: KafkaSettings, timeout_s: float | None = None) -> None:
    """Exit with one line unless the cluster answers a metadata request within
    ``timeout_s`` (default :data:`TIMEOUT_S`), as ``kafka`` logs in."""
    timeout_s = TIMEOUT_S if timeout_s is None else timeout_s
    admin = AdminClient(client_config(kafka, {"log_level": 0}))  # the reason is in the line
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        reason = error.str() if isinstance(error, KafkaError) else str(exc)
        fail(f"cannot reach Kafka at {kafka.bootstrap_servers} within {timeout_s:g} s: {reason}")


def require_database(url: str, timeout_s: float | None = None) -> None:
    """Exit with one line unless the database at ``url`` answers a query within ``timeout_s``
    (PostgreSQL's connect timeout; default :data:`TIMEOUT_S`). A SQLite file is not checked:
    the API creates it."""
    timeout_s = TIMEOUT_S if timeout_s is None else timeout_s
    if url.startswith("sqlite"):
        return
    # lazy: sqlalchemy only for the API
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    parsed = make_url(url)
    shown = parsed.render_as_string(hide_password=True)
    connect_args = {"connect_timeout": max(1, round(timeout_s))}
    engine = create_engine(
        parsed, connect_args=connect_args if parsed.get_backend_name() == "postgresql" else {}
    )
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        cause = exc.orig if isinstance(exc, DBAPIError) else exc
        fail(f"cannot reach the API database {shown}: {' '.join(str(cause).split())}")
    finally:
        engine.dispose()
