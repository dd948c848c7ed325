"""`EvsysEnvironment` on Harbor's `BaseEnvironment` contract, driven through Harbor's own classes (loaded by
import path with Harbor's EnvironmentFactory, as `harbor run -e` does) under Harbor's Python: see
contract_probe.py, which prints what each call gave."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from harbor_runs import harbor_env

PROBE = Path(__file__).resolve().parent / "contract_probe.py"


def probe(harbor: Path, scratch: Path, name: str) -> dict:
    """What contract_probe.py's probe `name` saw."""
    argv = [str(harbor / "bin" / "python"), str(PROBE), str(scratch), name]
    done = subprocess.run(argv, capture_output=True, text=True, env=harbor_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)[name]


def test_exec_runs_as_the_user_in_the_directory_with_the_variables_asked_for(tmp_path, harbor):
    got = probe(harbor, tmp_path, "commands")
    assert got["type"] == "evsys"
    # no user named: the image's (root, as in Harbor's Docker environment); names and uids map onto the
    # sandbox's two users; Harbor's scoped default user applies
    assert (got["default_user"], got["root_by_uid"]) == ("root", "root")
    assert (got["agent_by_name"], got["agent_by_uid"], got["scoped_default_user"]) == ("agent",) * 3
    assert (got["cwd_default"], got["cwd_given"]) == ("/app", "/tmp")
    assert got["seed"] == "from the Dockerfile"  # the Dockerfile's COPY
    assert (got["env_given"], got["env_task"]) == ("given-value", "task-value")
    assert got["exit_and_stderr"] == [3, "to-stderr\n"]
    assert got["timeout"] == "Command timed out after 1 seconds"
    assert got["after_stop"] == "RuntimeError"


def test_files_and_directories_go_in_and_come_out(tmp_path, harbor):
    got = probe(harbor, tmp_path, "files")
    assert got["uploaded"] == "one file\ntop\ndeep"
    assert got["downloaded_file"] == "made\n"
    assert got["downloaded_dir"] == ["a.txt", "sub/b.txt"]
    assert got["is_dir"] == [True, False]


@pytest.mark.slow
def test_network_policy_switches_and_declared_memory_holds(tmp_path, harbor):
    got = probe(harbor, tmp_path, "network_and_limits")
    assert (got["public"], got["switched_off"], got["switched_back"]) == ("open", "closed", "open")
    # 400 MiB: fine without a limit (the positive control), killed within the task's memory_mb = 128
    assert (got["memory_unlimited"], got["memory_limited"]) == (0, 137)
    assert got["healthcheck"] == "Healthcheck failed after 2 consecutive retries: false"
