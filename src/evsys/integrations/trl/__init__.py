"""TRL drives evsys (docs/integrations.md#trl): `GRPOTrainer(environment_factory=EnvironmentFactory(tasks))`
runs every rollout as an evsys episode (sandbox, the loop agent's tools, the task's verifier as reward);
`EvsysRolloutFunc` is a `rollout_func` for which evsys owns the whole loop (`run_rollouts`), returning its
recorded token ids and logprobs. Importable without TRL; using it needs the `trl` extra."""

from evsys.integrations.trl.environment import EnvironmentFactory, EvsysEnvironment, hermes_response_parsing
from evsys.integrations.trl.rollout import EvsysRolloutFunc, evsys_reward

__all__ = [
    "EnvironmentFactory",
    "EvsysEnvironment",
    "EvsysRolloutFunc",
    "evsys_reward",
    "hermes_response_parsing",
]
