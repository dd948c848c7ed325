"""The image services a job's trials share, and where their build progress goes.

`ImageServices` is owned by whoever runs trials — a `Job` (its progress on the job's event stream, which
`evsys run`'s progress display subscribes to), a worker process, an integration's runtime — and handed to
each trial (`TrialResources.images`). It keeps one `ImageService` (evsys.images) per pull policy, so
concurrent trials of a task wait for one build (trials of different owners, or processes, wait on the image
store's file locks instead). evsys.images itself loads on first use, not with every run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from evsys.engine.events import BuildProgress
from evsys.task.models import Task

if TYPE_CHECKING:
    from evsys.images import ImageResult, ImageService, PullPolicy

PROGRESS_LINE_CHARS = 120


class ImageServices:
    """The image services the trials of one owner share (a job, a worker process, an integration's runtime):
    one `ImageService` per pull policy, so concurrent trials of a task wait for a single build, and where
    their build progress goes (`on_progress`, e.g. the job's event stream)."""

    def __init__(self, on_progress: Callable[[BuildProgress], None] | None = None) -> None:
        self.on_progress = on_progress
        self._services: dict[str, ImageService] = {}

    def service(self, pull_policy: PullPolicy = "missing") -> ImageService:
        """The image service for a pull policy (made on first use)."""
        from evsys.images import ImageService

        if pull_policy not in self._services:
            self._services[pull_policy] = ImageService(pull_policy=pull_policy)
        return self._services[pull_policy]

    def _progress(self, task: str, line: str | None) -> None:
        if self.on_progress is not None:
            self.on_progress(BuildProgress(task=task, line=line))

    async def task_image(
        self,
        task: Task,
        log: Path,
        *,
        pull_policy: PullPolicy,
        timeout: float,  # noqa: ASYNC109 - the build's own limit
        notices: list[str],
    ) -> ImageResult:
        """The image of `task` (built, pulled or cached), its build's output in `log`; each line the build
        prints, and its end, go to `on_progress`."""
        await asyncio.to_thread(log.parent.mkdir, parents=True, exist_ok=True)

        def on_line(line: str) -> None:
            if line.strip():
                self._progress(task.name, line.strip()[:PROGRESS_LINE_CHARS])

        try:
            return await self.service(pull_policy).task_image(
                task.path,
                docker_image=task.config.environment.docker_image,
                build_timeout=timeout,
                name=task.name,
                log=log,
                on_line=on_line,
                notice=notices.append,
            )
        finally:
            self._progress(task.name, None)
