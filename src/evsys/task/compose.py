"""`environment/docker-compose.yaml`: the sidecar services of a task directory, as Harbor reads them.

Harbor merges the task's compose file on top of its own, where the service `main` is the task's environment
(built from `environment/Dockerfile` or `docker_image`); every other service is a sidecar that `main` reaches
by the service's name. evsys reads the keys that decide what runs: `image` or `build` (`context`,
`dockerfile`), `environment` (list or mapping; `${VAR:-default}` takes the default: the orchestrator's own
environment is never passed into a sandbox), `command` and `entrypoint` (string or list), `working_dir`,
`user`, `depends_on` (list or mapping with `condition`: service_started, service_healthy,
service_completed_successfully) and `healthcheck` (`test` as CMD / CMD-SHELL / string, `interval`, `timeout`,
`retries`, `start_period`, `disable`). Port publishing (`ports`, `expose`) needs nothing: the services share a
network. For `main` only `depends_on` and `environment` are read (its image, limits and network come from
task.toml; its environment is set for every command of the trial, the verifier's too, as in the container).
Other keys are reported as ignored warnings; a malformed file is an error naming the file and the field.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

MAIN = "main"
Condition = Literal["service_started", "service_healthy", "service_completed_successfully"]
KNOWN_KEYS = {
    "image", "build", "environment", "command", "entrypoint", "working_dir", "user", "depends_on",
    "healthcheck", "ports", "expose", "container_name", "hostname", "restart", "pull_policy",
}  # fmt: skip
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_VAR = re.compile(r"\$\{(?P<name>\w+)(?::?-(?P<default>[^}]*))?\}|\$(?P<plain>\w+)")


class ComposeHealthcheck(BaseModel):
    """A service's healthcheck, in seconds (compose's defaults: 30 s interval and timeout, 3 retries)."""

    command: str
    interval_sec: float = 30.0
    timeout_sec: float = 30.0
    retries: int = 3
    start_period_sec: float = 0.0


class ComposeService(BaseModel):
    """One sidecar service (or, for `main`, only its `depends_on`)."""

    name: str
    image: str | None = None
    build_context: Path | None = Field(None, description="The build context on the host (absolute).")
    dockerfile: str = "Dockerfile"
    environment: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = None
    entrypoint: list[str] | None = None
    working_dir: str | None = None
    user: str | None = None
    depends_on: dict[str, Condition] = Field(default_factory=dict)
    healthcheck: ComposeHealthcheck | None = None


class ComposeProject(BaseModel):
    """The task's sidecars (every service but `main`) and what `main` waits for."""

    file: str
    services: dict[str, ComposeService] = Field(default_factory=dict)
    main_depends_on: dict[str, Condition] = Field(default_factory=dict)
    main_environment: dict[str, str] = Field(
        default_factory=dict, description="`main`'s `environment`: set for every command of the trial."
    )

    def start_order(self) -> list[str]:
        """The sidecars, each after the services it depends on."""
        order: list[str] = []

        def visit(name: str) -> None:
            if name not in order:
                for dependency in self.services[name].depends_on:
                    visit(dependency)
                order.append(name)

        for name in sorted(self.services):
            visit(name)
        return order


class ComposeError(ValueError):
    """A compose file evsys cannot run; `field` names the offending key."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def duration(value: object, field: str) -> float:
    """Seconds from a compose duration (`1m30s`, `500ms`, a bare number of seconds)."""
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ComposeError(field, f"{text!r} is not a duration (like 2s, 1m30s, 500ms)")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _interpolate(text: str) -> str:
    return _VAR.sub(lambda m: m.group("default") or "", text)


def _argv(value: object, field: str) -> list[str]:
    if isinstance(value, str):
        return shlex.split(_interpolate(value))
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return [_interpolate(str(v)) for v in value]
    raise ComposeError(field, "must be a string or a list of strings")


def _environment(value: object, field: str) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): "" if v is None else _interpolate(str(v)) for k, v in value.items()}
    if isinstance(value, list):
        pairs = [str(item).partition("=") for item in value]
        return {k: _interpolate(v) for k, _, v in pairs}
    raise ComposeError(field, "must be a list of NAME=value or a mapping")


def _depends_on(value: object, field: str, names: set[str]) -> dict[str, Condition]:
    if isinstance(value, list):
        value = {str(name): {} for name in value}
    if not isinstance(value, dict):
        raise ComposeError(field, "must be a list of service names or a mapping")
    result: dict[str, Condition] = {}
    for name, options in value.items():
        if name not in names:
            raise ComposeError(f"{field}.{name}", f"no service named {name!r} in the file")
        condition = (options or {}).get("condition", "service_started")
        if condition not in ("service_started", "service_healthy", "service_completed_successfully"):
            raise ComposeError(f"{field}.{name}.condition", f"unknown condition {condition!r}")
        result[str(name)] = condition
    return result


def _healthcheck(value: object, field: str) -> ComposeHealthcheck | None:
    if not isinstance(value, dict):
        raise ComposeError(field, "must be a mapping")
    if value.get("disable"):
        return None
    test = value.get("test")
    if isinstance(test, list) and test and test[0] == "NONE":
        return None
    if isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL"):
        command = shlex.join(map(str, test[1:])) if test[0] == "CMD" else " ".join(map(str, test[1:]))
    elif isinstance(test, str):
        command = test
    else:
        raise ComposeError(f"{field}.test", 'must be ["CMD", ...], ["CMD-SHELL", "..."] or a string')
    check = ComposeHealthcheck(command=command)
    for key, attr in (
        ("interval", "interval_sec"),
        ("timeout", "timeout_sec"),
        ("start_period", "start_period_sec"),
    ):
        if key in value:
            setattr(check, attr, duration(value[key], f"{field}.{key}"))
    if "retries" in value:
        check.retries = int(value["retries"])
    return check


def _service(
    name: str, raw: dict[str, Any], env_dir: Path, names: set[str], warn: Callable[[str, str], None]
) -> ComposeService:
    field = f"services.{name}"
    service = ComposeService(name=name)
    if "depends_on" in raw:
        service.depends_on = _depends_on(raw["depends_on"], f"{field}.depends_on", names - {name})
    if name == MAIN:
        if "environment" in raw:
            service.environment = _environment(raw["environment"], f"{field}.environment")
        return service
    for key in sorted(set(raw) - KNOWN_KEYS):
        warn(f"{field}.{key}", "not applied by evsys (ignored)")
    build = raw.get("build")
    if build is not None:
        spec = {"context": build} if isinstance(build, str) else build
        if not isinstance(spec, dict) or "context" not in spec:
            raise ComposeError(f"{field}.build", "must be a path or a mapping with `context`")
        context = (env_dir / str(spec["context"])).resolve()
        if not context.is_relative_to(env_dir.resolve()) or not context.is_dir():
            raise ComposeError(
                f"{field}.build.context", f"{spec['context']!r} is not a directory in environment/"
            )
        service.build_context = context
        service.dockerfile = str(spec.get("dockerfile") or "Dockerfile")
    elif isinstance(raw.get("image"), str):
        service.image = _interpolate(raw["image"])
    else:
        raise ComposeError(field, "a sidecar needs `image` or `build`")
    if "environment" in raw:
        service.environment = _environment(raw["environment"], f"{field}.environment")
    for key in ("command", "entrypoint"):
        if raw.get(key) is not None:
            setattr(service, key, _argv(raw[key], f"{field}.{key}"))
    service.working_dir = raw.get("working_dir")
    service.user = None if raw.get("user") is None else str(raw["user"])
    if "healthcheck" in raw:
        service.healthcheck = _healthcheck(raw["healthcheck"], f"{field}.healthcheck")
    return service


def parse_compose(path: Path) -> tuple[ComposeProject, list[tuple[str, str]]]:
    """Read `path` (a task's environment/docker-compose.yaml): the project and (field, message) warnings;
    ComposeError on what evsys cannot run."""
    file = f"environment/{path.name}"
    warnings: list[tuple[str, str]] = []

    def warn(field: str, message: str) -> None:
        warnings.append((field, message))

    import yaml  # only tasks with a compose file need it: a run of plain task directories never loads it

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ComposeError("", f"cannot be read as YAML: {exc}") from None
    services = (data or {}).get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not all(isinstance(s, dict) for s in services.values()):
        raise ComposeError("services", "must be a mapping of service names to mappings")
    names = set(map(str, services))
    project = ComposeProject(file=file)
    for name, raw in services.items():
        service = _service(str(name), raw, path.parent, names, warn)
        if service.name == MAIN:
            project.main_depends_on = service.depends_on
            project.main_environment = service.environment
        else:
            project.services[service.name] = service
    _check_cycles(project)
    return project, warnings


def _check_cycles(project: ComposeProject) -> None:
    state: dict[str, str] = {}

    def visit(name: str) -> None:
        if state.get(name) == "open":
            raise ComposeError(f"services.{name}.depends_on", "services depend on each other in a cycle")
        if state.get(name) != "done":
            state[name] = "open"
            for dependency in project.services.get(name, ComposeService(name=name)).depends_on:
                if dependency == MAIN:
                    raise ComposeError(f"services.{name}.depends_on", "a sidecar cannot wait for `main`")
                visit(dependency)
            state[name] = "done"

    for name in project.services:
        visit(name)
