"""Shell completion of option values (`evsys --install-completion` sets it up: bash, zsh, fish, PowerShell).

Each function is a typer `autocompletion=` callback: given the word typed so far, the values that start with
it. They run on every Tab press, so they read names without importing plug-ins: agents, harnesses, sandbox
backends and executors from evsys's own table (evsys.util.builtin_plugins) and the installed entry points,
model providers
from their registry (which imports no SDK), and job and trial directories from the file system (a job
directory holds a `config.json`, a trial directory a `result.json` or `config.json` inside a job).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from pathlib import Path

from evsys.util.builtin_plugins import builtin_plugins

JOB_MARKER = "config.json"
TRIAL_MARKERS = ("result.json", "config.json")


def _starting(values: Iterable[str], incomplete: str) -> list[str]:
    return sorted({v for v in values if v.startswith(incomplete)})


def _entry_point_names(group: str) -> set[str]:
    """evsys's own plug-ins of `group` and every installed package's (no registry imported)."""
    return set(builtin_plugins(group)) | {ep.name for ep in entry_points(group=group)}


def complete_agent(incomplete: str) -> list[str]:
    """`-a/--agent`: the registered agents (oracle, nop, loop, plug-ins) and agent harnesses."""
    return _starting(_entry_point_names("evsys.agents") | _entry_point_names("evsys.harnesses"), incomplete)


def complete_model(incomplete: str) -> list[str]:
    """`-m/--model`: `provider:` for every registered model provider, and `local` (the default model)."""
    from evsys.model.registry import model_provider_names  # evsys.model registers the built-ins

    return _starting({"local", *(f"{name}:" for name in model_provider_names())}, incomplete)


def complete_sandbox(incomplete: str) -> list[str]:
    """`--sandbox`: the installed sandbox backends."""
    return _starting(_entry_point_names("evsys.sandboxes"), incomplete)


def complete_executor(incomplete: str) -> list[str]:
    """`--executor`: the installed executors (local, processes, ray, plug-ins)."""
    return _starting(_entry_point_names("evsys.executors"), incomplete)


def complete_export_format(incomplete: str) -> list[str]:
    """`evsys export -f/--format`: the export formats."""
    from evsys.trajectory.export import EXPORT_FORMATS

    return _starting(EXPORT_FORMATS, incomplete)


def complete_advantage(incomplete: str) -> list[str]:
    """`evsys export --advantage`: the advantage estimators."""
    from evsys.trajectory.advantages import ADVANTAGE_METHODS

    return _starting(ADVANTAGE_METHODS, incomplete)


def complete_integrity(incomplete: str) -> list[str]:
    """`evsys export --integrity`: the integrity policies."""
    from evsys.trajectory.integrity import INTEGRITY_POLICIES

    return _starting(INTEGRITY_POLICIES, incomplete)


def complete_job_dir(incomplete: str) -> list[str]:
    """A job directory (`--resume`, `evsys jobs show`, `evsys export`, `evsys view`): job directories starting
    with the word, and other directories (ending in `/`) to descend into."""
    return _directories(incomplete, lambda path: (path / JOB_MARKER).is_file())


def complete_trial_dir(incomplete: str) -> list[str]:
    """A trial directory (`evsys trial show`): trial directories of a job starting with the word, and other
    directories (ending in `/`) to descend into."""

    def is_trial(path: Path) -> bool:
        return (path.parent / JOB_MARKER).is_file() and any((path / m).is_file() for m in TRIAL_MARKERS)

    return _directories(incomplete, is_trial)


def _directories(incomplete: str, is_target: Callable[[Path], bool]) -> list[str]:
    """Directories whose path starts with `incomplete`: targets as they are, the others with a `/` added.
    Hidden directories only when the word's last part starts with a dot."""
    parent, slash, prefix = incomplete.rpartition("/")
    base = Path(os.path.expanduser(parent or "/")) if slash else Path(".")
    try:
        entries = sorted(os.scandir(base), key=lambda e: e.name)
    except OSError:
        return []
    out = []
    for entry in entries:
        hidden = entry.name.startswith(".") and not prefix.startswith(".")
        if hidden or not entry.name.startswith(prefix) or not entry.is_dir():
            continue
        shown = f"{parent}{slash}{entry.name}"
        out.append(shown if is_target(Path(entry.path)) else shown + "/")
    return out
