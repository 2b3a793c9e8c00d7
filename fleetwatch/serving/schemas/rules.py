"""Operators' rules: a rule as written (:class:`RuleSpec`, the body of ``POST /rules`` and
``PUT /rules/{id}``), as it stands, and its versions."""

from __future__ import annotations

from pydantic import BaseModel, Field

from fleetwatch.contracts.rules import RuleRecord, RuleSpec
from fleetwatch.serving.schemas.common import Page

__all__ = ["RulePublic", "RuleSpec", "RuleVersionPublic", "RuleVersionsPublic", "RulesPublic"]


class RulePublic(RuleRecord):
    """A rule in force: as written, its version (as on the ``rules`` topic), and the devices
    it judges (``devices``: the selector resolved against the registry; ``null``: every
    device)."""

    created_ms: int = Field(description="When its first version was made.")
    updated_by: str = Field(description="The API key that made this version.")


class RulesPublic(Page):
    data: list[RulePublic]


class RuleVersionPublic(BaseModel):
    version: int
    deleted: bool = Field(description="This version deleted the rule.")
    rule: RuleSpec | None = Field(description="The rule as written; null for a deletion.")
    updated_ms: int
    updated_by: str


class RuleVersionsPublic(Page):
    rule_id: str
    data: list[RuleVersionPublic] = Field(description="Newest first.")
