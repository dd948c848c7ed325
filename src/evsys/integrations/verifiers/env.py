"""`EvsysEnv`: verifiers' single-agent env with each rollout placed in a fresh evsys sandbox.

verifiers picks a runtime from a closed set of configuration types, so a runtime of another package enters
through an env: `EvsysEnv` provisions an `EvsysRuntime` per episode and runs the agent in it
(`Agent.run(task, runtime=box)`), tearing it down after. A taskset module opts in by exporting it:

    from evsys.integrations.verifiers import EvsysEnv
    __all__ = ["MyTaskset", "EvsysEnv"]

and `vf-eval <taskset>` (verifiers' own evaluation entry point) then runs every rollout in evsys; the
sandbox is configured with `--env.sandbox.*` (see `EvsysConfig`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pydantic import model_validator
from verifiers.v1.agent import Agents
from verifiers.v1.env import Env
from verifiers.v1.envs.single_agent import SingleAgentEnvConfig
from verifiers.v1.task import Task
from verifiers.v1.utils.aio import run_shielded
from verifiers.v1.utils.compile import resolve_runtime_config

from evsys.integrations.verifiers.runtime import EvsysConfig, EvsysRuntime


class EvsysEnvConfig(SingleAgentEnvConfig):
    """`SingleAgentEnv`'s config plus the evsys sandbox every episode runs in. The agent's own runtime
    (`--env.agent.runtime.*`) is refused: every episode runs in the evsys sandbox, so it would be ignored."""

    sandbox: EvsysConfig = EvsysConfig()

    @model_validator(mode="after")
    def _no_agent_runtime(self) -> EvsysEnvConfig:
        if "runtime" in self.agent.model_fields_set:
            kind = self.agent.runtime.type
            raise ValueError(
                f"--env.agent.runtime ({kind}) is not used by EvsysEnv: every episode runs in an evsys "
                "sandbox, configured with --env.sandbox.* (drop --env.agent.runtime.*, or export no EvsysEnv "
                "to run on verifiers' own runtimes)"
            )
        return self


@asynccontextmanager
async def provision_evsys_runtime(
    config: EvsysConfig, name: str | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[EvsysRuntime]:
    """A started `EvsysRuntime`, stopped on exit (also when starting failed halfway)."""
    runtime = EvsysRuntime(config, name)
    runtime.env = dict(env or {})
    try:
        await runtime.start()
        yield runtime
    finally:
        await run_shielded(runtime.stop())


class EvsysEnv(Env[EvsysEnvConfig]):
    """One agent per episode, in an evsys sandbox of its own (`--env.sandbox.*`, with the task's image,
    workdir, network policy and resources applied as verifiers applies them to its own runtimes)."""

    def _runs_local(self) -> bool:
        """Every agent runs in an evsys sandbox on this machine, whatever `--env.agent.runtime` says (it is
        not used): host services reach it through the runtime's loopback bridge, no tunnel needed."""
        return True

    async def run(self, task: Task, agents: Agents) -> None:
        """Provision the episode's sandbox, run the agent in it, release it."""
        # the task's image, workdir, network policy and resources, applied as verifiers does for its runtimes
        config = resolve_runtime_config(self.config.sandbox, task)
        assert isinstance(config, EvsysConfig)
        async with provision_evsys_runtime(config) as box:
            await agents.agent.run(task, runtime=box)
