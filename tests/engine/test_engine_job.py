"""Jobs end to end: rewards, bad input, timeouts, retries, callbacks, files. Through the real local sandbox
where the sandbox takes part in what is checked (isolation, killed processes, logs it writes); through the
in-memory one (`memory_sandbox`) where only the engine's own behaviour is (plans, retries, resume)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from engine_agents import COUNTER_ENV
from engine_tasks import REWARD_ONE

from evsys.engine import AgentSpec, Job, JobConfig
from evsys.records import FailureCause, TrialResult

HANG_SOLVE = "#!/bin/bash\n(sleep 300 &)\necho started > /app/out.txt\nsleep 300\n"
# Reward 1 when no `sleep` survives into verification (the agent's processes must be gone), and the agent's
# partial work is visible.
NO_SURVIVORS_TEST = (
    "#!/bin/bash\n"
    "alive=0\n"
    "for f in /proc/[0-9]*/cmdline; do\n"
    "  tr '\\0' ' ' < $f 2>/dev/null | grep -q '^sleep 300' && alive=1\n"
    "done\n"
    'if [ $alive = 0 ] && [ "$(cat /app/out.txt)" = started ]; then r=1; else r=0; fi\n'
    "echo $r > /logs/verifier/reward.txt\n"
)


def job_config(dataset: Path, **kw) -> JobConfig:
    kw.setdefault("jobs_dir", dataset.parent / "jobs")
    kw.setdefault("job_name", "test")
    kw.setdefault("n_concurrent", 4)
    return JobConfig(datasets=[dataset], **kw)


def by_task(trials: list[TrialResult]) -> dict[str, TrialResult]:
    return {t.task_name: t for t in trials}


@pytest.mark.needs_sandbox
async def test_oracle_reaches_one_on_every_example_and_nop_fails_nop_must_fail(examples_dir, tmp_path):
    config = JobConfig(
        datasets=[examples_dir / "tasks"],
        agents=[AgentSpec(name="oracle"), AgentSpec(name="nop")],
        jobs_dir=tmp_path,
        job_name="examples",
        n_concurrent=8,
    )
    result = await Job(config).run()
    oracle = [t for t in result.trials if t.agent == "oracle"]
    nop = {t.task_name: t for t in result.trials if t.agent == "nop"}
    assert len(oracle) >= 6
    assert {t.task_name: t.reward for t in oracle} == {t.task_name: 1.0 for t in oracle}
    assert all(t.failure is None and t.usage.cost_usd == 0 for t in oracle)
    assert nop["evsys/nop-must-fail"].reward == 0.0
    metrics = {m.agent: m for m in result.metrics}
    assert metrics["oracle"].mean_reward == 1.0
    assert metrics["oracle"].pass_at_k is None or metrics["oracle"].pass_at_k[1] == 1.0
    saved = json.loads((tmp_path / "examples" / "result.json").read_text())
    assert saved["complete"] is True and saved["n_done"] == len(result.trials)


async def test_attempts_plan_and_job_directory_layout(task_factory, memory_sandbox):
    for name in ("a", "b", "c"):
        task_factory(name)
    config = job_config(task_factory.dataset, n_attempts=2, n_concurrent=8, sandbox=memory_sandbox)
    calls: list[str] = []
    result = await Job(config, on_trial_done=lambda r: calls.append(r.trial_name)).run()
    assert result.n_planned == 6 and len(result.trials) == 6
    assert sorted(calls) == sorted(t.trial_name for t in result.trials)  # once per trial
    assert all(t.reward == 1.0 for t in result.trials)
    assert result.metrics[0].pass_at_k == {1: 1.0, 2: 1.0}
    job_dir = config.job_dir
    assert json.loads((job_dir / "config.json").read_text())["n_attempts"] == 2
    for trial in result.trials:
        trial_dir = job_dir / trial.trial_name
        for name in ("config.json", "result.json", "trajectory.json"):
            json.loads((trial_dir / name).read_text())
        assert (trial_dir / "verifier" / "reward.txt").read_text().strip() == "1"
        assert (trial_dir / "verifier" / "test-stdout.txt").exists()
        assert (trial_dir / "agent" / "oracle.txt").exists()
        assert (trial_dir / "artifacts").is_dir()
        trajectory = json.loads((trial_dir / "trajectory.json").read_text())
        assert [s["source"] for s in trajectory["steps"]] == ["user", "agent"]
        assert trajectory["final_metrics"]["total_prompt_tokens"] == 0


@pytest.mark.needs_sandbox
async def test_async_callback_and_parallel_attempts_do_not_share_state(task_factory):
    # Each attempt appends to a file; if sandboxes were shared, a later attempt would see earlier lines.
    task_factory(
        "append",
        solve="#!/bin/bash\necho line >> /app/log.txt\n",
        test='#!/bin/bash\n[ "$(wc -l < /app/log.txt)" = 1 ] && echo 1 > /logs/verifier/reward.txt'
        " || echo 0 > /logs/verifier/reward.txt\n",
    )
    seen: list[float] = []

    async def callback(result: TrialResult) -> None:
        seen.append(result.reward)

    result = await Job(job_config(task_factory.dataset, n_attempts=4), on_trial_done=callback).run()
    assert seen == [1.0, 1.0, 1.0, 1.0]
    assert len({t.sandbox_name for t in result.trials}) == 4


@pytest.mark.needs_sandbox
async def test_bad_input_each_fails_clearly_and_others_are_unaffected(task_factory):
    task_factory("good")
    task_factory("toml-syntax", toml="[task\nname = 'x'\n")
    task_factory("toml-type", toml='[agent]\ntimeout_sec = "soon"\n')
    task_factory("no-instruction", instruction=None)
    task_factory("no-test", test=None)
    task_factory("no-reward", test="#!/bin/bash\necho 'nothing written'\n")
    task_factory("txt-abc", test="#!/bin/bash\necho abc > /logs/verifier/reward.txt\n")
    task_factory("json-string", test="#!/bin/bash\necho '\"high\"' > /logs/verifier/reward.json\n")
    task_factory("json-nan", test="#!/bin/bash\necho '{\"reward\": NaN}' > /logs/verifier/reward.json\n")
    task_factory("hang", solve=HANG_SOLVE, test=NO_SURVIVORS_TEST, agent_timeout=1.0)
    result = await Job(job_config(task_factory.dataset, n_concurrent=8)).run()
    trials = by_task(result.trials)
    assert trials["good"].reward == 1.0 and trials["good"].failure is None

    def failure(name: str) -> tuple[FailureCause, str]:
        return trials[name].cause, trials[name].failure.message

    cause, message = failure("toml-syntax")
    assert cause == FailureCause.TASK_INVALID and "toml-syntax/task.toml" in message
    cause, message = failure("toml-type")
    assert cause == FailureCause.TASK_INVALID and "toml-type/task.toml:agent.timeout_sec" in message
    cause, message = failure("no-instruction")
    assert cause == FailureCause.TASK_INVALID and "no-instruction/instruction.md" in message
    cause, message = failure("no-test")
    assert cause == FailureCause.TASK_INVALID and "no-test/tests/test.sh" in message
    assert failure("no-reward")[0] == FailureCause.REWARD_MISSING
    assert "neither /logs/verifier/reward.json nor /logs/verifier/reward.txt" in failure("no-reward")[1]
    assert failure("txt-abc") == (FailureCause.REWARD_INVALID, "reward.txt holds 'abc', expected a number")
    assert failure("json-string")[0] == FailureCause.REWARD_INVALID
    assert "reward.json holds a JSON str" in failure("json-string")[1]
    assert failure("json-nan")[0] == FailureCause.REWARD_INVALID
    assert "reward.json key 'reward' holds nan" in failure("json-nan")[1]
    # The hanging solution: agent_timeout, its processes killed, verification still ran and kept the reward.
    hang = trials["hang"]
    assert hang.cause == FailureCause.AGENT_TIMEOUT
    assert hang.reward == 1.0
    [group] = result.metrics
    assert group.errors_by_cause["task_invalid"] == 4 and group.errors_by_cause["reward_invalid"] == 3


async def test_retries_recover_an_agent_that_fails_twice(task_factory, tmp_path, monkeypatch, memory_sandbox):
    task_factory("a")
    monkeypatch.setenv(COUNTER_ENV, str(tmp_path / "counter"))
    agent = AgentSpec(name="engine_agents:FlakyAgent", kwargs={"failures": 2})
    config = job_config(
        task_factory.dataset, agents=[agent], max_retries=2, retry_min_wait_sec=0.01, sandbox=memory_sandbox
    )
    [trial] = (await Job(config).run()).trials
    assert trial.failure is None and trial.reward == 1.0
    assert [r.cause for r in trial.retries] == [FailureCause.AGENT_ERROR, FailureCause.AGENT_ERROR]
    assert "flaky failure 2" in trial.retries[1].message
    saved = json.loads((config.job_dir / trial.trial_name / "result.json").read_text())
    assert len(saved["retries"]) == 2


async def test_agent_timeout_and_model_errors(task_factory, tmp_path, monkeypatch, memory_sandbox):
    task_factory("slow", agent_timeout=0.5)
    monkeypatch.setenv(COUNTER_ENV, str(tmp_path / "counter"))
    config = job_config(
        task_factory.dataset,
        agents=[
            AgentSpec(name="engine_agents:SleepyAgent"),
            AgentSpec(name="engine_agents:BrokenModelAgent"),
        ],
        max_retries=2,
        retry_min_wait_sec=0.01,
        sandbox=memory_sandbox,
    )
    result = await Job(config).run()
    trials = {t.agent: t for t in result.trials}
    sleepy = trials["engine_agents:SleepyAgent"]
    assert sleepy.cause == FailureCause.AGENT_TIMEOUT and sleepy.retries == []  # never retried
    assert (tmp_path / "counter").read_text() == "1"  # the sleepy agent ran exactly once
    broken = trials["engine_agents:BrokenModelAgent"]
    assert broken.cause == FailureCause.MODEL_ERROR and len(broken.retries) == 2
    assert "server unreachable" in broken.failure.message


async def test_resume_skips_finished_trials_and_reruns_the_rest(task_factory, memory_sandbox):
    for name in ("a", "b"):
        task_factory(name)
    config = job_config(task_factory.dataset, n_attempts=2, sandbox=memory_sandbox)
    first = await Job(config).run()
    names = sorted(t.trial_name for t in first.trials)
    # Simulate a crash: one result lost, one truncated, one cancelled.
    job_dir = config.job_dir
    (job_dir / names[0] / "result.json").unlink()
    (job_dir / names[1] / "result.json").write_text('{"trial_na')
    cancelled = json.loads((job_dir / names[2] / "result.json").read_text())
    cancelled["failure"] = {"cause": "cancelled", "message": "x"}
    (job_dir / names[2] / "result.json").write_text(json.dumps(cancelled))
    rerun: list[str] = []
    resumed = await Job.resume(job_dir, on_trial_done=lambda r: rerun.append(r.trial_name)).run()
    assert sorted(rerun) == names[:3]
    assert sorted(t.trial_name for t in resumed.trials) == names
    assert all(t.reward == 1.0 and t.failure is None for t in resumed.trials)
    assert resumed.complete


async def test_resume_keeps_the_jobs_start_and_wall_time_is_one_figure(task_factory, memory_sandbox):
    for name in ("a", "b"):
        task_factory(name)
    config = job_config(task_factory.dataset, sandbox=memory_sandbox)
    first = await Job(config).run()
    job_dir = config.job_dir
    saved = json.loads((job_dir / "result.json").read_text())
    started = saved["started_at"]
    # the job's wall time is its group's (the union of the trials' spans), in memory and on disk alike
    assert saved["wall_time_sec"] == saved["metrics"][0]["wall_time_sec"] == first.wall_time_sec > 0
    (job_dir / first.trials[0].trial_name / "result.json").unlink()  # as a kill leaves it
    await asyncio.sleep(0.01)  # a later clock reading than the first run's start
    resumed = await Job.resume(job_dir).run()
    saved = json.loads((job_dir / "result.json").read_text())
    assert resumed.started_at == saved["started_at"] == started
    assert saved["wall_time_sec"] == saved["metrics"][0]["wall_time_sec"] == resumed.wall_time_sec


async def test_resume_removes_temp_files_a_killed_run_left(task_factory, memory_sandbox):
    task_factory("a")
    config = job_config(task_factory.dataset, n_attempts=2, sandbox=memory_sandbox)
    first = await Job(config).run()
    job_dir = config.job_dir
    kept = sorted(t.trial_name for t in first.trials)[0]
    # what a SIGKILL between an atomic write's temp file and its rename leaves behind
    stale = [job_dir / ".result.json.k3j2.tmp", job_dir / kept / ".trajectory.json.x9q1.tmp"]
    for path in stale:
        path.write_text('{"half')
    own = job_dir / kept / "agent" / ".notes.tmp"  # the agent's own files are not the job's to touch
    own.parent.mkdir(exist_ok=True)
    own.write_text("mine")
    resumed = await Job.resume(job_dir).run()
    assert resumed.complete
    assert not any(p.exists() for p in stale)
    assert own.read_text() == "mine"


async def test_existing_job_dir_without_resume_is_refused(task_factory, memory_sandbox):
    task_factory("a")
    config = job_config(task_factory.dataset, sandbox=memory_sandbox)
    await Job(config).run()
    try:
        await Job(config).run()
    except ValueError as exc:
        assert "already exists: resume it with `evsys run --resume" in str(exc)
    else:
        raise AssertionError("a second run into the same job directory must be refused")


@pytest.mark.needs_sandbox
async def test_an_image_that_cannot_be_had_fails_the_build_and_skip_build_runs_on_the_host(task_factory):
    task_factory("img", dockerfile="FROM registry.invalid/none:1\nRUN pip install nothing\nWORKDIR /app\n")
    config = job_config(task_factory.dataset, job_name="no-skip", pull="never")
    [refused] = (await Job(config).run()).trials
    assert refused.cause == FailureCause.ENVIRONMENT_BUILD_FAILED
    assert "registry.invalid/none:1" in refused.failure.message and refused.retries == []
    [ran] = (await Job(job_config(task_factory.dataset, job_name="skip", skip_build=True)).run()).trials
    assert ran.failure is None and ran.reward == 1.0 and ran.ran_on_host_image is True
    assert ran.image is not None and (ran.image.ref, ran.image.source) == ("registry.invalid/none:1", "host")
    assert any(
        w.startswith("--skip-build: ran on the host rootfs in place of registry.invalid")
        for w in ran.warnings
    )


@pytest.mark.needs_sandbox
async def test_cancelling_job_run_records_cancelled_trials_and_stays_resumable(task_factory):
    for name in ("a", "b", "c"):
        task_factory(name, solve="#!/bin/bash\nsleep 60\n")
    config = job_config(task_factory.dataset, n_concurrent=2)
    job = Job(config)
    run = asyncio.create_task(job.run())

    def two_running() -> bool:
        names = list(job.running)
        return len(names) == 2 and all((config.job_dir / n / "config.json").exists() for n in names)

    while not two_running():  # noqa: ASYNC110 (the job exposes no event for this; polling is fine in a test)
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # let the agents get going (not a speed assertion)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    saved = {p.parent.name: json.loads(p.read_text()) for p in config.job_dir.glob("*/result.json")}
    assert len(saved) == 2 and all(r["failure"]["cause"] == "cancelled" for r in saved.values())
    job_result = json.loads((config.job_dir / "result.json").read_text())
    assert job_result["n_cancelled"] == 2 and job_result["complete"] is False


async def test_resume_keeps_errored_trials_unless_retry_errors(task_factory, memory_sandbox):
    task = task_factory("fixable", test="#!/bin/bash\necho 'forgot the reward'\n")
    config = job_config(task_factory.dataset, sandbox=memory_sandbox)
    [first] = (await Job(config).run()).trials
    assert first.cause == FailureCause.REWARD_MISSING
    (task / "tests" / "test.sh").write_text(REWARD_ONE)
    rerun: list[str] = []
    kept = await Job.resume(config.job_dir, on_trial_done=lambda r: rerun.append(r.trial_name)).run()
    assert rerun == [] and kept.trials[0].cause == FailureCause.REWARD_MISSING
    fixed = await Job.resume(config.job_dir, retry_errors=True).run()
    assert fixed.trials[0].failure is None and fixed.trials[0].reward == 1.0


async def test_setup_timeout_bounds_prepare_sandbox_and_setup_together(task_factory, memory_sandbox):
    """An agent's prepare_sandbox and setup share one setup timeout; the time of both is recorded."""
    toml = (
        '[task]\nname = "prep"\n[agent]\ntimeout_sec = 60.0\nsetup_timeout_sec = 1.0\n'
        '[verifier]\ntimeout_sec = 60.0\n[environment]\nworkdir = "/app"\nnetwork_mode = "no-network"\n'
    )
    task_factory("prep", toml=toml)
    config = job_config(
        task_factory.dataset,
        agents=[
            AgentSpec(name="engine_agents:SlowPreparingAgent", kwargs={"seconds": 0.7}),
            AgentSpec(name="engine_agents:SlowPreparingAgent", kwargs={"seconds": 0.05}),
        ],
        task_names=["prep"],
        sandbox=memory_sandbox,
    )
    trials = (await Job(config).run()).trials
    slow = next(t for t in trials if t.failure is not None)
    fast = next(t for t in trials if t.failure is None)
    assert "agent setup did not finish within 1 s" in slow.failure.message
    assert slow.timing.agent_setup >= 0.9  # both steps counted (0.7 s + the 0.3 s left)
    assert fast.reward == 1.0 and fast.timing.agent_setup >= 0.1


@pytest.mark.needs_sandbox
async def test_logs_from_the_sandbox_cannot_replace_the_trials_own_files(task_factory):
    solve = (
        "#!/bin/bash\necho ok > /app/out.txt\n"
        # beside agent/ verifier/ artifacts/, where the trial's own files would be
        "echo forged > /logs/result.json; echo forged > /logs/config.json\n"
        "mkdir -p /logs/agent/deep/er && echo kept > /logs/agent/deep/er/notes.txt\n"
        "ln -s /etc/passwd /logs/agent/host-link; ln -s ../../result.json /logs/artifacts/up-link\n"
        "echo art > /logs/artifacts/out.bin\n"
    )
    task_factory("logs", solve=solve)
    result = await Job(job_config(task_factory.dataset)).run()
    trial = result.trials[0]
    assert trial.reward == 1.0
    trial_dir = job_config(task_factory.dataset).job_dir / trial.trial_name
    assert json.loads((trial_dir / "result.json").read_text())["trial_name"] == trial.trial_name
    assert json.loads((trial_dir / "config.json").read_text())["trial_name"] == trial.trial_name
    assert (trial_dir / "agent" / "deep" / "er" / "notes.txt").read_text() == "kept\n"
    assert (trial_dir / "artifacts" / "out.bin").read_text() == "art\n"
    assert (trial_dir / "agent" / "oracle.txt").exists()
    assert not (trial_dir / "agent" / "host-link").exists()  # a link out of the trial dir is refused
    assert not (trial_dir / "artifacts" / "up-link").exists()
    assert any("host-link" in w for w in trial.warnings)


async def test_skip_build_on_a_backend_without_the_host_rootfs_refuses_rather_than_run_another_base(
    task_factory, docker_env
):
    task_factory("img", dockerfile="FROM python:3.13-slim-bookworm\nWORKDIR /app\n")
    config = job_config(task_factory.dataset, job_name="docker-skip", sandbox="docker", skip_build=True)
    [refused] = (await Job(config).run()).trials
    assert refused.cause == FailureCause.ENVIRONMENT_BUILD_FAILED and refused.reward is None
    assert "declares python:3.13-slim-bookworm" in refused.failure.message
    assert refused.sandbox_name is None and not refused.ran_on_host_image  # no sandbox ran on another base
