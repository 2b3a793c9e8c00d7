"""Path and query parameters, responses and the not-found check shared by the routers."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import HTTPException, Path, Query, Response
from pydantic import BaseModel

from fleetwatch.serving.schemas.common import DEVICE_ID_PATTERN, ID_PATTERN

DevicePath = Annotated[str, Path(pattern=DEVICE_ID_PATTERN, description="A device id")]
IdPath = Annotated[str, Path(pattern=ID_PATTERN)]
Limit = Annotated[int, Query(ge=1, le=1000, description="Page size")]
Offset = Annotated[int, Query(ge=0, le=10_000_000, description="Items to skip")]
FromMs = Annotated[
    int | None,
    Query(alias="from", ge=0, lt=10**14, description="Event time ≥ this (epoch ms)"),
]
ToMs = Annotated[
    int | None, Query(alias="to", ge=0, lt=10**14, description="Event time < this (epoch ms)")
]

NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such item"}}
AUTH: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key, or not a valid one"},
    403: {"description": "The API key lacks the scope"},
}


T = TypeVar("T")


def found(item: T | None, detail: str) -> T:
    """``item``, or a 404 saying ``detail`` when there is none."""
    if item is None:
        raise HTTPException(404, detail=detail)
    return item


def json_response(body: BaseModel, status_code: int = 200) -> Response:
    """``body`` serialised once, as is: hot read routes skip FastAPI's second validation of a
    return value they built from the same schema (``response_model`` still documents it)."""
    return Response(body.model_dump_json(), status_code=status_code, media_type="application/json")
