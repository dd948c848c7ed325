"""Job directories written by hand for export tests: config.json and finished trials (no sandbox, model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evsys.records import AgentInfo, TrialResult
from evsys.records.trajectory import TrajectoryRecorder


def make_job_dir(path: Path) -> Path:
    """An empty job directory (a config.json, no trials)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def write_trial(job_dir: Path, name: str, reward: float | None, answer: str | None = None, **fields: Any):
    """A finished trial of task `evsys/create-file` (`fields` override the result's); with `answer`, a
    trajectory whose model answered it."""
    trial = job_dir / name
    trial.mkdir(parents=True)
    result = TrialResult.model_validate(
        {
            "trial_name": name,
            "task_name": "evsys/create-file",
            "task_path": "/t",
            "dataset": "tasks",
            "agent": "loop",
            "attempt": 1,
            "reward": reward,
            "rewards": None if reward is None else {"reward": reward},
            **fields,
        }
    )
    (trial / "result.json").write_text(result.model_dump_json())
    if answer is not None:
        recorder = TrajectoryRecorder(name, AgentInfo(name="loop"))
        recorder.add("user", "Write the greeting.")
        recorder.add("agent", answer)
        (trial / "trajectory.json").write_text(recorder.build().model_dump_json())
