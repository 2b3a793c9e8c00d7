"""The rule checker the API runs as a child process (the ``fleetwatch-rule-check`` command),
so that the API itself loads no Spark.

One rule a line on stdin (a :class:`~fleetwatch.contracts.rules.RuleSpec` as JSON), one answer
a line on stdout: ``{"ok": true}``, or ``{"ok": false, "field": …, "error": …}`` with Spark's
parser's or analyser's words. A local Spark session with ANSI mode off, as the rules query
runs, starts once; the process ends when stdin closes.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, TextIO

from pydantic import ValidationError

from fleetwatch.contracts.rules import RuleSpec
from fleetwatch.streaming.rules.conditions import RuleError, check, local_rules_session


def answer(spark: Any, line: str) -> dict[str, Any]:
    try:
        spec = RuleSpec.model_validate_json(line)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else "rule"
        return {"ok": False, "field": field, "error": error["msg"]}
    try:
        check(spark, spec)
    except RuleError as exc:
        return {"ok": False, "field": exc.field, "error": exc.message}
    return {"ok": True}


def serve(spark: Any, lines: TextIO, out: TextIO) -> None:
    for line in lines:
        if line.strip():
            out.write(json.dumps(answer(spark, line)) + "\n")
            out.flush()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    spark = local_rules_session("fleetwatch-rule-check")
    serve(spark, sys.stdin, sys.stdout)
    spark.stop()


if __name__ == "__main__":
    main()
