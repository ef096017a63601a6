"""Typed dispatch failures: each knows its code, the HTTP status it maps to and a retry hint."""

from __future__ import annotations

# Load-shedding errors (429) clear as soon as a run finishes, so a short hint; a missing provider
# (503) usually means a Node reconnecting or a health check recovering, which takes seconds.
QUEUE_RETRY_AFTER_S = 1
NO_PROVIDER_RETRY_AFTER_S = 5


class DispatchError(Exception):
    """Base of every error ``ProviderPool.acquire`` raises; the OpenAI layer renders it."""

    code: str = "dispatch_error"
    status: int = 500
    retry_after: int | None = None

    def __init__(self, model: str, message: str) -> None:
        super().__init__(message)
        self.model = model
        self.message = message


class ModelNotFound(DispatchError):
    code = "model_not_found"
    status = 404

    def __init__(self, model: str) -> None:
        super().__init__(model, f"The model '{model}' does not exist.")


class NoProviderAvailable(DispatchError):
    """``reasons``: (provider id, why it is out) for each of the model's providers."""

    code = "no_provider_available"
    status = 503
    retry_after = NO_PROVIDER_RETRY_AFTER_S

    def __init__(self, model: str, reasons: tuple[tuple[str, str], ...] = ()) -> None:
        why = "; ".join(f"{provider}: {reason}" for provider, reason in reasons)
        why = f" ({why})" if why else ""
        super().__init__(model, f"No provider is available for model '{model}'{why}.")
        self.reasons = reasons


class EdgeShuttingDown(DispatchError):
    """The Edge is stopping: a request still waiting for a slot will not get one here."""

    code = "edge_shutting_down"
    status = 503
    retry_after = NO_PROVIDER_RETRY_AFTER_S

    def __init__(self, model: str) -> None:
        super().__init__(model, "The Edge is shutting down; try again in a moment.")


class ContextTooLong(DispatchError):
    """A long request for a model none of whose providers takes long requests, ever."""

    code = "context_length_exceeded"
    status = 400

    def __init__(self, model: str, estimated_tokens: int, threshold: int) -> None:
        super().__init__(
            model,
            f"The prompt is about {estimated_tokens} tokens; model '{model}' takes prompts of at "
            f"most {threshold - 1} tokens here (no provider of it takes long-context requests).",
        )


class QueueFull(DispatchError):
    code = "queue_full"
    status = 429
    retry_after = QUEUE_RETRY_AFTER_S

    def __init__(self, model: str) -> None:
        super().__init__(model, f"Too many requests are waiting for model '{model}'.")


class QueueTimeout(DispatchError):
    code = "queue_timeout"
    status = 429
    retry_after = QUEUE_RETRY_AFTER_S

    def __init__(self, model: str, waited_s: float) -> None:
        super().__init__(
            model, f"No provider for model '{model}' became free within {waited_s:g} s."
        )
