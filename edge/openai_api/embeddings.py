"""`/v1/embeddings`: the upstream's list relayed whole, with the caller's model name."""

from __future__ import annotations

from typing import Any

from edge.openai_api.assemble import BAD_NODE_RESPONSE
from edge.openai_api.endpoint_requests import parse_embeddings_request
from edge.openai_api.flow import Call, Endpoint
from edge.runs import CompletedRun, RunFailed


def _build(call: Call, run: CompletedRun) -> dict[str, Any]:
    if run.response is None or not isinstance(run.response.get("data"), list):
        raise RunFailed(BAD_NODE_RESPONSE, "the Node sent no embeddings list")
    return {**run.response, "model": call.request.model}


EMBEDDINGS = Endpoint(
    name="embeddings",
    path="/v1/embeddings",
    parse=parse_embeddings_request,
    max_tokens_keys=(),  # nothing is generated
    build=_build,
)
