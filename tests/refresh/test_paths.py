"""Which mirrored object a change's path is about (plain Python, no database)."""

from __future__ import annotations

import pytest

from refresh.paths import object_of


@pytest.mark.parametrize(
    ("path", "found"),
    [
        ("nodes[node-a]", ("node", ("node-a",))),
        ("nodes[node-a].alias", ("node", ("node-a",))),
        ("nodes[node-a].adapters[echo].token_delay_ms", ("adapter", ("node-a", "echo"))),
        ("nodes[node-a].providers[echo-1].capacity", ("provider", ("echo-1",))),
        ("nodes[node-a].providers[echo-1].served_models", ("provider", ("echo-1",))),
        ("models[meta/llama-3.1:8b@q4+x]", ("model", ("meta/llama-3.1:8b@q4+x",))),
        ("models[echo].generation.default_max_tokens", ("model", ("echo",))),
        ("models[echo].providers[echo-1]", ("route", ("echo", "echo-1"))),
        ("openai.principal_tokens[app-1].principal_ref", ("principal_token", ("app-1",))),
        ("openai.principal_tokens[app-1]", ("principal_token", ("app-1",))),
        ("edge.listen", None),
        ("queue.max_queue", None),
        ("version", None),
        ("", None),
        ("nodes[", None),
    ],
)
def test_it_finds_the_innermost_mirrored_object(path: str, found: tuple | None) -> None:
    assert object_of(path) == found
