"""Harbor itself (`harbor run`, the oracle) on task directories through `evsys.integrations.harbor`'s
environment: the parity set scores what evsys's own run scores, a Dockerfile with `RUN apt-get` is built, and
`no-network` holds."""

from __future__ import annotations

import asyncio
import socket

import pytest
from harbor_runs import PARITY_TASKS, TASKS, copy_tasks, harbor_env, run_harbor

from evsys.engine import AgentSpec, Job, JobConfig

pytestmark = pytest.mark.slow

# scored with evsys's own adversarial agent, not the oracle (tests/parity/test_parity.py)
EVSYS_AGENT_ONLY = {"forger-stays-out"}
# tests/parity/test_parity.py: the oracle's reward on each parity task, as Harbor 0.25 scores it on Docker;
# healthcheck-never-healthy has none (the trial fails before the agent)
PARITY_REWARDS = {
    "compose-sidecars": 1.0,
    "entrypoint-service": 1.0,
    "entrypoint-late-service": 1.0,
    "healthcheck-awaited": 1.0,
    "healthcheck-never-healthy": None,
    "low-port-service": 1.0,
    "multi-step": 0.75,
    "network-default-public": 1.0,
    "network-phase-override": 1.0,
    "separate-verifier": 1.0,
    "service-survives": 1.0,
    "tmp-visible": 1.0,
}


async def evsys_rewards(dataset, jobs) -> dict[str, float | None]:
    """evsys's own oracle run of `dataset` (local sandbox), rewards by task name without its `org/`."""
    config = JobConfig(
        datasets=[dataset], agents=[AgentSpec(name="oracle")], jobs_dir=jobs, job_name="evsys", n_concurrent=4
    )
    result = await Job(config).run()
    return {t.task_name.split("/", 1)[-1]: t.reward for t in result.trials}


async def test_harbor_scores_the_parity_set_as_evsys_does(tmp_path, harbor):
    sources = [p for p in sorted(PARITY_TASKS.iterdir()) if p.is_dir() and p.name not in EVSYS_AGENT_ONLY]
    dataset = copy_tasks(sources, tmp_path / "parity")
    jobs = tmp_path / "jobs"
    trials, done = await asyncio.to_thread(run_harbor, harbor, dataset, jobs, "harbor", "-n", "4")
    got = {name: trial.reward for name, trial in trials.items()}
    assert got == PARITY_REWARDS, (done.stdout[-3000:], {n: t.exception for n, t in trials.items()})
    assert got == await evsys_rewards(dataset, tmp_path / "jobs")
    # the healthcheck that never passes fails the trial the way Harbor's Docker environment does
    assert trials["healthcheck-never-healthy"].exception == (
        "HealthcheckError: Healthcheck failed after 2 consecutive retries: echo not yet >&2; false"
    )


def test_harbor_builds_a_dockerfile_with_apt_get(tmp_path, harbor):
    dataset = copy_tasks([TASKS / "apt-build"], tmp_path / "tasks")
    trials, done = run_harbor(harbor, dataset, tmp_path / "jobs", "apt-build")
    trial = trials["apt-build"]
    output = (trial.trial_dir / "verifier" / "test-stdout.txt").read_text()
    assert trial.reward == 1.0, (trial.exception, output, done.stdout[-2000:])
    assert "marker: built-by-run" in output  # the RUN steps ran: the trial ran on the built image


def test_no_network_holds_under_harbor(tmp_path, harbor):
    address = socket.getaddrinfo("pypi.org", 443, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    public = copy_tasks([TASKS / "net-probe"], tmp_path / "public")
    toml = public / "net-probe" / "task.toml"
    toml.write_text(toml.read_text().replace('network_mode = "no-network"', 'network_mode = "public"'))
    closed = copy_tasks([TASKS / "net-probe"], tmp_path / "closed")
    env = harbor_env(PROBE_ADDRESS=address)

    # positive control: the same probe with public networking connects, by name and by address
    opened, _ = run_harbor(harbor, public, tmp_path / "jobs", "public", env=env)
    control = (opened["net-probe"].trial_dir / "verifier" / "test-stdout.txt").read_text()
    assert opened["net-probe"].reward == 1.0, control
    assert f"pypi.org: connected\n{address}: connected" in control

    shut, _ = run_harbor(harbor, closed, tmp_path / "jobs", "closed", env=env)
    output = (shut["net-probe"].trial_dir / "verifier" / "test-stdout.txt").read_text()
    assert shut["net-probe"].reward == 0.0, output
    assert f"{address}: OSError: [Errno 101] Network is unreachable" in output


def test_a_bad_environment_option_is_refused_before_any_trial_runs(tmp_path, harbor):
    dataset = copy_tasks([TASKS / "net-probe"], tmp_path / "tasks")
    trials, done = run_harbor(harbor, dataset, tmp_path / "jobs", "bad-option", "--ek", "pull=sometimes")
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0 and trials == {}
    assert "pull" in output and "'missing', 'always' or 'never'" in output


def test_a_root_survivor_cannot_forge_the_reward_under_harbor(tmp_path, harbor):
    dataset = copy_tasks([TASKS / "survivor-forger"], tmp_path / "tasks")
    trials, done = run_harbor(harbor, dataset, tmp_path / "jobs", "survivor")
    trial = trials["survivor-forger"]
    output = (trial.trial_dir / "verifier" / "test-stdout.txt").read_text()
    # the attack ran: the oracle's root process was alive and writing /logs/verifier/reward.json throughout
    assert "forger alive: yes, wrote: wrote" in output, (trial.exception, output, done.stdout[-2000:])
    assert trial.exception is None and trial.reward == 0.0
