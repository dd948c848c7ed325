"""Planning: attempts x tasks x agents, unique deterministic names, invalid and image tasks as failures."""

from __future__ import annotations

import pytest

from evsys.engine import AgentSpec, JobConfig, PlanError, plan_trials
from evsys.records import FailureCause


def config(dataset, **kw) -> JobConfig:
    return JobConfig(datasets=[dataset], jobs_dir=dataset.parent / "jobs", job_name="j", **kw)


def test_plan_is_attempts_times_tasks_times_agents(task_factory):
    for name in ("a", "b", "c"):
        task_factory(name)
    cfg = config(task_factory.dataset, n_attempts=2, agents=[AgentSpec(name="oracle"), AgentSpec(name="nop")])
    plan = plan_trials(cfg)
    names = [p.config.trial_name for p in plan]
    assert len(plan) == 2 * 3 * 2
    assert len(set(names)) == len(names)
    assert "a__oracle__1" in names and "c__nop__2" in names
    assert names == [p.config.trial_name for p in plan_trials(cfg)]  # deterministic
    assert all(p.failure is None for p in plan)


def test_timeouts_apply_multipliers(task_factory):
    task_factory("a", agent_timeout=10.0)
    [planned] = plan_trials(
        config(task_factory.dataset, agent_timeout_multiplier=2.5, verifier_timeout_multiplier=0.5)
    )
    assert planned.config.agent_timeout_sec == 25.0
    assert planned.config.verifier_timeout_sec == 30.0
    assert planned.config.setup_timeout_sec == 360.0
    assert planned.config.build_timeout_sec == 600.0


def test_step_timeouts_are_scaled_once_when_planned(task_factory):
    toml = (
        '[task]\nname = "s"\n[agent]\ntimeout_sec = 10.0\n[verifier]\ntimeout_sec = 20.0\n'
        '[[steps]]\nname = "own"\n[steps.agent]\ntimeout_sec = 4.0\n[steps.verifier]\ntimeout_sec = 6.0\n'
        '[[steps]]\nname = "inherits"\n'
    )
    path = task_factory("s", toml=toml)
    for name in ("own", "inherits"):
        (path / "steps" / name).mkdir(parents=True)
        (path / "steps" / name / "instruction.md").write_text(f"{name}\n")
    cfg = config(task_factory.dataset, agent_timeout_multiplier=2.0, verifier_timeout_multiplier=3.0)
    [planned] = plan_trials(cfg)
    steps = planned.config.step_timeouts
    assert (steps["own"].agent_timeout_sec, steps["own"].verifier_timeout_sec) == (8.0, 18.0)
    assert (steps["inherits"].agent_timeout_sec, steps["inherits"].verifier_timeout_sec) == (20.0, 60.0)


def test_same_agent_twice_gets_distinct_names(task_factory):
    task_factory("a")
    cfg = config(task_factory.dataset, agents=[AgentSpec(name="nop"), AgentSpec(name="nop", kwargs={"x": 1})])
    assert [p.config.trial_name for p in plan_trials(cfg)] == ["a__nop__1", "a__nop-2__1"]


def test_invalid_task_becomes_task_invalid_trial_naming_file_and_field(task_factory):
    task_factory("good")
    task_factory("bad-type", toml='[task]\nname = "bad-type"\n[agent]\ntimeout_sec = "soon"\n')
    task_factory("no-instruction", instruction=None)
    plan = {p.config.task_name: p for p in plan_trials(config(task_factory.dataset))}
    assert plan["good"].failure is None
    bad = plan["bad-type"].failure
    assert bad.cause == FailureCause.TASK_INVALID
    assert "bad-type/task.toml:agent.timeout_sec" in bad.message
    missing = plan["no-instruction"].failure
    assert missing.cause == FailureCause.TASK_INVALID and "no-instruction/instruction.md" in missing.message


def test_a_dockerfile_needing_an_image_and_compose_sidecars_are_planned(task_factory):
    task_factory("img", dockerfile="FROM python:3.11\nRUN pip install numpy\nWORKDIR /app\n")
    compose = task_factory("compose")
    (compose / "environment").mkdir()
    (compose / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    plan = {p.config.task_name: p for p in plan_trials(config(task_factory.dataset))}
    assert plan["img"].failure is None  # its image is built when the trial runs
    assert plan["compose"].failure is None  # its sidecars start with the trial
    skipped = plan_trials(config(task_factory.dataset, skip_build=True))
    assert [p.failure for p in skipped] == [None, None]


def test_task_filter_and_no_match(task_factory):
    task_factory("alpha")
    task_factory("beta")
    assert [p.config.task_name for p in plan_trials(config(task_factory.dataset, task_names=["b*"]))] == [
        "beta"
    ]
    with pytest.raises(PlanError, match="no tasks matching zzz"):
        plan_trials(config(task_factory.dataset, task_names=["zzz"]))


def test_exclude_task_patterns_leave_tasks_out(task_factory):
    for name in ("alpha", "beta", "bravo", "gamma"):
        task_factory(name)
    names = lambda **kw: [p.config.task_name for p in plan_trials(config(task_factory.dataset, **kw))]  # noqa: E731
    assert names(exclude_task_names=["b*"]) == ["alpha", "gamma"]
    assert names(task_names=["b*", "g*"], exclude_task_names=["bravo"]) == ["beta", "gamma"]
    with pytest.raises(PlanError, match=r"no tasks matching b\* \(excluding b\*\)"):
        plan_trials(config(task_factory.dataset, task_names=["b*"], exclude_task_names=["b*"]))


def org_task(task_factory, directory: str, name: str) -> None:
    task_factory(directory, toml=f'[task]\nname = "{name}"\n[agent]\ntimeout_sec = 60.0\n')


def test_a_task_named_org_slash_name_is_selected_by_its_short_name_too(task_factory):
    org_task(task_factory, "create-file", "evsys/create-file")
    org_task(task_factory, "other", "evsys/other")
    names = lambda **kw: [p.config.task_name for p in plan_trials(config(task_factory.dataset, **kw))]  # noqa: E731
    assert names(task_names=["evsys/create-file"]) == ["evsys/create-file"]
    assert names(task_names=["create-file"]) == ["evsys/create-file"]  # what `--task create-file` gives
    assert names(task_names=["create-*"]) == ["evsys/create-file"]
    assert names(exclude_task_names=["create-file"]) == ["evsys/other"]
    with pytest.raises(PlanError, match="no tasks matching vsys/create-file"):
        names(task_names=["vsys/create-file"])  # a pattern with '/' is matched against the full name only


def test_trials_are_named_after_the_short_name_unless_two_orgs_share_it(task_factory):
    org_task(task_factory, "create-file", "evsys/create-file")
    org_task(task_factory, "a-copy", "acme/copy")
    org_task(task_factory, "b-copy", "zeta/copy")
    trials = {p.config.task_name: p.config.trial_name for p in plan_trials(config(task_factory.dataset))}
    assert trials == {
        "evsys/create-file": "create-file__oracle__1",  # as Harbor names its trials
        "acme/copy": "acme-copy__oracle__1",
        "zeta/copy": "zeta-copy__oracle__1",
    }


def test_n_tasks_samples_the_same_tasks_every_time_and_all_attempts_of_them(task_factory):
    for i in range(10):
        task_factory(f"t{i}")
    dataset = task_factory.dataset
    first = plan_trials(config(dataset, n_tasks=3, n_attempts=2))
    again = plan_trials(config(dataset, n_tasks=3, n_attempts=2))
    picked = sorted({p.config.task_name for p in first})
    assert len(picked) == 3 and len(first) == 6  # every attempt of the sampled tasks
    assert [p.config.trial_name for p in first] == [p.config.trial_name for p in again]
    other = {p.config.task_name for p in plan_trials(config(dataset, n_tasks=3, task_sample_seed=7))}
    assert other != set(picked)  # another seed, another sample (fixed seeds: deterministic)
    assert len(plan_trials(config(dataset, n_tasks=50))) == 10  # more than there are: every task


def test_a_job_plans_the_tasks_pre_flight_loaded_without_parsing_them_again(task_factory):
    """Pre-flight hands the task directories it parsed to the plan: a task added after the check is not
    planned (it was never checked), and every planned task is the very object pre-flight loaded."""
    from evsys.engine.preflight import preflight

    task_factory("a")
    cfg = config(task_factory.dataset)
    report = preflight(cfg, probe_models=False)
    task_factory("added-after-the-check")
    assert len(plan_trials(cfg)) == 2  # positive control: planning on its own parses the directory anew
    plan = plan_trials(cfg, tasksets=report.tasksets)
    [loaded] = report.tasksets[task_factory.dataset.resolve()].tasks
    assert [p.config.task_name for p in plan] == ["a"] and plan[0].task is loaded


def test_an_agent_on_the_local_engine_gets_a_longer_agent_timeout(task_factory):
    """The local engine's provider scales the task's agent timeout (x4), on top of the job's multiplier."""
    task_factory("a", agent_timeout=60.0)
    agents = [AgentSpec(name="loop", model="local"), AgentSpec(name="loop", model="openai:gpt-4.1")]
    plan = plan_trials(config(task_factory.dataset, agents=agents, agent_timeout_multiplier=0.5))
    assert [p.config.agent_timeout_sec for p in plan] == [120.0, 30.0]
