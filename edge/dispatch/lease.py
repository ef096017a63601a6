"""A lease: one admitted request's hold on a provider slot."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Literal

from edge.dispatch.state import ProviderState

ContextClass = Literal["normal", "long"]
NORMAL: ContextClass = "normal"
LONG: ContextClass = "long"


class Lease:
    """Where to send the run, and the slot it holds until ``release()``.

    A long lease holds a long slot and a normal slot. ``release()`` is idempotent so every exit
    path (done, error, cancel, client gone, Node gone) may call it without coordination; the
    lease is also a context manager that releases on exit. ``on_release`` hands the slot back to
    whoever granted it; ``provider_state`` lets the pool tell a lease of today's provider from one
    granted before a swap replaced it.
    """

    __slots__ = (
        "_on_release",
        "adapter_id",
        "context_class",
        "model",
        "node_id",
        "provider_id",
        "provider_state",
        "queued_ms",
        "released",
        "served_model",
    )

    def __init__(
        self,
        state: ProviderState,
        model: str,
        served_model: str,
        long: bool,
        queued_ms: float,
        on_release: Callable[[], None],
    ) -> None:
        self._on_release = on_release
        self.provider_state = state
        spec = state.spec
        self.model = model
        self.provider_id = spec.id
        self.node_id = spec.node_id
        self.adapter_id = spec.adapter_id
        self.served_model = served_model
        self.context_class = LONG if long else NORMAL
        self.queued_ms = queued_ms
        self.released = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self._on_release()

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return (
            f"<Lease {self.model} -> {self.provider_id}@{self.node_id} "
            f"({self.served_model}, {self.context_class}, {state})>"
        )
