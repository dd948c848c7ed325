"""environment/docker-compose.yaml: the sidecars a task declares; clear errors for files evsys cannot run."""

from __future__ import annotations

import pytest

from evsys.engine.trial.sidecars import service_argv
from evsys.records import ImageConfig, ImageSpec
from evsys.task import TaskLoadError, load_task
from evsys.task.compose import duration

DOCKERFILE = "FROM python:3.11-slim-bookworm\n"
COMPOSE = """
services:
  main:
    depends_on:
      db: {condition: service_healthy}
      init: {condition: service_completed_successfully}
  db:
    build: ./db
    environment:
      - PASSWORD=${DB_PASSWORD:-s3cret}
      - EMPTY=
    command: postgres -c 'fsync=off'
    healthcheck:
      test: ["CMD-SHELL", "pg_isready -h localhost"]
      interval: 1m30s
      timeout: 500ms
      retries: 7
      start_period: 2s
    ports: ["5432:5432"]
    cap_add: [NET_ADMIN]
  init:
    image: alpine:3
    depends_on: [db]
    entrypoint: ["sh", "-c"]
    command: ["echo seeded"]
"""


def _task(make_task, compose: str, files: dict[str, str] | None = None):
    files = {
        "environment/docker-compose.yaml": compose,
        "environment/db/Dockerfile": DOCKERFILE,
        **(files or {}),
    }
    return make_task(dockerfile=DOCKERFILE, files=files)


def test_services_dependencies_and_healthchecks_are_read(make_task):
    task = load_task(_task(make_task, COMPOSE))
    project = task.environment.compose
    assert project is not None and task.environment.needs_image
    assert project.main_depends_on == {"db": "service_healthy", "init": "service_completed_successfully"}
    assert project.start_order() == ["db", "init"]  # a service after what it depends on
    db, init = project.services["db"], project.services["init"]
    assert db.build_context == (task.path / "environment" / "db").resolve()
    # `${VAR:-default}` takes the default: the orchestrator's environment never reaches a sandbox
    assert db.environment == {"PASSWORD": "s3cret", "EMPTY": ""}
    assert db.command == ["postgres", "-c", "fsync=off"]
    assert db.healthcheck is not None and db.healthcheck.command == "pg_isready -h localhost"
    assert (db.healthcheck.interval_sec, db.healthcheck.timeout_sec) == (90.0, 0.5)
    assert (db.healthcheck.retries, db.healthcheck.start_period_sec) == (7, 2.0)
    assert init.image == "alpine:3" and init.depends_on == {"db": "service_started"}
    # a key evsys does not apply is a warning naming it, never silently dropped
    assert any("services.db.cap_add" in w and "not applied" in w for w in task.warnings)


def test_the_service_command_follows_composes_rules(make_task):
    project = load_task(_task(make_task, COMPOSE)).environment.compose
    image = ImageSpec(ref="x", config=ImageConfig(entrypoint=["/entry.sh"], cmd=["serve", "--port", "80"]))
    assert service_argv(project.services["db"], image) == ["/entry.sh", "postgres", "-c", "fsync=off"]
    # a service entrypoint replaces the image's and drops its CMD
    assert service_argv(project.services["init"], image) == ["sh", "-c", "echo seeded"]
    no_command = project.services["db"].model_copy(update={"command": None})
    assert service_argv(no_command, image) == ["/entry.sh", "serve", "--port", "80"]


@pytest.mark.parametrize(
    ("compose", "field", "words"),
    [
        ("services: [a, b]\n", "services", "mapping"),
        ("services:\n  db: {environment: [A=1]}\n", "services.db", "`image` or `build`"),
        ("services:\n  db: {build: ./nowhere}\n", "services.db.build.context", "not a directory"),
        ("services:\n  db: {build: ../..}\n", "services.db.build.context", "not a directory in environment/"),
        ("services:\n  main: {depends_on: [cache]}\n", "services.main.depends_on.cache", "no service named"),
        (
            "services:\n  a: {image: x, depends_on: [b]}\n  b: {image: x, depends_on: [a]}\n",
            "services.a.depends_on",
            "cycle",
        ),
        (
            "services:\n  a: {image: x, depends_on: {b: {condition: whenever}}}\n  b: {image: x}\n",
            "services.a.depends_on.b.condition",
            "unknown condition",
        ),
        (
            "services:\n  a: {image: x, healthcheck: {test: [CMD, 'true'], interval: soon}}\n",
            "services.a.healthcheck.interval",
            "not a duration",
        ),
        ("services:\n  a: {image: x\n", None, "YAML"),
    ],
)
def test_a_compose_file_evsys_cannot_run_names_the_file_and_field(make_task, compose, field, words):
    with pytest.raises(TaskLoadError) as info:
        load_task(_task(make_task, compose))
    [problem] = info.value.errors
    assert problem.file == "environment/docker-compose.yaml"
    assert problem.field == field
    assert words in problem.message


def test_durations():
    assert duration("1h2m3s", "f") == 3723.0
    assert duration(5, "f") == 5.0
    with pytest.raises(ValueError, match="not a duration"):
        duration("5 s", "f")


def test_mains_environment_is_the_trials_over_the_dockerfiles(make_task):
    compose = 'services:\n  main:\n    environment: ["TOOL_URL=http://tool:8080", "MODE=${MODE:-t}"]\n'
    dockerfile = "FROM python:3.11-slim-bookworm\nENV MODE=image TOOL_URL=unset KEEP=1\n"
    task = load_task(make_task(dockerfile=dockerfile, files={"environment/docker-compose.yaml": compose}))
    assert task.environment.env["TOOL_URL"] == "http://tool:8080" and task.environment.env["MODE"] == "t"
    assert task.environment.env["KEEP"] == "1"
