"""The bounded map of response ids to the providers that served them (Responses API affinity)."""

from __future__ import annotations

from edge.dispatch import ResponseRoutes, estimate_input_tokens


def test_remembers_and_forgets_the_least_recently_used_first() -> None:
    routes = ResponseRoutes(max_entries=2)
    routes.remember("resp_a", "p1")
    routes.remember("resp_b", "p2")
    assert routes.provider_of("resp_a") == "p1"  # now the most recently used
    routes.remember("resp_c", "p3")

    assert (routes.provider_of("resp_a"), routes.provider_of("resp_c")) == ("p1", "p3")
    assert routes.provider_of("resp_b") is None
    assert len(routes) == 2


def test_ids_that_are_not_plain_strings_are_not_kept() -> None:
    routes = ResponseRoutes()
    for bad in (None, 7, "", "x" * 257):
        routes.remember(bad, "p1")

    assert len(routes) == 0


def test_each_endpoint_s_input_counts_for_the_long_context_estimate() -> None:
    text = "x" * 400  # 100 tokens

    assert estimate_input_tokens({"input": text}) == 100
    assert estimate_input_tokens({"input": [text, text]}) == 200
    assert estimate_input_tokens({"input": [[1, 2, 3]]}) == 3
    assert estimate_input_tokens({"instructions": text}) == 100
    responses_items = [
        {"role": "user", "content": [{"type": "input_text", "text": text}]},
        {"type": "function_call_output", "output": text},
    ]
    assert estimate_input_tokens({"input": responses_items}) == 2 * 4 + 200
