"""What the proxy lets one session's requests cost it before a model sees them (issue 38).

A sandbox can send its session's requests as fast as it likes, and each body is held in memory and parsed
from JSON into Python objects (up to ~24 times the body's size). Without bounds, eight bodies of
`[{},{},...]` just under the 32 MiB limit took the orchestrator from 65 to 1,111 MiB and held its event loop
for a minute, and every other trial's model calls waited. So, per session (`BodyBudget`):

- a request whose key is no open session's is refused (401) before its body is read;
- at most `max_bodies` bodies are being received at once; the next request gets 429 before its body is read;
- the bodies of its requests still being served hold at most `max_bytes` in all; a body that would go over
  gets 429 while it is read (one body over the proxy's own limit gets 413, from `BodyLimit`);
- a body of more than `max_json_values` JSON values gets 413, counted on its text (in a worker thread) before
  any route parses it, `/mcp` included;
- bodies are parsed (and validated) in worker threads, one at a time per session and `parse_workers` at a
  time in all, so one session's bodies never queue ahead of another's more than one at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from evsys.model.proxy.replies import UNKNOWN_KEY
from evsys.util.bodylimit import (
    AsgiApp,
    BodyRefused,
    Inspect,
    Message,
    Receive,
    Refusal,
    Scope,
    Send,
    no_body,
)
from evsys.util.jsonparse import value_count

T = TypeVar("T")
MIB = 1 << 20


@dataclass(frozen=True)
class BodyBudget:
    """What one session's request bodies may hold at once, and how many JSON values one body may have."""

    max_bodies: int = 4  # being received at once
    max_bytes: int = 64 * MIB  # two bodies at the proxy's 32 MiB limit
    max_json_values: int = 250_000  # a long agent conversation with its tools is ~10^4
    parse_workers: int = 2  # bodies parsed at once, over all sessions


UNBOUNDED = BodyBudget(max_bodies=1 << 30, max_bytes=1 << 60, max_json_values=1 << 60, parse_workers=64)


@dataclass
class _InFlight:
    bodies: int = 0
    bytes: int = 0


class SessionIntake:
    """ASGI middleware in front of `BodyLimit`: admits a request's body within its session's `BodyBudget`.

    `key_of(scope)` names the open session a request belongs to (None: no open session has its key)."""

    def __init__(
        self,
        app: AsgiApp,
        budget: BodyBudget,
        *,
        key_of: Callable[[Scope], str | None],
        refuse: Refusal,
    ) -> None:
        self.app = app
        self.budget = budget
        self.key_of = key_of
        self.refuse = refuse
        self._sessions: dict[str, _InFlight] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        key = self.key_of(scope)
        held = self._sessions.get(key or "") or _InFlight()
        if key is None or held.bodies >= self.budget.max_bodies:
            status, reason = (401, UNKNOWN_KEY) if key is None else (429, self._too_many())
            await self.refuse(scope, status, reason)(scope, no_body, send)
            return
        self._sessions[key] = held
        metered = _Metered(held, receive, self.budget.max_bytes)
        try:
            await self.app(scope, metered, send)
        finally:
            metered.release()
            if held.bodies == 0 and held.bytes == 0:
                self._sessions.pop(key, None)

    def _too_many(self) -> str:
        return (
            f"too many request bodies at once: this session may send {self.budget.max_bodies} at a time; "
            "retry when one has been answered"
        )


class _Metered:
    """A `receive` that counts one body against its session's `_InFlight` until `release()`."""

    def __init__(self, held: _InFlight, receive: Receive, max_bytes: int) -> None:
        self.held = held
        self.receive = receive
        self.max_bytes = max_bytes
        self.receiving = True
        self.counted = 0
        held.bodies += 1

    async def __call__(self) -> Message:
        message = await self.receive()
        size = len(message.get("body", b""))
        if self.held.bytes + size > self.max_bytes:
            self._done_receiving()
            raise BodyRefused(429, self._over_budget())
        self.held.bytes += size
        self.counted += size
        if not message.get("more_body", False):
            self._done_receiving()
        return message

    def _over_budget(self) -> str:
        return (
            f"request bodies over this session's budget of {self.max_bytes:,} bytes in flight "
            "(its requests still being served hold them); retry when one has been answered"
        )

    def _done_receiving(self) -> None:
        if self.receiving:
            self.receiving = False
            self.held.bodies -= 1

    def release(self) -> None:
        """The request is answered: its body no longer counts."""
        self._done_receiving()
        self.held.bytes -= self.counted
        self.counted = 0


def json_value_check(max_values: int) -> Inspect:
    """A `BodyLimit` inspection refusing (413) a body of more than `max_values` JSON values, counted on its
    text in a worker thread, before any route parses it (the model endpoints and `/mcp` alike)."""

    async def check(body: bytes) -> None:
        count = await asyncio.to_thread(value_count, body, max_values)
        if count > max_values:
            reason = (
                f"request body too large: JSON of about {count:,} values, over the limit of {max_values:,}"
            )
            raise BodyRefused(413, reason)

    return check


@dataclass
class _Lane:
    lock: asyncio.Lock
    users: int = 0


class ParseQueue:
    """Runs parsing work in worker threads: one job at a time per session, `workers` at a time in all."""

    def __init__(self, workers: int) -> None:
        self._all = asyncio.Semaphore(workers)
        self._lanes: dict[str, _Lane] = {}

    async def run(self, key: str, job: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`job(*args, **kwargs)` in a worker thread, after the session's earlier jobs, within the global
        bound."""
        lane = self._lanes.setdefault(key, _Lane(asyncio.Lock()))
        lane.users += 1
        try:
            async with lane.lock, self._all:
                return await asyncio.to_thread(job, *args, **kwargs)
        finally:
            lane.users -= 1
            if lane.users == 0:
                del self._lanes[key]


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False
