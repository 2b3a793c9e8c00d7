"""Shared field types: every string the API accepts has a shape, every number a range."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from fleetwatch.contracts.identifiers import DEVICE_ID_PATTERN, DeviceId
from fleetwatch.contracts.telemetry import EpochMs

__all__ = [
    "DEVICE_ID_PATTERN",
    "Body",
    "DeviceId",
    "EpochMs",
    "FromRow",
    "Label",
    "Page",
    "Tag",
    "Text",
]

Tag = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")]
Label = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")]
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,96}$"


def text(max_length: int) -> object:
    """Printable text without control characters (NUL is refused by PostgreSQL)."""
    return StringConstraints(max_length=max_length, pattern=r"^[^\x00-\x08\x0b\x0c\x0e-\x1f]*$")


Text = Annotated[str, text(1024)]


class Body(BaseModel):
    """A request body: a field it does not declare is refused."""

    model_config = ConfigDict(extra="forbid")


class FromRow(BaseModel):
    """A response read from a row of the store (its attributes)."""

    model_config = ConfigDict(from_attributes=True)


class Page(BaseModel):
    count: int = Field(description="How many items match the filters (all pages).")
    limit: int
    offset: int
