"""Exports of real job directories: RL JSONL/Parquet rows that reload with `datasets` and match the
trajectories token for token, SFT chats with `--successful-only`, ATIF copies, and `evsys run examples/math`
through the CLI with the tiny local model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evsys.cli.main import app
from evsys.model.spec import create_model_client
from evsys.rollouts import run_rollouts
from evsys.task.python import VerifiedTask
from evsys.trajectory.export import ExportError, export_job, load_job_groups, to_hf_dataset

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def rollout_job(tmp_path: Path, math_client, fresh_verifier, questions):
    """A finished run_rollouts job (3 items x 3 samples, one item's verifier raising) and its groups."""

    def graded(completion: str, answer: int, boom: bool = False) -> float:
        if boom:
            raise ValueError("no grade")
        return float(completion.strip() == str(answer))

    name = fresh_verifier(graded)
    items = [
        VerifiedTask(id=f"q{i}", prompt=q, verifier=name, data={"answer": 42, "boom": i == 2})
        for i, q in enumerate(questions)
    ]
    groups = await run_rollouts(
        items, model=math_client, num_samples=3, jobs_dir=tmp_path, job_name="job", max_retries=0
    )
    return tmp_path / "job", groups


async def test_parquet_reloads_with_datasets_and_matches_the_trajectories(rollout_job, tmp_path: Path):
    import datasets

    job_dir, groups = rollout_job
    [path] = export_job(job_dir, "parquet", tmp_path / "out")
    loaded = datasets.load_dataset("parquet", data_files=str(path), split="train")
    by_trial = {row["trial_name"]: row for row in loaded}
    samples = [s for g in groups for s in g.trajectories]
    assert len(by_trial) == len(samples) == 9
    for group in groups:
        for sample in group.trajectories:
            row = by_trial[sample.trial_name]
            assert row["prompt_token_ids"] == sample.prompt_token_ids
            assert row["completion_token_ids"] == sample.completion_token_ids
            assert row["loss_mask"] == sample.loss_mask
            assert row["logprobs"] == pytest.approx(sample.logprobs)
            assert row["reward"] == sample.reward and row["task_id"] == sample.task_id
            assert row["advantage"] == pytest.approx(sample.advantage)
    errored = [r for r in by_trial.values() if r["error"]]
    assert len(errored) == 3 and all(r["error"].startswith("verifier_error: ") for r in errored)
    in_memory = to_hf_dataset(job_dir)
    assert sorted(in_memory["trial_name"]) == sorted(by_trial)


async def test_rl_jsonl_groups_match_run_rollouts(rollout_job, tmp_path: Path):
    job_dir, groups = rollout_job
    [path] = export_job(job_dir, "rl", tmp_path / "out")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["group_id"] for r in rows} == {g.group_id for g in groups}
    reloaded = {g.task_id: g for g in load_job_groups(job_dir)}
    for group in groups:
        assert reloaded[group.task_id].advantages == pytest.approx(group.advantages)
        assert reloaded[group.task_id].n_errors == group.n_errors


async def test_sft_successful_only_and_atif(rollout_job, tmp_path: Path):
    job_dir, groups = rollout_job
    [everything] = export_job(job_dir, "sft", tmp_path / "all")
    [winners] = export_job(job_dir, "sft", tmp_path / "ok", successful_only=True)
    all_rows = [json.loads(line) for line in everything.read_text().splitlines()]
    ok_rows = [json.loads(line) for line in winners.read_text().splitlines()]
    assert len(all_rows) == 9
    expected = sorted(s.trial_name for g in groups for s in g.trajectories if s.ok and s.reward >= 1.0)
    assert sorted(r["trial_name"] for r in ok_rows) == expected
    for row in all_rows:
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
        assert row["tools"] == []
    copies = export_job(job_dir, "atif", tmp_path / "atif")
    assert len(copies) == 9
    assert json.loads(copies[0].read_text())["schema_version"].startswith("ATIF")


def test_export_rejects_a_directory_that_is_not_a_job(tmp_path: Path):
    with pytest.raises(ExportError, match="not a job directory"):
        export_job(tmp_path, "rl", tmp_path / "out")
    result = CliRunner().invoke(app, ["export", str(tmp_path), "--format", "csv"])
    assert result.exit_code == 2 and "--format must be one of" in result.output


def test_cli_runs_examples_math_and_exports(tmp_path: Path, math_model_dir: Path):
    runner = CliRunner()
    args = ["run", str(REPO / "examples" / "math"), "-a", "loop", "-m", f"local:{math_model_dir}", "-k", "4"]
    args += ["--task", "math-00[0-2]", "--jobs-dir", str(tmp_path), "--job-name", "math"]
    args += ["--agent-kwarg", "max_tokens=8"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    job = json.loads((tmp_path / "math" / "result.json").read_text())
    assert job["n_planned"] == 12 and job["n_errors"] == 0 and job["complete"]
    [trial_dir] = (tmp_path / "math").glob("math-000__loop-*__1")
    trial = json.loads((trial_dir / "result.json").read_text())
    assert trial["rewards"] == {"reward": trial["reward"]} and trial["reward"] in (0.0, 1.0)
    assert (trial_dir / "verifier" / "reward.json").is_file()
    exported = runner.invoke(
        app, ["export", str(tmp_path / "math"), "--format", "rl", "-o", str(tmp_path / "o")]
    )
    assert exported.exit_code == 0, exported.output
    rows = [json.loads(line) for line in (tmp_path / "o" / "rl.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and all(r["completion_token_ids"] for r in rows)


@pytest.mark.parametrize("where", ["file", "file/sub"])
def test_export_to_an_existing_file_is_one_clear_error(tmp_path: Path, where: str):
    (tmp_path / "file").write_text("keep me\n")
    result = CliRunner().invoke(app, ["export", str(tmp_path), "-o", str(tmp_path / where)])
    assert result.exit_code == 2
    assert "error:" in result.stderr and str(tmp_path / "file") in result.stderr
    assert "Traceback" not in result.output and (tmp_path / "file").read_text() == "keep me\n"


async def test_every_token_export_row_names_the_weights_version_that_sampled_it(
    tmp_path: Path, math_model_dir: Path, questions
):
    """After a weights load (the same weights, a new version) every `rl`, `sequences` and `openenv` row of the
    next job carries the version the local engine sampled it with. The load goes to a private copy of the
    model: engines are shared per model path, and the session's `math_client` stays at version 0."""
    shutil.copytree(math_model_dir, tmp_path / "model")
    client = create_model_client(f"local:{tmp_path / 'model'}")
    engine = await client.engine()
    version = await client.load_weights(engine.model.state_dict())
    assert version == 1
    await run_rollouts(
        questions[:2], outcome_reward=False, model=client, num_samples=2, jobs_dir=tmp_path, job_name="v"
    )
    exported = {
        fmt: [json.loads(line) for line in path.read_text().splitlines()]
        for fmt in ("rl", "sequences", "openenv")
        for path in export_job(tmp_path / "v", fmt, tmp_path / "out")
    }
    assert len(exported["rl"]) == len(exported["sequences"]) == len(exported["openenv"]) == 4
    assert [row["weights_version"] for row in exported["rl"]] == [version] * 4
    for row in exported["sequences"]:
        assert row["weights_version"] == version and row["weights_versions"] == [version] * len(
            row["step_ids"]
        )
    turns = [turn for trace in exported["openenv"] for turn in trace["turns"]]
    assert turns and all(turn["metadata"]["weights_version"] == version for turn in turns)
