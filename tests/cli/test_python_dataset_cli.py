"""Python datasets from the CLI: dataset.toml's `name` is the dataset column and its `version` is recorded,
`evsys datasets show` shows them with the description, the reference column feeds `-a oracle` (refused
before the job starts when there are no references) and `evsys tasks check --oracle`, and the task subset
flags (`--task`, `--exclude-task`, `--n-tasks` with `--task-seed`) select Python tasks. No sandbox and no
model: Python tasks answered by the oracle run in-process."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evsys.cli.main import app

_names = itertools.count()
VERIFIER = """
from evsys.verify.functions import verifier


@verifier("{name}")
def score(completion: str, answer: int) -> float:
    {body}
"""
EXACT = "return float(completion.strip() == str(answer))"


def make_dataset(root: Path, *, reference: bool = True, body: str = EXACT, n: int = 6) -> Path:
    """A dataset dir `root` named "arith" (version 2.1): n sums whose answers are in the `answer` column."""
    root.mkdir(parents=True)
    name = f"cli_ref_{next(_names)}"  # a name of its own: the verifier registry is process-wide
    (root / "verifier.py").write_text(VERIFIER.format(name=name, body=body))
    rows = [{"id": f"q-{i}", "prompt": f"What is {i}+{i}?", "answer": 2 * i} for i in range(n)]
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    toml = [
        "[dataset]",
        'name = "arith"',
        'version = "2.1"',
        'description = "Sums of a number with itself"',
        'data = "rows.jsonl"',
        'verifier_module = "verifier.py"',
        f'verifier = "{name}"',
    ]
    (root / "dataset.toml").write_text("\n".join([*toml, *(['reference = "answer"'] if reference else [])]))
    return root


def evsys(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def results(job_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(job_dir.glob("*/result.json"))]


def test_oracle_answers_with_the_references_and_records_name_and_version(tmp_path: Path):
    dataset = make_dataset(tmp_path / "some-dir")
    out = evsys("run", dataset, "-a", "oracle", "--jobs-dir", tmp_path / "jobs", "--job-name", "o")
    assert out.exit_code == 0, out.output
    trials = results(tmp_path / "jobs" / "o")
    assert len(trials) == 6 and all(t["reward"] == 1.0 and t["failure"] is None for t in trials)
    assert {(t["dataset"], t["dataset_version"]) for t in trials} == {("arith", "2.1")}
    answers = {
        json.loads((tmp_path / "jobs" / "o" / t["trial_name"] / "trajectory.json").read_text())["steps"][-1][
            "message"
        ]
        for t in trials
    }
    assert answers == {"0", "2", "4", "6", "8", "10"}


def test_oracle_without_references_is_refused_before_the_job_starts(tmp_path: Path):
    dataset = make_dataset(tmp_path / "noref", reference=False)
    out = evsys("run", dataset, "-a", "oracle", "--jobs-dir", tmp_path / "jobs", "--job-name", "o")
    assert out.exit_code == 2
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and "6 of the 6 task(s)" in lines[0] and "no reference answer" in lines[0]
    assert not (tmp_path / "jobs").exists()


def test_tasks_check_oracle_runs_each_verifier_on_reference_and_empty_answers(tmp_path: Path):
    good = evsys("tasks", "check", make_dataset(tmp_path / "good"), "--oracle")
    assert good.exit_code == 0, good.output
    assert "6 verifier(s) checked against their reference answers: 6 ok, 0 with problems" in good.output
    lax = evsys("tasks", "check", make_dataset(tmp_path / "lax", body="return 1.0"), "--oracle")
    assert lax.exit_code == 1
    assert "q-0: an empty answer scores 1, expected less than 1" in lax.output
    assert "6 ok" not in lax.output
    wrong = make_dataset(tmp_path / "wrong", body="return float(completion.strip() == str(answer + 1))")
    out = evsys("tasks", "check", wrong, "--oracle")
    assert out.exit_code == 1 and "q-3: the reference answer scores 0, expected 1" in out.output
    noref = evsys("tasks", "check", make_dataset(tmp_path / "noref", reference=False), "--oracle")
    assert noref.exit_code == 1 and "q-0: no reference answer" in noref.output
    assert evsys("tasks", "check", tmp_path / "noref").exit_code == 0  # without --oracle: loads, fine


def test_datasets_show_gives_name_version_description_and_references(tmp_path: Path):
    out = evsys("datasets", "show", make_dataset(tmp_path / "d"))
    assert out.exit_code == 0, out.output
    shown = dict(line.split(None, 1) for line in out.stdout.splitlines())
    assert shown["name"] == "arith" and shown["version"] == "2.1" and shown["tasks"] == "6"
    assert shown["description"] == "Sums of a number with itself"
    assert shown["reference"] == "answer (6 of 6 tasks have one)"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--task", "q-1*", "--task", "q-4"], {"q-1", "q-10", "q-11", "q-4"}),
        (["--exclude-task", "q-1*"], {"q-0", "q-2", "q-3", "q-4", "q-5", "q-6", "q-7", "q-8", "q-9"}),
    ],
)
def test_task_selection_flags_pick_python_tasks(tmp_path: Path, flags: list[str], expected: set[str]):
    dataset = make_dataset(tmp_path / "d", n=12)
    out = evsys("run", dataset, "-a", "oracle", *flags, "--jobs-dir", tmp_path / "jobs", "--job-name", "s")
    assert out.exit_code == 0, out.output
    assert {t["task_name"] for t in results(tmp_path / "jobs" / "s")} == expected


def test_n_tasks_with_a_task_seed_is_the_same_sample_on_every_run(tmp_path: Path):
    dataset = make_dataset(tmp_path / "d", n=12)

    def sample(job: str, seed: int) -> set[str]:
        flags = ["--n-tasks", 3, "--task-seed", seed, "--jobs-dir", tmp_path / "jobs", "--job-name", job]
        assert evsys("run", dataset, "-a", "oracle", *flags).exit_code == 0
        return {t["task_name"] for t in results(tmp_path / "jobs" / job)}

    first, again, other = sample("a", 7), sample("b", 7), sample("c", 8)
    assert len(first) == 3 and first == again and other != first
