"""Which provider served a Responses API response: where a follow-up request must go.

A response's conversation state (``previous_response_id``) lives on the upstream that produced
it, so a follow-up is routed to that provider. The map is bounded: the oldest entries go first,
and a forgotten id is routed like any other request (docs/api.md, ``/v1/responses``).
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULT_MAX_ENTRIES = 100_000  # about 20 MB at most: an id and a provider id each
MAX_RESPONSE_ID_CHARS = 256  # longer ids are not remembered (no upstream sends them)


class ResponseRoutes:
    """A bounded map response id -> provider id, least recently used first out."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._max_entries = max_entries
        self._providers: OrderedDict[str, str] = OrderedDict()

    def remember(self, response_id: object, provider_id: str) -> None:
        if not isinstance(response_id, str) or not 0 < len(response_id) <= MAX_RESPONSE_ID_CHARS:
            return
        self._providers[response_id] = provider_id
        self._providers.move_to_end(response_id)
        if len(self._providers) > self._max_entries:
            self._providers.popitem(last=False)

    def provider_of(self, response_id: str) -> str | None:
        provider_id = self._providers.get(response_id)
        if provider_id is not None:
            self._providers.move_to_end(response_id)
        return provider_id

    def __len__(self) -> int:
        return len(self._providers)
