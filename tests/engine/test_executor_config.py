"""The executor is part of the job's config: saved in config.json, validated once, and what a resume runs on
unless the user names another one (`evsys run --resume` and `Job.resume`)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import ClassVar

import pytest
from engine_tasks import make_task
from pydantic import BaseModel, ConfigDict, ValidationError
from typer.testing import CliRunner

from evsys.cli.main import app
from evsys.engine import AgentSpec, ExecutorSpec, Job, JobConfig
from evsys.engine.executors import LocalExecutor, register_executor
from evsys.engine.executors.base import EXECUTORS
from evsys.engine.spec import PlannedTrial
from evsys.records import TrialResult


class LabelOptions(BaseModel):
    """A test executor's settings: a label it records with each trial; `interrupt` sends the process SIGINT
    (what Ctrl-C does) once a trial started."""

    model_config = ConfigDict(extra="forbid")

    label: str = "unset"
    interrupt: bool = False


class LabellingExecutor(LocalExecutor):
    """The local executor, remembering which trials it ran under which label."""

    name = "labelling"
    options_model = LabelOptions
    ran: ClassVar[list[tuple[str, str]]] = []

    async def execute(self, planned: PlannedTrial) -> TrialResult:
        options = self.ctx.options
        assert isinstance(options, LabelOptions)
        LabellingExecutor.ran.append((planned.config.trial_name, options.label))
        if options.interrupt:
            os.kill(os.getpid(), signal.SIGINT)
        return await super().execute(planned)


@pytest.fixture(autouse=True)
def labelling_executor():
    register_executor("labelling", LabellingExecutor)
    LabellingExecutor.ran.clear()
    yield
    EXECUTORS.unregister("labelling")


def _config(tmp_path: Path, **kw) -> JobConfig:
    dataset = tmp_path / "tasks"
    for name in ("a", "b"):
        if not (dataset / name).exists():
            make_task(dataset, name)
    return JobConfig(
        datasets=[dataset], agents=[AgentSpec(name="oracle")], jobs_dir=tmp_path / "jobs", job_name="j", **kw
    )


async def _finished_job_missing_one_trial(tmp_path: Path, **kw) -> Path:
    """A job that ran both trials; trial `b`'s result is removed, so a resume has it to run again."""
    job = Job(_config(tmp_path, **kw))
    result = await job.run()
    assert result.n_done == 2 and result.mean_reward == 1.0
    (job.job_dir / "b__oracle__1" / "result.json").unlink()
    LabellingExecutor.ran.clear()
    return job.job_dir


def test_the_executor_and_its_options_survive_config_json(tmp_path: Path):
    config = _config(tmp_path, executor={"name": "ray", "options": {"address": "auto", "mode": "actors"}})
    loaded = JobConfig.model_validate_json(config.model_dump_json())
    assert loaded.executor.name == "ray"
    assert loaded.executor.options.model_dump()["address"] == "auto"  # typed as RayOptions again
    assert type(loaded.executor.options).__name__ == "RayOptions"
    assert loaded.executor.options.model_dump() == config.executor.options.model_dump()


def test_invalid_executor_options_are_refused_when_the_config_is_made(tmp_path: Path):
    with pytest.raises(ValidationError, match="mode"):
        _config(tmp_path, executor={"name": "ray", "options": {"mode": "swarm"}})
    with pytest.raises(ValidationError, match="address"):
        _config(tmp_path, executor={"name": "local", "options": {"address": "auto"}})
    with pytest.raises(ValidationError, match=r"unknown executor 'nope'; available: .*local"):
        _config(tmp_path, executor={"name": "nope"})


async def test_a_resumed_job_runs_on_the_recorded_executor_with_its_options(
    tmp_path: Path, memory_sandbox: str
):
    executor = {"name": "labelling", "options": {"label": "first run"}}
    job_dir = await _finished_job_missing_one_trial(tmp_path, executor=executor, sandbox=memory_sandbox)
    saved = json.loads((job_dir / "config.json").read_text())["executor"]
    assert saved == {"name": "labelling", "options": {"label": "first run", "interrupt": False}}
    result = await Job.resume(job_dir).run()
    assert result.n_done == 2 and result.complete
    assert LabellingExecutor.ran == [("b__oracle__1", "first run")]


async def test_a_resume_may_name_another_executor(tmp_path: Path, memory_sandbox: str):
    job_dir = await _finished_job_missing_one_trial(
        tmp_path, executor={"name": "labelling"}, sandbox=memory_sandbox
    )
    job = Job.resume(job_dir, changes={"executor": ExecutorSpec(name="local")})
    result = await job.run()
    assert result.complete and LabellingExecutor.ran == []  # it ran locally
    assert json.loads((job_dir / "config.json").read_text())["executor"]["name"] == "local"


async def test_a_config_json_from_before_the_executor_was_recorded_resumes_locally(
    tmp_path: Path, memory_sandbox: str
):
    job_dir = await _finished_job_missing_one_trial(
        tmp_path, executor={"name": "labelling"}, sandbox=memory_sandbox
    )
    saved = json.loads((job_dir / "config.json").read_text())
    del saved["executor"]
    (job_dir / "config.json").write_text(json.dumps(saved))
    job = Job.resume(job_dir)
    assert job.config.executor.name == "local"
    result = await job.run()
    assert result.complete and LabellingExecutor.ran == []


def _evsys(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["run", *args, "--no-model-probe"])
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes is not None else "")


@pytest.mark.needs_sandbox
def test_evsys_run_resume_keeps_the_recorded_executor_and_its_options(tmp_path: Path):
    import asyncio

    executor = {"name": "labelling", "options": {"label": "recorded"}}
    job_dir = asyncio.run(_finished_job_missing_one_trial(tmp_path, executor=executor))
    code, output = _evsys("--resume", str(job_dir))
    assert code == 0, output
    assert LabellingExecutor.ran == [("b__oracle__1", "recorded")]


@pytest.mark.needs_sandbox
def test_evsys_run_resume_with_another_executor_named_runs_there(tmp_path: Path):
    import asyncio

    job_dir = asyncio.run(_finished_job_missing_one_trial(tmp_path, executor={"name": "labelling"}))
    code, output = _evsys("--resume", str(job_dir), "--executor", "local")
    assert code == 0, output
    assert LabellingExecutor.ran == []
    assert json.loads((job_dir / "config.json").read_text())["executor"]["name"] == "local"


@pytest.mark.needs_sandbox
def test_the_resume_hint_of_a_cancelled_job_names_its_executor(tmp_path: Path):
    import asyncio

    executor = {"name": "labelling", "options": {"label": "x"}}
    job_dir = asyncio.run(_finished_job_missing_one_trial(tmp_path, executor=executor))
    saved = json.loads((job_dir / "config.json").read_text())
    saved["executor"]["options"]["interrupt"] = True  # the resumed trial presses Ctrl-C
    (job_dir / "config.json").write_text(json.dumps(saved))
    code, output = _evsys("--resume", str(job_dir))
    assert code == 130, output  # cancelled by the SIGINT the executor sent
    assert LabellingExecutor.ran == [("b__oracle__1", "x")]  # positive control: it ran on the recorded one
    assert f"evsys run --resume {job_dir} --executor labelling" in " ".join(output.split())


def test_a_setting_the_executor_does_not_take_is_refused_naming_the_flag(tmp_path: Path):
    config = _config(tmp_path)
    code, output = _evsys(
        str(config.datasets[0]), "--jobs-dir", str(tmp_path / "jobs"), "--ray-address", "auto"
    )
    assert code == 2
    assert "--ray-address needs --executor ray (executor 'local' takes no address)" in output
    assert not (tmp_path / "jobs").exists()
