"""Pre-flight: everything that would make every trial of a job fail, found before the job directory exists.

`preflight(config)` checks, without starting a sandbox or loading a model:
- each agent: a known name (did-you-mean on a typo), its kwargs (valid names, did-you-mean), a model when the
  agent requires one (`Agent.model_use`: `loop` and the harnesses);
- each model: the `provider:model` string, the key its provider declares (`ProviderDefaults.api_key_env`:
  `openai:` needs OPENAI_API_KEY), a local model path that exists (`model_is_path`), and (unless
  `probe_models=False`, or the provider says not to) a model server that accepts connections;
- the sandbox backend: a known name, and for a cloud service its SDK and credentials;
- the `oracle` agent on a Python dataset: every selected task has a reference answer to give;
- the tasks: invalid task directories are listed (an error with `strict=True`), task warnings are reported.

Problems raise `PreflightError`, whose lines say what to fix; what is only worth knowing comes back as
`PreflightReport.warnings`. `dedupe_paths` drops a dataset path given twice.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from evsys.agent.registry import talks_to_model
from evsys.engine.config import AgentSpec, JobConfig
from evsys.task.loader import TaskSet

if TYPE_CHECKING:
    from evsys.task.python import PromptTask, VerifiedTask

PROBE_TIMEOUT_SEC = 2.0
DEFAULT_PORTS = {"http": 80, "https": 443}


class PreflightError(ValueError):
    """The job would fail in every trial; `problems` holds one line per thing to fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class PreflightReport:
    """What pre-flight found that does not stop the job: invalid tasks (without `strict`), task warnings;
    and the task directories it loaded (`tasksets`, by resolved dataset path), which the job plans from
    instead of parsing them again (`Job(..., tasksets=report.tasksets)`)."""

    warnings: list[str] = field(default_factory=list)
    invalid_tasks: list[str] = field(default_factory=list)
    tasksets: dict[Path, TaskSet] = field(default_factory=dict)


def dedupe_paths(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """`paths` with repeats (the same directory, however spelled) removed, in order; and the dropped ones."""
    kept: list[Path] = []
    dropped: list[Path] = []
    seen: set[Path] = set()
    for path in paths:
        key = Path(path).resolve()
        if key in seen:
            dropped.append(path)
        else:
            seen.add(key)
            kept.append(path)
    return kept, dropped


def preflight(config: JobConfig, *, probe_models: bool = True, strict: bool = False) -> PreflightReport:
    """Check `config` (see the module docstring); `PreflightError` listing every problem found."""
    problems: list[str] = []
    for agent in config.agents:
        problems += check_agent(agent)
        if agent.model is not None and talks_to_model(agent.name, agent.model):
            problems += check_model(agent.model, agent.base_url, probe=probe_models)
    problems += check_sandbox_backend(config.sandbox)
    problems += check_reference_answers(config)
    report = PreflightReport()
    _check_tasks(config, report)
    if strict and report.invalid_tasks:
        problems += [f"invalid task (--strict): {line}" for line in report.invalid_tasks]
    if problems:
        raise PreflightError(list(dict.fromkeys(problems)))
    return report


def check_agent(agent: AgentSpec) -> list[str]:
    """An unknown agent or bad kwargs (one line, with did-you-mean), or a model-driven agent with no model."""
    from evsys.agent.registry import AgentNotFoundError, agent_plugin, resolve_agent

    try:
        resolve_agent(agent.name, agent.kwargs)
    except AgentNotFoundError as exc:
        return [str(exc)]
    if agent.model is None and agent_plugin(agent.name).model_use == "required":
        return [
            f"agent '{agent.name}' needs a model: add -m provider:model (e.g. -m local, -m openai:gpt-4.1)"
        ]
    return []


def check_reference_answers(config: JobConfig) -> list[str]:
    """The `oracle` agent on a Python dataset answers with each task's reference answer: one line per
    dataset whose selected tasks lack one (a dataset that does not load is left to planning, which names
    its problems)."""
    from evsys.agent.oracle import OracleAgent
    from evsys.engine.config import selects_task
    from evsys.task.python import is_python_dataset, load_python_tasks

    if not any(agent.name == OracleAgent.name for agent in config.agents):
        return []
    problems = []
    for path in config.datasets:
        try:
            if not is_python_dataset(Path(path)):
                continue
            tasks = [t for t in load_python_tasks(path) if selects_task(config, t.id)]
        except (OSError, ValueError):
            continue
        problem = missing_references(tasks, f"the Python dataset {path}")
        problems += [f"-a oracle: {problem}"] if problem else []
    return problems


def missing_references(tasks: Sequence[VerifiedTask | PromptTask], where: str) -> str | None:
    """Why the oracle cannot answer `tasks` (some have no reference answer), or None when it can."""
    from evsys.task.python_manifest import REFERENCE_HINT

    missing = [task.id for task in tasks if task.reference_answer is None]
    if not missing:
        return None
    return (
        f"{len(missing)} of the {len(tasks)} task(s) of {where} have no reference answer (e.g. "
        f"{missing[0]!r}) for the oracle to give; {REFERENCE_HINT}"
    )


def check_model(model: str, base_url: str | None, *, probe: bool = True) -> list[str]:
    """The model string, its credentials, a local path, and (with `probe`) whether its server is up."""
    from evsys.model.registry import model_provider
    from evsys.model.spec import ModelSpec

    try:
        spec = ModelSpec.parse(model, base_url=base_url)
    except ValueError as exc:
        return [f"-m {model}: {exc}"]
    provider = model_provider(spec.provider).defaults
    if provider.api_key_env and not os.environ.get(provider.api_key_env):
        return [f"-m {model}: set {provider.api_key_env} ({spec.provider} needs a key)"]
    if provider.model_is_path and spec.model:
        return _check_local_path(model, Path(spec.model).expanduser())
    url = spec.resolved_base_url()
    if probe and url and provider.probe_server:
        return _probe(model, url)
    return []


def _check_local_path(model: str, path: Path) -> list[str]:
    if path.is_file() and path.suffix == ".gguf":
        return []
    if not path.is_dir():
        return [f"-m {model}: {path} is not a directory (nor a .gguf file)"]
    if not (path / "config.json").is_file():
        return [f"-m {model}: {path} has no config.json; is it a Hugging Face model directory?"]
    return []


def _probe(model: str, url: str) -> list[str]:
    """A TCP connection to the server of `url` (PROBE_TIMEOUT_SEC at most)."""
    parsed = urlparse(url)
    host = parsed.hostname
    if not host:
        return [f"-m {model}: base URL {url!r} has no host"]
    try:
        port = parsed.port or DEFAULT_PORTS.get(parsed.scheme, 80)
    except ValueError:
        return [f"-m {model}: base URL {url!r} has a bad port"]
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_SEC):
            return []
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return [
            f"-m {model}: the model server at {url} is not reachable ({reason}); start it, fix --base-url, "
            "or pass --no-model-probe"
        ]


def check_sandbox_backend(name: str) -> list[str]:
    """An unknown `--sandbox` name, with the available ones and a did-you-mean (from the backend registry);
    a backend that cannot start any sandbox from here (`Sandbox.checked_in_preflight`: a cloud service's SDK
    or credentials missing) with the reason its `unavailable()` gives."""
    from evsys.sandbox.base import SandboxUnsupported
    from evsys.sandbox.registry import UnknownSandboxBackend, check_backend, sandbox_class

    try:
        check_backend(name)
    except UnknownSandboxBackend as exc:
        return [f"--sandbox: {exc}"]
    try:
        backend = sandbox_class(name)
    except SandboxUnsupported as exc:
        return [f"--sandbox {name}: {exc}"]
    reason = _run_sync(backend.unavailable()) if backend.checked_in_preflight else None
    return [f"--sandbox {name}: {reason}"] if reason else []


def _run_sync(check: Coroutine[Any, Any, str | None]) -> str | None:
    """`check`'s result from this synchronous code, also when called inside a running event loop (in a thread
    of its own then: pre-flight blocks its caller either way)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(check)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, check).result()


def _check_tasks(config: JobConfig, report: PreflightReport) -> None:
    """Invalid task directories and task warnings of the selected tasks (datasets that do not load at all
    are left to planning, which names them)."""
    from evsys.engine.plan import invalid_task_lines, task_warning_lines
    from evsys.task.loader import load_tasks
    from evsys.task.python import is_python_dataset

    for path in config.datasets:
        if not Path(path).is_dir():
            continue
        try:
            if is_python_dataset(Path(path)):
                continue
            taskset = load_tasks(path)
        except (OSError, ValueError):
            continue
        report.tasksets[Path(path).resolve()] = taskset
        report.invalid_tasks += invalid_task_lines(taskset, config)
        report.warnings += task_warning_lines(taskset, config)
