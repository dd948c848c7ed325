"""`evsys run` as a user runs it: a real subprocess, SIGKILL + resume, Ctrl-C + resume, usage errors."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_tasks import make_task

RUN = [sys.executable, "-m", "evsys.cli.main", "run"]
SAFETY_TIMEOUT = 120  # seconds; only guards against a hung test, never asserts speed


def slow_dataset(root: Path, n: int, seconds: float) -> Path:
    dataset = root / "slow"
    dataset.mkdir()
    for i in range(n):
        make_task(dataset, f"slow-{i}", solve=f"#!/bin/bash\nsleep {seconds}\necho ok > /app/out.txt\n")
    return dataset


def cli_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "EVSYS_SANDBOX_DIR": str(tmp_path / "scratch")}


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + SAFETY_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def results(job_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in job_dir.glob("*/result.json")}


def assert_every_json_parses(job_dir: Path, *, temp_files_allowed: bool = False) -> None:
    for path in job_dir.rglob("*.json"):
        if path.parent.name in ("agent", "verifier", "artifacts"):
            continue
        json.loads(path.read_text())  # raises on a truncated file
    if (
        not temp_files_allowed
    ):  # a SIGKILL between an atomic write and its rename leaves one; resume removes it
        assert not list(job_dir.rglob(".*.tmp")), "a temp file was left behind"


def assert_no_leftover_sandbox(job_name: str, scratch: Path) -> None:
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            cgroup = (pid_dir / "cgroup").read_text()
        except OSError:
            continue
        assert job_name not in cgroup, f"process {pid_dir.name} of job {job_name} survived"
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        leaked = [d for d in dirs if job_name in d]
        assert not leaked, f"cgroup dirs left behind in {root}: {leaked}"
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(scratch) not in mounts and job_name not in mounts, "a sandbox mount was left behind"


@pytest.mark.needs_process
def test_sigkill_mid_run_then_resume_runs_every_trial_exactly_once(tmp_path):
    dataset = slow_dataset(tmp_path, n=6, seconds=0.5)
    job_name = f"kill-{secrets.token_hex(4)}"
    job_dir = tmp_path / "jobs" / job_name
    env = cli_env(tmp_path)
    args = [
        *RUN,
        str(dataset),
        "-a",
        "oracle",
        "-n",
        "2",
        "--jobs-dir",
        str(tmp_path / "jobs"),
        "--job-name",
        job_name,
    ]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: len(results(job_dir)) >= 1 or proc.poll() is not None, "a first finished trial")
        assert proc.poll() is None, f"the job ended before it could be killed: {proc.stderr.read().decode()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(SAFETY_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_with = len(results(job_dir))
    assert 1 <= killed_with < 6
    assert_every_json_parses(job_dir, temp_files_allowed=True)
    resumed = subprocess.run(
        [*RUN, "--resume", str(job_dir)], env=env, capture_output=True, text=True, timeout=SAFETY_TIMEOUT
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"job directory: {job_dir}" in resumed.stdout
    final = results(job_dir)
    assert sorted(final) == sorted(f"slow-{i}__oracle__1" for i in range(6))
    assert all(r["failure"] is None and r["reward"] == 1.0 for r in final.values())
    assert sorted(p.name for p in job_dir.iterdir() if p.is_dir()) == sorted(final)
    job_result = json.loads((job_dir / "result.json").read_text())
    assert job_result["complete"] and job_result["n_done"] == 6
    assert_every_json_parses(job_dir)
    assert_no_leftover_sandbox(job_name, tmp_path / "scratch")


@pytest.mark.needs_process
def test_ctrl_c_cancels_running_trials_then_resume_completes(tmp_path):
    dataset = slow_dataset(tmp_path, n=4, seconds=60)
    job_name = f"int-{secrets.token_hex(4)}"
    job_dir = tmp_path / "jobs" / job_name
    env = cli_env(tmp_path)
    args = [*RUN, str(dataset), "-n", "2", "--jobs-dir", str(tmp_path / "jobs"), "--job-name", job_name]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(
            lambda: len(list(job_dir.glob("*/agent"))) >= 2 or proc.poll() is not None, "two running trials"
        )
        time.sleep(0.5)  # let the agents get going (not a speed assertion)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=SAFETY_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert f"evsys run --resume {job_dir}" in stderr
    cancelled = results(job_dir)
    assert len(cancelled) == 2
    assert all(r["failure"]["cause"] == "cancelled" for r in cancelled.values())
    job_result = json.loads((job_dir / "result.json").read_text())
    assert job_result["n_cancelled"] == 2 and not job_result["complete"]
    assert_every_json_parses(job_dir)
    assert_no_leftover_sandbox(job_name, tmp_path / "scratch")
    for solve in dataset.glob("*/solution/solve.sh"):  # make the rerun quick
        solve.write_text("#!/bin/bash\necho ok > /app/out.txt\n")
    resumed = subprocess.run(
        [*RUN, "--resume", str(job_dir)], env=env, capture_output=True, text=True, timeout=SAFETY_TIMEOUT
    )
    assert resumed.returncode == 0, resumed.stderr
    final = results(job_dir)
    assert len(final) == 4 and all(r["failure"] is None and r["reward"] == 1.0 for r in final.values())


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["-a", "no-such-agent"], "unknown agent 'no-such-agent'"),
        (["-a", "nomod_xyz:Agent"], "cannot import module 'nomod_xyz'"),
        (["-k", "0"], "-k/--n-attempts"),  # the flag, not the internal field
        (["--agent-kwarg", "oops"], "agent kwarg 'oops' is not of the form key=value"),
    ],
)
@pytest.mark.needs_process
def test_usage_errors_exit_2_with_a_clear_message(tmp_path, extra, expected):
    dataset = slow_dataset(tmp_path, n=1, seconds=0)
    done = subprocess.run(
        [*RUN, str(dataset), "--jobs-dir", str(tmp_path / "jobs"), *extra],
        capture_output=True,
        text=True,
        timeout=SAFETY_TIMEOUT,
        env=cli_env(tmp_path),
    )
    assert done.returncode == 2
    assert expected in done.stderr


@pytest.mark.needs_process
def test_missing_dataset_and_bad_resume_dir_are_usage_errors(tmp_path):
    missing = subprocess.run([*RUN, str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    resume = subprocess.run([*RUN, "--resume", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert resume.returncode == 2 and "config.json does not exist" in resume.stderr


@pytest.mark.needs_process
def test_run_prints_a_summary_and_exits_0_even_when_rewards_are_0(tmp_path):
    dataset = slow_dataset(tmp_path, n=2, seconds=0)
    done = subprocess.run(
        [*RUN, str(dataset), "-a", "nop", "-a", "oracle", "-k", "2", "--jobs-dir", str(tmp_path / "jobs")],
        capture_output=True,
        text=True,
        timeout=SAFETY_TIMEOUT,
        env=cli_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert "nop" in done.stdout and "oracle" in done.stdout
    assert "@1 0.000" in done.stdout and "@2 1.000" in done.stdout
    assert "job directory:" in done.stdout


@pytest.mark.needs_process
def test_summary_shows_reward_per_task_and_agent(tmp_path, examples_dir):
    """The end-of-run summary names each task with each agent's reward, so a user sees which task failed."""
    args = [*RUN, str(examples_dir / "tasks"), "-a", "oracle", "-a", "nop", "--task", "create-file"]
    args += ["--task", "partial-credit", "--jobs-dir", str(tmp_path / "jobs")]
    proc = subprocess.run(
        args, env=cli_env(tmp_path), capture_output=True, text=True, timeout=SAFETY_TIMEOUT, check=False
    )
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[1]: line for line in proc.stdout.splitlines() if line.startswith("│ ")}
    tasks = ("evsys/create-file", "evsys/partial-credit")  # selected by their short names, shown in full
    assert set(tasks) <= set(rows), proc.stdout
    for task in tasks:
        cells = [c.strip() for c in rows[task].strip("│ ").split("│")]
        assert cells[1:] == ["0.000", "1.000"], rows[task]  # columns sorted: nop, oracle


@pytest.mark.needs_process
def test_without_a_terminal_progress_lines_arrive_while_the_job_runs(tmp_path):
    dataset = slow_dataset(tmp_path, n=2, seconds=3)
    proc = subprocess.Popen(
        [*RUN, str(dataset), "-a", "oracle", "-n", "1", "--jobs-dir", str(tmp_path / "jobs"),
         "--progress-interval", "0.5"],
        env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    first = proc.stderr.readline()  # blocks until the first line; the job is still running then
    running = proc.poll() is None
    out, rest = proc.communicate(timeout=SAFETY_TIMEOUT)
    assert first.startswith("progress: ") and "/2 trials" in first and "ETA" in first, first + rest
    assert running, "the first progress line came only after the job ended"
    assert "running 1" in first and "mean reward" in first
    assert rest.splitlines()[-1].startswith("progress: 2/2 trials")  # and a final line
    assert proc.returncode == 0 and "job directory" in out


@pytest.mark.needs_process
def test_a_job_that_fails_before_its_first_trial_prints_no_progress(tmp_path):
    dataset = slow_dataset(tmp_path, n=1, seconds=0)
    args = [*RUN, str(dataset), "-a", "oracle", "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "dup"]
    first = subprocess.run(
        args, env=cli_env(tmp_path), capture_output=True, text=True, timeout=SAFETY_TIMEOUT
    )
    assert first.returncode == 0 and "progress: 1/1 trials" in first.stderr  # control: a run shows progress
    again = subprocess.run(
        args, env=cli_env(tmp_path), capture_output=True, text=True, timeout=SAFETY_TIMEOUT
    )
    assert again.returncode == 2 and "already exists" in again.stderr
    assert "progress" not in again.stderr and "planning" not in again.stderr, again.stderr


@pytest.mark.needs_process
def test_option_errors_name_the_flags_not_internal_fields(tmp_path):
    dataset = slow_dataset(tmp_path, n=1, seconds=0)
    out = subprocess.run(
        [*RUN, str(dataset), "-k", "0", "-n", "0", "--jobs-dir", str(tmp_path / "jobs")],
        env={**cli_env(tmp_path), "COLUMNS": "300"}, capture_output=True, text=True, timeout=SAFETY_TIMEOUT,
    )  # fmt: skip
    assert out.returncode == 2
    assert "-k/--n-attempts: Input should be greater than or equal to 1" in out.stderr
    assert "-n/--n-concurrent" in out.stderr and "n_attempts" not in out.stderr


@pytest.mark.needs_process
def test_a_job_file_runs_with_the_flags_given_on_top_and_is_written_back_from_a_job(tmp_path):
    dataset = slow_dataset(tmp_path, n=2, seconds=0)
    jobs = tmp_path / "jobs"
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        f"datasets: [{dataset}]\nagents:\n  - name: nop\nn_attempts: 2\n"
        f"jobs_dir: {jobs}\njob_name: from-file\n"
    )
    env = cli_env(tmp_path)
    first = subprocess.run(
        [*RUN, "-c", str(job_file), "-k", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=SAFETY_TIMEOUT,
    )
    assert first.returncode == 0, first.stderr
    ran = results(jobs / "from-file")
    assert sorted(ran) == ["slow-0__nop__1", "slow-1__nop__1"]  # nop from the file, -k 1 from the flag
    written = subprocess.run(
        [sys.executable, "-m", "evsys.cli.main", "jobs", "config", str(jobs / "from-file")],
        env=env, capture_output=True, text=True, timeout=SAFETY_TIMEOUT,
    )  # fmt: skip
    assert written.returncode == 0 and "job_name" not in written.stdout and "n_attempts: 1" in written.stdout
    (tmp_path / "again.yaml").write_text(written.stdout)
    again = subprocess.run(
        [*RUN, "-c", str(tmp_path / "again.yaml"), "-a", "oracle", "--job-name", "again"],
        env=env, capture_output=True, text=True, timeout=SAFETY_TIMEOUT,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert {r["reward"] for r in results(jobs / "again").values()} == {1.0}  # -a replaced the file's agents
    assert sorted(results(jobs / "again")) == ["slow-0__oracle__1", "slow-1__oracle__1"]


@pytest.mark.needs_process
def test_a_job_file_with_a_misspelt_key_is_a_usage_error_naming_it(tmp_path):
    job_file = tmp_path / "job.yaml"
    job_file.write_text(f"datasets: [{tmp_path}]\nn_atempts: 2\nagents:\n  - name: oracle\n    kwarg: {{}}\n")
    out = subprocess.run(
        [*RUN, "-c", str(job_file)], env={**cli_env(tmp_path), "COLUMNS": "300"},
        capture_output=True, text=True, timeout=SAFETY_TIMEOUT,
    )  # fmt: skip
    assert out.returncode == 2
    assert f"job file {job_file}: " in out.stderr
    assert "line 2: n_atempts: Extra inputs are not permitted (did you mean 'n_attempts'?)" in out.stderr
    assert "line 5: agents.0.kwarg: Extra inputs are not permitted (did you mean 'kwargs'?)" in out.stderr


@pytest.mark.needs_process
@pytest.mark.needs_sandbox
def test_an_env_file_line_that_is_not_key_value_stops_the_run_naming_file_and_line(tmp_path):
    env_file = tmp_path / "agent.env"
    env_file.write_text("GOOD=1\nANTHROPIC_API_KEY sk-123\n")
    out = subprocess.run(
        [*RUN, str(slow_dataset(tmp_path, n=1, seconds=0)), "-a", "oracle", "--env-file", str(env_file),
         "--jobs-dir", str(tmp_path / "jobs")],
        env={**cli_env(tmp_path), "COLUMNS": "300"}, capture_output=True, text=True, timeout=SAFETY_TIMEOUT,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert f"--env-file {env_file}:2: 'ANTHROPIC_API_KEY sk-123' is not KEY=VALUE" in out.stderr
    assert not (tmp_path / "jobs").exists()


@pytest.mark.needs_process
def test_agent_env_reaches_the_agent_and_is_never_written_in_clear(tmp_path):
    dataset = slow_dataset(tmp_path, n=1, seconds=0)
    token, from_file = f"secret-{secrets.token_hex(8)}", f"secret-{secrets.token_hex(8)}"
    env_file = tmp_path / "agent.env"
    env_file.write_text(f"# keys for the agent\nFROM_FILE={from_file}\n")
    jobs = tmp_path / "jobs"
    args = [
        *RUN,
        str(dataset),
        "-a",
        "engine_agents:EnvCheckAgent",
        "--jobs-dir",
        str(jobs),
        "--job-name",
        "env",
    ]
    run = subprocess.run(
        [*args, "--agent-env", f"TOKEN={token}", "--env-file", str(env_file)],
        env=cli_env(tmp_path), cwd=Path(__file__).parent,
        capture_output=True, text=True, timeout=SAFETY_TIMEOUT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (result,) = results(jobs / "env").values()
    assert result["reward"] == 1.0  # the agent saw both values
    assert result["agent_metadata"]["env_names"] == ["FROM_FILE", "TOKEN"]
    saved = json.loads((jobs / "env" / "config.json").read_text())
    assert saved["agents"][0]["env"] == {"TOKEN": "**********", "FROM_FILE": "**********"}
    for path in (jobs / "env").rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert token.encode() not in text and from_file.encode() not in text, f"a value is in {path}"
    resumed = subprocess.run(
        [*RUN, "--resume", str(jobs / "env")],
        env=cli_env(tmp_path), cwd=Path(__file__).parent,
        capture_output=True, text=True, timeout=SAFETY_TIMEOUT,
    )  # fmt: skip
    assert resumed.returncode == 2 and "give the values again" in resumed.stderr
