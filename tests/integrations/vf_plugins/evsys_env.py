"""verifiers env plugin (`--env.id evsys_env`): every rollout in an evsys sandbox."""

from evsys.integrations.verifiers import EvsysEnv

__all__ = ["EvsysEnv"]
