"""Whatever a config holds, loading it ends in an EdgeConfig or a ConfigError, never a crash."""

from __future__ import annotations

import copy
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge.config import ConfigError, EdgeConfig, build_config, load_config_text
from edge.config.load import (
    EDGE_KEYS,
    GENERATION_KEYS,
    MODEL_KEYS,
    NODE_KEYS,
    OPENAI_KEYS,
    PROVIDER_KEYS,
    TOKEN_KEYS,
    TOP_KEYS,
)
from nodes.wire import ADAPTER_KEYS

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
BASES = [
    yaml.safe_load((CONFIGS / "edge.yaml").read_text()),
    yaml.safe_load((CONFIGS / "edge.provider-pool.yaml").read_text()),
]
KEYS = sorted(
    {
        *TOP_KEYS,
        *EDGE_KEYS,
        *OPENAI_KEYS,
        *TOKEN_KEYS,
        *NODE_KEYS,
        *PROVIDER_KEYS,
        *MODEL_KEYS,
        *GENERATION_KEYS,
        *(key for keys in ADAPTER_KEYS.values() for key in keys),
        *("url", "max_queue", "queue_timeout_s"),
        *("capcity", "password", "api_key", "token", "secret_env", "gpu-a-llama", "echo-a"),
    }
)
INTERESTING = [
    "",
    "echo",
    "vllm",
    "openai_http",
    "echo-small",
    "gpu-a-llama",
    "node-local",
    "127.0.0.1:8001",
    "0.0.0.0:8000",
    "[::1]:1",
    "127.0.0.1:²",
    "http://127.0.0.1:9000/v1/",
    "http://user:pass@host/v1",
    "http://[::1",
    "a" * 64,
    "A" * 64,
    "0" * 64,
    "sk-abc",
]

keys = st.one_of(
    st.sampled_from(KEYS), st.text(max_size=8), st.integers(-2, 2), st.booleans(), st.none()
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=70_000),
    st.sampled_from([-1, 0, 1, 3600, 3601, 10**30, -(10**30), 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=16),
    st.sampled_from(INTERESTING),
)
values = st.recursive(
    leaves,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=3),
    max_leaves=6,
)


def slots_of(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) position below ``value``."""
    slots = []
    stack = [value]
    while stack:
        item = stack.pop()
        children = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in children:
            slots.append((item, key))
            if isinstance(child, (dict, list)):
                stack.append(child)
    return slots


def mutate(config: dict[str, Any], data: st.DataObject) -> None:
    slots = slots_of(config)
    containers = [config, *(parent[key] for parent, key in slots)]
    mappings = [item for item in containers if isinstance(item, dict)]
    lists = [item for item in containers if isinstance(item, list) and item]
    operation = data.draw(st.sampled_from(["replace", "delete", "add", "duplicate"]))
    if operation in ("replace", "delete") and slots:
        parent, key = slots[data.draw(st.integers(0, len(slots) - 1))]
        if operation == "replace":
            parent[key] = data.draw(values)
        else:
            del parent[key]
    elif operation == "add":
        mapping = mappings[data.draw(st.integers(0, len(mappings) - 1))]
        mapping[data.draw(keys)] = data.draw(values)
    elif operation == "duplicate" and lists:
        items = lists[data.draw(st.integers(0, len(lists) - 1))]
        items.append(copy.deepcopy(items[data.draw(st.integers(0, len(items) - 1))]))


def make_mutated_config(data: st.DataObject) -> dict[str, Any]:
    config = copy.deepcopy(BASES[data.draw(st.integers(0, len(BASES) - 1))])
    for _ in range(data.draw(st.integers(1, 6))):
        mutate(config, data)
    return config


def assert_config_or_config_error(config: dict[str, Any], load: Any, source: Any) -> None:
    try:
        result = load(source)
    except ConfigError as exc:
        assert exc.issues
        root_has_odd_keys = any(not isinstance(key, str) for key in config)
        for issue in exc.issues:
            assert issue.message
            # The only whole-document problem a mapping root can have: a key that is no string.
            assert issue.path or (root_has_odd_keys and issue.message.startswith("keys must be"))
        assert str(exc).splitlines() == [str(issue) for issue in exc.issues]
    else:
        assert isinstance(result, EdgeConfig)
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", result.revision)


FAST = settings(
    max_examples=300,
    deadline=timedelta(milliseconds=500),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FAST
@given(data=st.data())
def test_it_only_ever_raises_config_error_for_a_mutated_config(data: st.DataObject) -> None:
    config = make_mutated_config(data)

    assert_config_or_config_error(config, build_config, config)


@settings(FAST, max_examples=100)
@given(data=st.data())
def test_it_only_ever_raises_config_error_for_a_mutated_yaml_file(data: st.DataObject) -> None:
    config = make_mutated_config(data)
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)

    assert_config_or_config_error(config, load_config_text, text)


@settings(FAST, max_examples=200)
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_it_only_ever_raises_config_error_for_arbitrary_text(text: str | bytes) -> None:
    try:
        load_config_text(text)
    except ConfigError as exc:
        assert exc.issues
        assert all(issue.message for issue in exc.issues)
