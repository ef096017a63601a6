"""Field readers that record every problem with its path instead of stopping at the first."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from edge.config.errors import ConfigIssue

_MISSING = object()

# Keys that name a credential. Configs carry hashes and `*_env` names, never the secret itself.
_CREDENTIAL_KEY = re.compile(
    r"(^|_)(token|tokens|api_?key|password|passwd|secret|credentials?|authorization|bearer|"
    r"private_key|access_key)($|_)",
    re.IGNORECASE,
)

# Characters `str.splitlines()` breaks on (and other controls), escaped in issue paths.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def item_path(base: str, raw: Any, index: int, key: str = "id") -> str:
    """`nodes[node-a]` when the item names itself, else `nodes[0]`."""
    ident = raw.get(key) if isinstance(raw, dict) else None
    return f"{base}[{ident}]" if isinstance(ident, str) and ident else f"{base}[{index}]"


def looks_like_credential_key(key: str) -> bool:
    return bool(_CREDENTIAL_KEY.search(key)) and not key.endswith("_env")


def never_echoed(key: str) -> bool:
    """Whether messages must not repeat the value of ``key``: a hash, credential, env name or URL.

    A value that fails their checks is often a secret pasted into the wrong field.
    """
    return bool(_CREDENTIAL_KEY.search(key)) or key.endswith(("_env", "hash", "_sha256", "url"))


class Fields:
    """Collects issues while reading raw YAML data."""

    def __init__(self) -> None:
        self.issues: list[ConfigIssue] = []

    def error(self, path: str, message: str) -> None:
        # Paths echo keys and ids as written; escape control characters so that every issue
        # stays on one line of the report.
        self.issues.append(ConfigIssue(_CONTROL.sub(_escape, path), message))

    def mapping(
        self,
        value: Any,
        path: str,
        known: Iterable[str],
        required: Iterable[str] = (),
        other_known: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | None:
        """Check that ``value`` is a mapping with only known keys and every required key.

        ``other_known`` maps keys that exist elsewhere (e.g. another adapter type) to the
        reason they do not apply here.
        """
        if not isinstance(value, dict):
            self.error(path, f"must be a mapping (got {type_name(value)})")
            return None
        known = list(known)
        for key in value:
            if not isinstance(key, str):
                self.error(path, f"keys must be strings (got {key!r})")
                continue
            if key in known:
                continue
            key_path = join(path, key or "''")  # an empty key still needs a visible path
            if other_known and key in other_known:
                self.error(key_path, other_known[key])
            elif looks_like_credential_key(key) and value[key] not in (None, ""):
                self.error(
                    key_path,
                    "raw credentials are not allowed in the config; keep the secret on the Node "
                    f"and name its environment variable with `{key}_env`, or store a sha256 hash",
                )
            else:
                near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                hint = (
                    f"; did you mean '{near[0]}'?" if near else f"; known keys: {', '.join(known)}"
                )
                self.error(key_path, f"unknown key{hint}")
        for key in required:
            if key not in value:
                self.error(join(path, key), "is required")
        return value

    def sequence(self, data: Mapping[str, Any], key: str, path: str) -> list[Any]:
        value = data.get(key, [])
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(join(path, key), f"must be a list (got {type_name(value)})")
            return []
        return value

    def string(
        self,
        data: Mapping[str, Any],
        key: str,
        path: str,
        *,
        default: Any = _MISSING,
        pattern: re.Pattern[str] | None = None,
        expected: str = "",
    ) -> Any:
        value = data.get(key, default)
        if value is _MISSING:
            return None  # `mapping()` reported the missing key
        if value is None and default is None:
            return None
        if not isinstance(value, str):
            self.error(join(path, key), f"must be a string (got {type_name(value)})")
            return None
        if pattern is not None and not pattern.fullmatch(value):
            shown = "" if never_echoed(key) else f" (got {value!r})"
            self.error(join(path, key), f"must be {expected}{shown}")
            return None
        return value

    def integer(
        self,
        data: Mapping[str, Any],
        key: str,
        path: str,
        *,
        default: Any = _MISSING,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> Any:
        value = data.get(key, default)
        if value is _MISSING or (value is None and default is None):
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(join(path, key), f"must be an integer (got {type_name(value)})")
            return None
        return self._bounded(value, join(path, key), minimum, maximum)

    def number(
        self,
        data: Mapping[str, Any],
        key: str,
        path: str,
        *,
        default: Any = _MISSING,
        minimum: float | None = None,
        maximum: float | None = None,
        above: float | None = None,
    ) -> Any:
        value = data.get(key, default)
        if value is _MISSING or (value is None and default is None):
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            # `value != value` is NaN, which every bound comparison would let through.
            self.error(join(path, key), f"must be a number (got {show_number(value)})")
            return None
        if above is not None and not value > above:
            self.error(join(path, key), f"must be > {above:g} (got {show_number(value)})")
            return None
        checked = self._bounded(value, join(path, key), minimum, maximum)
        return None if checked is None else float(checked)

    def boolean(self, data: Mapping[str, Any], key: str, path: str, *, default: bool) -> Any:
        value = data.get(key, default)
        if not isinstance(value, bool):
            self.error(join(path, key), f"must be true or false (got {type_name(value)})")
            return None
        return value

    def _bounded(
        self, value: float, path: str, minimum: float | None, maximum: float | None
    ) -> float | None:
        if minimum is not None and value < minimum:
            self.error(path, f"must be >= {minimum:g} (got {show_number(value)})")
            return None
        if maximum is not None and value > maximum:
            self.error(path, f"must be <= {maximum:g} (got {show_number(value)})")
            return None
        return value


def show_number(value: Any) -> str:
    """A number for an error message; ints too large for a float are shortened, not converted."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) < 10**18:
            return str(value)
        return "a very large negative integer" if value < 0 else "a very large integer"
    return type_name(value)


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)
