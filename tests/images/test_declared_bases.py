"""Every trial runs on the base its task declares: a `FROM python:3.13-slim-bookworm` + WORKDIR task gets
bookworm's userland with Python 3.13 compiled into /usr/local (synthesised once per machine, minutes on two
cores, then cached), and only a base this host provably provides runs on the host's root filesystem."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evsys.engine import AgentSpec, Job, JobConfig
from evsys.task.hostbase import host_facts, host_mismatch

pytestmark = pytest.mark.timeout(3600)
TASKS = Path(__file__).parent / "tasks"


async def _oracle(tmp_path: Path, task_dir: Path):
    dataset = tmp_path / "dataset"
    shutil.copytree(task_dir, dataset / task_dir.name)
    config = JobConfig(datasets=[dataset], agents=[AgentSpec(name="oracle")], jobs_dir=tmp_path / "jobs")
    (trial,) = (await Job(config).run()).trials
    return trial


@pytest.mark.slow
@pytest.mark.builds_cpython  # `make test-bases` (not `make test`: its minutes of compiling, Makefile)
async def test_python_313_on_bookworm_is_bookworms_userland_with_python_313_in_usr_local(
    image_storage, tmp_path
):
    trial = await _oracle(tmp_path, TASKS / "python-313-bookworm")
    assert trial.failure is None and trial.reward == 1.0  # the verifier checks python, pip, OpenSSL 3.0
    assert not trial.ran_on_host_image and trial.image is not None
    assert trial.image.source in ("built", "cached")  # the Dockerfile (its WORKDIR) on the synthesised base
    [synthesised] = trial.image.synthesised_bases
    assert "python 3.13 built from trixie's source on debian bookworm" in synthesised
    assert "without PGO/LTO" in synthesised  # how it differs from the official image
    assert any("python:3.13-slim-bookworm" in w and "synthesised" in w for w in trial.warnings)


@pytest.mark.needs_sandbox
async def test_a_base_the_host_provides_runs_on_the_host_and_says_so(tmp_path):
    if host_mismatch("debian:bookworm-slim") is not None:
        pytest.skip(f"this host ({host_facts().describe()}) is not Debian 12")
    task = tmp_path / "src" / "on-host"
    shutil.copytree(TASKS / "python-313-bookworm", task)
    (task / "task.toml").write_text('[task]\nname = "on-host"\n')
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ncat /etc/debian_version > /app/v\n")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\n[ "$(cut -d. -f1 /app/v)" = 12 ] && echo 1 > /logs/verifier/reward.txt\n'
    )
    trial = await _oracle(tmp_path, task)
    assert trial.failure is None and trial.reward == 1.0
    assert trial.ran_on_host_image is True
    assert trial.image is not None and (trial.image.ref, trial.image.source, trial.image.key) == (
        "debian:bookworm-slim",
        "host",
        "host:debian-12",  # what stood in: the host's release, no python layer for a plain Debian base
    )


@pytest.mark.slow
async def test_the_oracle_solves_every_example_on_docker_each_on_its_declared_base(
    image_storage, docker_env, examples_dir, tmp_path
):
    config = JobConfig(
        datasets=[examples_dir / "tasks"],
        agents=[AgentSpec(name="oracle")],
        jobs_dir=tmp_path,
        sandbox="docker",
        n_concurrent=2,
    )
    trials = (await Job(config).run()).trials
    assert len(trials) >= 8
    assert {t.task_name: (t.reward, t.failure) for t in trials} == {t.task_name: (1.0, None) for t in trials}
    for trial in trials:  # every example declares a base: none ran on the daemon's default image
        assert trial.image is not None and trial.image.source != "host", trial.task_name
        assert not trial.ran_on_host_image
