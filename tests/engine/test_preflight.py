"""Pre-flight: `evsys run` mistakes that would fail every trial stop the command before a job directory exists
(one clear line, exit 2); invalid tasks are listed up front; --resume applies safe flags, names others."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from engine_tasks import make_task
from typer.testing import CliRunner

from evsys.cli.main import app
from evsys.engine.preflight import check_model, dedupe_paths


def evsys(*args, env: dict[str, str] | None = None):
    """`evsys ARGS` in-process; the result has exit_code, stdout and stderr."""
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200", **(env or {})})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def closed_port() -> int:
    """A local TCP port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def one_task(tmp_path: Path) -> Path:
    return make_task(tmp_path / "tasks", "write-ok")


@pytest.fixture
def scratch_env(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EVSYS_SANDBOX_DIR", str(tmp_path / "scratch"))
    monkeypatch.chdir(tmp_path)


BAD_RUNS = {
    "openai-no-key": (["-a", "loop", "-m", "openai:gpt-4o"], "OPENAI_API_KEY"),
    "loop-no-model": (["-a", "loop"], "agent 'loop' needs a model"),
    "unknown-sandbox": (["--sandbox", "lcoal"], "unknown sandbox backend 'lcoal' (did you mean 'local'?)"),
    "local-path": (["-a", "loop", "-m", "local:/no/such/dir"], "/no/such/dir is not a directory"),
    "agent-typo": (["-a", "lop"], "unknown agent 'lop' (did you mean 'loop'?)"),
    "kwarg-typo": (
        ["-a", "loop", "-m", "local", "--agent-kwarg", "max_turn=3"],
        "unknown --agent-kwarg 'max_turn' (did you mean 'max_turns'?); valid: command_timeout_sec",
    ),
    "kwarg-type": (
        ["-a", "loop", "-m", "local", "--agent-kwarg", "max_turns=many"],
        "--agent-kwarg 'max_turns': Input should be a valid integer",
    ),
    "bad-provider": (["-a", "loop", "-m", "opneai:gpt-4o"], "unknown model provider 'opneai'"),
}


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_mistakes_stop_before_a_job_directory_exists(case, one_task, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args, expected = BAD_RUNS[case]
    out = evsys("run", one_task, "--jobs-dir", tmp_path / "jobs", *args)
    assert out.exit_code == 2, out.output
    assert expected in out.stderr
    assert "Traceback" not in out.output and "pydantic.dev" not in out.output
    assert [line for line in out.stderr.splitlines() if line.startswith("error:")] == out.stderr.splitlines()
    assert not (tmp_path / "jobs").exists(), "a job directory was left behind"


def test_a_model_server_that_is_down_is_found_by_a_short_probe(one_task, tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    out = evsys(
        "run", one_task, "--jobs-dir", tmp_path / "jobs", "-a", "loop", "-m", "vllm:m", "--base-url", url
    )
    assert out.exit_code == 2
    assert f"the model server at {url} is not reachable" in out.stderr and "--no-model-probe" in out.stderr
    assert not (tmp_path / "jobs").exists()


def test_the_probe_is_skippable_and_passes_a_listening_server():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert check_model("vllm:m", f"http://127.0.0.1:{server.getsockname()[1]}/v1") == []
    down = f"http://127.0.0.1:{closed_port()}/v1"
    assert check_model("vllm:m", down, probe=False) == []
    assert check_model("vllm:m", down) != []


@pytest.mark.needs_sandbox
def test_the_same_dataset_twice_runs_its_tasks_once(one_task, tmp_path, scratch_env):
    dataset = one_task.parent
    out = evsys("run", dataset, f"{dataset}/../tasks", "-a", "oracle", "--job-name", "dup")
    assert out.exit_code == 0, out.output
    assert "given more than once" in out.stderr
    assert [p.parent.name for p in (tmp_path / "jobs" / "dup").glob("*/result.json")] == [
        "write-ok__oracle__1"
    ]
    assert dedupe_paths([Path("a"), Path("./a"), Path("b")]) == ([Path("a"), Path("b")], [Path("./a")])


def invalid_dataset(tmp_path: Path) -> Path:
    dataset = tmp_path / "mixed"
    make_task(dataset, "good")
    make_task(dataset, "broken", instruction=None)
    return dataset


@pytest.mark.needs_sandbox
def test_invalid_tasks_are_listed_before_the_job_and_strict_refuses_them(tmp_path, scratch_env):
    dataset = invalid_dataset(tmp_path)
    refused = evsys("run", dataset, "-a", "oracle", "--strict", "--job-name", "strict")
    assert refused.exit_code == 2
    assert "invalid task (--strict)" in refused.stderr and "broken" in refused.stderr
    assert not (tmp_path / "jobs" / "strict").exists()

    out = evsys("run", dataset, "-a", "oracle", "--job-name", "lenient")
    assert out.exit_code == 0, out.output
    warning = out.stderr.index("1 invalid task(s) will fail as task_invalid")
    assert "broken" in out.stderr[warning:] and "instruction" in out.stderr[warning:]


@pytest.mark.needs_sandbox
def test_run_prints_task_warnings_with_did_you_mean(tmp_path, scratch_env):
    toml = '[task]\nname = "typo"\n[verifer]\ntimeout_sec = 60.0\n[environment]\nworkdir = "/app"\n'
    make_task(tmp_path / "ds", "typo", toml=toml)
    out = evsys("run", tmp_path / "ds", "-a", "nop", "--job-name", "warned")
    assert "did you mean" in out.stderr and "verifier" in out.stderr, out.stderr


@pytest.mark.needs_sandbox
def test_resume_applies_safe_flags_and_names_the_others(one_task, tmp_path, scratch_env):
    assert evsys("run", one_task, "-a", "oracle", "--job-name", "first").exit_code == 0
    job_dir = tmp_path / "jobs" / "first"

    refused = evsys("run", "--resume", job_dir, "-k", "5", "-a", "nop")
    assert refused.exit_code == 2
    assert "-k/--n-attempts" in refused.stderr and "-a/--agent" in refused.stderr
    assert "-n/--n-concurrent" in refused.stderr  # the flags that may change are named too

    applied = evsys("run", "--resume", job_dir, "-n", "2", "--max-retries", "3")
    assert applied.exit_code == 0, applied.output
    saved = json.loads((job_dir / "config.json").read_text())
    assert (saved["n_concurrent"], saved["max_retries"], saved["n_attempts"]) == (2, 3, 1)


async def test_the_python_api_leaves_no_job_directory_when_the_model_cannot_be_built(
    one_task, tmp_path, monkeypatch
):
    """`Job.run()` builds model clients before writing config.json: rerunning after a fix needs no resume."""
    from evsys.engine import AgentSpec, Job, JobConfig

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = JobConfig(
        datasets=[one_task],
        agents=[AgentSpec(name="loop", model="openai:gpt-4o")],
        jobs_dir=tmp_path / "jobs",
        job_name="no-key",
    )
    with pytest.raises(Exception, match="OPENAI_API_KEY"):
        await Job(config).run()
    assert not (tmp_path / "jobs" / "no-key").exists()


CLOUD_CREDENTIALS = {
    # the config file: $MODAL_CONFIG_PATH as the SDK read it when first imported (another test may have)
    "modal": ("modal", ["MODAL_TOKEN_ID and MODAL_TOKEN_SECRET", "modal.toml"]),
    "e2b": ("e2b", ["E2B_API_KEY"]),
    "daytona": ("daytona", ["DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID", ".env"]),
}


@pytest.fixture
def no_cloud_credentials(tmp_path: Path, monkeypatch) -> None:
    """No cloud service's credentials in the environment, the home directory or the working directory."""
    for var in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "E2B_API_KEY", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    for var in ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)


def refused_before_a_job_directory(out, jobs: Path) -> str:
    """The one `error:` line of a refused run (exit 2) that left no job directory behind."""
    assert out.exit_code == 2, out.output
    assert "Traceback" not in out.output
    assert [line for line in out.stderr.splitlines() if line.startswith("error:")] == out.stderr.splitlines()
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert not jobs.exists(), "a job directory was left behind"
    return out.stderr


@pytest.mark.parametrize("backend", list(CLOUD_CREDENTIALS))
def test_a_cloud_backend_without_credentials_is_refused_naming_what_its_sdk_reads(
    backend, one_task, tmp_path, no_cloud_credentials
):
    jobs = tmp_path / "jobs"
    line = refused_before_a_job_directory(
        evsys("run", one_task, "--jobs-dir", jobs, "--sandbox", backend), jobs
    )
    assert line.startswith(f"error: --sandbox {backend}:")
    for name in CLOUD_CREDENTIALS[backend][1]:
        assert name in line, line


@pytest.mark.parametrize("backend", list(CLOUD_CREDENTIALS))
def test_a_cloud_backend_without_its_sdk_is_refused_naming_the_extra(
    backend, one_task, tmp_path, no_cloud_credentials, monkeypatch
):
    monkeypatch.setitem(sys.modules, CLOUD_CREDENTIALS[backend][0], None)  # `import modal` fails
    jobs = tmp_path / "jobs"
    line = refused_before_a_job_directory(
        evsys("run", one_task, "--jobs-dir", jobs, "--sandbox", backend), jobs
    )
    assert f"pip install 'evsys[{backend}]'" in line, line


async def test_the_cloud_check_also_answers_inside_a_running_event_loop(no_cloud_credentials):
    """`check_sandbox_backend` is synchronous; code already in an event loop (a notebook) can call it too."""
    from evsys.engine.preflight import check_sandbox_backend

    [line] = check_sandbox_backend("e2b")
    assert line.startswith("--sandbox e2b:") and "E2B_API_KEY" in line
