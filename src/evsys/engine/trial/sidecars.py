"""A trial's docker-compose sidecars (environment/docker-compose.yaml, evsys.task.compose).

Before the main sandbox starts, each sidecar service gets a sandbox of the trial's backend, in dependency
order: its image (`image` pulled or synthesised, or `build` built, like the task's own), its `environment`,
the trial's starting network, and the pod of the trial (evsys.sandbox.base.PodSpec: one network, every
service reachable by its name, the main sandbox as `main`). Its process is the service's `entrypoint` +
`command` (compose's rules: the image's ENTRYPOINT and CMD where the service sets none; a service
`entrypoint` drops the image's CMD), started detached as root, its output in `SERVICE_LOG` inside the sidecar.
A `depends_on` condition is awaited before its dependent starts: `service_healthy` runs the service's
healthcheck until it passes (Docker's semantics: failures in the start period do not count, then `retries`
in a row fail the trial with `healthcheck_failed`), `service_completed_successfully` waits for the process
to exit 0. Sidecars are stopped with the trial, after the main sandbox (`start_sidecars`, `stop_sidecars`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from evsys.engine.image_services import ImageServices
from evsys.engine.trial import images
from evsys.engine.trial.healthcheck import HealthcheckFailed, await_healthy
from evsys.engine.trial.state import TrialState
from evsys.records import FailureCause, ImageSpec, NetworkMode, PodSpec, SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.registry import create_sandbox
from evsys.task.compose import MAIN, ComposeProject, ComposeService
from evsys.task.models import HealthcheckConfig, Task

if TYPE_CHECKING:  # evsys.images loads with the first sidecar that needs an image
    from evsys.images import PullPolicy

SERVICE_LOG = "/run/evsys-service.log"
SERVICE_STATUS = "/run/evsys-service.status"
COMPLETION_POLL_SEC = 0.2
COMPLETION_LIMIT_SEC = 600.0


class SidecarFailed(Exception):
    """A sidecar could not be built, started or made ready; `cause` is the trial's failure cause."""

    def __init__(self, cause: FailureCause, message: str) -> None:
        super().__init__(message)
        self.cause = cause


def service_argv(service: ComposeService, image: ImageSpec) -> list[str]:
    """What the service runs: compose's rules for entrypoint and command over the image's."""
    entrypoint = service.entrypoint if service.entrypoint is not None else image.config.entrypoint
    if service.command is not None:
        command = service.command
    else:
        command = image.config.cmd if service.entrypoint is None else []
    return [*entrypoint, *command]


class Sidecars:
    """The sidecar sandboxes of one trial (see the module docstring)."""

    def __init__(
        self,
        task: Task,
        project: ComposeProject,
        *,
        backend: str,
        name: str,
        trial_dir: Path,
        images: ImageServices,
    ) -> None:
        self.task = task
        self.images = images
        self.project = project
        self.backend = backend
        self.name = name  # the main sandbox's name: sidecars are named after it
        self.trial_dir = trial_dir
        self.sandboxes: dict[str, Sandbox] = {}
        self.pod_name = f"{name}-pod"

    def pod(self, hostname: str) -> PodSpec:
        """The trial's pod as `hostname` sees it."""
        return PodSpec(name=self.pod_name, hostname=hostname, hosts=[MAIN, *self.project.services])

    async def start(
        self, network: NetworkMode, *, pull: PullPolicy, build_timeout: float, notices: list[str]
    ) -> None:
        """Start every sidecar in dependency order, awaiting each `depends_on` condition, then `main`'s."""
        for service_name in self.project.start_order():
            service = self.project.services[service_name]
            await self._await_conditions(service.depends_on, service_name)
            image = await self._image(service, pull=pull, build_timeout=build_timeout, notices=notices)
            await self._start_one(service, image, network)
        await self._await_conditions(self.project.main_depends_on, MAIN)

    async def _image(
        self, service: ComposeService, *, pull: PullPolicy, build_timeout: float, notices: list[str]
    ) -> ImageSpec:
        from evsys.images import BuildContext, ImageError

        log = self.trial_dir / "environment" / f"build-{service.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        image_service = self.images.service(pull)
        try:
            if service.build_context is not None:
                context = BuildContext(service.build_context / service.dockerfile, service.build_context)
                name = f"{self.task.name}-{service.name}"
                result = await image_service.build(
                    context, name=name, timeout=build_timeout, log=log, notice=notices.append
                )
                return result.spec
            assert service.image is not None
            stored, _ = await image_service.ensure_ref(service.image, log=log, notice=notices.append)
            return await image_service.storage.spec(stored)
        except ImageError as exc:
            raise SidecarFailed(
                FailureCause.ENVIRONMENT_BUILD_FAILED,
                f"{self.project.file}: service {service.name}: {exc} (log: environment/{log.name})",
            ) from None

    async def _start_one(self, service: ComposeService, image: ImageSpec, network: NetworkMode) -> None:
        argv = service_argv(service, image)
        if not argv:
            raise SidecarFailed(
                FailureCause.TASK_INVALID,
                f"{self.project.file}: services.{service.name}: no command (neither the service nor "
                "its image names one)",
            )
        spec = SandboxSpec(
            name=f"{self.name}-{service.name}"[:120],
            image=image,
            env=dict(service.environment),
            workdir=service.working_dir or image.config.workdir or "/",
            network=network,
            user="root",
            pod=self.pod(service.name),
            run_entrypoint=False,
        )
        try:
            sandbox = create_sandbox(spec, self.backend)
            await sandbox.start()
        except SandboxError as exc:
            raise SidecarFailed(FailureCause.SANDBOX_FAILED, f"sidecar {service.name}: {exc}") from None
        self.sandboxes[service.name] = sandbox
        run = (
            f"( {shlex.join(argv)} > {SERVICE_LOG} 2>&1 < /dev/null; echo $? > {SERVICE_STATUS} )"
            " > /dev/null 2>&1 < /dev/null &"
        )
        result = await sandbox.exec(run, user="root", timeout=60)
        if not result.ok:
            raise SidecarFailed(
                FailureCause.SANDBOX_FAILED,
                f"sidecar {service.name}: its process did not start: {result.stderr}",
            )

    async def _await_conditions(self, conditions: Mapping[str, str], dependent: str) -> None:
        for name, condition in conditions.items():
            if condition == "service_healthy":
                await self._healthy(name, dependent)
            elif condition == "service_completed_successfully":
                await self._completed(name, dependent)

    async def _healthy(self, name: str, dependent: str) -> None:
        service, sandbox = self.project.services[name], self.sandboxes[name]
        check = service.healthcheck
        if check is None:
            raise SidecarFailed(
                FailureCause.TASK_INVALID,
                f"{self.project.file}: services.{dependent}.depends_on.{name}: service_healthy, but "
                f"{name} has no healthcheck",
            )
        config = HealthcheckConfig(
            command=check.command,
            interval_sec=check.interval_sec,
            timeout_sec=check.timeout_sec,
            start_period_sec=check.start_period_sec,
            start_interval_sec=min(check.interval_sec, 5.0),
            retries=max(1, check.retries),
        )
        try:
            await await_healthy(sandbox, config)
        except HealthcheckFailed as exc:
            detail = str(exc).split(": ", 1)[-1]
            log = await self._log_tail(sandbox)
            raise SidecarFailed(
                FailureCause.HEALTHCHECK_FAILED,
                f"{self.project.file}: service {name} never became healthy: {detail}" + log,
            ) from None

    async def _completed(self, name: str, dependent: str) -> None:
        sandbox = self.sandboxes[name]
        deadline = time.monotonic() + COMPLETION_LIMIT_SEC
        while True:
            result = await sandbox.exec(f"cat {SERVICE_STATUS} 2>/dev/null", user="root", timeout=30)
            status = result.stdout.strip()
            if status:
                break
            if time.monotonic() > deadline:
                status = f"none: still running after {COMPLETION_LIMIT_SEC:g} s"
                break
            await asyncio.sleep(COMPLETION_POLL_SEC)
        if status != "0":
            raise SidecarFailed(
                FailureCause.SANDBOX_FAILED,
                f"{self.project.file}: service {name} (awaited by {dependent}) exited with status {status}"
                + await self._log_tail(sandbox),
            )

    async def _log_tail(self, sandbox: Sandbox) -> str:
        with contextlib.suppress(SandboxError):
            tail = (await sandbox.exec(f"tail -c 600 {SERVICE_LOG}", user="root", timeout=30)).stdout.strip()
            return f"; its output: {tail}" if tail else ""
        return ""

    async def stop(self) -> list[str]:
        """Stop every sidecar, the last started first; the warnings of those that failed to stop."""
        warnings = []
        for name, sandbox in reversed(list(self.sandboxes.items())):
            try:
                await asyncio.shield(sandbox.stop())
            except Exception as exc:
                warnings.append(f"stopping sidecar {name} failed: {exc}")
        self.sandboxes.clear()
        return warnings


async def start_sidecars(state: TrialState, task: Task, spec: SandboxSpec) -> SandboxSpec | None:
    """Start the task's sidecars (before the main sandbox); `spec` in their pod as `main`, or None once a
    failure is recorded."""
    project = task.environment.compose
    if project is None or not project.services:
        return spec
    trial_dir = state.store.trial_dir(state.config.trial_name)
    sidecars = Sidecars(
        task, project, backend=state.spec.sandbox, name=spec.name, trial_dir=trial_dir, images=state.images
    )
    state.sidecars = sidecars
    notices: list[str] = []
    limit = images.build_timeout(state, task)
    try:
        await state.timed(
            "sandbox_start",
            sidecars.start(spec.network, pull=state.spec.pull, build_timeout=limit, notices=notices),
        )
    except SidecarFailed as exc:
        state.fail(exc.cause, str(exc))
        return None
    finally:
        state.result.warnings += notices
    return spec.model_copy(update={"pod": sidecars.pod(MAIN)})


async def stop_sidecars(state: TrialState) -> None:
    """Stop the sidecars (after the main sandbox, which shares their network); failures become warnings."""
    sidecars, state.sidecars = state.sidecars, None
    if sidecars is not None:
        state.result.warnings += await sidecars.stop()
