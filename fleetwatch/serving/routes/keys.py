"""API keys (admin). The key itself is shown once, when created; only its hash is stored."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response

from fleetwatch.serving.auth import Admin
from fleetwatch.serving.deps import ServicesDep, StoreDep
from fleetwatch.serving.routes.params import AUTH, NOT_FOUND, IdPath
from fleetwatch.serving.schemas.keys import KeyCreate, KeyCreated, KeyPublic, KeysPublic
from fleetwatch.serving.store import keys as repo
from fleetwatch.serving.store import now_ms
from fleetwatch.serving.tables import ApiKeyRow

router = APIRouter(prefix="/keys", tags=["keys"], responses=AUTH)


def public(row: ApiKeyRow) -> KeyPublic:
    return KeyPublic(
        key_id=row.key_id,
        name=row.name,
        scopes=row.scopes.split(),
        created_ms=row.created_ms,
        revoked_ms=row.revoked_ms,
    )


@router.post("", response_model=KeyCreated, status_code=201)
def create_key(body: KeyCreate, store: StoreDep, _: Admin) -> KeyCreated:
    with store.session() as session, session.begin():
        row, key = repo.create_key(session, body.name, body.scopes, now_ms())
    return KeyCreated(**public(row).model_dump(), key=key)


@router.get("", response_model=KeysPublic)
def list_keys(store: StoreDep, _: Admin) -> KeysPublic:
    with store.session() as session:
        rows = repo.list_keys(session)
    return KeysPublic(data=[public(r) for r in rows], count=len(rows))


@router.delete("/{key_id}", status_code=204, responses=NOT_FOUND)
def revoke_key(key_id: IdPath, services: ServicesDep, _: Admin) -> Response:
    """Revoke a key: refused from now on by this process, by others within api.key_cache_s."""
    with services.store.session() as session, session.begin():
        if not repo.revoke(session, key_id, now_ms()):
            raise HTTPException(404, detail=f"no API key {key_id!r}")
    services.authenticator.forget()
    return Response(status_code=204)
