"""The locks and what they pin: every requirement pyproject.toml declares has a pinned line in
``requirements/dev.lock`` (and the runtime ones in ``requirements/runtime.lock``) that satisfies
it, the image's lock agrees with the dev lock, the virtualenv holds what the lock pins, and every
third-party module the code imports comes from a distribution it declares. After a change to
pyproject's dependencies, ``make lock`` brings the locks back in line."""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCKS = REPO / "requirements"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
RUNTIME = [Requirement(r) for r in PROJECT["dependencies"]]
DEV = [Requirement(r) for r in PROJECT["optional-dependencies"]["dev"]]

# The platform the locks are resolved for (the Makefile's LOCK_FLAGS): markers are read there
# (Marker.evaluate fills in the rest from the running interpreter).
TARGET: dict[str, str] = {
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}

PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)")


def pins(lock: str) -> dict[NormalizedName, Version]:
    """A lock's pinned lines, name → version (the locks hold one line per name: one platform)."""
    text = (LOCKS / lock).read_text()
    found: dict[NormalizedName, Version] = {}
    for line in text.splitlines():
        match = PIN.match(line)
        if match:
            name = canonicalize_name(match["name"])
            assert name not in found, f"{lock} pins {name} twice"
            found[name] = Version(match["version"])
    assert found, f"{lock} pins nothing"
    return found


def applicable(requirements: Iterable[Requirement]) -> Iterator[Requirement]:
    return (r for r in requirements if r.marker is None or r.marker.evaluate(TARGET))


def disagreements(
    requirements: Iterable[Requirement], pinned: dict[NormalizedName, Version]
) -> list[str]:
    wrong = []
    for requirement in applicable(requirements):
        name = canonicalize_name(requirement.name)
        if name not in pinned:
            wrong.append(f"{requirement}: not in the lock")
        elif not requirement.specifier.contains(pinned[name], prereleases=True):
            wrong.append(f"{requirement}: the lock pins {pinned[name]}")
    return wrong


@pytest.mark.parametrize(
    ("lock", "requirements"),
    [("dev.lock", RUNTIME + DEV), ("runtime.lock", RUNTIME)],
)
def test_every_declared_requirement_has_a_pin_that_satisfies_it(
    lock: str, requirements: list[Requirement]
) -> None:
    wrong = disagreements(requirements, pins(lock))
    assert not wrong, f"pyproject.toml and requirements/{lock} disagree (run `make lock`): {wrong}"


def test_the_disagreement_check_catches_a_stale_lock() -> None:
    pinned = {canonicalize_name("numpy"): Version("2.4.6")}
    assert disagreements([Requirement("numpy>=1.26,<3")], pinned) == []
    assert disagreements([Requirement("numpy>=3")], pinned) == ["numpy>=3: the lock pins 2.4.6"]
    assert disagreements([Requirement("niquests>=3.4")], pinned) == [
        "niquests>=3.4: not in the lock"
    ]
    # a requirement whose marker leaves the locks' platform out needs no pin
    assert disagreements([Requirement("pywin32>=300; sys_platform == 'win32'")], pinned) == []


def test_the_image_gets_the_dev_lock_s_versions_less_the_dev_extra() -> None:
    dev, runtime = pins("dev.lock"), pins("runtime.lock")
    differ = {n: (v, dev.get(n)) for n, v in runtime.items() if dev.get(n) != v}
    assert not differ, f"runtime.lock and dev.lock pin differently (run `make lock`): {differ}"
    # the test and lint tools stay out of the image
    assert not {"pytest", "ruff", "mypy", "hypothesis", "schemathesis"} & runtime.keys()


def test_every_pin_carries_its_hashes() -> None:
    for lock in ("dev.lock", "runtime.lock", "tools.lock"):
        entries = re.split(r"\n(?=[A-Za-z0-9])", (LOCKS / lock).read_text())
        unhashed = [e.split()[0] for e in entries if PIN.match(e) and "--hash=sha256:" not in e]
        assert not unhashed, f"requirements/{lock}: pins without hashes: {unhashed}"


def test_the_virtualenv_holds_what_the_dev_lock_pins() -> None:
    """The tests run against the locked versions: `make setup` syncs the virtualenv to the lock."""
    wrong = {}
    for name, pinned in pins("dev.lock").items():
        try:
            installed = Version(version(name))
        except PackageNotFoundError:
            wrong[name] = "missing"
            continue
        if installed != pinned:
            wrong[name] = f"{installed}, lock {pinned}"
    assert not wrong, (
        f"the virtualenv differs from requirements/dev.lock (run `make setup`): {wrong}"
    )


@functools.cache
def module_distributions() -> dict[str, list[str]]:
    """Top-level module → the installed distributions that provide it."""
    return dict(packages_distributions())


def third_party_imports(root: Path, own: set[str]) -> dict[str, set[str]]:
    """Top-level modules the files under root import (absolute imports, lazy ones included),
    less the standard library and the repository's own packages → the files importing each."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in own | {"__future__"}:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


@pytest.mark.parametrize(
    ("root", "declared"),
    [
        # the package runs in the image, which has the runtime dependencies only
        ("fleetwatch", RUNTIME),
        ("tests", RUNTIME + DEV),
        ("bench", RUNTIME + DEV),
    ],
)
def test_every_third_party_import_is_declared(root: str, declared: list[Requirement]) -> None:
    names = {canonicalize_name(r.name) for r in declared}
    distributions = module_distributions()
    imports = third_party_imports(REPO / root, own={"fleetwatch", "tests", "bench"})
    assert imports, f"found no third-party import under {root}/"
    undeclared = {}
    for module, files in sorted(imports.items()):
        providers = {canonicalize_name(d) for d in distributions.get(module, [])}
        if not providers & names:
            undeclared[module] = (sorted(providers) or "not installed", sorted(files)[:3])
    assert not undeclared, (
        f"{root}/ imports modules pyproject.toml does not declare "
        f"(module: its distributions, where): {undeclared}"
    )
