"""Safe YAML parsing for configs: no tags, no duplicate keys, no merge keys, bounded size and
alias expansion.

PyYAML's safe loader still keeps the last of two equal keys silently and lets aliases fan out
exponentially ("billion laughs"). Both would let a config mean something other than it reads, so
both are errors here. Merge keys (`<<: [*a, *a]`) are refused while composing: their flattening
copies pairs for every alias, exponentially when chained, before any size check could see them,
and a config has no need of them.
"""

from __future__ import annotations

from typing import Any

import yaml

from edge.config.errors import ConfigError

MAX_CONFIG_BYTES = 1024 * 1024
MAX_ALIASES = 100
# Nodes after alias expansion; a real config has a few thousand at most.
MAX_EXPANDED_NODES = 200_000
# What PyYAML's safe constructors raise on a malformed value behind an explicit standard tag or a
# date-like scalar (`!!bool maybe`, `!!timestamp foo`, `2024-13-01`, an int over the digit limit).
_VALUE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate and merge keys and counts aliases as they are composed."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_count = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.alias_count += 1
            if self.alias_count > MAX_ALIASES:
                event = self.peek_event()
                raise ConfigError.single(
                    _where(event.start_mark), f"more than {MAX_ALIASES} YAML aliases"
                )
        node = super().compose_node(parent, index)
        # `<<` (or an explicit `!!merge`) resolves to this tag; nothing is constructed yet.
        if node is not None and node.tag == _MERGE_TAG:
            raise ConfigError.single(
                _where(node.start_mark), "`<<` merge keys are not allowed; write the keys out"
            )
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except _VALUE_ERRORS:
            kind = node.tag.rpartition(":")[2]
            raise ConfigError.single(
                _where(node.start_mark),
                f"invalid YAML value: cannot read {self._shown(node)} as {kind}",
            ) from None

    def _shown(self, node: yaml.Node) -> str:
        """The value, when it only looks like its type (`2024-13-45`); an explicitly tagged
        value (`!!int ...`) may be anything, a secret too, and is not echoed."""
        value = node.value if isinstance(node.value, str) else ""
        if self.resolve(yaml.ScalarNode, value, (True, False)) != node.tag:
            return "this value"
        return repr(value if len(value) <= 40 else value[:40] + "...")

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise ConfigError.single(
                    _where(key_node.start_mark), "mapping keys must be scalars"
                )
            if key in seen:
                first = seen[key].start_mark.line + 1
                raise ConfigError.single(
                    _where(key_node.start_mark),
                    f"duplicate key {key!r} (first defined on line {first})",
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def parse_yaml(text: str | bytes) -> Any:
    """Parse one YAML document into plain data, or raise ConfigError saying where and why."""
    try:
        raw = text.encode() if isinstance(text, str) else text
    except UnicodeEncodeError as exc:
        raise ConfigError.single("", f"config is not valid text ({exc.reason})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError.single("", f"config is {len(raw)} bytes; the limit is {MAX_CONFIG_BYTES}")
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError.single(
            "", f"config is not UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    loader = None
    try:
        # The reader rejects control characters while the loader is being built, so it is
        # built inside the try.
        loader = _StrictLoader(source)
        data = loader.get_single_data()
    except yaml.reader.ReaderError as exc:
        line = source.count("\n", 0, exc.position) + 1
        column = exc.position - (source.rfind("\n", 0, exc.position) + 1) + 1
        raise ConfigError.single(
            f"line {line}, column {column}",
            f"invalid YAML: {exc.reason} (#x{exc.character:04x})",
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _where(mark) if mark else ""
        raise ConfigError.single(where, f"invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError.single("", f"invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError.single("", "invalid YAML: nested too deeply") from None
    except _VALUE_ERRORS:
        # Not echoed: the exception's text may quote the value.
        raise ConfigError.single("", "invalid YAML value") from None
    finally:
        if loader is not None:
            loader.dispose()
    _check_expanded_size(data)
    return data


def _check_expanded_size(data: Any) -> None:
    """Walk the data as the validator would, stopping as soon as it is too large."""
    budget = MAX_EXPANDED_NODES
    stack = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError.single("", f"config expands to more than {MAX_EXPANDED_NODES} values")
        if depth > 50:
            raise ConfigError.single("", "config is nested more than 50 levels deep")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
