"""A lease: one admitted request's hold on a provider slot."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from edge.dispatch.pool import ProviderPool
    from edge.dispatch.state import ProviderState

ContextClass = Literal["normal", "long"]
NORMAL: ContextClass = "normal"
LONG: ContextClass = "long"


class Lease:
    """Where to send the run, and the slot it holds until ``release()``.

    A long lease holds a long slot and a normal slot. ``release()`` is idempotent so every exit
    path (done, error, cancel, client gone, Node gone) may call it without coordination; the
    lease is also a context manager that releases on exit.
    """

    __slots__ = (
        "_pool",
        "_state",
        "adapter_id",
        "context_class",
        "model",
        "node_id",
        "provider_id",
        "queued_ms",
        "released",
        "served_model",
    )

    def __init__(
        self,
        pool: ProviderPool,
        state: ProviderState,
        model: str,
        served_model: str,
        long: bool,
        queued_ms: float,
    ) -> None:
        self._pool = pool
        self._state = state
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
        self._pool._release(self._state, self.context_class is LONG)

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
