"""Loading SWE-bench-family rows (JSONL, Parquet, saved HF datasets); bad rows named by row and field."""

from __future__ import annotations

import json

import pytest

from evsys.repo.rows import RepoRowsError, is_repo_dataset, load_repo_rows, load_repo_tasks

ROW = {
    "instance_id": "owner__proj-1",
    "repo": "owner/proj",
    "base_commit": "a" * 40,
    "patch": "diff --git a/x b/x\n",
    "test_patch": "diff --git a/t b/t\n",
    "FAIL_TO_PASS": '["tests/test_x.py::test_a"]',
    "PASS_TO_PASS": '["tests/test_x.py::test_b", "tests/test_x.py::test_c[1-2]"]',
    "problem_statement": "x is broken",
    "version": "1.0",
    "environment_setup_commit": "b" * 40,
    "hints_text": "",
    "created_at": "2023-01-01T00:00:00Z",
}


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_a_swe_bench_row_loads_with_its_json_string_test_lists(tmp_path):
    rows = load_repo_rows(_jsonl(tmp_path / "rows.jsonl", [ROW]))
    assert not rows.errors
    task = rows.tasks[0]
    assert task.FAIL_TO_PASS == ["tests/test_x.py::test_a"]
    assert task.PASS_TO_PASS[1] == "tests/test_x.py::test_c[1-2]"
    assert task.source == "https://github.com/owner/proj.git"
    assert task.version == "1.0" and task.environment_setup_commit == "b" * 40


def test_bad_rows_are_named_by_row_and_field_and_the_rest_load(tmp_path):
    missing = {k: v for k, v in ROW.items() if k != "base_commit"} | {"instance_id": "no-commit"}
    unparsable = ROW | {"instance_id": "bad-list", "FAIL_TO_PASS": "[tests/x.py::t"}
    empty = ROW | {"instance_id": "no-f2p", "FAIL_TO_PASS": "[]"}
    good2 = ROW | {"instance_id": "good-2"}
    rows = load_repo_rows(
        _jsonl(tmp_path / "rows.jsonl", [ROW, missing, "{not json", unparsable, empty, ROW, good2])
    )
    assert [t.instance_id for t in rows.tasks] == ["owner__proj-1", "good-2"]
    messages = [str(e) for e in rows.errors]
    assert messages[0] == "rows.jsonl: row 2 (no-commit): base_commit: missing (required)"
    assert messages[1].startswith("rows.jsonl: row 3: invalid JSON")
    assert messages[2].startswith("rows.jsonl: row 4 (bad-list): FAIL_TO_PASS: not a JSON list")
    assert messages[3] == (
        "rows.jsonl: row 5 (no-f2p): FAIL_TO_PASS: is empty (the reward needs at least one test that must "
        "start passing)"
    )
    assert messages[4] == "rows.jsonl: row 6 (owner__proj-1): instance_id: also used by row 1"


def test_every_row_bad_is_an_error_listing_them(tmp_path):
    with pytest.raises(RepoRowsError, match=r"row 1 \(x\): base_commit: 'zz' is not a commit id"):
        load_repo_tasks(_jsonl(tmp_path / "rows.jsonl", [ROW | {"instance_id": "x", "base_commit": "zz"}]))


def test_load_repo_tasks_names_the_rows_it_leaves_out(tmp_path):
    from evsys.repo.rows import SkippedRowsWarning

    path = _jsonl(tmp_path / "rows.jsonl", [ROW, ROW | {"instance_id": "x", "base_commit": "zz"}])
    with pytest.warns(SkippedRowsWarning, match=r"1 invalid row\(s\) .* row 2 \(x\): base_commit"):
        tasks = load_repo_tasks(path)
    assert [t.instance_id for t in tasks] == ["owner__proj-1"]
    with pytest.raises(RepoRowsError, match=r"row 2 \(x\)"):
        load_repo_tasks(path, strict=True)


def test_tasks_check_checks_a_rows_file_and_a_python_dataset_as_run_loads_them(tmp_path, examples_dir):
    from typer.testing import CliRunner

    from evsys.cli.tasks import tasks_app

    path = _jsonl(tmp_path / "rows.jsonl", [ROW, ROW | {"instance_id": "x", "base_commit": "zz"}])
    result = CliRunner().invoke(tasks_app, ["check", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    assert "row 2 (x): base_commit: 'zz' is not a commit id" in result.output
    assert "2 row(s) checked: 1 ok, 1 with errors" in result.output
    good = CliRunner().invoke(tasks_app, ["check", str(_jsonl(tmp_path / "good.jsonl", [ROW]))])
    assert good.exit_code == 0 and "1 ok, 0 with errors" in good.output
    python = CliRunner().invoke(tasks_app, ["check", str(examples_dir / "math")])
    assert python.exit_code == 0, python.output
    assert "50 Python task(s) loaded" in python.output


@pytest.mark.slow  # importing `datasets`
def test_parquet_and_a_saved_hugging_face_dataset_load_the_same_rows(tmp_path):
    datasets = pytest.importorskip("datasets")
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [ROW, ROW | {"instance_id": "owner__proj-2"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "hf"))
    for path in (tmp_path / "rows.parquet", tmp_path / "hf"):
        assert is_repo_dataset(path)
        loaded = load_repo_rows(path)
        assert [t.instance_id for t in loaded.tasks] == ["owner__proj-1", "owner__proj-2"], path
        assert loaded.tasks[0].PASS_TO_PASS == json.loads(ROW["PASS_TO_PASS"])


def test_a_directory_of_task_directories_is_not_a_rows_dataset(tmp_path, examples_dir):
    assert not is_repo_dataset(examples_dir / "tasks")
    with pytest.raises(RepoRowsError, match="not a rows file"):
        load_repo_rows(_jsonl(tmp_path / "rows.json", [ROW]))
