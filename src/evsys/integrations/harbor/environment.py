"""`EvsysEnvironment`: an evsys sandbox behind Harbor's `BaseEnvironment` contract (harbor >= 0.25).

Harbor loads it by import path (`harbor run -e evsys.integrations.harbor:EvsysEnvironment`, or the older
`--environment-import-path`) and drives it like its Docker environment: `start` (the image built from the
task's `environment/`), `exec`, file transfers, network policy switches between phases, `stop`. Each call
is one call on evsys's `Sandbox` contract; the sandbox itself comes from `EnvironmentRuntime`. This module
imports Harbor: import it only where Harbor is installed (`evsys.integrations.harbor` does so lazily).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.models.task.config import NetworkMode, NetworkPolicy
from pydantic import ValidationError

from evsys.integrations.harbor.private_tests import StagedTests, private_tests_possible
from evsys.integrations.harbor.runtime import (
    EnvironmentBuildFailed,
    EnvironmentRequest,
    EnvironmentRuntime,
    HarborOptions,
    sandbox_user,
)
from evsys.records import ExecResult as SandboxResult
from evsys.task.compose import MAIN
from evsys.task.network import BREADTH
from evsys.task.network import NetworkPolicy as EvsysPolicy

ENVIRONMENT_TYPE = "evsys"


def evsys_policy(policy: NetworkPolicy) -> EvsysPolicy:
    """Harbor's network policy as evsys's."""
    mode = NetworkMode(policy.network_mode).value
    return EvsysPolicy(mode=mode, allowed_hosts=tuple(policy.allowed_hosts))


def harbor_result(result: SandboxResult, timeout_sec: float | None) -> ExecResult:
    """evsys's command result as Harbor's; a timeout raises, as Harbor's Docker environment does."""
    if result.timed_out:
        raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
    return ExecResult(
        stdout=result.stdout_shown or None, stderr=result.stderr_shown or None, return_code=result.exit_code
    )


class EvsysEnvironment(BaseEnvironment):
    """A Harbor environment that runs in an evsys sandbox (local by default: no Docker daemon)."""

    def __init__(self, *args: Any, backend: str = "local", pull: str = "missing", **kwargs: Any) -> None:
        self._options = HarborOptions.model_validate({"backend": backend, "pull": pull})
        super().__init__(*args, **kwargs)
        self._runtime: EnvironmentRuntime | None = None
        self._tests = StagedTests()  # Harbor's tests, kept until its tests command (private_tests.py)
        if self._host_mounts:
            raise ValueError(f"the {ENVIRONMENT_TYPE} environment does not mount host paths (--mount)")
        if self.extra_docker_compose_paths:
            raise ValueError(f"the {ENVIRONMENT_TYPE} environment does not take --extra-docker-compose files")

    @classmethod
    def preflight(cls, kwargs: dict[str, Any] | None = None) -> None:
        """Check `--ek` options before any trial is queued (Harbor >= 0.26 passes them; 0.25 passes none)."""
        try:
            HarborOptions.model_validate(kwargs or {})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(
                f"invalid --ek options for the {ENVIRONMENT_TYPE} environment: {problems}"
            ) from None

    @staticmethod
    def type() -> str:
        """Harbor's name for this environment type."""
        return ENVIRONMENT_TYPE

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        """What evsys's sandbox enforces: every network mode (switched between phases), compose sidecars."""
        return EnvironmentCapabilities(
            disable_internet=True,
            network_allowlist=True,
            network_allowlist_hostnames=True,
            network_allowlist_ipv4_addresses=True,
            network_allowlist_ipv6_addresses=True,
            dynamic_network_policy=True,
            docker_compose=True,
        )

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        """cpus and memory_mb are hard limits (cgroups); fractional cpus are fine."""
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True, fractional_cpus=True)

    def _validate_definition(self) -> None:
        """Anything evsys can run: a Dockerfile, a compose file, a `docker_image`, or nothing (the host
        rootfs); the directory is read at start."""

    def _start_policy(self) -> NetworkPolicy:
        """The broadest policy of this environment's phases: evsys narrows a started sandbox's network and
        widens it back, but cannot give network to a sandbox started without."""
        policies = [self._network_policy, *self._phase_network_policies]
        return max(policies, key=lambda p: BREADTH[NetworkMode(p.network_mode).value])

    def _request(self, force_build: bool) -> EnvironmentRequest:
        config = self.task_env_config
        return EnvironmentRequest(
            name=self.session_id,
            task_name=self.environment_name,
            environment_dir=Path(self.environment_dir),
            docker_image=config.docker_image,
            force_build=force_build,
            workdir=config.workdir,
            env=self._startup_env(),
            network=evsys_policy(self._start_policy()),
            cpus=self._effective_cpus,
            memory_mb=self._effective_memory_mb,
            storage_mb=self._effective_storage_mb,
            build_timeout_sec=config.build_timeout_sec,
            trial_dir=Path(self.trial_paths.trial_dir),
            options=self._options,
        )

    async def start(self, force_build: bool) -> None:
        """Build or fetch the image (once per content), start the sidecars and the sandbox."""
        runtime = EnvironmentRuntime(self._request(force_build))
        try:
            await runtime.start()
        except EnvironmentBuildFailed as exc:
            raise SandboxBuildFailedError(str(exc)) from None
        self._runtime = runtime
        for notice in runtime.notices:
            self.logger.info(notice)
        if self._network_policy != self._start_policy():
            await self._apply_network_policy(self._network_policy)
        await self._upload_environment_dir_after_start()

    async def stop(self, delete: bool) -> None:
        """Stop the sandbox and the sidecars; images stay in evsys's cache (`evsys image prune`)."""
        runtime, self._runtime = self._runtime, None
        await self._tests.discard()
        if runtime is not None:
            for warning in await runtime.stop():
                self.logger.warning(warning)

    def _running(self) -> EnvironmentRuntime:
        if self._runtime is None:
            raise RuntimeError(f"the {ENVIRONMENT_TYPE} environment {self.session_id} is not started")
        return self._runtime

    async def _apply_network_policy(self, network_policy: NetworkPolicy) -> None:
        policy = evsys_policy(network_policy)
        await self._running().running().set_network(policy.mode, policy.allowed_hosts)

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        """Run `command` with bash as `user` (root, or the unprivileged agent user for any other name);
        Harbor's tests command runs its staged tests in the verifier's private places (private_tests.py)."""
        runtime = self._running()
        sandbox = runtime.running()
        options = {
            "cwd": cwd or self.task_env_config.workdir,
            "env": self._merge_env(env),
            "user": sandbox_user(self._resolve_user(user), runtime.default_user),
        }
        if self._tests.pending:
            if self._tests.chmod(command):
                return ExecResult(return_code=0)
            if call := self._tests.tests_call(command):
                result, findings = await self._tests.run(sandbox, call, timeout=timeout_sec, **options)
                for finding in findings:
                    self.logger.warning(f"the agent wrote to a verifier place: {finding}")
                return harbor_result(result, timeout_sec)
            self.logger.warning("running the tests unprotected: Harbor did not run them as expected")
            await self._tests.flush(sandbox)
        result = await sandbox.exec(command, timeout=timeout_sec, **options)
        return harbor_result(result, timeout_sec)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        """Copy a host file to `target_path` (root-owned, mode kept)."""
        await self._running().running().upload(Path(source_path), target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        """Copy a host directory's contents into `target_dir` (merged; root-owned, modes kept); Harbor's
        tests (`/tests`) are kept on the host for a private verification run where the sandbox has one."""
        sandbox = self._running().running()
        if private_tests_possible(sandbox, target_dir):
            await self._tests.stage(Path(source_dir))
        else:
            await sandbox.upload(Path(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        """Copy a sandbox file to the host path `target_path`."""
        await self._running().running().download(source_path, Path(target_path))

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        """Copy a sandbox directory's contents into `target_dir` (merged; no link out of it)."""
        await self._running().running().download(source_dir, Path(target_dir))

    # ---------------------------------------------------------------- compose services
    async def service_exec(
        self,
        command: str,
        *,
        service: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        """`exec` in compose service `service` (as root unless told; no main-environment defaults)."""
        if self.is_main_service(service):
            return await self.exec(command, cwd=cwd, env=env, timeout_sec=timeout_sec, user=user)
        sandbox = self._running().service(str(service))
        result = await sandbox.exec(
            command, cwd=cwd, env=env, timeout=timeout_sec, user=sandbox_user(user, "root")
        )
        return harbor_result(result, timeout_sec)

    async def service_download_file(
        self, source_path: str, target_path: Path | str, *, service: str | None = None
    ) -> None:
        """Copy a file out of compose service `service`."""
        await self._running().service(service or MAIN).download(source_path, Path(target_path))

    async def service_download_dir(
        self, source_dir: str, target_dir: Path | str, *, service: str | None = None
    ) -> None:
        """Copy a directory out of compose service `service`."""
        await self._running().service(service or MAIN).download(source_dir, Path(target_dir))

    async def stop_service(self, service: str) -> None:
        """Stop one compose service (the main one too), the others keep running."""
        await self._running().stop_service(service)
