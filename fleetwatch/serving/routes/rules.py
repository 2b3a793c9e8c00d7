"""Operators' rules: list, read, versions; create, replace and delete (the ``admin`` scope).

A write is checked by Spark (:mod:`fleetwatch.serving.rules.checker`), stored as the rule's
next version and published on the ``rules`` topic before it is answered
(:mod:`fleetwatch.serving.rules.publish`): a rule Spark refuses is a 422 naming the field, and
a write that cannot be checked or published is a 503 that changed nothing."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Response, status
from sqlalchemy.exc import IntegrityError

from fleetwatch.contracts.rules import RULE_ID_PATTERN, RuleSpec
from fleetwatch.serving.auth import Admin, Reader
from fleetwatch.serving.control.publisher import PublishFailed
from fleetwatch.serving.deps import ServicesDep, StoreDep
from fleetwatch.serving.routes.params import AUTH, NOT_FOUND, Limit, Offset
from fleetwatch.serving.rules.checker import CheckerUnavailable, RuleCheck
from fleetwatch.serving.rules.publish import (
    RulesBusy,
    RuleTooLarge,
    publish,
    record,
    rule_transaction,
)
from fleetwatch.serving.schemas.rules import (
    RulePublic,
    RulesPublic,
    RuleVersionPublic,
    RuleVersionsPublic,
)
from fleetwatch.serving.store import Store, now_ms
from fleetwatch.serving.store import rules as repo
from fleetwatch.serving.tables import RuleRow

router = APIRouter(prefix="/rules", tags=["rules"], responses=AUTH)

RuleIdPath = Annotated[str, Path(pattern=RULE_ID_PATTERN, description="A rule id")]

WRITES: dict[int | str, dict[str, Any]] = {
    422: {"description": "Not a valid rule: Spark's parser or analyser says where"},
    503: {"description": "The rule could not be checked or published; nothing changed"},
}


def _public(row: RuleRow) -> RulePublic:
    return RulePublic(
        **record(row).model_dump(), created_ms=row.created_ms, updated_by=row.updated_by
    )


def _invalid(field: str, message: str) -> HTTPException:
    """A 422 shaped as FastAPI's own: the field's place in the body and the message."""
    return HTTPException(
        422, detail=[{"loc": ["body", field], "msg": message, "type": "rule_invalid"}]
    )


def _checked(checker: RuleCheck, spec: RuleSpec) -> None:
    try:
        verdict = checker.check(spec)
    except CheckerUnavailable as exc:
        raise HTTPException(
            503, detail=f"the rule was not saved: it cannot be checked now ({exc})"
        ) from exc
    if not verdict.ok:
        raise _invalid(verdict.field or "when", verdict.error or "refused by Spark")


def _write(services: ServicesDep, spec: RuleSpec, by: str, create: bool) -> tuple[RuleRow, bool]:
    """Check, store as the next version, publish; the row and whether the rule is new. A rule
    written again as it stands makes no version."""
    _checked(services.checker, spec)
    written = spec.model_dump(mode="json")
    try:
        with rule_transaction(services.store) as session:
            row = repo.get_rule(session, spec.id)
            exists = row is not None and not row.deleted
            if row is not None and exists:
                if create:
                    raise HTTPException(
                        409,
                        detail=f"rule {spec.id!r} exists (version {row.version}); "
                        f"PUT /rules/{spec.id} replaces it",
                    )
                if row.spec == written:
                    return row, False
            devices = repo.resolve(session, spec.select)
            row = repo.write_version(session, spec.id, written, devices, now_ms(), by)
            publish(services.publisher, row)
    except RuleTooLarge as exc:
        raise _invalid("select", str(exc)) from exc
    except (PublishFailed, RulesBusy) as exc:
        raise HTTPException(503, detail=f"the rule was not saved: {exc}") from exc
    except IntegrityError as exc:
        raise HTTPException(
            409, detail=f"rule {spec.id!r} was written at the same time by another request; retry"
        ) from exc
    return row, not exists


@router.get("", response_model=RulesPublic)
def list_rules(store: StoreDep, _: Reader, limit: Limit = 100, offset: Offset = 0) -> RulesPublic:
    """The rules in force, by id."""
    with store.session() as session:
        rows, total = repo.list_rules(session, limit, offset)
    return RulesPublic(data=[_public(r) for r in rows], count=total, limit=limit, offset=offset)


@router.post(
    "",
    response_model=RulePublic,
    status_code=status.HTTP_201_CREATED,
    responses={409: {"description": "The rule exists"}, **WRITES},
)
def create_rule(body: RuleSpec, services: ServicesDep, who: Admin) -> RulePublic:
    """Create a rule (a deleted one's id may be used again: its versions count on)."""
    row, _ = _write(services, body, who.name, create=True)
    return _public(row)


def _current(store: Store, rule_id: str) -> RuleRow:
    with store.session() as session:
        row = repo.get_rule(session, rule_id)
    if row is None:
        raise HTTPException(404, detail=f"no rule {rule_id!r}")
    if row.deleted:
        raise HTTPException(
            404,
            detail=f"rule {rule_id!r} was deleted (version {row.version}); "
            f"GET /rules/{rule_id}/versions shows what it was",
        )
    return row


@router.get("/{rule_id}", response_model=RulePublic, responses=NOT_FOUND)
def get_rule(rule_id: RuleIdPath, store: StoreDep, _: Reader) -> RulePublic:
    """A rule in force: as written, its version and the devices it judges."""
    return _public(_current(store, rule_id))


@router.get("/{rule_id}/versions", response_model=RuleVersionsPublic, responses=NOT_FOUND)
def rule_versions(
    rule_id: RuleIdPath, store: StoreDep, _: Reader, limit: Limit = 100, offset: Offset = 0
) -> RuleVersionsPublic:
    """Every version of a rule, newest first; a deletion is a version without a rule."""
    with store.session() as session:
        rows, total = repo.versions(session, rule_id, limit, offset)
    if total == 0:
        raise HTTPException(404, detail=f"no rule {rule_id!r}")
    data = [
        RuleVersionPublic(
            version=r.version,
            deleted=r.spec is None,
            rule=None if r.spec is None else RuleSpec.model_validate(r.spec),
            updated_ms=r.updated_ms,
            updated_by=r.updated_by,
        )
        for r in rows
    ]
    return RuleVersionsPublic(rule_id=rule_id, data=data, count=total, limit=limit, offset=offset)


@router.put(
    "/{rule_id}",
    response_model=RulePublic,
    responses={201: {"description": "Created", "model": RulePublic}, **WRITES},
)
def put_rule(
    rule_id: RuleIdPath, body: RuleSpec, services: ServicesDep, who: Admin, response: Response
) -> RulePublic:
    """Create a rule (201) or replace it (200) with a new version; the body's ``id`` is the
    path's. The rule as it stands again makes no version."""
    if body.id != rule_id:
        raise _invalid("id", f"the rule's id ({body.id!r}) is not the path's ({rule_id!r})")
    row, created = _write(services, body, who.name, create=False)
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return _public(row)


@router.delete(
    "/{rule_id}",
    status_code=204,
    responses={**NOT_FOUND, 503: WRITES[503]},
)
def delete_rule(rule_id: RuleIdPath, services: ServicesDep, who: Admin) -> Response:
    """Delete a rule: a version of its own, and a tombstone on the ``rules`` topic."""
    try:
        with rule_transaction(services.store) as session:
            row = repo.get_rule(session, rule_id)
            if row is None or row.deleted:
                raise HTTPException(404, detail=f"no rule {rule_id!r}")
            row = repo.write_version(session, rule_id, None, None, now_ms(), who.name)
            publish(services.publisher, row)
    except (PublishFailed, RulesBusy) as exc:
        raise HTTPException(503, detail=f"the rule was not deleted: {exc}") from exc
    return Response(status_code=204)
