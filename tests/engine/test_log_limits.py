"""Where a trial's /logs bounds come from: the job's --log-limit, the task's [environment.logs], defaults."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from evsys.engine import JobConfig
from evsys.engine.plan import plan_trials
from evsys.records import DEFAULT_LIMITS, parse_limit
from evsys.sandbox.copyout import CopiedTree


def test_the_job_wins_over_the_task_and_defaults_fill_the_rest(task_factory, tmp_path):
    toml = '[task]\nname = "t"\n[environment.logs]\nmax_entries = 100\nmax_depth = 5\n'
    task_factory("t", toml=toml)
    task_factory("plain")
    config = JobConfig(
        datasets=[task_factory.dataset], jobs_dir=tmp_path / "jobs", log_limits={"max_depth": 9}
    )
    limits = {p.config.task_name: p.config.log_limits for p in plan_trials(config)}
    assert limits["t"].max_entries == 100 and limits["t"].max_depth == 9
    assert limits["t"].max_bytes == DEFAULT_LIMITS.max_bytes
    assert limits["plain"].max_entries == DEFAULT_LIMITS.max_entries and limits["plain"].max_depth == 9


@pytest.mark.parametrize(
    ("text", "expected"),
    [("max_bytes=10M", ("max_bytes", 10 << 20)), ("max-entries=5", ("max_entries", 5))],
)
def test_log_limit_flags_parse(text, expected):
    assert parse_limit(text) == expected


@pytest.mark.parametrize("text", ["max_size=1", "max_bytes=-1", "max_bytes=lots", "max_bytes"])
def test_a_bad_log_limit_names_the_flag_and_value(text):
    with pytest.raises(ValueError, match="--log-limit"):
        parse_limit(text)


@pytest.mark.needs_sandbox
def test_evsys_run_saves_its_log_limits_and_refuses_bad_ones(task_factory, tmp_path):
    task_factory("t")
    jobs = tmp_path / "jobs"
    run = [sys.executable, "-m", "evsys.cli.main", "run", str(task_factory.dataset), "--jobs-dir", str(jobs)]
    bad = subprocess.run([*run, "--log-limit", "max_size=3"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "max_size=3" in bad.stderr and "max_entries" in bad.stderr
    assert not jobs.exists()
    good = subprocess.run(
        [*run, "--job-name", "j", "--log-limit", "max_file_bytes=1K", "-a", "nop"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert good.returncode == 0, good.stderr
    saved = json.loads((jobs / "j" / "config.json").read_text())
    assert saved["log_limits"]["max_file_bytes"] == 1024


def test_a_bounded_copy_reads_back_in_order_and_frees_its_chunks():
    tree = CopiedTree(chunks=[b"ab", b"", b"cde", b"f"])
    reader = tree.reader()
    assert reader.read(1) == b"a" and reader.read(3) == b"bcd" and reader.read() == b"ef"
    assert reader.read(5) == b"" and tree.chunks == []


def test_a_bad_environment_logs_table_names_the_file_and_field(task_factory):
    from evsys.task import TaskLoadError, load_task

    path = task_factory("t", toml='[environment.logs]\nmax_entries = 0\nmax_size = "1G"\n')
    with pytest.raises(TaskLoadError) as err:
        load_task(path)
    assert "task.toml:environment.logs.max_entries" in str(err.value)
    assert "task.toml:environment.logs.max_size" in str(err.value)
