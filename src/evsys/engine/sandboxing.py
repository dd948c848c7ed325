"""The environment phase of a trial: its sandbox spec (on the task's image when it has one), the sandbox from
the pool, the healthcheck, the network each phase runs with, and the sandbox's release at the end.

`EnvironmentPhaseMixin` is the part of `Trial` (evsys.engine.trial) that owns `self.sandbox`; an episode
served step by step (evsys.server) drives the same phase."""

from __future__ import annotations

import asyncio
import secrets

from evsys.engine import environment
from evsys.engine.config import slugify
from evsys.engine.healthcheck import HealthcheckFailed, await_healthy
from evsys.images import ImageError
from evsys.records import FailureCause, FileCopy, ImageSpec, SandboxSpec, TrialImage
from evsys.repo.workspace import WorkspaceError, place_workspace, task_workspace
from evsys.sandbox.base import Capability, SandboxError
from evsys.task.models import Task
from evsys.task.network import NetworkPlan, NetworkPolicy, resolve_network_plan
from evsys.util.hostca import SANDBOX_CA_PATH, ca_environment, host_ca_bundle

# a sandbox that failed, or whose trial was cancelled, is stopped rather than reset for the next trial
NOT_REUSABLE = (FailureCause.SANDBOX_FAILED, FailureCause.CANCELLED)


def sandbox_spec(
    task: Task, job_name: str, trial_name: str, network: NetworkPlan | None = None
) -> SandboxSpec:
    """The sandbox a trial of `task` asks for; its name is unique per trial (job, trial, random suffix). It
    starts with the broadest network the trial's phases need (`network`, default: the task's own plan)."""
    env = task.config.environment
    start = (network or resolve_network_plan(task.config)).start
    name = f"{slugify(job_name, max_len=40)}-{slugify(trial_name, max_len=60)}-{secrets.token_hex(3)}"
    return SandboxSpec(
        name=name,
        workdir=task.environment.workdir,
        env=dict(task.environment.env),
        files=list(task.environment.files),
        network=start.mode,
        allowed_hosts=list(start.allowed_hosts),
        cpus=env.cpus,
        memory_mb=env.memory_mb,
        storage_mb=env.storage_mb,
    )


def image_spec(spec: SandboxSpec, task: Task, image: ImageSpec) -> SandboxSpec:
    """`spec` on an image: the image brings the Dockerfile's files, ENV, WORKDIR and USER; task.toml's
    `[environment] env` and `workdir` still apply on top. A sandbox with network also gets the host's CA
    bundle and the variables pointing tools at it (the host rootfs has it already; an image does not), unless
    the task sets them itself."""
    env = task.config.environment
    user = image.config.user or ""
    files: list[FileCopy] = []
    variables: dict[str, str] = {}
    bundle = host_ca_bundle()
    if spec.network != "no-network" and bundle is not None:
        files.append(FileCopy(src=bundle, dst=SANDBOX_CA_PATH))
        variables = ca_environment(SANDBOX_CA_PATH)
    return spec.model_copy(
        update={
            "image": image,
            "files": files,
            "env": variables | dict(env.env),
            "workdir": env.workdir or image.config.workdir or task.environment.workdir,
            "user": "root" if user.split(":")[0] in ("root", "0") else spec.user,
        }
    )


def describe_exception(exc: BaseException) -> str:
    """`Type: message` of an exception (the type alone when it has no message)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class EnvironmentPhaseMixin:
    """The environment half of `Trial`: start, check, switch the network of, and release its sandbox."""

    async def _on_image(self, task: Task, spec: SandboxSpec) -> SandboxSpec | None:
        """`spec` moved onto the task's image (built, pulled or cached now); None after a failed build."""
        limit = task.config.environment.build_timeout_sec * self.spec.setup_timeout_multiplier
        trial_dir = self.store.trial_dir(self.config.trial_name)
        notices: list[str] = []
        try:
            image = await self._timed(
                "environment_build",
                environment.task_image(
                    task, trial_dir, pull_policy=self.spec.pull, timeout=limit, notices=notices
                ),
            )
        except ImageError as exc:
            self.fail(FailureCause.ENVIRONMENT_BUILD_FAILED, f"{exc} (log: {environment.BUILD_LOG})")
            return None
        finally:
            self.result.warnings += notices
        self.result.image = TrialImage(
            ref=image.spec.ref,
            source=image.source,
            key=image.key,
            synthesised_bases=image.synthesised_bases,
            pull_error=image.pull_error,
            seconds=image.seconds,
        )
        return image_spec(spec, task, image.spec)

    async def _start_sandbox(self, spec: SandboxSpec) -> bool:
        self.result.sandbox_name = spec.name
        timeout = self.config.sandbox_start_timeout_sec
        try:
            self.slot = await self._timed(
                "sandbox_start", self.slots.acquire(self.spec.trial_name, spec, timeout=timeout)
            )
            self.sandbox = self.slots.as_sandbox(self.slot)
            self.result.sandbox_reused = self.slots.was_reused(self.slot)
        except TimeoutError:
            self.fail(FailureCause.SANDBOX_FAILED, f"the sandbox did not start within {timeout:g} s")
            return False
        except (SandboxError, OSError, ValueError) as exc:
            self.fail(FailureCause.SANDBOX_FAILED, f"the sandbox could not start: {describe_exception(exc)}")
            return False
        self.sandbox_alive = True
        self._network_now = self.network.start
        if not await self._place_repository():
            return False
        return await self._switch_network(self.network.agent, "agent") and await self._healthy()

    async def _place_repository(self) -> bool:
        """A repository task's tree at its workdir, from the repo cache (evsys.repo.workspace), with the
        start network (its install commands may fetch packages)."""
        if self.task is None:
            return True
        try:
            workspace = task_workspace(self.task.config.metadata)
        except ValueError as exc:
            self.fail(FailureCause.TASK_INVALID, f"task.toml:metadata.evsys_repo: {exc}")
            return False
        if workspace is None:
            return True
        try:
            await self._timed("environment_build", place_workspace(self.sandbox, workspace))
        except WorkspaceError as exc:
            self.fail(FailureCause.ENVIRONMENT_BUILD_FAILED, str(exc))
            return False
        return True

    async def _healthy(self) -> bool:
        """Await `[environment.healthcheck]` (counted in the sandbox_start phase); False once it failed."""
        check = self.task.config.environment.healthcheck if self.task is not None else None
        if check is None:
            return True
        try:
            await self._timed("sandbox_start", await_healthy(self.sandbox, check))
        except HealthcheckFailed as exc:
            self.fail(FailureCause.HEALTHCHECK_FAILED, str(exc))
            return False
        except SandboxError as exc:
            self.sandbox_alive = False
            self.fail(
                FailureCause.SANDBOX_FAILED, f"the healthcheck could not run: {describe_exception(exc)}"
            )
            return False
        return True

    async def _switch_network(self, policy: NetworkPolicy, phase: str) -> bool:
        """Give the sandbox `policy` for the coming phase when it differs from what it runs with; False (with
        the failure recorded) when the backend cannot."""
        sandbox = self.sandbox
        assert sandbox is not None
        if self._network_now == policy:
            return True
        if not sandbox.supports(Capability.SWITCH_NETWORK):
            self.fail(
                FailureCause.ENVIRONMENT_UNSUPPORTED,
                f"task.toml:{phase}.network_mode: the {phase} phase's network ({policy.mode}) differs from "
                f"the sandbox's ({self._network_now.mode}) and the '{self.spec.sandbox}' backend cannot "
                "switch a sandbox's network between phases",
            )
            return False
        try:
            await sandbox.set_network(policy.mode, policy.allowed_hosts)
        except SandboxError as exc:
            self.sandbox_alive = False
            self.fail(
                FailureCause.SANDBOX_FAILED,
                f"giving the {phase} phase its network: {describe_exception(exc)}",
            )
            return False
        self._network_now = policy
        return True

    async def _stop_sandbox(self) -> None:
        if self.slot is None:
            return
        reusable = self.sandbox_alive and self.result.cause not in NOT_REUSABLE
        slot, self.slot, self.sandbox, self.sandbox_alive = self.slot, None, None, False
        try:
            await self._timed("sandbox_stop", asyncio.shield(self.slots.release(slot, reusable=reusable)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.result.warnings.append(f"stopping the sandbox failed: {exc}")
