"""Publish the dashboards to a running Grafana through its HTTP API (``grafana-client``):
``fleetwatch grafana push``. Idempotent: each dashboard keeps its uid and is overwritten, so a
second push makes a new version of the same dashboard; the folder is created when missing.

A datasource is written only when given its address: created under the uid the dashboards'
variables default to, or, when Grafana has one of that uid, updated (``PUT``) to that address,
keeping its name and whatever else it has. A provisioned one (read-only) is left as it is. With
no address, a missing datasource is reported: the dashboards then read whichever datasource of
that type a user picks in their variable."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

import niquests
from grafana_client.api import GrafanaApi
from grafana_client.client import GrafanaClientError, GrafanaException
from sqlalchemy.engine import make_url

from fleetwatch.observability.errors import GrafanaPushError
from fleetwatch.observability.panels import DATABASE_SOURCE, PROMETHEUS_SOURCE, Source

logger = logging.getLogger(__name__)

FOLDER_UID = "fleetwatch"
FOLDER_TITLE = "fleetwatch"

SslMode = Literal["disable", "require", "verify-ca", "verify-full"]
"""The TLS modes Grafana's PostgreSQL datasource offers (``jsonData.sslmode``)."""
SSL_MODES: tuple[str, ...] = get_args(SslMode)
DEFAULT_SSLMODE: SslMode = "require"

UPDATABLE = (
    "uid",
    "name",
    "type",
    "access",
    "url",
    "user",
    "database",
    "basicAuth",
    "basicAuthUser",
    "withCredentials",
    "isDefault",
    "jsonData",
    "version",
)
"""The fields of Grafana's update command that a read of the datasource returns: a ``PUT``
replaces all of them (``secureJsonData`` alone keeps the secrets it is not sent), so an update
sends them back as they were, with fleetwatch's over them; ``version`` makes Grafana refuse it
if someone changed the datasource in between."""


@dataclass(frozen=True)
class Published:
    uid: str
    title: str
    version: int
    url: str


@dataclass(frozen=True)
class Written:
    """A datasource this push created or updated."""

    action: Literal["created", "updated"]
    uid: str
    url: str


@dataclass
class PushReport:
    dashboards: list[Published] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    """The folder, when this push created it."""
    datasources: list[Written] = field(default_factory=list)
    provisioned: list[str] = field(default_factory=list)
    """Datasources given an address that Grafana provisions from files (read-only): left as
    they are."""
    missing: list[str] = field(default_factory=list)
    """Datasources Grafana lacks that this push was given no address for."""


def prometheus_datasource(url: str) -> dict[str, Any]:
    return {
        "name": f"fleetwatch {PROMETHEUS_SOURCE.name}",
        "uid": PROMETHEUS_SOURCE.uid,
        "type": PROMETHEUS_SOURCE.plugin,
        "access": "proxy",
        "url": url,
        "jsonData": {"timeInterval": "15s"},
    }


def sslmode_of(database_url: str, sslmode: str | None = None) -> SslMode:
    """``sslmode`` if given, else the URL's ``?sslmode=``, else ``require``; one Grafana offers."""
    query = make_url(database_url).query.get("sslmode")
    chosen = sslmode or (query if isinstance(query, str) else None) or DEFAULT_SSLMODE
    if chosen not in SSL_MODES:
        raise GrafanaPushError(
            f"sslmode {chosen!r}: Grafana's PostgreSQL datasource takes {', '.join(SSL_MODES)}"
        )
    return cast(SslMode, chosen)


def database_datasource(database_url: str, sslmode: str | None = None) -> dict[str, Any]:
    """Grafana's PostgreSQL datasource from a SQLAlchemy URL of the API's database (use a role
    that may only read; see README "Dashboards"), with TLS as ``sslmode_of`` chooses."""
    url = make_url(database_url)
    if not url.drivername.startswith("postgresql"):
        raise GrafanaPushError(
            "the database URL must be PostgreSQL's (Grafana reads the API's database there), "
            f"not {url.drivername}"
        )
    if not url.host:
        raise GrafanaPushError(
            "the database URL needs the host Grafana reaches PostgreSQL at "
            "(postgresql://reader:PASSWORD@HOST:5432/fleetwatch)"
        )
    return {
        "name": DATABASE_SOURCE.name,
        "uid": DATABASE_SOURCE.uid,
        "type": DATABASE_SOURCE.plugin,
        "access": "proxy",
        "url": f"{url.host}:{url.port or 5432}",
        "user": url.username or "",
        "jsonData": {
            "database": url.database or "",
            "sslmode": sslmode_of(database_url, sslmode),
        },
        "secureJsonData": {"password": url.password or ""},
    }


def _get(lookup: Any, uid: str) -> dict[str, Any] | None:
    """The object of that uid, or None when Grafana answers 404."""
    try:
        found: dict[str, Any] = lookup(uid)
    except GrafanaClientError as exc:
        if exc.status_code == 404:
            return None
        raise
    return found


def updated(existing: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """The ``PUT`` body: the datasource as Grafana has it, with fleetwatch's address, user,
    ``jsonData`` keys and password over it; its name (a user may have renamed it) is kept."""
    body = {key: existing[key] for key in UPDATABLE if key in existing}
    body.update(
        {key: value for key, value in wanted.items() if key not in ("name", "jsonData")},
    )
    body["jsonData"] = {**(existing.get("jsonData") or {}), **wanted.get("jsonData", {})}
    return body


def _write_datasource(
    grafana: Any, source: Source, wanted: dict[str, Any] | None, report: PushReport
) -> None:
    """Create or update the datasource of ``source.uid`` when given one; note what happened."""
    existing = _get(grafana.datasource.get_datasource_by_uid, source.uid)
    if wanted is None:
        if existing is None:
            report.missing.append(source.uid)
        return
    if existing is None:
        grafana.datasource.create_datasource(wanted)
        report.datasources.append(Written("created", source.uid, str(wanted["url"])))
        return
    if existing.get("type") != source.plugin:
        raise GrafanaPushError(
            f"Grafana's datasource {source.uid!r} is of type {existing.get('type')!r}, not "
            f"{source.plugin!r}: leave out its address and pick yours in the dashboards' "
            "variable, or remove that datasource"
        )
    if existing.get("readOnly"):
        report.provisioned.append(source.uid)
        return
    grafana.datasource.update_datasource_by_uid(source.uid, updated(existing, wanted))
    report.datasources.append(Written("updated", source.uid, str(wanted["url"])))


def push(
    api: GrafanaApi,
    dashboards: dict[str, dict[str, Any]],
    prometheus_url: str | None = None,
    database_url: str | None = None,
    database_sslmode: str | None = None,
) -> PushReport:
    """Make sure of the folder, create or update the datasources given an address, then write
    every dashboard (overwrite)."""
    report = PushReport()
    wanted = {
        PROMETHEUS_SOURCE.uid: (
            prometheus_datasource(prometheus_url) if prometheus_url is not None else None
        ),
        DATABASE_SOURCE.uid: (
            database_datasource(database_url, database_sslmode)
            if database_url is not None
            else None
        ),
    }
    grafana: Any = api  # grafana-client's methods carry no annotations
    try:
        grafana.health.check()
        if _get(grafana.folder.get_folder, FOLDER_UID) is None:
            grafana.folder.create_folder(FOLDER_TITLE, uid=FOLDER_UID)
            report.created.append(f"folder {FOLDER_UID}")
        for source in (PROMETHEUS_SOURCE, DATABASE_SOURCE):
            _write_datasource(grafana, source, wanted[source.uid], report)
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
