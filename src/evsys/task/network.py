"""The network a trial's phases get, resolved the way Harbor 0.25 resolves it.

- The environment's baseline is `[environment] network_mode` (default `public` for task directories, as in
  Harbor; Python tasks keep `no-network`), with `allowed_hosts` for `allowlist`.
- `[agent]` and `[verifier]` may each set their own `network_mode` / `allowed_hosts`: the phase then uses that
  policy instead of the baseline (a step's `[steps.agent]` / `[steps.verifier]` wins over the task's).
- A job-level override (`evsys run --network MODE`) replaces every phase's policy, for users who want no
  network whatever the tasks say.

A sandbox starts with the broadest policy its phases need and is narrowed for the others (see
`evsys.sandbox.network`); `public` here means slirp4netns on the local backend: the host's loopback and the
orchestrator stay unreachable.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evsys.task.models import PhaseNetwork, StepConfig, TaskConfig

NetworkMode = Literal["no-network", "public", "allowlist"]  # as evsys.sandbox.base names them

BREADTH: dict[str, int] = {"no-network": 0, "allowlist": 1, "public": 2}


class NetworkPolicy(BaseModel):
    """One phase's network: a mode, and the hosts an `allowlist` lets through."""

    model_config = ConfigDict(frozen=True)

    mode: NetworkMode = "public"
    allowed_hosts: tuple[str, ...] = ()


class NetworkPlan(BaseModel):
    """The policy of each phase of a trial (or of one step of a multi-step trial)."""

    model_config = ConfigDict(frozen=True)

    baseline: NetworkPolicy
    agent: NetworkPolicy
    verifier: NetworkPolicy = Field(description="In the agent's sandbox, or a separate verifier's.")

    @property
    def start(self) -> NetworkPolicy:
        """The policy a sandbox starts with: the broadest one its phases need (narrowing works anywhere,
        widening a sandbox started without network does not). Equal breadths: the agent's."""
        return max((self.agent, self.verifier), key=lambda p: BREADTH[p.mode])


PUBLIC = NetworkPolicy()  # the default policy; frozen, so shared
DEFAULT_PLAN = NetworkPlan(baseline=PUBLIC, agent=PUBLIC, verifier=PUBLIC)


def _phase(section: PhaseNetwork | None) -> NetworkPolicy | None:
    """An explicit `[agent]`/`[verifier]` policy, or None when the section does not set `network_mode`."""
    if section is None or section.network_mode is None:
        return None
    return NetworkPolicy(mode=section.network_mode, allowed_hosts=tuple(section.allowed_hosts or ()))


def resolve_network_plan(
    config: TaskConfig, step: StepConfig | None = None, override: NetworkMode | None = None
) -> NetworkPlan:
    """The plan for a `TaskConfig` (and optionally one of its `StepConfig`s); `override` replaces it all."""
    if override is not None:
        policy = NetworkPolicy(mode=override)
        return NetworkPlan(baseline=policy, agent=policy, verifier=policy)
    env = config.environment
    baseline = NetworkPolicy(mode=env.network_mode, allowed_hosts=tuple(env.allowed_hosts or ()))
    agent = (_phase(step.agent) if step is not None else None) or _phase(config.agent) or baseline
    verifier = (_phase(step.verifier) if step is not None else None) or _phase(config.verifier) or baseline
    return NetworkPlan(baseline=baseline, agent=agent, verifier=verifier)
