"""The parity set: each task directory under tests/parity/tasks holds one behaviour Harbor has, and gets the
reward Harbor gives it, on every sandbox backend that can run here (the same rewards across backends)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from parity_jobs import PARITY_TASKS, run_parity_job

from evsys.records import FailureCause
from evsys.sandbox import entrypoint

# The oracle's reward on every parity task, as Harbor 0.25 scores it.
ORACLE_REWARDS = {
    "service-survives": 1.0,
    "low-port-service": 1.0,
    "healthcheck-awaited": 1.0,
    "entrypoint-service": 1.0,
    "entrypoint-late-service": 1.0,
    "compose-sidecars": 1.0,
    "separate-verifier": 1.0,
    "network-default-public": 1.0,
    "network-phase-override": 1.0,
    "tmp-visible": 1.0,
    # steps "write" (1.0) and "append" (0.5, below its min_reward: "gate" never runs); the mean of the two
    "multi-step": 0.75,
}
BACKENDS = ["local", "docker"]
# Tasks whose verifier reaches the internet. The test suite's dockerd has a network of its own without NAT
# (so sessions side by side never break each other), so on docker these run in bench/bench_harbor_parity.py
# against a daemon with a route out; the docker backend's network switching is tested in tests/sandbox/docker.
NEEDS_INTERNET = {"network-default-public", "network-phase-override"}


def expected_rewards(backend: str) -> dict[str, float]:
    """Harbor's rewards for the parity tasks this backend can run in the test suite."""
    if backend == "docker":
        return {name: r for name, r in ORACLE_REWARDS.items() if name not in NEEDS_INTERNET}
    return ORACLE_REWARDS


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_oracle_gets_harbors_reward_on_every_parity_task(tmp_path, backend):
    expected = expected_rewards(backend)
    trials = await run_parity_job(tmp_path, backend, sorted(expected))
    got = {name: trial.reward for name, trial in trials.items()}
    assert got == expected, {n: t.failure for n, t in trials.items() if t.failure}


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_a_process_the_agent_left_cannot_forge_the_reward(tmp_path, backend):
    trials = await run_parity_job(tmp_path, backend, ["forger-stays-out"], agent="parity_agents:ForgerAgent")
    trial = trials["forger-stays-out"]
    verifier_dir = tmp_path / "jobs" / f"parity-{backend}" / trial.trial_name / "verifier"
    # the attack ran: the forger was still alive while tests/test.sh ran
    assert (verifier_dir / "forger-alive.txt").read_text().strip() == "yes"
    assert trial.failure is None and trial.reward == 0.0


@pytest.mark.parametrize("backend", ["local"], indirect=True)
async def test_a_cheating_trial_scores_0_with_findings_and_an_honest_one_1_without(tmp_path, backend):
    honest = (await run_parity_job(tmp_path / "honest", backend, ["tmp-visible"]))["tmp-visible"]
    assert (honest.failure, honest.reward, honest.integrity) == (None, 1.0, [])
    trials = await run_parity_job(
        tmp_path / "cheat", backend, ["tmp-visible"], agent="parity_agents:CheaterAgent"
    )
    cheat = trials["tmp-visible"]
    assert cheat.failure is None and cheat.reward == 0.0
    seen = {(f.kind.value, f.evidence, f.source) for f in cheat.integrity}
    assert {e for _, e, _ in seen} >= {
        "/tests/test.sh",
        "/logs/verifier/reward.txt",
        "/logs/verifier/reward.json",
    }, seen
    assert {(k, s) for k, _, s in seen} == {("verifier_place_written", "verifier")}
    # the RL export carries them
    assert cheat.model_dump(mode="json")["integrity"]


@pytest.mark.parametrize("backend", ["local"], indirect=True)
async def test_a_service_the_entrypoint_left_starting_is_up_before_the_agent(tmp_path, backend, monkeypatch):
    """The entrypoint hands over while its service is still starting; the sandbox waits for it to settle."""
    with monkeypatch.context() as no_wait:  # positive control: without the settling, the agent is too early
        no_wait.setattr(entrypoint, "SETTLE_MAX_SEC", 0.0)
        early = await run_parity_job(tmp_path / "early", backend, ["entrypoint-late-service"])
    assert early["entrypoint-late-service"].reward == 0.0
    settled = await run_parity_job(tmp_path / "settled", backend, ["entrypoint-late-service"])
    assert settled["entrypoint-late-service"].reward == 1.0, settled["entrypoint-late-service"].failure


@pytest.mark.parametrize("backend", ["local"], indirect=True)
async def test_a_multi_step_trial_records_each_write_to_the_verifiers_places_once(tmp_path, backend):
    trials = await run_parity_job(tmp_path, backend, ["multi-step"], agent="parity_agents:CheaterAgent")
    evidence = [f.evidence for f in trials["multi-step"].integrity]
    assert "/tests/test.sh" in evidence and len(evidence) == len(set(evidence)), evidence


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_a_timed_out_agents_processes_are_killed_before_verification(tmp_path, backend):
    trials = await run_parity_job(
        tmp_path,
        backend,
        ["forger-stays-out"],
        agent="parity_agents:ForgerThenHangAgent",
        agent_timeout_multiplier=0.05,
    )
    trial = trials["forger-stays-out"]
    verifier_dir = tmp_path / "jobs" / f"parity-{backend}" / trial.trial_name / "verifier"
    assert trial.cause == FailureCause.AGENT_TIMEOUT
    assert (verifier_dir / "forger-alive.txt").read_text().strip() == "no"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_the_jobs_network_override_wins_over_the_tasks(tmp_path, backend):
    # on docker without a route out this would pass without the override: the positive control is local
    trials = await run_parity_job(tmp_path, backend, ["network-default-public"], network="no-network")
    trial = trials["network-default-public"]
    assert trial.failure is None and trial.reward == 0.0
    assert trial.sandbox_reused is False


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_multi_step_rewards_per_step_and_per_key(tmp_path, backend):
    trial = (await run_parity_job(tmp_path, backend, ["multi-step"]))["multi-step"]
    assert [(s.name, s.rewards) for s in trial.steps] == [
        ("write", {"reward": 1.0, "shared": 1.0}),
        ("append", {"reward": 0.5}),
    ]
    assert trial.rewards == {"reward": 0.75, "shared": 0.5}  # a key a step lacks counts 0
    assert [w for w in trial.warnings if "synthesised from package mirrors" not in w] == [
        "step 'append': reward = 0.5 is below its min_reward 0.9; the remaining steps were not run"
    ]
    step_dir = tmp_path / "jobs" / f"parity-{backend}" / trial.trial_name / "steps"
    assert (step_dir / "write" / "verifier" / "reward.json").is_file()
    assert "two" not in (step_dir / "write" / "agent" / "oracle.txt").read_text()
    assert not (step_dir / "gate").exists()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_a_healthcheck_that_never_passes_fails_the_trial_before_the_agent(tmp_path, backend):
    trial = (await run_parity_job(tmp_path, backend, ["healthcheck-never-healthy"]))[
        "healthcheck-never-healthy"
    ]
    assert trial.cause == FailureCause.HEALTHCHECK_FAILED and trial.reward is None
    assert trial.failure.message == (
        "task.toml:environment.healthcheck: 'echo not yet >&2; false' failed 2 times in a row after the "
        "start period (the last attempt exited 1: not yet)"
    )
    assert trial.timing.agent_run is None


def _compose_variant(tmp_path, healthcheck_test: str):
    """A copy of the compose-sidecars task whose kv-store healthcheck runs `healthcheck_test`."""
    dataset = tmp_path / "tasks"
    task = dataset / "compose-sidecars"
    shutil.copytree(PARITY_TASKS / "compose-sidecars", task)
    compose = task / "environment" / "docker-compose.yaml"
    text = compose.read_text()
    start = text.index("      test: ")
    end = text.index("\n", start)
    text = text[:start] + f"      test: {healthcheck_test}" + text[end:]
    compose.write_text(
        text.replace("retries: 30", "retries: 2").replace("start_period: 1s", "start_period: 0s")
    )
    return dataset


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_a_sidecar_that_never_becomes_healthy_fails_the_trial_before_the_agent(tmp_path, backend):
    dataset = _compose_variant(tmp_path, '["CMD-SHELL", "echo kv-store not ready >&2; false"]')
    trial = (await run_parity_job(tmp_path, backend, ["compose-sidecars"], datasets=[dataset]))[
        "compose-sidecars"
    ]
    assert trial.cause == FailureCause.HEALTHCHECK_FAILED and trial.reward is None
    assert "service kv-store never became healthy" in trial.failure.message
    assert "kv-store not ready" in trial.failure.message
    assert trial.timing.agent_run is None


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_sidecars_are_stopped_with_the_trial(tmp_path, backend):
    trial = (await run_parity_job(tmp_path, backend, ["compose-sidecars"]))["compose-sidecars"]
    assert trial.failure is None and trial.reward == 1.0
    assert kv_store_processes() == []  # the service served the oracle (reward 1), and is gone with the trial


def kv_store_processes() -> list[str]:
    """The compose-sidecars task's kv-store service processes on this machine (sandboxes' processes, in
    their pid namespaces, are visible from the host)."""
    done = subprocess.run(["pgrep", "-af", "/srv/kv.py 7000"], capture_output=True, text=True)
    return done.stdout.splitlines()
