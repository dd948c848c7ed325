"""One trial directory read back for people: result, config, trajectory, traceback, verifier output, logs.

Read-only and through `SafeDir` (no symbolic link followed, every read capped). A file that is missing or
broken never hides the rest: its problem is reported beside what could be read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from evsys.records import Trajectory, TrialResult
from evsys.trajectory.graph import SequenceBreak, capture_graph
from evsys.viewer.files import FileText, SafeDir, UnsafePathError

EXCEPTION = "exception.txt"
VERIFIER_FILES = ("reward.json", "reward.txt", "test-stdout.txt")
LOG_DIRS = ("agent", "verifier", "artifacts")
INLINE_CAP = 256 << 10  # verifier files and the traceback are shown inline up to 256 KiB


class TextFile(BaseModel):
    """A file's (possibly truncated) text as shown to a user."""

    path: str
    text: str
    size: int
    truncated: bool


class LogFile(BaseModel):
    """A file under agent/, verifier/ or artifacts/ (fetched on demand)."""

    path: str
    size: int


class SequenceSummary(BaseModel):
    """One training sequence of the trial's capture graph, as the trial page lists it."""

    index: int
    step_ids: list[int]
    call_indices: list[int | None]
    prompt_tokens: int
    completion_tokens: int
    learned_tokens: int = Field(description="Tokens with loss mask 1 (model tokens not learnt elsewhere).")
    opened_by: SequenceBreak | None = None


def sequence_summaries(trajectory: Trajectory | None) -> list[SequenceSummary]:
    """The training sequences of `trajectory`'s capture graph (evsys.trajectory.graph), without their tokens
    (the steps hold those)."""
    return [
        SequenceSummary(
            index=seq.index,
            step_ids=seq.step_ids,
            call_indices=seq.call_indices,
            prompt_tokens=len(seq.prompt_token_ids),
            completion_tokens=len(seq.completion_token_ids),
            learned_tokens=sum(seq.loss_mask),
            opened_by=seq.opened_by,
        )
        for seq in capture_graph(trajectory).sequences
    ]


class LoadedTrial(BaseModel):
    """Everything the trial page and `evsys trial show` display."""

    name: str
    job: str
    result: TrialResult | None = None
    config: dict[str, Any] | None = None
    trajectory: Trajectory | None = None
    instruction: str | None = None
    exception: TextFile | None = None
    verifier: list[TextFile] = Field(default_factory=list)
    logs: list[LogFile] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list, description="Files that could not be read, and why.")
    sequences: list[SequenceSummary] = Field(
        default_factory=list, description="The capture graph's training sequences (one per call path)."
    )
    token_texts: dict[int, list[str]] = Field(
        default_factory=dict, description="Per step id, each completion token's text (with a tokenizer)."
    )


def load_trial(job_dir: Path, trial_name: str) -> LoadedTrial:
    """Read the trial `trial_name` of the job at `job_dir`."""
    root = SafeDir(job_dir)
    if root.kind(trial_name) != "dir":
        raise UnsafePathError(f"no trial directory {trial_name!r} in {job_dir}")
    trial = LoadedTrial(name=trial_name, job=Path(job_dir).name)
    trial.result = _model(root, f"{trial_name}/result.json", TrialResult, trial.problems)
    trial.trajectory = _model(root, f"{trial_name}/trajectory.json", Trajectory, trial.problems)
    trial.sequences = sequence_summaries(trial.trajectory)
    trial.config = _raw_json(root, f"{trial_name}/config.json", trial.problems)
    trial.instruction = _instruction(trial.trajectory)
    trial.exception = _text(root, f"{trial_name}/{EXCEPTION}", trial.problems)
    for name in VERIFIER_FILES:
        text = _text(root, f"{trial_name}/verifier/{name}", trial.problems)
        if text is not None:
            trial.verifier.append(text)
    for sub in LOG_DIRS:
        for entry in root.walk_files(f"{trial_name}/{sub}"):
            trial.logs.append(LogFile(path=f"{sub}/{entry.name}", size=entry.size))
    return trial


def read_trial_file(job_dir: Path, trial_name: str, rel_path: str, cap: int) -> FileText:
    """One file of a trial (under agent/, verifier/, artifacts/ or exception.txt), cut at `cap` bytes."""
    top = rel_path.split("/", 1)[0]
    if top not in LOG_DIRS and rel_path != EXCEPTION:
        raise UnsafePathError(f"{rel_path!r} is not a trial log (agent/, verifier/, artifacts/)")
    return SafeDir(job_dir).read_text(f"{trial_name}/{rel_path}", cap)


def _instruction(trajectory: Trajectory | None) -> str | None:
    if trajectory is None:
        return None
    return next((s.message for s in trajectory.steps if s.source == "user"), None)


def _model(root: SafeDir, path: str, model: type[BaseModel], problems: list[str]) -> Any:
    try:
        return model.model_validate_json(root.read_json_bytes(path))
    except FileNotFoundError:
        problems.append(f"{path}: missing")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        problems.append(f"{path}: {where}: {first['msg']}")
    except (OSError, UnsafePathError, ValueError) as exc:
        problems.append(f"{path}: {exc}")
    return None


def _raw_json(root: SafeDir, path: str, problems: list[str]) -> dict[str, Any] | None:
    try:
        data = json.loads(root.read_json_bytes(path))
    except FileNotFoundError:
        return None
    except (OSError, UnsafePathError, ValueError) as exc:
        problems.append(f"{path}: {exc}")
        return None
    return data if isinstance(data, dict) else None


def _text(root: SafeDir, path: str, problems: list[str]) -> TextFile | None:
    try:
        text = root.read_text(path, INLINE_CAP)
    except FileNotFoundError:
        return None
    except (OSError, UnsafePathError) as exc:
        problems.append(f"{path}: {exc}")
        return None
    return TextFile(path=path.split("/", 1)[1], text=text.text, size=text.size, truncated=text.truncated)
