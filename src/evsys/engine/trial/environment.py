"""The environment phase of a trial: its sandbox spec (on the task's image and in its sidecars' pod when it
has them), the sandbox from the pool, the repository tree, the healthcheck, the network each phase runs with,
and the sandbox's release at the end.

Functions over a `TrialState` (evsys.engine.trial.state); an episode driven step by step
(evsys.engine.episodes) runs through the same `Trial`, so through these.
"""

from __future__ import annotations

import asyncio
import secrets

from evsys.engine.config import slugify
from evsys.engine.trial import images
from evsys.engine.trial.healthcheck import HealthcheckFailed, await_healthy
from evsys.engine.trial.sidecars import start_sidecars
from evsys.engine.trial.state import TrialState, describe_exception
from evsys.records import FailureCause, SandboxSpec
from evsys.repo.workspace import WorkspaceError, place_workspace, task_workspace
from evsys.sandbox.base import Capability, SandboxError
from evsys.task.models import Task
from evsys.task.network import NetworkPlan, NetworkPolicy, resolve_network_plan

# a sandbox that failed, or whose trial was cancelled, is stopped rather than reset for the next trial
NOT_REUSABLE = (FailureCause.SANDBOX_FAILED, FailureCause.CANCELLED)


def sandbox_spec(
    task: Task, job_name: str, trial_name: str, network: NetworkPlan | None = None
) -> SandboxSpec:
    """The sandbox a trial of `task` asks for; its name is unique per trial (job, trial, random suffix). It
    starts with the broadest network the trial's phases need (`network`, default: the task's own plan). On
    the host rootfs, a python base the host provides with the thin python layer names it (`host_python`)."""
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
        host_python=images.host_python(task),
    )


async def environment_spec(state: TrialState, task: Task) -> SandboxSpec | None:
    """The trial's sandbox spec with the task's network plan resolved: on the task's image (built, pulled or
    cached now) and in its sidecars' pod (started now) when it has them; None once a failure is recorded."""
    state.network = resolve_network_plan(task.config, override=state.config.network)
    spec: SandboxSpec | None = sandbox_spec(task, state.spec.job_name, state.config.trial_name, state.network)
    if spec is not None and images.needs_image(task, state.spec.skip_build, state.spec.sandbox):
        spec = await images.on_image(state, task, spec)
        spec = spec and await start_sidecars(state, task, spec)
    elif spec is not None and not images.on_host(state, task):  # the host rootfs in place of the base
        return None
    return spec


async def start_sandbox(state: TrialState, spec: SandboxSpec) -> bool:
    """The trial's sandbox from the pool (started, or reset after an earlier trial), its repository tree in
    place, the agent phase's network and a passing healthcheck; False once a failure is recorded."""
    state.result.sandbox_name = spec.name
    timeout = state.config.sandbox_start_timeout_sec
    try:
        state.lease = await state.timed("sandbox_start", state.pool.acquire(spec, timeout=timeout))
        state.sandbox = state.lease.sandbox
        state.result.sandbox_reused = state.lease.reused
    except TimeoutError:
        state.fail(FailureCause.SANDBOX_FAILED, f"the sandbox did not start within {timeout:g} s")
        return False
    except (SandboxError, OSError, ValueError) as exc:
        state.fail(FailureCause.SANDBOX_FAILED, f"the sandbox could not start: {describe_exception(exc)}")
        return False
    state.sandbox_alive = True
    state.network_now = state.network.start
    if not await place_repository(state):
        return False
    return await switch_network(state, state.network.agent, "agent") and await healthy(state)


async def place_repository(state: TrialState) -> bool:
    """A repository task's tree at its workdir, from the repo cache (evsys.repo.workspace), with the start
    network (its install commands may fetch packages)."""
    if state.task is None:
        return True
    try:
        workspace = task_workspace(state.task.config.metadata)
    except ValueError as exc:
        state.fail(FailureCause.TASK_INVALID, f"task.toml:metadata.evsys_repo: {exc}")
        return False
    if workspace is None:
        return True
    try:
        await state.timed("environment_build", place_workspace(state.require_sandbox(), workspace))
    except WorkspaceError as exc:
        state.fail(FailureCause.ENVIRONMENT_BUILD_FAILED, str(exc))
        return False
    return True


async def healthy(state: TrialState) -> bool:
    """Await `[environment.healthcheck]` (counted in the sandbox_start phase); False once it failed."""
    check = state.task.config.environment.healthcheck if state.task is not None else None
    if check is None:
        return True
    try:
        await state.timed("sandbox_start", await_healthy(state.require_sandbox(), check))
    except HealthcheckFailed as exc:
        state.fail(FailureCause.HEALTHCHECK_FAILED, str(exc))
        return False
    except SandboxError as exc:
        message = f"the healthcheck could not run: {describe_exception(exc)}"
        state.lose_sandbox(FailureCause.SANDBOX_FAILED, message)
        return False
    return True


async def switch_network(state: TrialState, policy: NetworkPolicy, phase: str) -> bool:
    """Give the sandbox `policy` for the coming phase when it differs from what it runs with; False (with
    the failure recorded) when the backend cannot."""
    sandbox = state.require_sandbox()
    if state.network_now == policy:
        return True
    if not sandbox.supports(Capability.SWITCH_NETWORK):
        state.fail(
            FailureCause.ENVIRONMENT_UNSUPPORTED,
            f"task.toml:{phase}.network_mode: the {phase} phase's network ({policy.mode}) differs from "
            f"the sandbox's ({state.network_now.mode}) and the '{state.spec.sandbox}' backend cannot "
            "switch a sandbox's network between phases",
        )
        return False
    try:
        await sandbox.set_network(policy.mode, policy.allowed_hosts)
    except SandboxError as exc:
        message = f"giving the {phase} phase its network: {describe_exception(exc)}"
        state.lose_sandbox(FailureCause.SANDBOX_FAILED, message)
        return False
    state.network_now = policy
    return True


async def kill_leftovers(state: TrialState) -> None:
    """Kill what an agent that did not finish normally left running (after a timeout, error or failed
    setup); a finished agent's services keep running into verification."""
    sandbox = state.live_sandbox
    if sandbox is None or state.agent_finished:
        return
    try:
        await sandbox.kill_processes()
    except SandboxError as exc:
        message = f"could not kill the agent's processes: {describe_exception(exc)}"
        state.lose_sandbox(FailureCause.SANDBOX_FAILED, message)


async def stop_sandbox(state: TrialState) -> None:
    """Release the trial's lease: reset for the next trial when the sandbox is fit for it, else stopped."""
    if state.lease is None:
        return
    reusable = state.sandbox_alive and state.result.cause not in NOT_REUSABLE
    lease, state.lease, state.sandbox, state.sandbox_alive = state.lease, None, None, False
    try:
        # a sandbox kept for the next trial is reset in the background: the trial's result does not wait
        release = lease.release(reusable=reusable, wait=False)
        await state.timed("sandbox_stop", asyncio.shield(release))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        state.result.warnings.append(f"stopping the sandbox failed: {exc}")
