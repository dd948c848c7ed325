"""Whole jobs on the cloud backends through their stand-ins: trials run, score and come back, and the
service's API key appears nowhere in the job directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.asyncio

REPO = Path(__file__).resolve().parents[3]


async def _run_job(backend: str, jobs_dir: Path, key: str) -> None:
    from standins import examples_on_standin_base

    from evsys.engine import Job, JobConfig

    config = JobConfig(
        datasets=[examples_on_standin_base(jobs_dir / "tasks", ["create-file", "multi-key-reward"])],
        sandbox=backend,
        jobs_dir=jobs_dir,
        job_name=backend,
    )
    job = Job(config)
    result = await job.run()
    outcomes = sorted((t.task_name, t.failure, t.reward) for t in result.trials)
    # the oracle solves both
    assert outcomes == [("evsys/create-file", None, 1.0), ("evsys/multi-key-reward", None, 1.0)]
    trial = next(t for t in result.trials if t.task_name == "evsys/create-file")
    assert (job.store.trial_dir(trial.trial_name) / "agent" / "oracle.txt").is_file()  # copied out
    written = [p for p in (jobs_dir / backend).rglob("*") if p.is_file()]
    assert written  # positive control: the job wrote its records
    assert not [p for p in written if key.encode() in p.read_bytes()], "the API key was written to the job"


async def test_a_job_on_daytona_scores_trials_and_keeps_the_key_out_of_the_job(daytona_standin, tmp_path):
    await _run_job("daytona", tmp_path, os.environ["DAYTONA_API_KEY"])


async def test_a_job_on_e2b_scores_trials_and_keeps_the_key_out_of_the_job(e2b_standin, tmp_path):
    await _run_job("e2b", tmp_path, os.environ["E2B_API_KEY"])


async def test_a_job_on_modal_scores_trials_and_keeps_the_token_out_of_the_job(modal_standin, tmp_path):
    await _run_job("modal", tmp_path, os.environ["MODAL_TOKEN_SECRET"])


async def test_a_job_on_modal_hands_modal_the_tasks_dockerfile_or_docker_image(modal_standin, tmp_path):
    from standins import STANDIN_IMAGE

    from evsys.engine import Job, JobConfig

    tasks = tmp_path / "tasks"
    for name, extra in (("from-dockerfile", None), ("from-registry", f'docker_image = "{STANDIN_IMAGE}"')):
        task = tasks / name
        shutil.copytree(REPO / "examples" / "tasks" / "create-file", task)
        toml = (task / "task.toml").read_text().replace('name = "evsys/create-file"', f'name = "{name}"')
        if extra:
            toml = toml.replace("[environment]", f"[environment]\n{extra}")
        (task / "task.toml").write_text(toml)
        (task / "environment").mkdir(exist_ok=True)  # create-file has one (its plain FROM)
        (task / "environment" / "Dockerfile").write_text(f"FROM {STANDIN_IMAGE}\nRUN true\n")
    before = len(modal_standin.built)
    config = JobConfig(datasets=[tasks], sandbox="modal", jobs_dir=tmp_path / "jobs", job_name="images")
    result = await Job(config).run()
    trials = {t.task_name: t for t in result.trials}
    outcomes = {name: (t.failure and t.failure.cause, t.reward) for name, t in trials.items()}
    assert outcomes == {"from-dockerfile": ("sandbox_failed", None), "from-registry": (None, 1.0)}
    failure = trials["from-dockerfile"].failure
    assert failure is not None and "builds nothing but FROM lines, not 'RUN true'" in failure.message
    assert trials["from-registry"].image is not None and trials["from-registry"].image.source == "remote"
    lines = modal_standin.built_lines(before)  # each task's image, nothing built here
    assert (lines.count(f"FROM {STANDIN_IMAGE}"), lines.count("RUN true")) == (2, 1)
