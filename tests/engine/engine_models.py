"""Model clients for engine tests that need no model engine."""

from __future__ import annotations

from evsys.model.base import Completion


class RecordingClient:
    """Answers every call with plain text (the loop agent stops: no tool call); keeps each call's params."""

    def __init__(self, model: str, seen: dict[str, list]) -> None:
        self.model = model
        self.seen = seen.setdefault(model, [])

    async def complete(self, messages, *, tools=None, params=None) -> Completion:
        self.seen.append(params)
        return Completion(text="done", model=self.model, finish_reason="stop")

    async def aclose(self) -> None:
        return None
