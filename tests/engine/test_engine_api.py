"""The public Python surface: lazy top-level exports, refusing to resume a different job."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta

import pytest
from engine_tasks import make_task

from evsys.engine import AgentSpec, Job, JobConfig, JobStoreError


def test_import_evsys_is_lazy_and_exports_the_engine():
    code = (
        "import sys, evsys\n"
        "assert 'evsys.engine' not in sys.modules, 'import evsys pulled in the engine'\n"
        "from evsys import Job, JobConfig, AgentSpec, TrialResult, JobResult\n"
        "assert Job.__module__ == 'evsys.engine.job'\n"
        "try:\n    evsys.NoSuchThing\nexcept AttributeError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "module 'evsys' has no attribute 'NoSuchThing'" in done.stdout


async def test_resume_with_a_different_config_is_refused(tmp_path, memory_sandbox):
    dataset = tmp_path / "ds"
    dataset.mkdir()
    make_task(dataset, "a")
    config = JobConfig(datasets=[dataset], jobs_dir=tmp_path / "jobs", job_name="j", sandbox=memory_sandbox)
    await Job(config).run()
    changed = config.model_copy(update={"n_attempts": 3})
    with pytest.raises(JobStoreError, match="differs from this job's config: cannot resume"):
        await Job(changed, resume=True).run()
    resumed = await Job.resume(config.job_dir).run()
    assert resumed.complete and resumed.n_done == 1


class FakeClientForFactory:
    """What a model_client_factory returns here: a plain object with a label and an aclose()."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


async def test_model_client_factory_feeds_agents_and_clients_are_closed(tmp_path, memory_sandbox):
    dataset = tmp_path / "ds"
    dataset.mkdir()
    make_task(dataset, "a")
    built: list[FakeClientForFactory] = []

    def factory(agent: AgentSpec) -> FakeClientForFactory:
        built.append(FakeClientForFactory(f"client-for-{agent.model}"))
        return built[-1]

    agents = [AgentSpec(name="engine_agents:ModelEchoAgent", model="vllm:qwen"), AgentSpec(name="oracle")]
    config = JobConfig(
        datasets=[dataset],
        agents=agents,
        jobs_dir=tmp_path / "jobs",
        job_name="m",
        n_attempts=2,
        sandbox=memory_sandbox,
    )
    result = await Job(config, model_client_factory=factory).run()
    echo = [t for t in result.trials if t.agent.endswith("ModelEchoAgent")]
    assert [t.agent_metadata for t in echo] == [{"client": "client-for-vllm:qwen", "model": "vllm:qwen"}] * 2
    assert len(built) == 1 and built[0].closed  # one client per agent spec, closed at the end
    assert {t.trial_name for t in echo} == {
        "a__ModelEchoAgent-vllm-qwen__1",
        "a__ModelEchoAgent-vllm-qwen__2",
    }


async def test_bad_model_string_is_refused_before_any_trial(tmp_path):
    dataset = tmp_path / "ds"
    dataset.mkdir()
    make_task(dataset, "a")
    agents = [AgentSpec(name="engine_agents:ModelEchoAgent", model="nosuchprovider:x")]
    config = JobConfig(datasets=[dataset], agents=agents, jobs_dir=tmp_path / "jobs", job_name="bad")
    with pytest.raises(ValueError, match="model 'nosuchprovider:x': unknown model provider"):
        await Job(config).run()


def test_agent_base_url_reaches_the_model_client():
    """`--base-url` (AgentSpec.base_url) points a vllm:/openai: model at the user's server."""
    from evsys.engine import AgentSpec
    from evsys.engine.job import default_model_client

    client = default_model_client(
        AgentSpec(name="loop", model="vllm:Qwen/Qwen3-8B", base_url="http://127.0.0.1:9/v1")
    )
    try:
        assert client.base_url == "http://127.0.0.1:9/v1"
    finally:
        import asyncio

        asyncio.run(client.aclose())


async def test_two_jobs_started_in_one_second_get_two_directories(tmp_path, memory_sandbox):
    make_task(tmp_path / "dataset", "a")
    common = {"datasets": [tmp_path / "dataset"], "jobs_dir": tmp_path / "jobs", "sandbox": memory_sandbox}
    now = datetime.now()
    taken = {(now + timedelta(seconds=s)).strftime("%Y-%m-%d__%H-%M-%S") for s in (0, 1)}
    for name in taken:  # jobs that started this second (and the next)
        (tmp_path / "jobs" / name).mkdir(parents=True)
    config = JobConfig(**common)
    assert config.job_name not in taken and config.job_name.rsplit("-", 1)[0] in taken
    assert config.job_name.endswith("-2")
    result = await Job(config).run()
    assert (tmp_path / "jobs" / result.job_name / "result.json").exists()
    named = JobConfig(**common, job_name=result.job_name)
    assert named.job_name == result.job_name  # a name the user gives is kept (and then refused as existing)
    with pytest.raises(JobStoreError, match="already exists"):
        await Job(named).run()
