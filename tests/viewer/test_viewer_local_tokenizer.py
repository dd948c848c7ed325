"""`evsys view` decodes a local-engine trial's tokens with that model's own tokenizer, without `--tokenizer`:
`local:<model dir>` and the bundled default (`local`, its cached conversion); `--tokenizer` still wins."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from viewer_jobs import COMPLETION_IDS, make_handmade_job, start_viewer

from evsys.model.local.loader import SOURCE_RECORD, default_gguf_path
from evsys.records import TrialResult
from evsys.viewer.app import JobSource, create_app
from evsys.viewer.server import source_for

TRIAL = "greet__loop-local__1"
SAFETY_TIMEOUT = 60


def word_model(model_dir: Path, prefix: str) -> Path:
    """A model directory whose tokenizer.json maps each completion id to `<prefix><id>`."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    model_dir.mkdir(parents=True)
    vocab = {f"{prefix}{i}": i for i in COMPLETION_IDS} | {"[UNK]": 0}
    Tokenizer(WordLevel(vocab, unk_token="[UNK]")).save(str(model_dir / "tokenizer.json"))
    (model_dir / "config.json").write_text("{}")
    return model_dir


def job_with_model(jobs_dir: Path, model: str, name: str = "handmade") -> Path:
    job_dir = make_handmade_job(jobs_dir, name)
    for path in job_dir.glob("*/result.json"):
        trial = TrialResult.model_validate_json(path.read_text())
        path.write_text(trial.model_copy(update={"model": model}).model_dump_json())
    return job_dir


def texts(source: JobSource, job: str = "handmade") -> list[str] | None:
    api = TestClient(create_app(source), base_url="http://127.0.0.1:8765")
    return api.get(f"/api/jobs/{job}/trials/{TRIAL}").json()["token_texts"].get("3")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch) -> Path:
    """An empty evsys cache (so the machine's own converted models are not found)."""
    monkeypatch.setenv("EVSYS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_local_model_directory_s_tokenizer_is_found(tmp_path, cache):
    model = word_model(tmp_path / "models/qwen-mini", "q")
    jobs = job_with_model(tmp_path / "jobs", f"local:{model}").parent
    assert texts(JobSource(jobs)) is None  # control: a plain source shows ids
    assert texts(source_for(jobs)) == [f"q{i}" for i in COMPLETION_IDS]  # what `evsys view jobs/` does
    assert texts(source_for(jobs / "handmade")) == [f"q{i}" for i in COMPLETION_IDS]  # one job


def test_the_default_local_model_s_converted_tokenizer_is_found(tmp_path, cache):
    jobs = job_with_model(tmp_path / "jobs", "local").parent
    assert texts(source_for(jobs)) is None  # nothing converted yet: ids, and nothing is converted
    assert not (cache / "models").exists()
    gguf = default_gguf_path()
    converted = word_model(cache / f"models/{gguf.stem}-0123456789abcdef", "d")
    (converted / SOURCE_RECORD).write_text(json.dumps({"gguf": str(gguf)}))
    assert texts(source_for(jobs)) == [f"d{i}" for i in COMPLETION_IDS]


def test_tokenizer_flag_wins_and_other_providers_are_not_guessed(tmp_path, cache):
    model = word_model(tmp_path / "models/own", "o")
    given = word_model(tmp_path / "models/given", "g")
    jobs = job_with_model(tmp_path / "jobs", f"local:{model}").parent
    assert texts(source_for(jobs, given)) == [f"g{i}" for i in COMPLETION_IDS]
    job_with_model(jobs, f"vllm:{model}", name="served")
    assert texts(source_for(jobs), "served") is None  # a served model's name is not a path on this machine


@pytest.mark.needs_process
def test_evsys_view_decodes_without_tokenizer_flag(tmp_path):
    model = word_model(tmp_path / "models/qwen-mini", "v")
    jobs = job_with_model(tmp_path / "jobs", f"local:{model}").parent
    proc, url = start_viewer(jobs, cache_dir=tmp_path / "cache")
    try:
        with urllib.request.urlopen(f"{url}/api/jobs/handmade/trials/{TRIAL}") as response:
            body = json.load(response)
    finally:
        proc.terminate()
        proc.wait(SAFETY_TIMEOUT)
    assert body["token_texts"]["3"] == [f"v{i}" for i in COMPLETION_IDS]
