"""Rows as task directories, as `evsys run rows.jsonl` runs them: content-keyed, safe to write at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from calc_repo import calc_rows

from evsys.repo.materialise import materialised_dir
from evsys.repo.rows import RepoTask
from evsys.task.loader import load_task


def test_concurrent_writers_of_one_row_share_one_directory_and_a_changed_row_gets_another(calc, tmp_path):
    row = RepoTask.model_validate(calc_rows(*calc)[0])
    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda _: materialised_dir(row, tmp_path), range(8)))
    assert len(set(paths)) == 1
    task = load_task(paths[0])
    assert task.config.metadata["evsys_repo"]["commit"] == row.base_commit
    assert task.config.agent.network_mode == "no-network" and task.config.verifier.network_mode is None
    assert sorted(p.name for p in (paths[0] / "tests").iterdir()) == [
        "config.json",
        "evsys_grade.py",
        "evsys_runner.py",
        "evsys_runner_canaries.py",
        "evsys_runner_child.py",
        "evsys_runner_guard.py",
        "test.patch",
        "test.sh",
    ]
    assert not list(paths[0].parent.glob(".*"))  # no temp directory left behind
    changed = materialised_dir(row.model_copy(update={"test_cmd": "python -m pytest -x"}), tmp_path)
    assert changed != paths[0] and changed.name == paths[0].name
