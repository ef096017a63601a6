"""requirements.lock, what `make setup` installs, holds pyproject.toml's pins, each with hashes."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT

# A locked requirement: `name==version \` then its `--hash=sha256:...` lines.
ENTRY = re.compile(r"^([A-Za-z0-9._-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}.*\n)+)", re.M)


def locked() -> dict[str, str]:
    text = (ROOT / "requirements.lock").read_text()
    entries = {canonicalize_name(m[1]): m[2] for m in ENTRY.finditer(text)}
    pinned_lines = re.findall(r"^[A-Za-z0-9._-]+==", text, re.M)
    assert len(entries) == len(pinned_lines), "every locked requirement carries its hashes"
    return entries


def pyproject_pins() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [
        Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    ]


def test_every_pyproject_pin_is_locked_at_its_version() -> None:
    lock = locked()
    mismatched = {}
    for requirement in pyproject_pins():
        (spec,) = requirement.specifier  # pinned exactly, one version
        assert spec.operator == "==", requirement
        if lock.get(canonicalize_name(requirement.name)) != spec.version:
            mismatched[requirement.name] = (spec.version, lock.get(requirement.name))
    assert mismatched == {}, "run `make lock` after changing a pin in pyproject.toml"


def test_an_extra_is_locked_at_its_package_s_version() -> None:
    # psycopg[binary] needs psycopg-binary at the same version.
    lock = locked()
    assert lock["psycopg-binary"] == lock["psycopg"]
