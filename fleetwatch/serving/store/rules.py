"""Operators' rules: each rule as it stands, every version of it, and the registry's devices
its selector names."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from fleetwatch.contracts.rules import RuleSelector
from fleetwatch.serving.store.pages import Paged, page
from fleetwatch.serving.tables import DeviceRow, DeviceTagRow, RuleRow, RuleVersionRow


def get_rule(session: Session, rule_id: str) -> RuleRow | None:
    """The rule's newest version (deleted or not), or ``None`` for a rule never written."""
    return session.get(RuleRow, rule_id)


def list_rules(session: Session, limit: int, offset: int) -> Paged[RuleRow]:
    """The rules in force (not deleted), by id."""
    live = [RuleRow.deleted.is_(False)]
    return page(session, RuleRow, live, [RuleRow.rule_id], limit, offset)


def versions(session: Session, rule_id: str, limit: int, offset: int) -> Paged[RuleVersionRow]:
    """A rule's versions, newest first."""
    where = [RuleVersionRow.rule_id == rule_id]
    return page(session, RuleVersionRow, where, [RuleVersionRow.version.desc()], limit, offset)


def write_version(
    session: Session,
    rule_id: str,
    spec: dict[str, Any] | None,
    devices: list[str] | None,
    now: int,
    by: str,
) -> RuleRow:
    """The rule's next version: ``spec`` as written, or ``None`` to delete it. Versions count
    on across a deletion, so a ``(rule_id, version)`` names one rule as it was, for good."""
    row = session.get(RuleRow, rule_id)
    if row is None:
        row = RuleRow(rule_id=rule_id, version=0, created_ms=now)
        session.add(row)
    row.version += 1
    row.deleted = spec is None
    row.spec = spec
    row.devices = devices
    row.updated_ms = now
    row.updated_by = by
    session.add(
        RuleVersionRow(
            rule_id=rule_id, version=row.version, spec=spec, updated_ms=now, updated_by=by
        )
    )
    session.flush()
    return row


def resolve(session: Session, selector: RuleSelector) -> list[str] | None:
    """The devices a selector names: those listed, those of its kinds and those with any of its
    tags in the registry, sorted; ``None`` for an empty selector (every device)."""
    if selector.everyone:
        return None
    found = set(selector.devices)
    named = []
    if selector.kinds:
        named.append(DeviceRow.kind.in_(selector.kinds))
    if selector.tags:
        tagged = select(DeviceTagRow.device_id).where(DeviceTagRow.tag.in_(selector.tags))
        named.append(DeviceRow.device_id.in_(tagged))
    if named:
        found.update(session.scalars(select(DeviceRow.device_id).where(or_(*named))))
    return sorted(found)


@dataclass(frozen=True)
class RegistryTerms:
    """The kinds and tags a device has in the registry: what a selector can name it by."""

    kinds: frozenset[str] = field(default_factory=frozenset)
    tags: frozenset[str] = field(default_factory=frozenset)

    def __or__(self, other: RegistryTerms) -> RegistryTerms:
        return RegistryTerms(self.kinds | other.kinds, self.tags | other.tags)

    def __bool__(self) -> bool:
        return bool(self.kinds or self.tags)


def registry_terms(session: Session, device_id: str) -> RegistryTerms:
    row = session.get(DeviceRow, device_id)
    if row is None:
        return RegistryTerms()
    tags = session.scalars(select(DeviceTagRow.tag).where(DeviceTagRow.device_id == device_id))
    return RegistryTerms(frozenset([row.kind] if row.kind else []), frozenset(tags))


def naming(session: Session, terms: RegistryTerms) -> list[RuleRow]:
    """The rules in force whose selector names any of these kinds or tags, by id."""
    rows = session.scalars(
        select(RuleRow).where(RuleRow.deleted.is_(False)).order_by(RuleRow.rule_id)
    ).all()
    return [r for r in rows if _names(r.spec or {}, terms.kinds, terms.tags)]


def _names(spec: dict[str, Any], kinds: Collection[str], tags: Collection[str]) -> bool:
    selector = spec.get("select") or {}
    return bool(set(selector.get("kinds", ())) & set(kinds)) or bool(
        set(selector.get("tags", ())) & set(tags)
    )
