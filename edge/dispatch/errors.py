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
    code = "no_provider_available"
    status = 503
    retry_after = NO_PROVIDER_RETRY_AFTER_S

    def __init__(self, model: str) -> None:
        super().__init__(model, f"No provider is available for model '{model}'.")


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
