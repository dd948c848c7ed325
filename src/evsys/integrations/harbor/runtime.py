"""The Harbor-free half of evsys's Harbor environment: what one Harbor environment asks for, as evsys sees it
(`EnvironmentRequest`), and its sandbox (`EnvironmentRuntime`), made with the machinery evsys's own trials
use: the environment directory resolved by `evsys.task` (trivial Dockerfiles run on the host rootfs, others on
an image), the image built, pulled or synthesised by `evsys.images`, the spec by `evsys.engine.sandboxing`,
compose sidecars by `evsys.engine.sidecars`, and the sandbox from the backend registry. Importing this module
needs no Harbor, so it runs (and is tested) on every Python evsys supports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evsys.engine.image_services import ImageServices
from evsys.engine.trial.environment import sandbox_spec
from evsys.engine.trial.images import BUILD_LOG, image_spec, needs_image
from evsys.engine.trial.sidecars import SidecarFailed, Sidecars
from evsys.images import BuildContext, ImageError, ImageResult, PullPolicy
from evsys.records import FailureCause, SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.registry import create_sandbox
from evsys.task.compose import MAIN
from evsys.task.dockerfile import resolve_environment_dir
from evsys.task.hostbase import host_mismatch
from evsys.task.models import EnvironmentConfig, ResolvedEnvironment, Task, TaskConfig
from evsys.task.network import NetworkPlan, NetworkPolicy

SandboxUser = Literal["root", "agent"]
ROOT_NAMES = ("root", "0")


class EnvironmentBuildFailed(RuntimeError):
    """The environment's image (or a sidecar's) could not be built or pulled; retrying will not help."""


class EnvironmentStartFailed(RuntimeError):
    """The sandbox or a sidecar could not start, or a sidecar never became ready."""


class HarborOptions(BaseModel):
    """What `harbor run --ek KEY=VALUE` may set for the evsys environment."""

    model_config = ConfigDict(extra="forbid")

    backend: str = Field("local", description="The evsys sandbox backend (`local`, `docker`, a plug-in's).")
    pull: PullPolicy = Field("missing", description="When `docker_image` and FROM bases are fetched.")


class EnvironmentRequest(BaseModel):
    """One Harbor environment, in evsys's terms (Harbor's resource overrides and policies already applied)."""

    name: str = Field(description="Harbor's session id, unique per trial and role.")
    task_name: str = Field(description="Harbor's environment name (the task's short name).")
    environment_dir: Path
    docker_image: str | None = None
    force_build: bool = False
    workdir: str | None = None
    env: dict[str, str] = Field(default_factory=dict, description="Task and trial variables at start.")
    network: NetworkPolicy = Field(description="The broadest policy of the environment's phases.")
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    build_timeout_sec: float = 600.0
    trial_dir: Path = Field(description="Where the build log goes (`environment/build.log` below it).")
    options: HarborOptions = Field(default_factory=HarborOptions)


def sandbox_user(user: str | int | None, default: SandboxUser) -> SandboxUser:
    """The sandbox user a Harbor user stands for: root (by name or uid 0), else evsys's unprivileged `agent`
    (whatever the name or uid: the sandbox has these two); `default` when Harbor names none."""
    if user is None:
        return default
    return "root" if str(user) in ROOT_NAMES else "agent"


def _task(request: EnvironmentRequest, resolved: ResolvedEnvironment) -> Task:
    """The request as an evsys task, so that evsys's own spec and image code serves it unchanged."""
    docker_image = request.docker_image
    if request.force_build and (request.environment_dir / "Dockerfile").is_file():
        docker_image = None  # Harbor's --force-build: the Dockerfile rather than the prebuilt image
    if docker_image and host_mismatch(docker_image) is not None:
        resolved.needs_image = True
    resolved.workdir = request.workdir or resolved.workdir
    resolved.env = {**resolved.env, **request.env}
    config = EnvironmentConfig(
        build_timeout_sec=request.build_timeout_sec,
        docker_image=docker_image,
        cpus=request.cpus,
        memory_mb=request.memory_mb,
        storage_mb=request.storage_mb,
        env=request.env,
        workdir=request.workdir,
        network_mode=request.network.mode,
        allowed_hosts=list(request.network.allowed_hosts),
    )
    return Task(
        name=request.task_name,
        path=request.environment_dir.parent.resolve(),
        instruction="",
        config=TaskConfig(environment=config),
        environment=resolved,
    )


class EnvironmentRuntime:
    """The sandbox (and sidecars) of one Harbor environment: `start`, then `sandbox`, then `stop`."""

    def __init__(self, request: EnvironmentRequest) -> None:
        self.request = request
        self.sandbox: Sandbox | None = None
        self.sidecars: Sidecars | None = None
        self.image: ImageResult | None = None
        self.default_user: SandboxUser = "root"
        self.notices: list[str] = []
        self.images = ImageServices()  # this environment's builds, pulls and their cache

    def running(self) -> Sandbox:
        """The started sandbox; `SandboxError` before `start` or after `stop`."""
        if self.sandbox is None:
            raise SandboxError(f"the evsys environment {self.request.name} is not running")
        return self.sandbox

    async def start(self) -> None:
        """Resolve the environment, get its image when it needs one, start the sidecars and the sandbox."""
        resolved, problems = resolve_environment_dir(self.request.environment_dir)
        errors = [str(p) for p in problems if p.severity == "error"]
        if errors:
            raise EnvironmentBuildFailed("; ".join(errors))
        task = _task(self.request, resolved)
        policy = self.request.network
        plan = NetworkPlan(baseline=policy, agent=policy, verifier=policy)
        spec = sandbox_spec(task, "harbor", self.request.name, plan)
        if needs_image(task, False, self.request.options.backend):
            self.image = await self._image(task)
            spec = image_spec(spec, task, self.image.spec)
        declared = (self.image.spec.config.user if self.image else resolved.user) or "root"
        self.default_user = sandbox_user(declared.split(":")[0], "root")
        spec = spec.model_copy(update={"user": self.default_user})
        spec = await self._start_sidecars(task, spec)
        sandbox = create_sandbox(spec, self.request.options.backend)
        try:
            await sandbox.start()
        except BaseException:
            await self._stop_sidecars()
            raise
        self.sandbox = sandbox

    async def _image(self, task: Task) -> ImageResult:
        """The task's image: evsys's task image for an `environment/` directory (a prebuilt `docker_image`
        falls back to the Dockerfile), else the directory's own Dockerfile or image (a separate
        verifier's)."""
        request = self.request
        timeout, pull = request.build_timeout_sec, request.options.pull
        log = request.trial_dir / BUILD_LOG
        try:
            if request.environment_dir.name == "environment":
                return await self.images.task_image(
                    task, log, pull_policy=pull, timeout=timeout, notices=self.notices
                )
            service = self.images.service(pull)
            log.parent.mkdir(parents=True, exist_ok=True)
            image = task.config.environment.docker_image
            if image:
                stored, _ = await service.ensure_ref(image, log=log, notice=self.notices.append)
                return ImageResult(spec=await service.storage.spec(stored), source="pulled")
            context = BuildContext(request.environment_dir / "Dockerfile", request.environment_dir)
            return await service.build(context, name=task.name, timeout=timeout, log=log)
        except ImageError as exc:
            raise EnvironmentBuildFailed(f"{exc} (log: {log})") from None

    async def _start_sidecars(self, task: Task, spec: SandboxSpec) -> SandboxSpec:
        """Start the compose services (evsys.engine.sidecars); `spec` joins their pod as `main`."""
        project = task.environment.compose
        if project is None or not project.services:
            return spec
        self.sidecars = Sidecars(
            task,
            project,
            backend=self.request.options.backend,
            name=spec.name,
            trial_dir=self.request.trial_dir,
            images=self.images,
        )
        try:
            await self.sidecars.start(
                spec.network,
                pull=self.request.options.pull,
                build_timeout=self.request.build_timeout_sec,
                notices=self.notices,
            )
        except SidecarFailed as exc:
            await self._stop_sidecars()
            if exc.cause == FailureCause.ENVIRONMENT_BUILD_FAILED:
                raise EnvironmentBuildFailed(str(exc)) from None
            raise EnvironmentStartFailed(str(exc)) from None
        return spec.model_copy(update={"pod": self.sidecars.pod(MAIN)})

    def service(self, name: str) -> Sandbox:
        """The sandbox of compose service `name` (`main` is the environment's own)."""
        if name == MAIN:
            return self.running()
        if self.sidecars is None or name not in self.sidecars.sandboxes:
            raise SandboxError(f"the evsys environment {self.request.name} has no compose service {name!r}")
        return self.sidecars.sandboxes[name]

    async def stop_service(self, name: str) -> None:
        """Stop one compose service's sandbox (`main` too), leaving the others running."""
        sandbox = self.service(name)
        await sandbox.stop()
        if name == MAIN:
            self.sandbox = None
        elif self.sidecars is not None:
            self.sidecars.sandboxes.pop(name, None)

    async def stop(self) -> list[str]:
        """Stop the sandbox, then the sidecars (idempotent); warnings for what failed to stop."""
        sandbox, self.sandbox = self.sandbox, None
        warnings = []
        if sandbox is not None:
            try:
                await sandbox.stop()
            except SandboxError as exc:
                warnings.append(f"stopping the sandbox failed: {exc}")
        return warnings + await self._stop_sidecars()

    async def _stop_sidecars(self) -> list[str]:
        sidecars, self.sidecars = self.sidecars, None
        return await sidecars.stop() if sidecars is not None else []
