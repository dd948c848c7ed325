"""Jobs on E2B and Daytona with tasks that bring their own image: the task's Dockerfile or `docker_image` is
handed to the service (through the stand-ins), which builds it; evsys builds and pulls nothing itself, and
the trial records the image's source as `remote`. The tasks' oracles only pass on the image the Dockerfile
describes (its RUN and, on E2B, COPY steps made the file they copy). An image evsys built here is refused by
every cloud backend, in the same words naming the service."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
from standins import STANDIN_IMAGE

from evsys.engine.trial.images import BUILD_LOG
from evsys.records import ImageSpec, SandboxSpec
from evsys.sandbox.base import SandboxUnsupported
from evsys.sandbox.daytona.sandbox import DaytonaSandbox
from evsys.sandbox.e2b.sandbox import E2BSandbox
from evsys.sandbox.modal.sandbox import ModalSandbox
from evsys.sandbox.remote.sandbox import RemoteSandbox

pytestmark = pytest.mark.asyncio
CLOUD_BACKENDS = [(DaytonaSandbox, "Daytona"), (E2BSandbox, "E2B"), (ModalSandbox, "Modal")]

REPO = Path(__file__).resolve().parents[3]
GREETING = "Hello from evsys!\n"


def make_task(tasks: Path, name: str, dockerfile: str, docker_image: str | None = None) -> Path:
    """create-file as `name`, on `dockerfile` (or `docker_image`), its oracle copying the greeting the image
    left in /opt/seed/ran.txt."""
    task = tasks / name
    shutil.copytree(REPO / "examples" / "tasks" / "create-file", task)
    toml = (task / "task.toml").read_text().replace('name = "evsys/create-file"', f'name = "{name}"')
    if docker_image:
        toml = toml.replace("[environment]", f'[environment]\ndocker_image = "{docker_image}"')
    (task / "task.toml").write_text(toml)
    (task / "environment").mkdir(exist_ok=True)  # create-file has one (its plain FROM)
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "environment" / "seed.txt").write_text(GREETING)
    solve = "#!/bin/bash\nset -euo pipefail\ncat /opt/seed/ran.txt > /app/greeting.txt\n"
    (task / "solution" / "solve.sh").write_text(solve)
    return task


async def run_image_job(backend: str, tmp_path: Path, dockerfile: str) -> dict[str, Any]:
    """A job on `backend` with a task on `dockerfile` and one whose `docker_image` (the stand-in's plain
    image) overrides its Dockerfile; its trials by task, after checking nothing was built here."""
    from evsys.engine import Job, JobConfig

    tasks = tmp_path / "tasks"
    make_task(tasks, "from-dockerfile", dockerfile)
    make_task(tasks, "from-registry", "FROM scratch\nRUN exit 1\n", docker_image=STANDIN_IMAGE)
    config = JobConfig(datasets=[tasks], sandbox=backend, jobs_dir=tmp_path / "jobs", job_name="images")
    job = Job(config)
    result = await job.run()
    trials = {t.task_name: t for t in result.trials}
    for trial in trials.values():
        assert trial.image is not None and trial.image.source == "remote"
        assert not (job.store.trial_dir(trial.trial_name) / BUILD_LOG).exists()  # nothing built here
    return trials


def dockerfile(*lines: str) -> str:
    """A Dockerfile on the stand-in's image making /opt/seed/ran.txt with `lines`, after `ENV`, `WORKDIR`."""
    return "\n".join([f"FROM {STANDIN_IMAGE}", "ENV SEED_DIR=/opt/seed", "WORKDIR /app", *lines, ""])


async def test_a_job_on_e2b_builds_each_tasks_image_on_the_service(e2b_standin, tmp_path):
    steps = ("COPY seed.txt /opt/seed/", 'RUN cp "$SEED_DIR/seed.txt" "$SEED_DIR/ran.txt"')
    trials = await run_image_job("e2b", tmp_path, dockerfile(*steps))
    outcomes = {name: (t.failure, t.reward) for name, t in trials.items()}
    # The registry image has no /opt/seed/ran.txt: the oracle fails there (reward 0) and passes on the build.
    assert outcomes == {"from-dockerfile": (None, 1.0), "from-registry": (None, 0.0)}
    built = [b["steps"] for b in e2b_standin.builds.values() if "steps" in b]
    from_dockerfile = [s for s in built if any(step["type"] == "COPY" for step in s.get("steps", []))]
    assert len(from_dockerfile) == 1 and from_dockerfile[0]["fromImage"] == STANDIN_IMAGE
    kinds = [(step["type"], step["args"][0]) for step in from_dockerfile[0]["steps"]]
    assert ("COPY", "seed.txt") in kinds and ("RUN", 'cp "$SEED_DIR/seed.txt" "$SEED_DIR/ran.txt"') in kinds
    uploaded = [tarfile.open(fileobj=io.BytesIO(data)) for data in e2b_standin.uploads.values()]
    seeds = [archive.extractfile("seed.txt") for archive in uploaded if "seed.txt" in archive.getnames()]
    assert [seed.read() for seed in seeds if seed is not None] == [GREETING.encode()]  # the context, uploaded
    assert any(s == {"fromImage": STANDIN_IMAGE, "force": False, "steps": []} for s in built)  # docker_image


async def test_a_job_on_daytona_builds_each_tasks_image_on_the_service(daytona_standin, tmp_path):
    run = 'RUN mkdir -p "$SEED_DIR" && printf "Hello from evsys!\\n" > "$SEED_DIR/ran.txt"'
    before = len(daytona_standin.created)
    trials = await run_image_job("daytona", tmp_path, dockerfile(run))
    outcomes = {name: (t.failure, t.reward) for name, t in trials.items()}
    assert outcomes == {"from-dockerfile": (None, 1.0), "from-registry": (None, 0.0)}
    received = [body["buildInfo"]["dockerfileContent"] for body in daytona_standin.created[before:]]
    assert sorted(received) == sorted([dockerfile(run), f"FROM {STANDIN_IMAGE}\n"])


@pytest.mark.parametrize(("backend", "service"), CLOUD_BACKENDS, ids=[name for _, name in CLOUD_BACKENDS])
async def test_an_image_built_here_is_refused_naming_the_service(backend: type[RemoteSandbox], service: str):
    built_here = ImageSpec(ref="sha256-local", source="containers-storage:[/var/lib/evsys]sha256-local")
    with pytest.raises(SandboxUnsupported) as refused:
        backend(SandboxSpec(name="refused", image=built_here))
    assert str(refused.value) == (
        "sandbox refused: image 'sha256-local' was built locally; "
        f"push it to a registry {service} can pull from"
    )
    # What the service builds or pulls itself is accepted: a task's Dockerfile, a registry image.
    backend(SandboxSpec(name="dockerfile", image=ImageSpec(ref="task", dockerfile=Path("/t/Dockerfile"))))
    backend(SandboxSpec(name="registry", image=ImageSpec(ref="python:3.13-slim")))
