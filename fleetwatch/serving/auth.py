"""Who is calling: API keys with scopes. ``admin`` includes ``operate``, which includes
``read``. A missing or unknown key is a 401, a key without the scope a 403."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from fleetwatch.serving.store import Store
from fleetwatch.serving.store.keys import verify

IMPLIED = {
    "admin": frozenset({"admin", "operate", "read"}),
    "operate": frozenset({"operate", "read"}),
    "read": frozenset({"read"}),
}


@dataclass(frozen=True)
class Principal:
    key_id: str
    name: str
    scopes: frozenset[str]


ANONYMOUS = Principal("anonymous", "anonymous", IMPLIED["read"])


def effective_scopes(scopes: str) -> frozenset[str]:
    out: set[str] = set()
    for scope in scopes.split():
        out |= IMPLIED.get(scope, frozenset())
    return frozenset(out)


class Authenticator:
    """Checks keys against the store, trusting a checked key for ``cache_s`` seconds."""

    def __init__(self, store: Store, anonymous_read: bool, cache_s: float) -> None:
        self.store = store
        self.anonymous_read = anonymous_read
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._lock = threading.Lock()

    def cached(self, key: str | None) -> Principal | None:
        """The principal of a key checked lately (or the anonymous reader), without I/O."""
        if not key:
            return ANONYMOUS if self.anonymous_read else None
        with self._lock:
            hit = self._cache.get(key)
        return hit[1] if hit is not None and hit[0] > time.monotonic() else None

    def principal(self, key: str | None) -> Principal | None:
        if not key:
            return ANONYMOUS if self.anonymous_read else None
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        with self.store.session() as session:
            row = verify(session, key)
            found = Principal(row.key_id, row.name, effective_scopes(row.scopes)) if row else None
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = (now + self.cache_s, found)
        return found

    def forget(self) -> None:
        """Drop cached keys (after a revocation through the API)."""
        with self._lock:
            self._cache.clear()


_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer fwk_…")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="X-API-Key: fwk_…")


async def _caller(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header: Annotated[str | None, Security(_header)],
) -> Principal:
    authenticator: Authenticator = request.app.state.services.authenticator
    key = bearer.credentials if bearer is not None else header
    principal = authenticator.cached(key)
    if principal is None:  # not checked lately: ask the store, off the event loop
        principal = await run_in_threadpool(authenticator.principal, key)
    if principal is None:
        raise HTTPException(
            status_code=401,
            detail="a valid API key is required (Authorization: Bearer fwk_… or X-API-Key)"
            if not key
            else "the API key is not valid (unknown, malformed or revoked)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return principal


def require(scope: str) -> Callable[..., Awaitable[Principal]]:
    async def check(principal: Annotated[Principal, Depends(_caller)]) -> Principal:
        if scope not in principal.scopes:
            detail = (
                f"anonymous callers may only read: send an API key with the {scope!r} scope"
                if principal is ANONYMOUS
                else f"this API key ({principal.name}) lacks the {scope!r} scope"
            )
            raise HTTPException(status_code=403, detail=detail)
        return principal

    return check


Reader = Annotated[Principal, Depends(require("read"))]
Operator = Annotated[Principal, Depends(require("operate"))]
Admin = Annotated[Principal, Depends(require("admin"))]
