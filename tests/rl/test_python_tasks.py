"""Python tasks: the models; loading JSONL, Parquet, datasets directories and rows; dataset.toml; errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from evsys.task.loader import DatasetNotFoundError
from evsys.task.python import (
    PromptTask,
    PythonTask,
    PythonTaskLoadError,
    VerifiedTask,
    is_python_dataset,
    load_python_tasks,
    read_dataset_config,
)

ROWS = [
    {"id": "sum-1", "prompt": "What is 19+23?", "verifier": "exact_int", "answer": 42},
    {
        "id": "sum-2",
        "prompt": "What is 2+2?",
        "verifier": "exact_int",
        "data": {"answer": 4},
        "level": "easy",
    },
]


def write_jsonl(path: Path, rows: list, extra_lines: tuple[str, ...] = ()) -> Path:
    lines = [json.dumps(row) for row in rows] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_models_and_their_round_trip():
    task = VerifiedTask(id="a", prompt="p", verifier="exact_int", data={"answer": 1})
    assert task.kind == "verified" and task.sandbox is False and task.tools is None
    prompt = PromptTask(id="b", prompt="Write a haiku")
    adapter = TypeAdapter(list[PythonTask])
    dumped = adapter.dump_json([task, prompt])
    assert adapter.validate_json(dumped) == [task, prompt]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"id": "", "prompt": "p", "verifier": "v"}, "id"),
        ({"id": "a\nb", "prompt": "p", "verifier": "v"}, "control characters"),
        ({"id": "a", "prompt": "   ", "verifier": "v"}, "must not be empty"),
        ({"id": "a", "prompt": "p", "verifier": ""}, "verifier"),
        ({"id": "a", "prompt": "p", "verifier": "v", "data": {"task": 1}}, "'task' is reserved"),
        ({"id": "a", "prompt": "p", "verifier": "v", "tools": ["bash"]}, "tools need a sandbox"),
        ({"id": "a", "prompt": "p", "verifier": "v", "colour": 1}, "colour"),
        (
            {"id": "a", "prompt": "p", "verifier": "v", "data": {"f": object()}},
            "'f' holds a object, which is not JSON",
        ),
    ],
)
def test_model_validation(fields, message):
    with pytest.raises(ValidationError, match=message):
        VerifiedTask(**fields)


def test_jsonl_columns_map_to_fields_and_extra_columns_go_to_data(tmp_path: Path):
    tasks = load_python_tasks(write_jsonl(tmp_path / "train.jsonl", ROWS))
    assert tasks == [
        VerifiedTask(id="sum-1", prompt="What is 19+23?", verifier="exact_int", data={"answer": 42}),
        VerifiedTask(
            id="sum-2", prompt="What is 2+2?", verifier="exact_int", data={"answer": 4, "level": "easy"}
        ),
    ]


def test_rows_without_verifier_are_prompt_tasks_with_generated_ids():
    tasks = load_python_tasks(
        [{"prompt": "Write a haiku"}, {"prompt": "Write a limerick", "topic": "sandboxes"}]
    )
    assert tasks == [
        PromptTask(id="item-0", prompt="Write a haiku"),
        PromptTask(id="item-1", prompt="Write a limerick", data={"topic": "sandboxes"}),
    ]


def test_defaults_and_column_renaming():
    rows = [{"qid": 7, "question": "What is 1+1?", "solution": 2}]
    tasks = load_python_tasks(
        rows, verifier="exact_int", system_prompt="Be brief.", columns={"id": "qid", "prompt": "question"}
    )
    assert tasks == [
        VerifiedTask(
            id="7",
            prompt="What is 1+1?",
            verifier="exact_int",
            system_prompt="Be brief.",
            data={"solution": 2},
        )
    ]


def test_bad_jsonl_rows_are_all_reported_with_file_row_and_field(tmp_path: Path):
    rows = [
        ROWS[0],
        {"id": "sum-3", "verifier": "exact_int"},
        {"id": "sum-4", "prompt": 5, "verifier": "exact_int"},
        {"id": "sum-1", "prompt": "again", "verifier": "exact_int"},
        {"id": "sum-5", "prompt": "p", "verifier": "exact_int", "data": [1], "x": 1},
        {"id": "sum-6", "prompt": "p", "verifier": "exact_int", "data": {"x": 1}, "x": 2},
    ]
    path = write_jsonl(tmp_path / "bad.jsonl", rows, extra_lines=("", "{not json", "[1, 2]"))
    with pytest.raises(PythonTaskLoadError) as caught:
        load_python_tasks(path)
    lines = str(caught.value).splitlines()
    assert f"{path}: row 2: prompt: Field required" in lines
    assert f"{path}: row 3: prompt: Input should be a valid string" in lines
    assert f"{path}: row 5: data: must be an object, got list" in lines
    assert f"{path}: row 6: data: column 'x' clashes with the data field of the same name" in lines
    assert any(line.startswith(f"{path}: row 8: invalid JSON") for line in lines)
    assert f"{path}: row 9: must be an object, got list" in lines
    assert f"{path}: row 4: id: duplicate id 'sum-1' (first used in row 1)" in lines
    assert len(caught.value.problems) == 7


def test_a_mix_of_scored_and_unscored_rows_is_reported():
    with pytest.raises(
        PythonTaskLoadError, match=r"<rows>: row 2: verifier: has no verifier while other rows"
    ):
        load_python_tasks([ROWS[0], {"id": "x", "prompt": "p"}])


def test_renamed_columns_are_named_in_errors():
    with pytest.raises(PythonTaskLoadError, match=r"row 1: question: Input should be a valid string"):
        load_python_tasks([{"question": 3}], columns={"prompt": "question"})


def test_missing_path_and_unsupported_type(tmp_path: Path):
    with pytest.raises(DatasetNotFoundError, match="no such file or directory"):
        load_python_tasks(tmp_path / "absent.jsonl")
    (tmp_path / "rows.csv").write_text("id,prompt\n", encoding="utf-8")
    with pytest.raises(PythonTaskLoadError, match=r"rows.csv: unsupported file type '.csv'"):
        load_python_tasks(tmp_path / "rows.csv")
    with pytest.raises(
        PythonTaskLoadError, match=r"neither a saved datasets directory nor has a dataset\.toml"
    ):
        load_python_tasks(tmp_path)


def test_parquet(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(
        [
            {
                "id": "p-1",
                "prompt": "What is 3+4?",
                "verifier": "exact_int",
                "answer": 7,
                "system_prompt": None,
            },
            {
                "id": "p-2",
                "prompt": "What is 1+4?",
                "verifier": "exact_int",
                "answer": 5,
                "system_prompt": "Hi",
            },
        ]
    )
    pq.write_table(table, tmp_path / "train.parquet")
    tasks = load_python_tasks(tmp_path / "train.parquet")
    assert [(t.id, t.data, t.system_prompt) for t in tasks] == [
        ("p-1", {"answer": 7}, None),
        ("p-2", {"answer": 5}, "Hi"),
    ]
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(PythonTaskLoadError, match=r"broken\.parquet: unreadable Parquet"):
        load_python_tasks(tmp_path / "broken.parquet")


def test_saved_datasets_directory_and_dataset_dict_splits(tmp_path: Path):
    import datasets

    rows = {"id": ["d-1", "d-2"], "prompt": ["What is 2*3?", "What is 5-9?"], "answer": [6, -4]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "single"))
    tasks = load_python_tasks(tmp_path / "single", verifier="exact_int")
    assert [(t.id, t.verifier, t.data) for t in tasks] == [
        ("d-1", "exact_int", {"answer": 6}),
        ("d-2", "exact_int", {"answer": -4}),
    ]

    both = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(rows), "test": datasets.Dataset.from_dict(rows)}
    )
    both.save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(
        PythonTaskLoadError, match=r"dict: split: holds splits train, test; choose one with split="
    ):
        load_python_tasks(tmp_path / "dict")
    with pytest.raises(PythonTaskLoadError, match="no split 'valid'; available: train, test"):
        load_python_tasks(tmp_path / "dict", split="valid")
    assert len(load_python_tasks(tmp_path / "dict", split="test")) == 2


def test_an_in_memory_dataset_is_rows():
    import datasets

    dataset = datasets.Dataset.from_dict({"prompt": ["a", "b"], "verifier": ["v", "v"]})
    assert [t.id for t in load_python_tasks(dataset)] == ["item-0", "item-1"]


def make_dataset_dir(root: Path, toml: str) -> Path:
    root.mkdir()
    write_jsonl(root / "rows.jsonl", [{"id": "q1", "prompt": "Say yes"}, {"id": "q2", "prompt": "Say no"}])
    (root / "checks.py").write_text(
        "from evsys.verify.functions import verifier\n\n"
        "@verifier('t_says_yes')\n"
        "def says_yes(completion):\n    return 'yes' in completion\n",
        encoding="utf-8",
    )
    (root / "dataset.toml").write_text(toml, encoding="utf-8")
    return root


async def test_dataset_toml_directory_and_sibling_file(tmp_path: Path):
    from evsys.verify.functions import registered_verifiers, run_verifier, unregister_verifier

    toml = '[dataset]\ndata = "rows.jsonl"\nverifier_module = "checks.py"\nverifier = "t_says_yes"\n'
    toml += 'system_prompt = "Answer in one word."\n'
    root = make_dataset_dir(tmp_path / "yesno", toml)
    try:
        assert is_python_dataset(root) and not is_python_dataset(tmp_path)
        tasks = load_python_tasks(root)
        assert "t_says_yes" in registered_verifiers()
        assert [(t.id, t.verifier, t.system_prompt) for t in tasks] == [
            ("q1", "t_says_yes", "Answer in one word."),
            ("q2", "t_says_yes", "Answer in one word."),
        ]
        assert load_python_tasks(root / "rows.jsonl") == tasks
        assert load_python_tasks(root, verifier="other")[0].verifier == "other"
        assert (await run_verifier(tasks[0].verifier, "yes!", tasks[0].data)).reward == 1.0
    finally:
        unregister_verifier("t_says_yes")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[dataset\n", "dataset.toml: invalid TOML"),
        ('[dataset]\nverifier = "v"\n', "dataset.toml: dataset.data: Field required"),
        ('[dataset]\ndata = "rows.jsonl"\nverifer = "v"\n', "dataset.toml: dataset.verifer: Extra inputs"),
        ('[dataset]\ndata = "missing.jsonl"\n', "dataset.toml: dataset.data: .*missing.jsonl does not exist"),
        (
            '[dataset]\ndata = "rows.jsonl"\nverifier_module = "nope.py"\n',
            r"dataset.toml: dataset.verifier_module: cannot import 'nope.py': FileNotFoundError",
        ),
    ],
)
def test_bad_dataset_toml(tmp_path: Path, toml: str, message: str):
    root = make_dataset_dir(tmp_path / "bad", toml)
    with pytest.raises(PythonTaskLoadError, match=message):
        load_python_tasks(root)
    if "missing" not in toml and "nope" not in toml:
        with pytest.raises(PythonTaskLoadError, match=message):
            read_dataset_config(root)


def test_non_utf8_jsonl_and_corrupt_datasets_directory(tmp_path: Path):
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(PythonTaskLoadError, match=r"latin1\.jsonl: is not UTF-8 text"):
        load_python_tasks(tmp_path / "latin1.jsonl")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "state.json").write_text("{", encoding="utf-8")
    with pytest.raises(PythonTaskLoadError, match="corrupt: unreadable datasets directory"):
        load_python_tasks(corrupt)


def test_a_dataframe_is_rows_and_a_single_dict_is_an_error():
    import pandas as pd

    frame = pd.DataFrame({"prompt": ["What is 1+2?"], "verifier": ["exact_int"], "answer": [3]})
    [task] = load_python_tasks(frame)
    assert task.data == {"answer": 3} and task.id == "item-0"
    with pytest.raises(PythonTaskLoadError, match="got a single dict"):
        load_python_tasks({"prompt": "p"})
