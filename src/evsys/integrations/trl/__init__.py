"""TRL drives evsys (docs/integrations.md#trl): `GRPOTrainer(environment_factory=EnvironmentFactory(tasks))`
runs every rollout as an evsys episode (sandbox, the loop agent's tools, the task's verifier as reward);
`EvsysRolloutFunc` is a `rollout_func` for which evsys owns the whole loop (`run_rollouts`), returning its
recorded token ids and logprobs. Importable without TRL; using it needs the `trl` extra.

Each environment TRL creates is an `EvsysTrlEnvironment` (`EvsysEnvironment` is its deprecated name: Harbor's
environment, evsys.integrations.harbor:EvsysEnvironment, keeps that one)."""

import warnings
from typing import Any

from evsys.integrations.trl.environment import (
    EnvironmentFactory,
    EvsysTrlEnvironment,
    TrlEpisode,
    hermes_response_parsing,
)
from evsys.integrations.trl.rollout import EvsysRolloutFunc, evsys_reward

__all__ = [
    "EnvironmentFactory",
    "EvsysRolloutFunc",
    "EvsysTrlEnvironment",
    "TrlEpisode",
    "evsys_reward",
    "hermes_response_parsing",
]


def __getattr__(name: str) -> Any:
    """`EvsysEnvironment`: the deprecated name of `EvsysTrlEnvironment` (with a DeprecationWarning)."""
    if name != "EvsysEnvironment":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        "evsys.integrations.trl.EvsysEnvironment is now EvsysTrlEnvironment (Harbor's environment keeps the "
        "name EvsysEnvironment)",
        DeprecationWarning,
        stacklevel=2,
    )
    return EvsysTrlEnvironment
