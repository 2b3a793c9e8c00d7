from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from fleetwatch.serving.schemas.common import Body, text

Scope = Literal["read", "operate", "admin"]


class KeyCreate(Body):
    name: Annotated[str, text(128), Field(min_length=1)]
    scopes: Annotated[list[Scope], Field(min_length=1, max_length=3)]


class KeyPublic(BaseModel):
    key_id: str
    name: str
    scopes: list[Scope]
    created_ms: int
    revoked_ms: int | None


class KeyCreated(KeyPublic):
    key: str = Field(description="The key itself: shown once, stored only as a hash.")


class KeysPublic(BaseModel):
    data: list[KeyPublic]
    count: int
