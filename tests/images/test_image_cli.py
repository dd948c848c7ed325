"""`evsys image build|ls|inspect|prune` on task directories written for the tests."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evsys.cli.main import app

pytestmark = pytest.mark.timeout(1800)
TASKS = Path(__file__).parent / "tasks"


def _task(tmp_path: Path, marker: str) -> Path:
    task = tmp_path / "tasks" / "cli-image"
    if not task.exists():
        shutil.copytree(TASKS / "debian-run", task)
        (task / "task.toml").write_text((task / "task.toml").read_text().replace("img-debian-run", "img-cli"))
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(f"FROM debian:bookworm-slim\nRUN echo {marker} > /opt/marker\n")
    return task


def test_build_then_a_cached_build_then_ls_and_inspect(image_storage, tmp_path):
    runner = CliRunner()
    task = _task(tmp_path, uuid.uuid4().hex)
    first = runner.invoke(app, ["image", "build", str(task), "--pull", "never", "--log-dir", str(tmp_path)])
    assert first.exit_code == 0, first.output
    assert "built" in first.output and "img-cli" in first.output
    assert "COMMIT" in (tmp_path / "img-cli.log").read_text()
    again = runner.invoke(app, ["image", "build", str(task), "--pull", "never"])
    assert again.exit_code == 0 and "cached" in again.output
    listing = runner.invoke(app, ["image", "ls", "--json"])
    names = [n for image in json.loads(listing.output)["images"] for n in image["names"]]
    assert any(n.startswith("localhost/evsys/img-cli:") for n in names)
    assert "docker.io/library/debian:bookworm-slim" in names
    shown = json.loads(runner.invoke(app, ["image", "inspect", str(task)]).output)
    assert shown["ref"].startswith("localhost/evsys/img-cli:") and len(shown["layers"]) == 2


def test_a_failed_build_exits_1_with_the_log_tail(image_storage, tmp_path):
    task = _task(tmp_path, "x")
    (task / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN echo no-such-luck; false\n"
    )
    result = CliRunner().invoke(app, ["image", "build", str(task), "--pull", "never"])
    assert result.exit_code == 1 and "no-such-luck" in result.output


def test_a_failed_build_names_the_users_dockerfile_line_and_the_tools_error(image_storage, tmp_path):
    task = _task(tmp_path, "x")
    (task / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\n"
        "# comments and continuations shift lines; evsys's own ARG steps shift step numbers\n"
        "RUN echo first \\\n  && echo still-first\n"
        "RUN apt-get install -y no-such-package-xyz || (seq 1 60; exit 100)\n"
    )
    result = CliRunner().invoke(app, ["image", "build", str(task), "--pull", "never"], env={"COLUMNS": "300"})
    assert result.exit_code == 1
    dockerfile = task / "environment" / "Dockerfile"
    assert f"{dockerfile}:5: RUN apt-get install -y no-such-package-xyz" in result.output
    assert "E: Unable to locate package no-such-package-xyz" in result.output  # 60 lines before the end


def test_prune_removes_superseded_builds_of_a_task(image_storage, tmp_path):
    runner = CliRunner()
    tags = []
    for marker in (uuid.uuid4().hex, uuid.uuid4().hex):
        task = _task(tmp_path, marker)
        assert runner.invoke(app, ["image", "build", str(task), "--pull", "never"]).exit_code == 0
        tags.append(json.loads(runner.invoke(app, ["image", "inspect", str(task)]).output)["ref"])
    pruned = runner.invoke(app, ["image", "prune"])
    assert pruned.exit_code == 0 and "freed" in pruned.output
    assert image_storage.find(tags[0]) is None and image_storage.find(tags[1]) is not None
    assert image_storage.find("docker.io/library/debian:bookworm-slim") is not None
