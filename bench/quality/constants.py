"""The detection code's numeric constants, counted: how many of them can change what alerts.

Parses (``ast``; nothing of the package is imported) the modules a reading's score and alert
are made in — ``fleetwatch/models/``, ``fleetwatch/streaming/scorer/``, ``fleetwatch/fleet/``,
``fleetwatch/filemode/`` — and lists each numeric constant:

- a module-level name in UPPER_CASE (a leading ``_`` too), or any name annotated ``Final``,
  assigned a number, a tuple/list of numbers, or an expression of numbers and other numeric
  constants (names imported from ``fleetwatch`` are followed to their module to tell);
- an UPPER_CASE name of the same kind in a class body (enum members are codes, not constants,
  and are left out);
- apart from those, the numeric defaults of each detector's fields and ``__init__`` keywords (a
  class with a ``kind`` string): its hyper-parameters' defaults, reported as such and not
  counted below.

Each constant is ``plumbing`` when :data:`PLUMBING` names it (a size, a wire limit, a version
…: it cannot change which readings alert nor their score), ``derived`` when :data:`DERIVED`
names it (another constant restated in other units: counted once, as that one), and
``alerting`` otherwise, so that
a new constant counts against the budget until someone says why it does not. The budget (issue
68) is :data:`BUDGET` alerting constants.

    python bench/quality/constants.py

Prints one table row per constant (module, name, value as written, the first line of its
docstring or comment, class), the hyper-parameter defaults, and last a JSON line:
{"alerting", "plumbing", "derived", "hyperparameter_defaults", "budget", "within_budget",
"by_module": {module: alerting constants}}.
"""

from __future__ import annotations

import ast
import io
import json
import re
import sys
import tokenize
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

ROOT = Path(__file__).resolve().parents[2]
DETECTION = ("models", "streaming/scorer", "fleet", "filemode")
"""The packages under ``fleetwatch/`` scanned: where a reading's score and alert are made."""
BUDGET = 35
ALERTING, PLUMBING_CLASS, HYPER = "alerting", "plumbing", "hyper-parameter default"
DERIVED_CLASS = "derived"

_M, _S, _F = "fleetwatch.models.", "fleetwatch.streaming.scorer.", "fleetwatch.filemode."
PLUMBING: Mapping[str, str] = {
    f"{_M}baseline:PARAMS_SCHEMA": "version",
    f"{_M}batch:FEW_METRICS": "speed",
    f"{_M}baseline:SMALL": "speed",
    f"{_M}baseline:_NAN": "sentinel",
    f"{_M}baseline:_UNKNOWN": "sentinel",
    f"{_M}calibration:_LN2": "math",
    f"{_M}flatline:SQRT_2PI": "math",
    f"{_M}grid:WIDTH": "layout",
    f"{_M}grid:MEMO_SIZE": "cache",
    f"{_M}grid:_EPS": "math",
    f"{_M}lasting:CARRIED": "layout",
    f"{_M}level:TINY": "guard",
    f"{_M}level:CARRY": "layout",
    f"{_M}level:FEW_READINGS": "speed",
    f"{_M}profile:HOUR_MS": "unit",
    f"{_M}tail:BIN_WIDTH": "bins",
    f"{_M}tail:LINEAR_TOP": "bins",
    f"{_M}tail:GEOMETRIC_STEPS": "bins",
    f"{_M}tail:LINEAR_BINS": "bins",
    f"{_M}tail:BINS": "bins",
    f"{_M}tail:EDGES": "bins",
    f"{_M}tail:_CENTRES": "bins",
    f"{_M}tail:_OLD_BINS": "compat",
    f"{_M}tail:DAY_MS": "unit",
    f"{_M}trend:CARRY": "layout",
    f"{_M}trend:_SPAN": "overflow",
    f"{_M}trend:SMALL": "speed",
    f"{_S}device_moves:TINY": "guard",
    f"{_S}episodes:UPDATE_STEP": "messages",
    f"{_S}job:PLAN_VERSION": "version",
    f"{_S}quarantine:MAX_REASON": "formatting",
    f"{_S}readings:_NAN": "sentinel",
    f"{_S}readings:UNKNOWN": "sentinel",
    "fleetwatch.fleet.tracking:_MAX_PARAMS_PER_REQUEST": "wire",
    "fleetwatch.fleet.tracking:_MAX_PARAM_CHARS": "wire",
    f"{_F}columns:EPOCH_SECONDS_BELOW": "parsing",
    f"{_F}columns:NUMERIC_SHARE": "parsing",
    f"{_F}columns:TIME_SHARE": "parsing",
    f"{_F}csvfile:DEFAULT_PIECE_ROWS": "memory",
    f"{_F}rules:NEVER_EXPIRE_MS": "sentinel",
}
"""``module:NAME`` (``module:Class.NAME`` in a class) → why it cannot change which readings alert
nor their score, in one word: a format's version, a faster path to the same result, a
placeholder, a mathematical constant or a unit, the layout of a state, a size or a limit of
memory, a cache or the wire, a guard against dividing by zero, the histogram's bins (their
resolution, not a threshold), or how input is parsed and how many events an episode sends.
Everything not named here counts as alerting."""

DERIVED: Mapping[str, str] = {
    f"{_M}calibration:S_ALERT": "ALERT_P in nats",
    f"{_M}calibration:ALERT_Z": "ALERT_P as a two-sided normal deviate",
    f"{_M}calibration:ALERT_SCORE": "S_ALERT (ALERT_P) as a score",
    f"{_M}grid:_KEEP": "HALFLIFE as a decay per value",
    f"{_M}lasting:CAP_Z": "CAP_P as an upper normal deviate",
    f"{_M}seasonal:SPLIT_Z": "EARLY_Z",
    f"{_M}level:UNBACKED": "EARLY_Z over ALERT_Z (a tail nothing knows: twice the floor)",
    "fleetwatch.fleet.pca:RANGE_Z": "EARLY_Z (how far normal readings reach, their tail unknown)",
    f"{_M}tail:_BODY_NATS": "P_BODY in nats",
    f"{_M}tail:MIN_HISTORY": "MIN_PEAKS values above the body's 1 - P_BODY quantile",
    f"{_M}tail:MIN_BETA": "BIN_WIDTH",
}
"""``module:NAME`` → the constant it restates in other units (no choice of its own: a
probability as nats or as a normal deviate, a half-life as a decay). It changes what alerts only
through that constant, which is counted; :func:`census` checks that its value names it."""

_UPPER = re.compile(r"_*[A-Z][A-Z0-9_]*")
_NUMERIC_ATTRS = {"inf", "nan", "pi", "e", "tau"}
_NUMERIC_MODULES = {"math", "np", "numpy"}


@dataclass(frozen=True)
class Constant:
    module: str
    """Dotted module name, ``fleetwatch.models.tail``."""
    name: str
    """``NAME``, ``Class.NAME``, or ``Class(param)`` for a hyper-parameter default."""
    value: str
    """As written."""
    doc: str
    """First line of its docstring, else of its trailing comment, else of the comment above."""
    kind: str
    """``alerting``, ``plumbing``, ``derived`` or ``hyper-parameter default``."""
    why: str = ""
    """For plumbing, :data:`PLUMBING`'s word; for derived, what :data:`DERIVED` says."""


@dataclass
class _Module:
    name: str
    tree: ast.Module
    lines: list[str]
    source: str
    imports: dict[str, tuple[str, str | None]]
    """Local name → (module, name in it); name ``None`` for a module imported whole."""
    values: dict[str, ast.expr]
    """Module-level assignments of UPPER_CASE (or ``Final``) names."""


class _Modules:
    """Parsed modules by dotted name, on demand, to follow imported names."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[str, _Module | None] = {}
        self._numeric: dict[tuple[str, str], bool] = {}

    def load(self, name: str, path: Path | None = None) -> _Module | None:
        if name not in self._cache:
            path = path or self._path(name)
            self._cache[name] = None if path is None else _parse(name, path)
        return self._cache[name]

    def _path(self, name: str) -> Path | None:
        base = self.root.joinpath(*name.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None

    def is_numeric_name(self, module: _Module, name: str) -> bool:
        """Whether ``name`` in ``module`` is a numeric constant (defined there or imported)."""
        key = (module.name, name)
        if key not in self._numeric:
            self._numeric[key] = False  # a cycle is not a number
            self._numeric[key] = self._resolve(module, name)
        return self._numeric[key]

    def _resolve(self, module: _Module, name: str) -> bool:
        if name in module.values:
            return self.is_numeric(module, module.values[name])
        if name in module.imports:
            source, imported = module.imports[name]
            other = self.load(source)
            if imported is not None and other is not None:
                return self.is_numeric_name(other, imported)
        return False

    def is_numeric(self, module: _Module, node: ast.expr) -> bool:
        """Whether ``node`` is a number, numbers, or an expression of them and of constants."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int | float) and not isinstance(node.value, bool)
        if isinstance(node, ast.UnaryOp):
            return self.is_numeric(module, node.operand)
        if isinstance(node, ast.BinOp):
            return self.is_numeric(module, node.left) and self.is_numeric(module, node.right)
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return bool(node.elts) and all(self.is_numeric(module, e) for e in node.elts)
        if isinstance(node, ast.Name):
            return self.is_numeric_name(module, node.id)
        if isinstance(node, ast.Attribute) and _is_machine_limits(node.value):
            return True  # ``np.finfo(np.float64).eps``: a number, as ``math.pi`` is
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base = node.value.id
            if base in _NUMERIC_MODULES:
                return node.attr in _NUMERIC_ATTRS
            source, imported = module.imports.get(base, ("", ""))
            # ``import a.b as c`` or ``from a import b`` (a module): ``c.NAME``, ``b.NAME``
            other = self.load(source if imported is None else f"{source}.{imported}")
            return other is not None and self.is_numeric_name(other, node.attr)
        if isinstance(node, ast.Call):
            return self._is_numeric_call(module, node)
        if isinstance(node, ast.Subscript):
            index = node.slice
            return self.is_numeric(module, node.value) and self._is_numeric_index(module, index)
        return False

    def _is_numeric_index(self, module: _Module, node: ast.expr) -> bool:
        if isinstance(node, ast.Slice):
            parts = (node.lower, node.upper, node.step)
            return all(p is None or self.is_numeric(module, p) for p in parts)
        return self.is_numeric(module, node)

    def _is_numeric_call(self, module: _Module, node: ast.Call) -> bool:
        """A function of numbers and numeric constants alone (``math.log(2.0)``,
        ``float(-ndtri(ALERT_P / 2))``, ``np.arange(BINS)``), or ``float("inf")``."""
        args = [*node.args, *(k.value for k in node.keywords)]
        if not args or any(isinstance(a, ast.Starred) for a in node.args):
            return False
        if isinstance(node.func, ast.Name) and node.func.id == "float" and len(args) == 1:
            arg = args[0]
            if isinstance(arg, ast.Constant) and str(arg.value).lower() in {"inf", "-inf", "nan"}:
                return True
        return all(self.is_numeric(module, a) for a in args)


def _is_machine_limits(node: ast.expr) -> bool:
    """``np.finfo(…)`` or ``np.iinfo(…)``: a float or integer type's limits, whose attributes
    (``eps``, ``max``, …) are numbers. Without this a tolerance derived from float64's
    precision would be missed by the census (neither counted nor shown)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"finfo", "iinfo"}
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in _NUMERIC_MODULES
    )


def _parse(name: str, path: Path) -> _Module:
    source = path.read_text()
    tree = ast.parse(source, str(path))
    imports: dict[str, tuple[str, str | None]] = {}
    values: dict[str, ast.expr] = {}
    for node in _module_level(tree.body):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imports[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imports[alias.asname or alias.name.split(".")[0]] = (alias.name, None)
        else:
            for target, value in _assigned(node):
                values[target] = value
    return _Module(name, tree, source.splitlines(), source, imports, values)


def _module_level(body: Sequence[ast.stmt]) -> Iterable[ast.stmt]:
    """The statements run at import: the body, and what ``if``/``try``/``with`` hold."""
    for node in body:
        if isinstance(node, ast.If):
            yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level(block)
            for handler in node.handlers:
                yield from _module_level(handler.body)
        elif isinstance(node, ast.With):
            yield from _module_level(node.body)
        else:
            yield node


def _is_final(annotation: ast.expr) -> bool:
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.split("[")[0].split(".")[-1] == "Final"
    return (isinstance(annotation, ast.Name) and annotation.id == "Final") or (
        isinstance(annotation, ast.Attribute) and annotation.attr == "Final"
    )


def _assigned(node: ast.stmt) -> list[tuple[str, ast.expr]]:
    """The constant-like names ``node`` assigns, each with its value."""
    pairs: list[tuple[ast.expr, ast.expr]] = []
    if isinstance(node, ast.Assign):
        pairs = [(t, node.value) for t in node.targets]
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        if isinstance(node.target, ast.Name) and _is_final(node.annotation):
            return [(node.target.id, node.value)]
        pairs = [(node.target, node.value)]
    out: list[tuple[str, ast.expr]] = []
    for target, value in pairs:
        if isinstance(target, ast.Name) and _UPPER.fullmatch(target.id):
            out.append((target.id, value))
        elif (
            isinstance(target, ast.Tuple)
            and isinstance(value, ast.Tuple)
            and len(target.elts) == len(value.elts)
        ):
            for t, v in zip(target.elts, value.elts, strict=True):
                if isinstance(t, ast.Name) and _UPPER.fullmatch(t.id):
                    out.append((t.id, v))
    return out


def _doc(module: _Module, body: Sequence[ast.stmt], index: int) -> str:
    """The first line of the docstring after ``body[index]``, else of its trailing comment,
    else of the comment block just above it."""
    node = body[index]
    after = body[index + 1] if index + 1 < len(body) else None
    if (
        isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    ):
        return _first_line(after.value.value)
    for lineno in range(node.lineno, (node.end_lineno or node.lineno) + 1):
        comment = _comment(module.lines[lineno - 1])
        if comment:
            return comment
    above: list[str] = []
    lineno = node.lineno - 1
    while lineno >= 1 and module.lines[lineno - 1].strip().startswith("#"):
        above.insert(0, module.lines[lineno - 1].strip().lstrip("#").strip())
        lineno -= 1
    return above[0] if above else ""


def _comment(line: str) -> str:
    """A line's ``#`` comment (not a ``#`` in a string), without the hash."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(line + "\n").readline):
            if token.type == tokenize.COMMENT:
                return token.string[1:].strip()
    except (tokenize.TokenError, SyntaxError):  # a line of a longer statement
        return line.split("  # ", 1)[1].strip() if "  # " in line else ""
    return ""


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.strip().splitlines() if line.strip()), "")


def _written(module: _Module, node: ast.expr) -> str:
    return " ".join((ast.get_source_segment(module.source, node) or ast.unparse(node)).split())


def _classify(
    module: str,
    name: str,
    value: ast.expr,
    plumbing: Mapping[str, str],
    derived: Mapping[str, str],
) -> tuple[str, str]:
    key = f"{module}:{name}"
    why = plumbing.get(key)
    if why is not None:
        return PLUMBING_CLASS, why
    source = derived.get(key)
    if source is not None:
        named = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        restated = source.split()[0]
        if restated not in named:
            raise ValueError(f"{key} is said to restate {restated}, and its value does not name it")
        return DERIVED_CLASS, source
    return ALERTING, ""


def _constants_of(
    modules: _Modules, module: _Module, plumbing: Mapping[str, str], derived: Mapping[str, str]
) -> list[Constant]:
    found: list[Constant] = []

    def scan(body: Sequence[ast.stmt], owner: str) -> None:
        for index, node in enumerate(body):
            if isinstance(node, ast.ClassDef):
                if not _is_enum(node):
                    scan(node.body, f"{owner}{node.name}.")
                if not owner:
                    found.extend(_hyper_defaults(modules, module, node))
                continue
            for name, value in _assigned(node):
                if modules.is_numeric(module, value):
                    kind, why = _classify(module.name, owner + name, value, plumbing, derived)
                    found.append(
                        Constant(
                            module.name,
                            owner + name,
                            _written(module, value),
                            _doc(module, body, index),
                            kind,
                            why,
                        )
                    )

    top = list(_module_level(module.tree.body))
    scan(top, "")
    return found


def _is_enum(node: ast.ClassDef) -> bool:
    names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
    return any(n.endswith(("Enum", "Flag")) for n in names)


def _hyper_defaults(modules: _Modules, module: _Module, node: ast.ClassDef) -> list[Constant]:
    """The numeric defaults of a detector's fields and ``__init__`` keywords (a class with a
    ``kind``, or a base of detectors: a class named ``…Detector``)."""
    is_detector = node.name.endswith("Detector") or any(
        isinstance(s, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(t, ast.Name) and t.id == "kind"
            for t in (s.targets if isinstance(s, ast.Assign) else [s.target])
        )
        for s in node.body
    )
    if not is_detector:
        return []
    # a dataclass's fields: ``name: type = default`` in the class body
    fields = [
        Constant(module.name, f"{node.name}({s.target.id})", _written(module, s.value), "", HYPER)
        for s in node.body
        if isinstance(s, ast.AnnAssign)
        and isinstance(s.target, ast.Name)
        and s.value is not None
        and not _UPPER.fullmatch(s.target.id)
        and modules.is_numeric(module, s.value)
    ]
    init = next(
        (s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
    )
    if init is None:
        return fields
    args = init.args
    positional = [*args.posonlyargs, *args.args]
    defaulted = positional[len(positional) - len(args.defaults) :]
    pairs = list(zip(defaulted, args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
    return fields + [
        Constant(module.name, f"{node.name}({arg.arg})", _written(module, default), "", HYPER)
        for arg, default in pairs
        if modules.is_numeric(module, default)
    ]


def census(
    paths: Iterable[Path],
    root: Path,
    plumbing: Mapping[str, str] = PLUMBING,
    derived: Mapping[str, str] = DERIVED,
) -> list[Constant]:
    """Every numeric constant of the modules at ``paths`` (each named by its path under
    ``root``, which is also where imported ``fleetwatch`` names are looked up), classified."""
    modules = _Modules(root)
    found: list[Constant] = []
    for path in paths:
        name = ".".join(path.resolve().relative_to(root.resolve()).with_suffix("").parts)
        module = modules.load(name, path)
        assert module is not None
        found.extend(_constants_of(modules, module, plumbing, derived))
    return found


def summary(constants: Sequence[Constant], budget: int = BUDGET) -> dict[str, object]:
    kinds = Counter(c.kind for c in constants)
    by_module = Counter(c.module for c in constants if c.kind == ALERTING)
    return {
        "alerting": kinds[ALERTING],
        "plumbing": kinds[PLUMBING_CLASS],
        "derived": kinds[DERIVED_CLASS],
        "hyperparameter_defaults": kinds[HYPER],
        "budget": budget,
        "within_budget": kinds[ALERTING] <= budget,
        "by_module": dict(by_module.most_common()),
    }


def detection_files(root: Path = ROOT) -> list[Path]:
    return [
        path
        for package in DETECTION
        for path in sorted((root / "fleetwatch" / package).glob("*.py"))
    ]


def _table(constants: Sequence[Constant]) -> str:
    rows = [("module", "name", "value", "doc", "class")]
    for c in constants:
        short = c.module.removeprefix("fleetwatch.")
        value = c.value if len(c.value) <= 40 else c.value[:39] + "…"
        doc = c.doc if len(c.doc) <= 70 else c.doc[:69] + "…"
        rows.append((short, c.name, value, doc, c.kind + (f" ({c.why})" if c.why else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True))
        + "  "
        + row[4]
        for row in rows
    )


def main() -> None:
    from bench.common import write_results

    constants = census(detection_files(), ROOT)
    named = {f"{c.module}:{c.name}" for c in constants}
    for stale in sorted(set(PLUMBING) - named):
        print(f"constants: PLUMBING names {stale}, no constant of the scan", file=sys.stderr)
    print(_table([c for c in constants if c.kind != HYPER]))
    print()
    print("hyper-parameter defaults (detectors' __init__):")
    print(_table([c for c in constants if c.kind == HYPER]))
    result = summary(constants)
    print(json.dumps(result))
    write_results(__file__, result)


if __name__ == "__main__":
    main()
