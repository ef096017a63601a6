"""Config errors: every problem carries the identity path it belongs to."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem in a config, e.g. ``nodes[node-a].providers[p1].capacity: must be >= 1``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(Exception):
    """A config that cannot be used. ``issues`` lists every problem found, in a stable order."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))

    def __reduce__(self) -> tuple[type[ConfigError], tuple[list[ConfigIssue]]]:
        # Pickled between processes (refresh.plan_worker) with its issues.
        return (type(self), (self.issues,))

    @classmethod
    def single(cls, path: str, message: str) -> ConfigError:
        return cls([ConfigIssue(path, message)])
