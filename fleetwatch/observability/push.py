"""Publish the dashboards to a running Grafana through its HTTP API (``grafana-client``):
``fleetwatch grafana push``. Idempotent: each dashboard keeps its uid and is overwritten, so a
second push makes a new version of the same dashboard; the folder and the datasources are
created only when missing, never changed."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import niquests
from grafana_client.api import GrafanaApi
from grafana_client.client import GrafanaClientError, GrafanaException
from sqlalchemy.engine import make_url

from fleetwatch.observability.errors import GrafanaPushError
from fleetwatch.observability.panels import DATABASE_UID, PROMETHEUS_UID

logger = logging.getLogger(__name__)

FOLDER_UID = "fleetwatch"
FOLDER_TITLE = "fleetwatch"


@dataclass(frozen=True)
class Published:
    uid: str
    title: str
    version: int
    url: str


@dataclass
class PushReport:
    dashboards: list[Published] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    """Folder and datasources this push created (empty on a second push)."""
    missing: list[str] = field(default_factory=list)
    """Datasources the dashboards need that Grafana lacks and this push could not create."""


def prometheus_datasource(url: str) -> dict[str, Any]:
    return {
        "name": "Prometheus",
        "uid": PROMETHEUS_UID,
        "type": "prometheus",
        "access": "proxy",
        "url": url,
        "jsonData": {"timeInterval": "15s"},
    }


def database_datasource(database_url: str) -> dict[str, Any]:
    """Grafana's PostgreSQL datasource from a SQLAlchemy URL of the API's database (use a role
    that may only read; see README "Dashboards")."""
    url = make_url(database_url)
    if not url.drivername.startswith("postgresql"):
        raise GrafanaPushError(
            "the database URL must be PostgreSQL's (Grafana reads the API's database there), "
            f"not {url.drivername}"
        )
    return {
        "name": "fleetwatch API database",
        "uid": DATABASE_UID,
        "type": "grafana-postgresql-datasource",
        "access": "proxy",
        "url": f"{url.host or '127.0.0.1'}:{url.port or 5432}",
        "user": url.username or "",
        "jsonData": {"database": url.database or "", "sslmode": "disable"},
        "secureJsonData": {"password": url.password or ""},
    }


def _exists(lookup: Any, uid: str) -> bool:
    try:
        lookup(uid)
    except GrafanaClientError as exc:
        if exc.status_code == 404:
            return False
        raise
    return True


def push(
    api: GrafanaApi,
    dashboards: dict[str, dict[str, Any]],
    prometheus_url: str,
    database_url: str | None = None,
) -> PushReport:
    """Make sure of the folder and the datasources, then write every dashboard (overwrite)."""
    report = PushReport()
    grafana: Any = api  # grafana-client's methods carry no annotations
    try:
        grafana.health.check()
        if not _exists(grafana.folder.get_folder, FOLDER_UID):
            grafana.folder.create_folder(FOLDER_TITLE, uid=FOLDER_UID)
            report.created.append(f"folder {FOLDER_UID}")
        if not _exists(grafana.datasource.get_datasource_by_uid, PROMETHEUS_UID):
            grafana.datasource.create_datasource(prometheus_datasource(prometheus_url))
            report.created.append(f"datasource {PROMETHEUS_UID}")
        if not _exists(grafana.datasource.get_datasource_by_uid, DATABASE_UID):
            if database_url is None:
                report.missing.append(DATABASE_UID)
            else:
                grafana.datasource.create_datasource(database_datasource(database_url))
                report.created.append(f"datasource {DATABASE_UID}")
        for built in dashboards.values():
            body = {key: value for key, value in built.items() if key not in ("id", "version")}
            answer = grafana.dashboard.update_dashboard(
                {
                    "dashboard": body,
                    "folderUid": FOLDER_UID,
                    "overwrite": True,
                    "message": "fleetwatch grafana push",
                }
            )
            report.dashboards.append(
                Published(
                    str(answer.get("uid", body["uid"])),
                    str(body.get("title", "")),
                    int(answer.get("version", 0)),
                    str(answer.get("url", "")),
                )
            )
    except GrafanaException as exc:
        raise GrafanaPushError(f"Grafana refused a request: {exc.message}") from exc
    except niquests.exceptions.RequestException as exc:
        raise GrafanaPushError(f"cannot reach Grafana: {exc}") from exc
    return report
