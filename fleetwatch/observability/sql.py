"""SQL targets for Grafana's PostgreSQL datasource, which the Grafana Foundation SDK has no
builders for: a panel query and an annotation query, each serialised as Grafana stores them
(``rawSql`` in code mode)."""

from __future__ import annotations

from typing import Literal

from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import dashboard as model

SqlFormat = Literal["time_series", "table"]


class SqlQuery(cogvariants.Dataquery):
    def __init__(
        self, raw_sql: str, fmt: SqlFormat, ref_id: str, datasource: model.DataSourceRef
    ) -> None:
        self.raw_sql = raw_sql
        self.fmt = fmt
        self.ref_id = ref_id
        self.datasource = datasource

    def to_json(self) -> dict[str, object]:
        return {
            "datasource": self.datasource.to_json(),
            "editorMode": "code",
            "format": self.fmt,
            "rawQuery": True,
            "rawSql": self.raw_sql,
            "refId": self.ref_id,
        }


class Sql(cogbuilder.Builder[cogvariants.Dataquery]):
    """A panel's SQL query: ``time_series`` wants a ``time`` column (and a ``metric`` column
    names the series of a long result), ``table`` any columns."""

    def __init__(
        self, raw_sql: str, datasource: model.DataSourceRef, fmt: SqlFormat = "table"
    ) -> None:
        self._query = SqlQuery(raw_sql, fmt, "A", datasource)

    def ref_id(self, ref_id: str) -> Sql:
        self._query.ref_id = ref_id
        return self

    def build(self) -> cogvariants.Dataquery:
        return self._query


class SqlAnnotationTarget(model.AnnotationTarget):
    """An annotation from SQL: columns ``time``, ``timeend``, ``text`` and ``tags``."""

    def __init__(self, raw_sql: str) -> None:
        super().__init__()
        self.raw_sql = raw_sql

    def to_json(self) -> dict[str, object]:
        return {
            "editorMode": "code",
            "format": "table",
            "rawQuery": True,
            "rawSql": self.raw_sql,
            "refId": "Anno",
        }


class SqlAnnotation(cogbuilder.Builder[model.AnnotationTarget]):
    def __init__(self, raw_sql: str) -> None:
        self._target = SqlAnnotationTarget(raw_sql)

    def build(self) -> model.AnnotationTarget:
        return self._target
