"""Failures an agent causes are its own (issue 38): an agent that answers wrong and then exhausts its own
sandbox (every pid held by a survivor, /tmp and /dev/shm filled up to the memory limit, the sandbox
OOM-killed by a dd during its phase) scores 0 as `agent_exhausted_resources` in one attempt, with the
kernel's counters as evidence, and its siblings in the group keep their rewards.

The positive control runs the same group as evsys did before (one flat cgroup per sandbox, its counters
unread): each attack then ends as an error (verifier_error, sandbox_failed), and the OOM-killed one is
retried. With the nested cgroups alone (cgsetup.py) the daemon, bubblewrap and the verifier keep their
headroom: each attack's wrong answer is verified as 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_tasks import CHECK_OUT, make_task

from evsys.engine import AgentSpec, Job, JobConfig
from evsys.records import FailureCause, TrajectoryGroup, TrialResult
from evsys.records.integrity import IntegrityKind
from evsys.sandbox import LocalSandbox
from evsys.sandbox.local import cgsetup
from evsys.sandbox.local.cgroups import parse_counter
from evsys.sandbox.local.exhaustion import counter_evidence
from evsys.trajectory.groups import finalize_group, rollout_from_trial

TOML = (
    '[task]\nname = "t"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60.0\n'
    '[environment]\nworkdir = "/app"\nnetwork_mode = "no-network"\nmemory_mb = 256\n'
)
MODES = ("right", "wrong", "pids", "tmpfs", "dd")
ERRORS_BEFORE = {FailureCause.VERIFIER_ERROR, FailureCause.SANDBOX_FAILED, FailureCause.REWARD_MISSING}


async def _group(tmp_path: Path, name: str, modes: tuple[str, ...] = MODES) -> dict[str, TrialResult]:
    dataset = tmp_path / name
    make_task(dataset, "t", test=CHECK_OUT, toml=TOML)
    agents = [AgentSpec(name=f"exhaustion_agents:{m.capitalize()}Agent") for m in modes]
    config = JobConfig(
        datasets=[dataset], agents=agents, jobs_dir=tmp_path / "jobs", job_name=name,
        max_retries=2, retry_min_wait_sec=0.01, n_concurrent=len(modes),
    )  # fmt: skip
    trials = (await Job(config).run()).trials
    return {t.agent.removeprefix("exhaustion_agents:").removesuffix("Agent").lower(): t for t in trials}


@pytest.mark.needs_sandbox
async def test_an_agent_exhausting_its_sandbox_scores_zero_once_and_spares_its_siblings(
    tmp_path, monkeypatch
):
    with monkeypatch.context() as before:  # positive control: one flat cgroup, the counters unread (before)
        before.setattr(cgsetup, "NESTED", ())
        before.setattr(LocalSandbox, "exhausted_limits", _no_evidence)
        control = await _group(tmp_path, "control")
    for mode in ("pids", "tmpfs", "dd"):
        assert control[mode].cause in ERRORS_BEFORE, (mode, control[mode].failure)
    # the OOM killer takes bubblewrap or the daemon, during the agent phase (retried) or at the verifier
    dd = control["dd"]
    assert dd.cause != FailureCause.SANDBOX_FAILED or len(dd.retries) == 2, dd.failure

    with (
        monkeypatch.context() as headroom_only
    ):  # the nested cgroups alone: the machinery survives each attack
        headroom_only.setattr(LocalSandbox, "exhausted_limits", _no_evidence)
        spared = await _group(tmp_path, "headroom")
    for mode in ("pids", "tmpfs", "dd"):
        assert (spared[mode].reward, spared[mode].failure) == (0.0, None), mode  # verified: the wrong answer

    trials = await _group(tmp_path, "judged")
    assert (trials["right"].reward, trials["right"].failure) == (1.0, None)
    assert (trials["wrong"].reward, trials["wrong"].failure) == (0.0, None)
    expected = {"pids": "pids: ", "tmpfs": "memory: ", "dd": "memory: "}
    for mode, counter in expected.items():
        trial = trials[mode]
        assert trial.reward == 0.0 and trial.cause == FailureCause.AGENT_EXHAUSTED_RESOURCES, trial.failure
        assert trial.retries == []  # one attempt, never re-rolled
        assert counter in trial.failure.message
        [finding] = [f for f in trial.integrity if f.kind == IntegrityKind.AGENT_EXHAUSTED_RESOURCES]
        assert finding.source == "sandbox" and counter in finding.evidence
    group = finalize_group(
        TrajectoryGroup(
            group_id="t", task_id="t", trajectories=[rollout_from_trial(trials[m], None, "t") for m in MODES]
        )
    )
    rewards = dict(zip(MODES, group.rewards, strict=True))
    assert rewards == {"right": 1.0, "wrong": 0.0, "pids": 0.0, "tmpfs": 0.0, "dd": 0.0}
    assert group.errors_by_cause == {"agent_exhausted_resources": 3}
    advantages = dict(zip(MODES, group.advantages, strict=True))  # in the baseline, each one a wrong answer
    assert advantages["right"] > 0 and advantages["right"] == pytest.approx(0.8)
    for mode in ("pids", "tmpfs", "dd"):
        assert advantages[mode] == pytest.approx(advantages["wrong"]) == pytest.approx(-0.2), mode


@pytest.mark.needs_sandbox
async def test_a_failure_of_evsys_itself_stays_retryable(tmp_path):
    [crash] = (await _group(tmp_path, "crash", ("crash",))).values()
    assert crash.cause == FailureCause.SANDBOX_FAILED and len(crash.retries) == 2  # no limit hit: retried
    assert crash.integrity == []


async def _no_evidence(self) -> list[str]:
    return []


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n", "oom_kill", 1),  # v2 memory.events
        ("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n", "oom", 2),
        ("max 7\n", "max", 7),  # pids.events
        ("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill", 3),  # v1 memory.oom_control
        ("134217728\n", "", 134217728),  # v1 memory.max_usage_in_bytes
        ("", "max", 0),
    ],
)
def test_cgroup_counter_files_parse_on_v1_and_v2(text, key, value):
    assert parse_counter(text, key) == value


def test_an_oom_kill_below_the_limit_is_the_hosts_not_the_agents():
    where = {"memory": "/cg/memory", "pids": "/cg/pids"}
    host_oom = counter_evidence({"memory": 0, "memory_limit": 0}, {"memory": 1, "memory_limit": 0}, where)
    assert host_oom == []
    [own] = counter_evidence({"memory": 0, "memory_limit": 0}, {"memory": 1, "memory_limit": 1}, where)
    assert own.startswith("memory: 1 OOM kill") and "/cg/memory" in own
    [pids] = counter_evidence({"pids": 4}, {"pids": 9}, where)
    assert pids.startswith("pids: 5 fork(s) refused") and "4 -> 9" in pids
