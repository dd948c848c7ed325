"""Placing a repository task's checkout into a trial's sandbox (the `[metadata.evsys_repo]` of its task.toml).

At trial start, evsys streams the tree of `source` at `commit` out of the repo cache's bare mirror (`git
archive`: nothing checked out on the host, no objects copied) and extracts it at `workdir` as
the sandbox's `agent` user. There it becomes a fresh one-commit git repository, so `git status`/`git diff`
work for the agent and the verifier restores test files from `HEAD` — and the mirror's history (which may hold
the fix itself) never enters the sandbox. The install commands then run in `workdir` as root.
"""

from __future__ import annotations

import asyncio
import shlex
from typing import Any

from pydantic import BaseModel, Field

from evsys.repo.cache import RepoCache
from evsys.sandbox.base import HELPER_ENV, Sandbox

METADATA_KEY = "evsys_repo"  # task.toml's [metadata.evsys_repo]: where the tree comes from

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "evsys",
    "GIT_AUTHOR_EMAIL": "evsys@localhost",
    "GIT_COMMITTER_NAME": "evsys",
    "GIT_COMMITTER_EMAIL": "evsys@localhost",
}


class WorkspaceError(RuntimeError):
    """The repository could not be placed into the sandbox (fetch, checkout, or an install command)."""


class RepoWorkspace(BaseModel):
    """Where a task's repository comes from and where it goes (`[metadata.evsys_repo]`)."""

    source: str
    commit: str
    workdir: str = "/testbed"
    install: list[str] = Field(default_factory=list)
    install_timeout_sec: float = 1800.0


def task_workspace(metadata: dict[str, Any]) -> RepoWorkspace | None:
    """The workspace a task's metadata asks for, or None for a task that brings its own files."""
    raw = metadata.get(METADATA_KEY)
    return RepoWorkspace.model_validate(raw) if raw is not None else None


def checkout_tar(source: str, commit: str, cache: RepoCache | None = None) -> bytes:
    """The working tree of `source` at `commit` as a tar, streamed from the cache's mirror (fetched first when
    the commit is not in it)."""
    return (cache or RepoCache()).archive(source, commit)


async def _run(sandbox: Sandbox, command: str, what: str, **kw: Any) -> str:
    result = await sandbox.exec(command, cwd="/", **kw)
    if not result.ok:
        detail = (result.stderr.strip() or result.stdout.strip())[-800:] or f"exit code {result.exit_code}"
        raise WorkspaceError(f"{what} failed: {detail}")
    return result.stdout


async def place_workspace(sandbox: Sandbox, workspace: RepoWorkspace, cache: RepoCache | None = None) -> None:
    """The checkout at `workspace.workdir` (owned by the agent user), committed; then the install commands."""
    try:
        data = await asyncio.to_thread(checkout_tar, workspace.source, workspace.commit, cache)
    except Exception as exc:
        raise WorkspaceError(f"checking out {workspace.source} at {workspace.commit}: {exc}") from None
    q = shlex.quote(workspace.workdir)
    ids = (
        await _run(sandbox, "id -u; id -g", "finding the agent user", user="agent", env=HELPER_ENV)
    ).split()
    await _run(
        sandbox,
        f"rm -rf {q} && mkdir -p {q} && chown {ids[0]}:{ids[1]} {q}",
        f"creating {workspace.workdir}",
        user="root",
        env=HELPER_ENV,
    )
    env = {**HELPER_ENV, **GIT_IDENTITY}
    await _run(sandbox, f"tar -x -C {q} -f -", "extracting the checkout", user="agent", stdin=data, env=env)
    git = "git -c core.hooksPath=/dev/null"
    commit = f"cd {q} && {git} init -q && {git} add -A && {git} commit -q --no-verify -m base"
    await _run(sandbox, commit, "committing the checkout", user="agent", env=env)
    for command in workspace.install:
        await _run(
            sandbox,
            f"cd {q} && {command}",
            f"install command {command!r}",
            user="root",
            timeout=workspace.install_timeout_sec,
        )
