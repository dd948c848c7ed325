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

    @abstractmethod
    def _running_client(self) -> DaemonClient:
        """The daemon client; `SandboxError` unless the sandbox is running."""
