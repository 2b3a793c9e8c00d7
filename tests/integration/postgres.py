"""A PostgreSQL server for integration tests: ``FLEETWATCH_TEST_POSTGRES_URL`` when set, else
the private cluster ``deploy/install-postgres.sh`` installs and starts (stopped again by whoever
started it), and a fresh database of a test's own in it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "install-postgres.sh"


def _script(action: str, port: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), action],
        env=dict(os.environ, PGPORT=port),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """The server's URL, for as long as the context lasts."""
    given = os.environ.get("FLEETWATCH_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    port = os.environ.get("FLEETWATCH_TEST_POSTGRES_PORT", "25432")
    was_running = _script("url", port).returncode == 0
    started = _script("start", port)
    assert started.returncode == 0, f"PostgreSQL did not start: {started.stderr}"
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        if not was_running:
            _script("stop", port)


@contextlib.contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A database of its own on ``server`` (dropped afterwards); its URL."""
    name = f"fw_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
