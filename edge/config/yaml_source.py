"""Safe YAML parsing for configs: no tags, no duplicate keys, no merge keys, bounded size and
alias expansion.

PyYAML's safe loader still keeps the last of two equal keys silently and lets aliases fan out
exponentially ("billion laughs"). Both would let a config mean something other than it reads, so
both are errors here. Merge keys (`<<: [*a, *a]`) are refused before they are flattened: the
flattening copies pairs for every alias, exponentially when chained, and a config has no need of
them.

Parsing and composing run in libyaml (PyYAML's C loader): a fleet's config of thousands of nodes
is megabytes, and the pure-Python reader took seconds over it. The checks run while the composed
nodes are constructed, which is Python either way. Composition shares an anchored node between
its aliases, so nothing is expanded before the expansion check sees it.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from edge.config.errors import ConfigError

# A fleet of 8,000 nodes with ten providers each is about 14 MB in the block style `fleet_yaml`
# writes; the cap leaves room for that and still bounds what one request may make the Edge parse.
MAX_CONFIG_BYTES = 16 * 1024 * 1024
MAX_ALIASES = 100
# Values after alias expansion: an 8,000-node fleet has about 720,000.
MAX_EXPANDED_NODES = 4_000_000
MAX_DEPTH = 50
# What PyYAML's safe constructors raise on a malformed value behind an explicit standard tag or a
# date-like scalar (`!!bool maybe`, `!!timestamp foo`, `2024-13-01`, an int over the digit limit).
_VALUE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError)
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_MERGE_REFUSED = "`<<` merge keys are not allowed; write the keys out"
_SCALAR_KEYS = (str, int, float, bool, type(None))


class _StrictLoader(yaml.CSafeLoader):
    """libyaml composes; the document is then built here, refusing duplicate and merge keys and
    any collection but a plain mapping or list, and counting aliases.

    Composition shares one node between an anchor and each of its aliases, so a node reached a
    second time is an alias. Strings and plain decimal integers, most of a config, are built
    directly; any other scalar goes to PyYAML's safe constructors.
    """

    assert not yaml.CSafeLoader.yaml_path_resolvers  # what `resolve` below relies on

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_count = 0
        self._built: dict[yaml.Node, Any] = {}
        self._plain_tags: dict[str, str] = {}
        # What the expansion check needs, kept while building: without aliases nothing is
        # shared, so the document's values are the nodes built but its keys (``values``).
        self._keys = 0
        self._depth = 0
        self.deepest = 0

    @property
    def values(self) -> int:
        return len(self._built) - self._keys

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        """The tag of a scalar, as PyYAML resolves it, remembered per plain value: libyaml calls
        this for every scalar, and PyYAML's resolver tries its patterns in Python each time
        (about a tenth of a fleet config's parse). With no path resolvers (the safe loader has
        none), the tag depends on the value alone: a quoted scalar is a string."""
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)
        if not implicit[0]:
            return _STR_TAG
        tag = self._plain_tags.get(value)
        if tag is None:
            tag = self._plain_tags[value] = super().resolve(kind, value, implicit)
        return tag

    def construct_document(self, node: yaml.Node) -> Any:
        return self._build(node, node)

    def _build(self, node: yaml.Node, parent: yaml.Node) -> Any:
        if node in self._built:
            self.alias_count += 1
            if self.alias_count > MAX_ALIASES:
                raise ConfigError.single(
                    _where(parent.start_mark), f"more than {MAX_ALIASES} YAML aliases"
                )
            return self._built[node]
        if node.tag == _MERGE_TAG:
            raise ConfigError.single(_where(node.start_mark), _MERGE_REFUSED)
        if isinstance(node, yaml.ScalarNode):
            value = self._scalar(node)
            self._built[node] = value
            return value
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            raise _tag_refused(node)
        if isinstance(node, yaml.SequenceNode):
            items: list[Any] = []
            self._built[node] = items  # before its items: a list may hold itself
            self._enter(node)
            items.extend(self._build(child, node) for child in node.value)
            self._depth -= 1
            return items
        return self._mapping(node)

    def _enter(self, node: yaml.Node) -> None:
        """Into a collection's items: they are one level deeper (an empty one has none)."""
        self._depth += 1
        if node.value:
            self.deepest = max(self.deepest, self._depth)

    def _mapping(self, node: yaml.Node) -> dict[Any, Any]:
        mapping: dict[Any, Any] = {}
        self._built[node] = mapping
        lines: dict[Any, int] = {}
        self._keys += len(node.value)
        self._enter(node)
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                raise ConfigError.single(_where(key_node.start_mark), _MERGE_REFUSED)
            key = self._build(key_node, node)
            if not isinstance(key, _SCALAR_KEYS):
                raise ConfigError.single(
                    _where(key_node.start_mark), "mapping keys must be scalars"
                )
            if key in lines:
                raise ConfigError.single(
                    _where(key_node.start_mark),
                    f"duplicate key {key!r} (first defined on line {lines[key]})",
                )
            lines[key] = key_node.start_mark.line + 1
            mapping[key] = self._build(value_node, node)
        self._depth -= 1
        return mapping

    def _scalar(self, node: yaml.Node) -> Any:
        text = node.value
        if node.tag == _STR_TAG:
            return text
        if node.tag not in self.yaml_constructors:
            raise _tag_refused(node)
        try:
            # YAML 1.1 reads a leading 0 as octal: those go the long way.
            if node.tag == _INT_TAG and text.isdigit() and (text[0] != "0" or text == "0"):
                return int(text)
            return self.construct_object(node, deep=True)
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


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _tag_refused(node: yaml.Node) -> ConfigError:
    tag = node.tag.replace("tag:yaml.org,2002:", "!!")
    return ConfigError.single(
        _where(node.start_mark), f"invalid YAML: the tag {tag} is not allowed"
    )


# libyaml's words for two problems whose subject is at the mark: named from the source.
_UNDEFINED_ALIAS = "found undefined alias"
_BAD_CHARACTER = "found character that cannot start any token"
_ALIAS_NAME = re.compile(r"\*([^\s,\[\]{}]+)")


def _problem(exc: yaml.MarkedYAMLError, source: str) -> str:
    problem = exc.problem or exc.context or "malformed"
    mark = exc.problem_mark
    if mark is None or problem not in (_UNDEFINED_ALIAS, _BAD_CHARACTER):
        return problem
    lines = source.split("\n")
    rest = lines[mark.line][mark.column :] if mark.line < len(lines) else ""
    if problem == _UNDEFINED_ALIAS and (alias := _ALIAS_NAME.match(rest)):
        return f"{problem} {alias.group(1)!r}"
    if problem == _BAD_CHARACTER and rest:
        return f"found character {rest[0]!r} that cannot start any token"
    return problem


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
    loader = _StrictLoader(source)
    try:
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
        raise ConfigError.single(where, f"invalid YAML: {_problem(exc, source)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError.single("", f"invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError.single("", "invalid YAML: nested too deeply") from None
    except _VALUE_ERRORS:
        # Not echoed: the exception's text may quote the value.
        raise ConfigError.single("", "invalid YAML value") from None
    finally:
        loader.dispose()
    if loader.alias_count:
        _check_expanded_size(data)
    else:  # nothing shared: the counts kept while building are the walk's (60-90 ms at 1,000 nodes)
        _check_counts(loader.values, loader.deepest)
    return data


def _check_counts(values: int, deepest: int) -> None:
    if values > MAX_EXPANDED_NODES:
        raise _too_large()
    if deepest > MAX_DEPTH:
        raise _too_deep()


def _too_large() -> ConfigError:
    return ConfigError.single("", f"config expands to more than {MAX_EXPANDED_NODES} values")


def _too_deep() -> ConfigError:
    return ConfigError.single("", f"config is nested more than {MAX_DEPTH} levels deep")


def _check_expanded_size(data: Any) -> None:
    """Walk the data as the validator would, stopping as soon as it is too large."""
    budget = MAX_EXPANDED_NODES
    stack = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise _too_large()
        if depth > MAX_DEPTH:
            raise _too_deep()
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
