"""`LocalSandboxCore`: the state `LocalSandbox` shares with the halves it is assembled from.

`LocalSandbox` is `LocalCommandsMixin` (commands.py) + `LocalFilesMixin` (files.py) + its own lifecycle
(sandbox.py). Both halves subclass this core, so what they use of the sandbox (its spec, daemon client, cgroup
and shell counter) is declared once, and their methods are checked against `Sandbox`'s signatures."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from evsys.sandbox.base import Sandbox

if TYPE_CHECKING:
    from evsys.sandbox.local.cgroups import SandboxCgroup
    from evsys.sandbox.local.client import DaemonClient


class LocalSandboxCore(Sandbox):
    """A `Sandbox` whose commands and files go through an in-sandbox daemon (set up by `LocalSandbox`)."""

    _cgroup: SandboxCgroup | None  # the sandbox's cgroup (its memory/pids counters), None before start
    _shells: int  # shell sessions opened so far (each one's id)
    _fresh_since: float = 0.0  # when its root was last fresh (start, reset): newer files are the trial's
    _limit_mark: dict[str, int]  # the cgroup's limit counters when it started or was last reset

    @abstractmethod
    def _running_client(self) -> DaemonClient:
        """The daemon client; `SandboxError` unless the sandbox is running."""

    @abstractmethod
    def _live_daemon_pid(self) -> int | None:
        """The host pid of the sandbox's daemon while it runs, else None."""
