"""API keys: ``fwk_{key_id}_{secret}``; only a SHA-256 of the secret is stored (the secret is
32 random bytes, so a fast hash is enough: there is nothing to guess)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from fleetwatch.serving.tables import ApiKeyRow

PREFIX = "fwk"
SCOPES = ("read", "operate", "admin")


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(
    session: Session, name: str, scopes: Sequence[str], now: int
) -> tuple[ApiKeyRow, str]:
    """A new key; returns its row and the key itself (shown once)."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise ValueError(f"scopes must be some of {', '.join(SCOPES)}; got {list(scopes)}")
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    row = ApiKeyRow(
        key_id=key_id,
        name=name,
        scopes=" ".join(s for s in SCOPES if s in scopes),
        secret_hash=_hash(secret),
        created_ms=now,
        revoked_ms=None,
    )
    session.add(row)
    return row, f"{PREFIX}_{key_id}_{secret}"


def split_key(key: str) -> tuple[str, str] | None:
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def verify(session: Session, key: str) -> ApiKeyRow | None:
    """The key's row if the key is valid and not revoked."""
    parts = split_key(key)
    if parts is None:
        return None
    row = session.get(ApiKeyRow, parts[0])
    if row is None or row.revoked_ms is not None:
        return None
    if not hmac.compare_digest(row.secret_hash, _hash(parts[1])):
        return None
    return row


def list_keys(session: Session) -> list[ApiKeyRow]:
    return list(session.scalars(select(ApiKeyRow).order_by(ApiKeyRow.created_ms)).all())


def revoke(session: Session, key_id: str, now: int) -> bool:
    """Revoke a key; False if there is no such key. Revoking twice keeps the first time."""
    if session.get(ApiKeyRow, key_id) is None:
        return False
    session.execute(
        update(ApiKeyRow)
        .where(ApiKeyRow.key_id == key_id, ApiKeyRow.revoked_ms.is_(None))
        .values(revoked_ms=now)
    )
    return True
