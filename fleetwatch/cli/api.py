"""`fleetwatch api` serves the HTTP API; `fleetwatch api keys create | list | revoke` manages
its API keys directly in its database (the first admin key has to come from somewhere)."""

from __future__ import annotations

import ipaddress
import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from fleetwatch.cli.common import fail, load_settings
from fleetwatch.cli.preflight import require_database, require_kafka
from fleetwatch.cli.stages import serve_api, stage_settings
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.errors import FleetwatchError

if TYPE_CHECKING:
    from fleetwatch.serving.store import Store

app = typer.Typer(help="The HTTP API, and its API keys.", no_args_is_help=False)
keys = typer.Typer(help="API keys: create, list, revoke.", no_args_is_help=True)
app.add_typer(keys, name="keys")

_out = Console(soft_wrap=True)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.callback(invoke_without_command=True)
def api(
    ctx: typer.Context,
    host: str | None = typer.Option(None, help="default: settings api.host"),
    port: int | None = typer.Option(None, help="default: settings api.port"),
    anonymous_read: bool = typer.Option(
        False,
        "--anonymous-read",
        help="requests without a key may read (loopback hosts only; the demo uses it)",
    ),
) -> None:
    """The HTTP API (and its Kafka materialiser, command tracker and webhook delivery)."""
    if ctx.invoked_subcommand is not None:
        return
    settings = stage_settings("api")
    if anonymous_read:
        settings = settings.model_copy(
            update={"api": settings.api.model_copy(update={"anonymous_read": True})}
        )
    bind = host or settings.api.host
    if settings.api.anonymous_read and not _loopback(bind):
        fail(f"anonymous read is allowed on a loopback host only, not {bind!r}")
    require_kafka(settings.kafka)
    require_database(settings.database_url)
    serve_api(settings, bind, port or settings.api.port)


def _store() -> Store:
    # lazy: sqlalchemy only for the commands that use the database
    from fleetwatch.serving.store import Store

    settings = load_settings()
    settings.run_path.mkdir(parents=True, exist_ok=True)
    try:
        return Store(settings.database_url)
    except FleetwatchError as exc:
        fail(str(exc))


@keys.command("create")
def create(
    name: Annotated[str, typer.Option(help="who or what the key is for")],
    scope: Annotated[
        list[str], typer.Option(help="read, operate or admin (repeatable); admin ⊇ operate ⊇ read")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Create a key and print it: it is shown this once (only its hash is stored)."""
    # lazy: sqlalchemy only for the commands that use the database
    from fleetwatch.serving.store.keys import create_key

    store = _store()
    try:
        with store.session() as session, session.begin():
            row, key = create_key(session, name, scope, now_ms())
    except ValueError as exc:
        fail(str(exc))
    finally:
        store.close()
    if as_json:
        print(
            json.dumps(
                {"key_id": row.key_id, "name": name, "scopes": row.scopes.split(), "key": key}
            )
        )
    else:
        print(key)


@keys.command("list")
def list_(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Every key: id, name, scopes, created, revoked."""
    # lazy: sqlalchemy only for the commands that use the database
    from fleetwatch.serving.store.keys import list_keys

    store = _store()
    try:
        with store.session() as session:
            rows = list_keys(session)
    finally:
        store.close()
    if as_json:
        body = [
            {
                "key_id": r.key_id,
                "name": r.name,
                "scopes": r.scopes.split(),
                "created_ms": r.created_ms,
                "revoked_ms": r.revoked_ms,
            }
            for r in rows
        ]
        print(json.dumps(body))
        return
    table = Table("key id", "name", "scopes", "created_ms", "revoked_ms")
    for r in rows:
        table.add_row(r.key_id, r.name, r.scopes, str(r.created_ms), str(r.revoked_ms or ""))
    _out.print(table)


@keys.command("revoke")
def revoke(key_id: Annotated[str, typer.Argument(help="the key id (see `keys list`)")]) -> None:
    """Revoke a key (a running API refuses it within api.key_cache_s)."""
    # lazy: sqlalchemy only for the commands that use the database
    from fleetwatch.serving.store.keys import revoke as revoke_key

    store = _store()
    try:
        with store.session() as session, session.begin():
            found = revoke_key(session, key_id, now_ms())
    finally:
        store.close()
    if not found:
        fail(f"no API key {key_id!r}")
    print(f"revoked {key_id}")
