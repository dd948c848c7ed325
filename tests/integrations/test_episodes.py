"""`EpisodeRunner` (evsys.integrations.episodes): served episodes driven by blocking calls from plain threads,
as the TRL and OpenEnv integrations drive them."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from evsys.integrations.episodes import EpisodeRunner
from evsys.records import TrialResult

TASK = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "create-file"
GOOD = "printf 'Hello from evsys!\\n' > /app/greeting.txt"


def recorded(runner: EpisodeRunner, name: str) -> TrialResult:
    return TrialResult.model_validate_json((runner.job_dir / name / "result.json").read_text())


@pytest.mark.needs_sandbox
def test_episodes_from_threads_are_verified_and_recorded(tmp_path: Path) -> None:
    runner = EpisodeRunner(TASK, jobs_dir=tmp_path, job_name="episodes")
    rewards: dict[str, float | None] = {}

    def episode(command: str) -> None:
        client = runner.open()
        try:
            first = client.start("create-file")
            assert first.instruction and "greeting.txt" in first.instruction
            observation, reward, done = client.tool("bash", {"command": f"{command}; cat /app/greeting.txt"})
            assert not done and reward is None
            assert observation.result is not None and observation.result["data"].strip() in (
                "Hello from evsys!",
                "no",
            )
            result = client.finish()
            assert client.trajectory().steps[-1].tool_calls  # the bash call was recorded
            rewards[command] = result.reward
            assert recorded(runner, result.trial_name).reward == result.reward
        finally:
            client.close()

    try:
        threads = [threading.Thread(target=episode, args=(c,)) for c in (GOOD, "echo no > /app/greeting.txt")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        runner.close()
    assert rewards == {GOOD: 1.0, "echo no > /app/greeting.txt": 0.0}
    assert (runner.job_dir / "result.json").is_file()
    with pytest.raises(RuntimeError, match="closed"):
        runner.open()


@pytest.mark.needs_sandbox
def test_a_closed_session_still_records_its_episode(tmp_path: Path) -> None:
    runner = EpisodeRunner(TASK, jobs_dir=tmp_path, job_name="left")
    try:
        client = runner.open()
        client.start("create-file")
        client.tool("bash", {"command": GOOD})
        client.close()  # left mid-episode: verified and recorded anyway, the sandbox released
        assert not runner.service.episodes
        (result,) = [
            TrialResult.model_validate_json(p.read_text()) for p in runner.job_dir.glob("*/result.json")
        ]
        assert result.reward == 1.0
        assert result.failure is not None and "the session was closed" in result.failure.message
    finally:
        runner.close()


@pytest.mark.needs_sandbox
def test_a_task_is_picked_by_its_full_or_unambiguous_short_name(tmp_path: Path) -> None:
    dataset = tmp_path / "tasks"
    for directory, name in (("create-file", "evsys/create-file"), ("a", "acme/copy"), ("b", "zeta/copy")):
        shutil.copytree(TASK, dataset / directory)
        toml = dataset / directory / "task.toml"
        toml.write_text(toml.read_text().replace('name = "evsys/create-file"', f'name = "{name}"'))
    runner = EpisodeRunner(dataset, jobs_dir=tmp_path / "jobs", job_name="names")
    try:
        assert runner.require_tasks(["create-file", "zeta/copy"]) == ["evsys/create-file", "zeta/copy"]
        with pytest.raises(ValueError, match=r"'copy' names 2 tasks \(acme/copy, zeta/copy\); give the full"):
            runner.require_tasks(["copy"])
        client = runner.open()
        started = client.start("create-file")
        assert started.task == "evsys/create-file"
        client.close()
    finally:
        runner.close()
