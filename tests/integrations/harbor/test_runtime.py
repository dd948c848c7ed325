"""The Harbor-free half of the integration (`EnvironmentRuntime`), on the Python evsys runs on: a Harbor
environment's directory becomes a running evsys sandbox, and is gone after `stop`."""

from __future__ import annotations

import pytest

from evsys.integrations.harbor.runtime import EnvironmentRequest, EnvironmentRuntime, sandbox_user
from evsys.sandbox.base import SandboxError
from evsys.task.network import NetworkPolicy


def test_harbor_users_map_onto_the_sandboxs_two():
    assert [sandbox_user(u, "root") for u in ("root", 0, "0", "agent", 1000, "appuser")] == [
        "root",
        "root",
        "root",
        "agent",
        "agent",
        "agent",
    ]
    assert (sandbox_user(None, "root"), sandbox_user(None, "agent")) == ("root", "agent")


@pytest.mark.needs_sandbox
async def test_an_environment_directory_becomes_a_running_sandbox(tmp_path):
    env_dir = tmp_path / "task" / "environment"
    env_dir.mkdir(parents=True)
    (env_dir / "Dockerfile").write_text(
        "FROM python:3.11-slim-bookworm\nWORKDIR /srv\nENV GREETING=hi\nCOPY x.txt ./\n"
    )
    (env_dir / "x.txt").write_text("copied\n")
    request = EnvironmentRequest(
        name="probe__env",
        task_name="probe",
        environment_dir=env_dir,
        env={"FROM_HARBOR": "yes"},
        network=NetworkPolicy(mode="no-network"),
        trial_dir=tmp_path / "trial",
    )
    runtime = EnvironmentRuntime(request)
    await runtime.start()
    sandbox = runtime.running()
    result = await sandbox.exec('cat x.txt; echo "$GREETING $FROM_HARBOR"; pwd', user=runtime.default_user)
    assert result.stdout == "copied\nhi yes\n/srv\n"
    assert runtime.default_user == "root"  # no USER in the Dockerfile: root, as Docker runs it
    assert await runtime.stop() == []
    with pytest.raises(SandboxError):
        runtime.running()
