"""Safe YAML parsing: no tags, no duplicate or merge keys, bounded size and alias expansion."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edge.config import ConfigError, ConfigIssue, load_config_file, load_config_text, yaml_source
from edge.config.yaml_source import (
    MAX_ALIASES,
    MAX_CONFIG_BYTES,
    MAX_EXPANDED_NODES,
    parse_yaml,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "configs" / "edge.yaml"


def make_billion_laughs(levels: int = 9, width: int = 9) -> str:
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def load_issues(text: str | bytes) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    return caught.value.issues


def test_it_rejects_a_duplicate_top_level_key_with_its_line() -> None:
    text = "version: 1\nedge: {id: a}\nversion: 1\n"

    assert load_issues(text) == [
        ConfigIssue("line 3, column 1", "duplicate key 'version' (first defined on line 1)")
    ]


def test_it_rejects_a_duplicate_nested_key_with_its_line() -> None:
    text = EXAMPLE.read_text().replace(
        "        capacity: 2\n", "        capacity: 2\n        capacity: 20\n"
    )
    first = text.splitlines().index("        capacity: 2") + 1

    assert load_issues(text) == [
        ConfigIssue(
            f"line {first + 1}, column 9",
            f"duplicate key 'capacity' (first defined on line {first})",
        )
    ]


def test_it_rejects_a_duplicate_key_in_a_flow_mapping() -> None:
    issues = load_issues("models:\n  - {id: a, providers: {p1: x, p1: y}}\n")

    assert issues == [
        ConfigIssue("line 2, column 32", "duplicate key 'p1' (first defined on line 2)")
    ]


def make_merge_bomb(levels: int = 21) -> str:
    """Each level merges the previous one twice: flattening it would copy 2**levels pairs."""
    lines = ["a0: &a0 {k: v}"]
    lines += [f"a{n}: &a{n} {{<<: [*a{n - 1}, *a{n - 1}]}}" for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_it_accepts_anchors_and_aliases() -> None:
    text = EXAMPLE.read_text()
    assert "queue_timeout_s: 30\n" in text and "max_queue: 16\n" in text
    text = text.replace("queue_timeout_s: 30\n", "queue_timeout_s: &timeout 30\n", 1)
    text = text.replace("max_queue: 16\n", "max_queue: 16\n        queue_timeout_s: *timeout\n", 1)

    config = load_config_text(text)

    assert config.revision == load_config_file(EXAMPLE).revision


def test_it_rejects_a_merge_key_with_its_line() -> None:
    text = "queue: &queue {max_queue: 8}\nother:\n  <<: *queue\n"

    assert load_issues(text) == [
        ConfigIssue("line 3, column 3", "`<<` merge keys are not allowed; write the keys out")
    ]


def test_it_rejects_an_explicitly_tagged_merge_key() -> None:
    [issue] = load_issues("queue: &queue {max_queue: 8}\nother: {!!merge x: *queue}\n")

    assert issue.message == "`<<` merge keys are not allowed; write the keys out"


def test_it_refuses_a_merge_bomb_at_its_first_merge_key() -> None:
    text = make_merge_bomb()
    # Within every other limit: well under 1 KiB, 42 aliases, 2**21 pairs once flattened.
    assert len(text.encode()) < 1024 and text.count("*") == 42 < MAX_ALIASES

    # Line 2 is the first `<<`: construction stopped there, so nothing was flattened.
    assert load_issues(text) == [
        ConfigIssue("line 2, column 10", "`<<` merge keys are not allowed; write the keys out")
    ]


def test_it_rejects_a_billion_laughs_before_building_it() -> None:
    # Composition shares the anchored nodes, so it is refused by the walk that counts values,
    # before anything would expand it.
    issues = load_issues(make_billion_laughs())

    assert issues == [ConfigIssue("", f"config expands to more than {MAX_EXPANDED_NODES} values")]


def test_it_rejects_too_many_aliases() -> None:
    text = "a: &a x\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"

    [issue] = load_issues(text)

    assert issue.message == f"more than {MAX_ALIASES} YAML aliases"
    assert issue.path.startswith("line 2, column ")


def test_it_accepts_exactly_the_alias_limit() -> None:
    text = "a: &a x\nb: [" + ", ".join(["*a"] * MAX_ALIASES) + "]\n"

    issues = load_issues(text)  # parsed fine; only the schema objects to `a` and `b`

    assert [issue.path for issue in issues] == ["a", "b", "version", "edge", "nodes"]


def test_it_rejects_a_text_over_the_size_limit() -> None:
    text = "version: 1\n# " + "x" * MAX_CONFIG_BYTES + "\n"

    assert load_issues(text) == [
        ConfigIssue("", f"config is {len(text)} bytes; the limit is {MAX_CONFIG_BYTES}")
    ]


def test_it_counts_the_size_in_utf8_bytes() -> None:
    text = "# " + "é" * (MAX_CONFIG_BYTES // 2) + "\n"

    [issue] = load_issues(text)

    assert issue.message == f"config is {len(text.encode())} bytes; the limit is {MAX_CONFIG_BYTES}"


def test_it_rejects_a_file_over_the_size_limit_before_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"version: 1\n#" + b"x" * MAX_CONFIG_BYTES)

    with pytest.raises(ConfigError) as caught:
        load_config_file(big)

    assert caught.value.issues == [
        ConfigIssue("", f"config is {MAX_CONFIG_BYTES + 12} bytes; the limit is {MAX_CONFIG_BYTES}")
    ]


@pytest.mark.parametrize(
    "text",
    [
        "!!python/object/apply:os.system ['true']\n",
        "version: !!python/object/apply:os.system ['true']\n",
        "edge: !!python/name:os.system\n",
        "edge: !!python/object/new:dict {}\n",
        "edge: !custom {id: a}\n",
    ],
)
def test_it_rejects_tags(text: str) -> None:
    [issue] = load_issues(text)

    assert issue.path.startswith("line 1, column ")
    assert issue.message.startswith("invalid YAML: the tag !")
    assert issue.message.endswith(" is not allowed")


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        ("version: 1\nnodes: [1, 2\n", "line 3, column 1", "expected ',' or ']'"),
        ("version: 1\nedge: id: a\n", "line 2, column 9", "mapping values are not allowed"),
        ("version: 1\n  edge: {}\n", "line 2, column 7", "mapping values are not allowed"),
        ("edge: {id: a\n", "line 2, column 1", "expected ',' or '}'"),
        ("version: 1\n---\nversion: 1\n", "line 2, column 1", "found another document"),
        ("edge: *missing\n", "line 1, column 7", "found undefined alias 'missing'"),
        ("edge:\n\tid: a\n", "line 2, column 1", "found character '\\t'"),
    ],
)
def test_it_reports_where_the_yaml_is_invalid(text: str, path: str, fragment: str) -> None:
    [issue] = load_issues(text)

    assert issue.path == path
    assert issue.message.startswith("invalid YAML: ")
    assert fragment in issue.message


@pytest.mark.parametrize(
    ("text", "issue"),
    [
        (
            "version: 1\x00\n",
            ConfigIssue(
                "line 1, column 11", "invalid YAML: control characters are not allowed (#x0000)"
            ),
        ),
        (
            "version: 1\nedge: {id: a\x07}\n",
            ConfigIssue(
                "line 2, column 13", "invalid YAML: control characters are not allowed (#x0007)"
            ),
        ),
        (
            "version: 1\nedge: {id: 2024-13-45}\n",
            ConfigIssue(
                "line 2, column 12", "invalid YAML value: cannot read '2024-13-45' as timestamp"
            ),
        ),
        (
            "edge:\n  id: 2024-02-30\n",
            ConfigIssue(
                "line 2, column 7", "invalid YAML value: cannot read '2024-02-30' as timestamp"
            ),
        ),
        (
            "version: " + "9" * 5000 + "\n",
            ConfigIssue(
                "line 1, column 10", f"invalid YAML value: cannot read '{'9' * 40}...' as int"
            ),
        ),
        (
            "edge: {require_auth: !!bool maybe}\n",
            ConfigIssue("line 1, column 22", "invalid YAML value: cannot read this value as bool"),
        ),
        (
            "edge: !!timestamp soon\n",
            ConfigIssue(
                "line 1, column 7", "invalid YAML value: cannot read this value as timestamp"
            ),
        ),
        (
            "version: !!int one\n",
            ConfigIssue("line 1, column 10", "invalid YAML value: cannot read this value as int"),
        ),
        ("edge: \ud800\n", ConfigIssue("", "config is not valid text (surrogates not allowed)")),
    ],
    ids=[
        "nul",
        "bell",
        "bad-month",
        "bad-day",
        "huge-int",
        "bad-bool-tag",
        "bad-timestamp-tag",
        "bad-int-tag",
        "lone-surrogate",
    ],
)
def test_it_turns_every_parse_failure_into_a_config_error(text: str, issue: ConfigIssue) -> None:
    assert load_issues(text) == [issue]


def test_it_rejects_deep_nesting() -> None:
    assert load_issues("a: " + "[" * 60 + "]" * 60 + "\n") == [
        ConfigIssue("", "config is nested more than 50 levels deep")
    ]


def test_it_rejects_nesting_deeper_than_the_parser_can_follow() -> None:
    [issue] = load_issues("a: " + "[" * 5000 + "]" * 5000 + "\n")

    # libyaml stops at its own limit of 1,000 levels, where it is reached.
    assert issue == ConfigIssue(
        "line 1, column 1003", "invalid YAML: exceeded maximum nesting depth"
    )


@pytest.mark.parametrize(
    "raw",
    [b"version: 1\n\xff\xfe\n", b"edge: {id: caf\xe9}\n", "version: 1\n".encode("utf-16")],
    ids=["invalid-start-byte", "latin-1", "utf-16"],
)
def test_it_rejects_bytes_that_are_not_utf8(raw: bytes) -> None:
    [issue] = load_issues(raw)

    assert issue.path == ""
    assert issue.message.startswith("config is not UTF-8 (")


def test_it_accepts_a_utf8_byte_order_mark() -> None:
    raw = b"\xef\xbb\xbf" + EXAMPLE.read_bytes()

    assert load_config_text(raw).revision == load_config_file(EXAMPLE).revision


def test_it_names_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"

    with pytest.raises(ConfigError) as caught:
        load_config_file(missing)

    [issue] = caught.value.issues
    assert str(missing) in issue.message
    assert issue.message == f"cannot read {missing}: No such file or directory"


def test_it_names_a_directory_given_as_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_file(tmp_path)

    assert f"cannot read {tmp_path}" in str(caught.value)


def test_scalars_read_as_pyyaml_reads_them_however_often_a_value_repeats() -> None:
    # Plain values' tags are remembered per value; quoted ones are strings.
    values = ["yes", "'yes'", "1", '"1"', "0o17", "017", "1.5", "~", "null", "''", "2024-01-02"]
    text = "".join(f"k{i}: [{value}, {value}]\n" for i, value in enumerate(values * 2))
    assert parse_yaml(text) == yaml.safe_load(text)


def nested(depth: int, leaf: str) -> str:
    return "{a: " * depth + leaf + "}" * depth


@pytest.mark.parametrize("alias", [False, True])
@pytest.mark.parametrize(
    ("depth", "leaf", "refused"),
    [(50, "x", False), (50, "[]", False), (50, "[x]", True), (51, "x", True)],
)
def test_the_depth_limit_is_the_same_with_or_without_aliases(
    alias: bool, depth: int, leaf: str, refused: bool
) -> None:
    # Without aliases the counts kept while building decide; with one, the walk over the data.
    text = "root: " + nested(depth - 1, leaf) + ("\nx: &x 1\ny: *x\n" if alias else "\n")

    expected = [ConfigIssue("", "config is nested more than 50 levels deep")] if refused else []
    assert parse_issues(text) == expected


@pytest.mark.parametrize("alias", [False, True])
@pytest.mark.parametrize(("values", "refused"), [(20, False), (21, True)])
def test_the_value_limit_is_the_same_with_or_without_aliases(
    monkeypatch: pytest.MonkeyPatch, alias: bool, values: int, refused: bool
) -> None:
    monkeypatch.setattr(yaml_source, "MAX_EXPANDED_NODES", 20)
    # The root mapping, `x`, `y` and the list are four values; keys are not counted.
    items = "0, " * (values - 4)
    text = "x: &x 1\n" + ("y: *x\n" if alias else "y: 2\n") + f"z: [{items}]\n"

    expected = [ConfigIssue("", "config expands to more than 20 values")] if refused else []
    assert parse_issues(text) == expected


def parse_issues(text: str) -> list[ConfigIssue]:
    try:
        parse_yaml(text)
    except ConfigError as error:
        return error.issues
    return []
