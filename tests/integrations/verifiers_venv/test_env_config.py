"""`EvsysEnv`'s config: an agent runtime set with `--env.agent.runtime.*` would be ignored (every episode
runs in the evsys sandbox), so it is refused with a message saying what to do; before, it was dropped."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from evsys.integrations.verifiers.env import EvsysEnvConfig


def test_the_default_config_runs_on_the_evsys_sandbox() -> None:
    config = EvsysEnvConfig()
    assert "runtime" not in config.agent.model_fields_set


def test_an_agent_runtime_given_on_the_command_line_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"--env.agent.runtime \(subprocess\) is not used by EvsysEnv"):
        EvsysEnvConfig.model_validate({"agent": {"runtime": {"type": "subprocess"}}})
