"""Check a dataset or task directory and list every problem, for `evsys tasks check`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from evsys.task.config import UNKNOWN_KEY_PREFIXES
from evsys.task.harbor_task import harbor_problems
from evsys.task.loader import TaskLoadError, load_task, manifest_task_dirs
from evsys.task.models import Problem


class TaskReport(BaseModel):
    """The problems of one task directory; `ok` when none is an error."""

    name: str
    path: Path
    problems: list[Problem] = Field(default_factory=list)
    base_image: str | None = Field(None, description="The base the task declares (FROM or docker_image).")
    base_reason: str | None = Field(
        None, description="Why the host cannot stand in for that base (it is pulled, built or synthesised)."
    )
    needs_image: bool = Field(False, description="The task runs on an image (its base's or a build on it).")

    @property
    def ok(self) -> bool:
        """True when the task loads (warnings allowed)."""
        return not any(p.severity == "error" for p in self.problems)


class CheckReport(BaseModel):
    """The outcome of checking a dataset: one report per task directory, in directory order."""

    path: Path
    tasks: list[TaskReport] = Field(default_factory=list)

    @property
    def n_errors(self) -> int:
        """How many error problems were found, over all tasks."""
        return sum(p.severity == "error" for t in self.tasks for p in t.problems)

    @property
    def n_warnings(self) -> int:
        """How many warnings were found, over all tasks."""
        return sum(p.severity == "warning" for t in self.tasks for p in t.problems)

    def lines(self) -> list[tuple[str, str]]:
        """Every problem as (severity, `path/file:field: message`) with paths as the user gave them."""
        out: list[tuple[str, str]] = []
        for task in self.tasks:
            for problem in task.problems:
                located = problem.model_copy(update={"file": str(task.path / problem.file)})
                text = str(located)
                if problem.severity == "warning":
                    where, _, message = text.partition(": ")
                    text = f"{where}: warning: {message}"
                out.append((problem.severity, text))
        return out


def check_tasks(path: Path | str, *, require_solution: bool = False, strict: bool = False) -> CheckReport:
    """Load every task under `path` and collect its problems (errors and warnings); bad tasks never raise.
    With `strict`, unknown or misspelt keys and sections of task.toml are errors, not warnings. Whatever would
    make Harbor skip a task (evsys.task.harbor_task) is a warning.

    A Harbor `dataset.toml` decides which directories are checked, as it decides which run; a task it lists
    that has no directory here is reported as an error.

    Raises `DatasetNotFoundError` when `path` is missing or holds no task directory, `DatasetManifestError`
    when its `dataset.toml` is invalid.
    """
    report = CheckReport(path=Path(path))
    dirs, missing, _ = manifest_task_dirs(path)
    for error in missing:  # listed in dataset.toml, absent here: `evsys run` reports it as an invalid task
        report.tasks.append(TaskReport(name=error.task_name, path=Path(path), problems=error.problems))
    names: dict[str, Path] = {}
    for task_dir in dirs:
        try:
            task = load_task(task_dir, require_solution=require_solution)
        except TaskLoadError as exc:
            problems = [_strict(p) if strict else p for p in exc.problems]
            problems += harbor_problems(task_dir)
            report.tasks.append(TaskReport(name=exc.task_name, path=task_dir, problems=problems))
            continue
        problems = [_parse_warning(w) for w in task.warnings]
        problems = [_strict(p) if strict else p for p in problems] + harbor_problems(task_dir)
        if task.name in names:
            problems.append(
                Problem(
                    file="task.toml", field="task.name", message=f"name is also used by {names[task.name]}"
                )
            )
        names.setdefault(task.name, task_dir)
        env = task.environment
        report.tasks.append(
            TaskReport(
                name=task.name,
                path=task_dir,
                problems=problems,
                base_image=env.base_image,
                base_reason=env.base_reason,
                needs_image=env.needs_image,
            )
        )
    return report


def _parse_warning(text: str) -> Problem:
    """Turn a `file:field: message` warning string of a loaded Task back into a Problem."""
    where, _, message = text.partition(": ")
    file, _, field = where.partition(":")
    return Problem(file=file, field=field or None, message=message, severity="warning")


def _strict(problem: Problem) -> Problem:
    """The problem as `--strict` sees it: a warning about an unknown key or section becomes an error."""
    if problem.severity == "warning" and problem.message.startswith(UNKNOWN_KEY_PREFIXES):
        return problem.model_copy(update={"severity": "error"})
    return problem
