"""The record of every LLM-judge call of a trial: `verifier/judge.jsonl`, one `JudgeCall` per line.

The engine opens a `JudgeLog` on the trial's `verifier/judge.jsonl` around its host-side scoring
(`recording_judge_calls`); every `LLMJudge` call made inside — by a rubric, a `RubricVerifier`, or a verifier
function that calls a judge itself — appends one line when it ends: the prompt messages, the reply, the
parsed score, the model, the duration and the error if it failed or timed out. Each line is one `write` to
a file opened with O_APPEND, so concurrent judges never interleave their lines and a line is never half
there. Outside such a scope (a judge called directly) nothing is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evsys.records import utc_now

JUDGE_LOG = "judge.jsonl"


class JudgeCall(BaseModel):
    """One judge call: what it asked, what came back, what it made of it."""

    started_at: str = Field(default_factory=utc_now)
    model: str | None = None
    messages: list[dict[str, Any]] = Field(description="The prompt messages sent to the judge's model.")
    reply: str | None = Field(None, description="The model's reply text (None when it failed).")
    raw_score: float | None = Field(None, description="The number parsed from the reply, before mapping.")
    score: float | None = Field(None, description="The score the judge returned (None when it failed).")
    warning: str | None = Field(None, description="E.g. no score in the reply: the default was used.")
    duration_sec: float = 0.0
    error: str | None = Field(None, description="Why the call failed (a timeout, an unreachable model).")


class JudgeLog:
    """Appends `JudgeCall`s as JSON lines to one file, created on the first call. A file of that name that
    was there before (copied out of the sandbox's /logs/verifier: not evsys's record) is then moved aside to
    `judge.from-sandbox.jsonl`; when no judge is called it is left as it is."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # appends run in worker threads
        self._started = False

    async def append(self, call: JudgeCall) -> None:
        """Write `call` as one line, in a worker thread (the event loop never waits on the disk)."""
        await asyncio.to_thread(self.append_now, call)

    def append_now(self, call: JudgeCall) -> None:
        """Write `call` as one line now (for a call being cancelled, which cannot wait for a thread)."""
        line = (call.model_dump_json() + "\n").encode()
        with self._lock:
            if not self._started:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _move_aside(self.path)
                self._started = True
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


_CURRENT_LOG: contextvars.ContextVar[JudgeLog | None] = contextvars.ContextVar(
    "evsys_judge_log", default=None
)


def current_judge_log() -> JudgeLog | None:
    """The log judge calls in progress append to (None outside `recording_judge_calls`)."""
    return _CURRENT_LOG.get()


@contextlib.asynccontextmanager
async def recording_judge_calls(verifier_dir: Path) -> AsyncIterator[JudgeLog]:
    """Judge calls inside this scope are appended to `verifier_dir/judge.jsonl` (see `JudgeLog`)."""
    log = JudgeLog(verifier_dir / JUDGE_LOG)
    token = _CURRENT_LOG.set(log)
    try:
        yield log
    finally:
        _CURRENT_LOG.reset(token)


def _move_aside(path: Path) -> None:
    if path.is_file() or path.is_symlink():
        path.replace(path.with_name("judge.from-sandbox.jsonl"))
