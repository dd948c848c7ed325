"""Errors raised by model clients. Retryable ones are retried by `evsys.model.retry`; the rest are final."""

from __future__ import annotations

from evsys.records import CausedError, FailureCause


class ModelError(CausedError, RuntimeError):
    """A model request failed. Base of every model error; only a `RetryableModelError` is retried."""

    failure_cause = FailureCause.MODEL_ERROR

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class RetryableModelError(ModelError):
    """A transient failure (429, 5xx, timeout, connection error): worth retrying after `retry_after_s`."""

    def __init__(self, message: str, *, status_code: int | None = None, retry_after_s: float | None = None):
        super().__init__(message, status_code=status_code)
        self.retry_after_s = retry_after_s


class AuthenticationError(ModelError):
    """The server rejected the credentials (401/403). Check the API key; retrying will not help."""


class UnknownModelError(ModelError):
    """The server does not serve the requested model (404), or the model could not be found locally."""


class ContextOverflowError(ModelError):
    """The prompt plus the requested completion does not fit in the model's context window."""

    def __init__(
        self,
        message: str,
        *,
        prompt_tokens: int | None = None,
        max_tokens: int | None = None,
        context_window: int | None = None,
        status_code: int | None = 400,
    ) -> None:
        super().__init__(message, status_code=status_code)
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.context_window = context_window


class QuotaExceededError(ModelError):
    """The account's usage limit or quota is exhausted (429 `insufficient_quota`). Not retried."""


class InvalidRequestError(ModelError):
    """The server rejected the request as malformed (400/422) for a reason other than context length."""
