"""Running Harbor itself (from its own virtualenv, Python >= 3.12) on task directories through evsys's
environment, and reading back what it scored."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
TASKS = Path(__file__).resolve().parent / "tasks"
PARITY_TASKS = REPO_ROOT / "tests" / "parity" / "tasks"
ENVIRONMENT = "evsys.integrations.harbor:EvsysEnvironment"
BOOTSTRAP_HINT = "scripts/bootstrap.sh makes .venv-harbor when it finds a Python >= 3.12"


def harbor_venv() -> Path | None:
    """The virtualenv with Harbor ($EVSYS_HARBOR_VENV, else the checkout's .venv-harbor), if there is one."""
    venv = Path(os.environ.get("EVSYS_HARBOR_VENV", REPO_ROOT / ".venv-harbor"))
    return venv if (venv / "bin" / "harbor").is_file() else None


def harbor_env(**extra: str) -> dict[str, str]:
    """The environment of a Harbor process: this checkout's evsys first on its path; LiteLLM's model price
    list read from its package instead of downloaded (no route to it here)."""
    path = [str(REPO_ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    offline_prices = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **offline_prices, **extra}


def copy_tasks(sources: list[Path], dataset: Path) -> Path:
    """The task directories copied into `dataset`; a `[task] name` without an org becomes `evsys-test/<name>`
    (Harbor skips a task whose name is not `org/name`: the parity set's names are bare, evsys's examples and
    this directory's tasks are Harbor's form already)."""
    dataset.mkdir(parents=True, exist_ok=True)
    for source in sources:
        task = dataset / source.name
        shutil.copytree(source, task)
        toml = task / "task.toml"
        bare = r'(?m)^name = "([^"/]*)"'
        toml.write_text(re.sub(bare, r'name = "evsys-test/\1"', toml.read_text(), count=1))
    return dataset


@dataclass
class HarborTrial:
    """One trial as Harbor recorded it."""

    task: str
    rewards: dict[str, float] | None
    exception: str | None
    trial_dir: Path

    @property
    def reward(self) -> float | None:
        """The primary reward: `reward`, else the mean of the keys (as evsys's `TrialResult.reward`)."""
        if not self.rewards:
            return None
        return self.rewards.get("reward", sum(self.rewards.values()) / len(self.rewards))


def run_harbor(
    venv: Path, dataset: Path, jobs: Path, job: str, *args: str, env: dict[str, str] | None = None
) -> tuple[dict[str, HarborTrial], subprocess.CompletedProcess[str]]:
    """`harbor run` with the oracle on `dataset` through evsys's environment; its trials by task name (the
    `org/` prefix dropped) and the finished process."""
    argv = [str(venv / "bin" / "harbor"), "run", "-p", str(dataset), "-a", "oracle", "-e", ENVIRONMENT]
    argv += ["--jobs-dir", str(jobs), "--job-name", job, "-q", "-y", *args]
    done = subprocess.run(argv, capture_output=True, text=True, env=env or harbor_env(), timeout=1800)
    return read_trials(jobs / job), done


def read_trials(job_dir: Path) -> dict[str, HarborTrial]:
    """Harbor's trial results in `job_dir`, by task name."""
    trials = {}
    for result in sorted(job_dir.glob("*/result.json")):
        data = json.loads(result.read_text())
        if "task_name" not in data:
            continue  # the job's own result.json
        info = data.get("exception_info") or {}
        exception = f"{info.get('exception_type')}: {info.get('exception_message')}" if info else None
        name = data["task_name"].split("/", 1)[-1]
        rewards = (data.get("verifier_result") or {}).get("rewards")
        trials[name] = HarborTrial(name, rewards, exception, result.parent)
    return trials
