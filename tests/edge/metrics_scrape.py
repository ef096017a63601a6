"""One Prometheus scrape, parsed with prometheus_client's own parser: values by name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """The samples of one exposition text (which must parse)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {family.name: family for family in text_string_to_metric_families(text)}
        self._values = {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in self.families.values()
            for sample in family.samples
        }

    def value(self, name: str, **labels: str) -> float | None:
        """The sample named ``name`` with exactly these labels; None when there is none."""
        return self._values.get((name, frozenset(labels.items())))

    def count(self, name: str, **labels: str) -> float:
        """A counter's or histogram series' value, 0 before it was first counted."""
        return self.value(name, **labels) or 0.0

    def labelled(self, name: str) -> list[dict[str, str]]:
        """The label sets of every sample named ``name``."""
        return [dict(labels) for sample, labels in self._values if sample == name]

    def total(self, name: str) -> float:
        """The sum of every sample named ``name``, whatever its labels."""
        return sum(value for (sample, _), value in self._values.items() if sample == name)

    def sample_names(self) -> set[str]:
        return {name for name, _ in self._values}
