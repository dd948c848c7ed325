"""The viewer's JSON API and its file reader, without a browser: containment, caps, headers, decoding."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from viewer_jobs import COMPLETION_IDS, SECRET, make_handmade_job

from evsys.viewer.app import JobSource, create_app
from evsys.viewer.files import SafeDir, UnsafePathError
from evsys.viewer.tokens import TokenDecoder, TokenizerError

TRIAL = "greet__loop-local__1"


@pytest.fixture
def handmade(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    root.mkdir()
    return make_handmade_job(root)


def client(source: JobSource) -> TestClient:
    return TestClient(create_app(source), base_url="http://127.0.0.1:8765")


def test_safe_dir_refuses_links_anywhere_on_the_path(handmade: Path):
    assert (handmade / "linked/secret.txt").read_text() == SECRET  # positive control: the link leads out
    safe = SafeDir(handmade)
    for path in ("linked/secret.txt", f"{TRIAL}/agent/leak.txt", "../outside/secret.txt", "/etc/passwd"):
        with pytest.raises(UnsafePathError):
            safe.read_text(path)
    assert safe.kind("linked") == "link"
    assert "leak.txt" not in [e.name for e in safe.walk_files(f"{TRIAL}/agent")]


def test_safe_dir_never_opens_a_fifo(handmade: Path):
    os.mkfifo(handmade / TRIAL / "agent/pipe")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        SafeDir(handmade).read_text(f"{TRIAL}/agent/pipe")  # would block forever if opened for reading


def test_large_files_are_cut_at_the_cap(handmade: Path):
    (handmade / TRIAL / "agent/big.log").write_bytes(b"x" * 5000)
    text = SafeDir(handmade).read_text(f"{TRIAL}/agent/big.log", cap=1000)
    assert (len(text.text), text.size, text.truncated) == (1000, 5000, True)
    with pytest.raises(UnsafePathError, match="larger than"):
        SafeDir(handmade).read_json_bytes(f"{TRIAL}/agent/big.log", cap=1000)


def test_api_serves_jobs_with_security_headers(handmade: Path):
    response = client(JobSource(handmade.parent)).get("/api/jobs")
    assert response.status_code == 200
    assert [j["name"] for j in response.json()["jobs"]] == ["handmade"]
    assert (
        response.json()["jobs"][0]["state"] == "incomplete"
    )  # finished with complete: false, nothing cancelled
    assert response.headers["content-security-policy"].startswith("default-src 'self'")
    assert response.headers["x-content-type-options"] == "nosniff"


def test_api_refuses_foreign_hosts_and_writes(handmade: Path):
    app = create_app(JobSource(handmade.parent))
    assert TestClient(app, base_url="http://127.0.0.1").get("/api/jobs").status_code == 200  # control
    assert TestClient(app, base_url="http://evil.example").get("/api/jobs").status_code == 403
    assert TestClient(app, base_url="http://127.0.0.1").post("/api/jobs").status_code == 405


def test_api_refuses_paths_out_of_the_job(handmade: Path):
    api = client(JobSource(handmade.parent))
    base = f"/api/jobs/handmade/trials/{TRIAL}/file?path="
    assert api.get(base + "agent/agent.log").json()["text"] == "agent log line\n"  # control
    escapes = ("agent/leak.txt", "../../outside/secret.txt", "config.json", "agent/../../linked/secret.txt")
    for path in escapes:
        response = api.get(base + path)
        assert response.status_code == 404 and SECRET not in response.text, path
    assert api.get("/api/jobs/handmade/trials/linked").status_code == 404
    assert api.get("/api/jobs/..").status_code == 404


def test_a_single_job_view_shows_only_that_job(handmade: Path, tmp_path: Path):
    make_handmade_job(handmade.parent, name="other")
    api = client(JobSource(handmade.parent, only="handmade"))
    assert [j["name"] for j in api.get("/api/jobs").json()["jobs"]] == ["handmade"]
    assert api.get("/api/jobs/other").status_code == 404


def _word_tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {f"w{i}": i for i in COMPLETION_IDS}
    vocab["[UNK]"] = 0
    Tokenizer(WordLevel(vocab, unk_token="[UNK]")).save(str(path))
    return path


def test_trial_tokens_are_decoded_with_a_tokenizer(handmade: Path, tmp_path: Path):
    decoder = TokenDecoder(_word_tokenizer(tmp_path / "tokenizer.json"))
    trial = client(JobSource(handmade.parent, decoder=decoder)).get(f"/api/jobs/handmade/trials/{TRIAL}")
    assert trial.json()["token_texts"]["3"] == [f"w{i}" for i in COMPLETION_IDS]
    plain = client(JobSource(handmade.parent)).get(f"/api/jobs/handmade/trials/{TRIAL}")
    assert plain.json()["token_texts"] == {}


def test_a_missing_tokenizer_is_named(tmp_path: Path):
    (tmp_path / "model").mkdir()
    with pytest.raises(TokenizerError, match=r"model/tokenizer\.json does not exist"):
        TokenDecoder(tmp_path / "model")
    with pytest.raises(TokenizerError, match=r"nope\.json does not exist"):
        TokenDecoder(tmp_path / "nope.json")


def test_a_finished_job_is_read_again_when_it_changes(handmade: Path):
    source = JobSource(handmade.parent)
    assert len(source.load("handmade").trials) == 4
    assert source.load("handmade") is source.load("handmade")  # unchanged: not read again
    done = (handmade / TRIAL / "result.json").read_text().replace(TRIAL, "running__loop-local__1")
    (handmade / "running__loop-local__1/result.json").write_text(done)
    result = handmade / "result.json"
    result.write_text(result.read_text())  # a resume rewrites the job's result.json (new inode)
    assert len(source.load("handmade").trials) == 5


def test_a_broken_trial_result_is_named_and_hides_nothing_else(handmade: Path):
    (handmade / "running__loop-local__1/result.json").write_text('{"trial_name": 3')
    job = client(JobSource(handmade.parent)).get("/api/jobs/handmade").json()
    assert len(job["trials"]) == 4
    [pending] = job["pending"]
    assert pending["name"] == "running__loop-local__1"
    assert pending["problem"].startswith("running__loop-local__1/result.json: ")
    trial = client(JobSource(handmade.parent)).get("/api/jobs/handmade/trials/running__loop-local__1").json()
    assert trial["result"] is None and "running__loop-local__1/result.json" in trial["problems"][0]


def test_trial_lists_the_training_sequences_of_its_capture_graph(handmade: Path):
    """The handmade trial's second model turn does not extend the first: the API lists two training
    sequences, the second opened by a new root that shares three tokens with the first call."""
    trial = client(JobSource(handmade.parent)).get(f"/api/jobs/handmade/trials/{TRIAL}").json()
    first, second = trial["sequences"]
    assert (first["step_ids"], first["opened_by"]) == ([3], None)
    assert (
        first["completion_tokens"] == len(COMPLETION_IDS)
        and first["learned_tokens"] == len(COMPLETION_IDS) - 1
    )
    assert second["step_ids"] == [4] and second["call_indices"] == [1]
    assert second["opened_by"]["kind"] == "new_root" and second["opened_by"]["common_prefix_tokens"] == 3
