"""`evsys run --keep-state`, `evsys trial files` and `evsys rescore`, as a user runs them (in-process CLI)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evsys.cli.main import app

pytestmark = pytest.mark.needs_sandbox  # every test runs trials in local sandboxes

# writes the answer, deletes a file of a lower layer, replaces a lower directory as a whole, leaves a fifo
# and a link to a host-looking absolute path
SOLVE = (
    "#!/bin/bash\nset -e\necho ok > /app/out.txt\nchown agent:agent /app/out.txt\nrm /etc/hostname\n"
    "rm -rf /opt && mkdir /opt && echo new > /opt/only.txt\nmkfifo /app/pipe\nln -s /etc/passwd /app/link\n"
)
# a corrected verifier: a fifth for each of the answer, its owner, the deletion and the replaced directory, so
# its reward (0.8) differs from the task's own and depends on every part of the kept state
CHANGED_TEST = (
    "#!/bin/bash\nr=0\n"
    '[ "$(cat /app/out.txt 2>/dev/null)" = ok ] && r=$((r + 20))\n'
    '[ "$(stat -c %U /app/out.txt 2>/dev/null)" = agent ] && r=$((r + 20))\n'
    "[ -e /etc/hostname ] || r=$((r + 20))\n"
    '[ -e /opt/only.txt ] && [ "$(ls /opt)" = only.txt ] && r=$((r + 20))\n'
    "printf '%d.%02d\\n' $((r / 100)) $((r % 100)) > /logs/verifier/reward.txt\n"
)
TIMEOUT_SOLVE = "#!/bin/bash\necho ok > /app/out.txt\nsleep 300\n"


def evsys(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def run_kept_job(task_factory, tmp_path: Path, name: str, *flags: str) -> Path:
    """`evsys run` of the task_factory dataset with --keep-state and `flags`; the job dir."""
    jobs = ["--jobs-dir", str(tmp_path / "jobs"), "--job-name", name, "--no-model-probe"]
    evsys("run", str(task_factory.dataset), "--keep-state", *flags, *jobs)
    return tmp_path / "jobs" / name


def run_kept(task_factory, tmp_path: Path, *agents: str) -> Path:
    task_factory("answer", solve=SOLVE)
    return run_kept_job(task_factory, tmp_path, "kept", *[f for agent in agents for f in ("-a", agent)])


def reward(result_json: Path) -> float | None:
    return json.loads(result_json.read_text())["reward"]


def test_keep_state_keeps_writes_and_deletions_not_devices(task_factory, tmp_path: Path) -> None:
    trial = run_kept(task_factory, tmp_path, "oracle") / "answer__oracle__1"
    manifest = json.loads((trial / "state" / "manifest.json").read_text())
    assert "/etc/hostname" in manifest["deletions"]
    assert "/opt" in manifest["opaque_dirs"]
    assert manifest["skipped"] == ["/app/pipe"]
    with tarfile.open(trial / "state" / "upper.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert all(m.isreg() or m.isdir() or m.issym() for m in members.values())  # no whiteout, no fifo
    assert "etc/hostname" not in members and members["app/link"].linkname == "/etc/passwd"
    assert evsys("trial", "files", str(trial), "/app/out.txt") == "ok\n"
    listing = evsys("trial", "files", str(trial))
    assert "/app/out.txt" in listing and "deleted /etc/hostname" in listing


def test_trial_files_extracts_without_links_out(task_factory, tmp_path: Path) -> None:
    trial = run_kept(task_factory, tmp_path, "oracle") / "answer__oracle__1"
    assert "/app/link -> /etc/passwd" in evsys("trial", "files", str(trial), "/app")  # the link was kept
    out = tmp_path / "out"
    evsys("trial", "files", str(trial), "/app", "-o", str(out))
    assert (out / "app" / "out.txt").read_text() == "ok\n"
    assert not (out / "app" / "link").is_symlink()  # never a host link to the host's /etc/passwd


def test_state_kept_after_agent_timeout(task_factory, tmp_path: Path) -> None:
    task_factory("slow", solve=TIMEOUT_SOLVE, agent_timeout=1.0)
    trial = run_kept_job(task_factory, tmp_path, "slow", "-a", "oracle") / "slow__oracle__1"
    assert json.loads((trial / "result.json").read_text())["failure"]["cause"] == "agent_timeout"
    assert evsys("trial", "files", str(trial), "/app/out.txt") == "ok\n"


def test_rescore_reproduces_rewards_and_applies_changed_tests(task_factory, tmp_path: Path) -> None:
    job = run_kept(task_factory, tmp_path, "oracle", "nop")
    trials = {name: job / f"answer__{name}__1" for name in ("oracle", "nop")}
    before = {name: (trial / "result.json").read_bytes() for name, trial in trials.items()}
    assert [reward(t / "result.json") for t in trials.values()] == [1.0, 0.0]

    rows = json.loads(evsys("rescore", str(job), "--json"))
    assert {r["trial_name"]: (r["old_reward"], r["new_reward"]) for r in rows} == {
        "answer__oracle__1": (1.0, 1.0),
        "answer__nop__1": (0.0, 0.0),
    }
    tests = tmp_path / "corrected"
    tests.mkdir()
    (tests / "test.sh").write_text(CHANGED_TEST)
    rows = json.loads(evsys("rescore", str(job), "--tests", str(tests), "--json"))
    new = {r["trial_name"]: r["new_reward"] for r in rows}
    # the corrected tests ran, and saw the answer, the deletion and the replaced directory the agent left
    assert new == {"answer__oracle__1": 0.8, "answer__nop__1": 0.0}
    for name, trial in trials.items():
        assert (trial / "result.json").read_bytes() == before[name]  # the trial's own result untouched
        assert len(list((trial / "rescore").glob("*/result.json"))) == 2  # both rescores kept, side by side


def test_state_over_its_limit_is_cut_with_a_warning(task_factory, tmp_path: Path) -> None:
    solve = "#!/bin/bash\nhead -c 2000000 /dev/urandom > /app/big.bin\necho ok > /app/out.txt\n"
    task_factory("big", solve=solve)
    trial = (
        run_kept_job(task_factory, tmp_path, "big", "-a", "oracle", "--keep-state-limit", "1")
        / "big__oracle__1"
    )
    manifest = json.loads((trial / "state" / "manifest.json").read_text())
    assert manifest["cut"] == ["/app/big.bin"] and manifest["size"] <= 1024 * 1024
    warnings = json.loads((trial / "result.json").read_text())["warnings"]
    assert any("exceeds 1 MB" in w and "/app/big.bin" in w for w in warnings)
    assert evsys("trial", "files", str(trial), "/app/out.txt") == "ok\n"  # what fits is kept


def test_a_job_without_kept_state_is_not_rescored(task_factory, tmp_path: Path) -> None:
    task_factory("plain")
    jobs = ["--jobs-dir", str(tmp_path / "jobs"), "--job-name", "plain", "--no-model-probe"]
    evsys("run", str(task_factory.dataset), "-a", "oracle", *jobs)
    job = tmp_path / "jobs" / "plain"
    (row,) = json.loads(evsys("rescore", str(job), "--json"))
    assert (row["old_reward"], row["new_reward"], row["result_dir"]) == (1.0, None, None)
    assert "--keep-state" in row["skipped"]
    files = CliRunner().invoke(app, ["trial", "files", str(job / "plain__oracle__1")])
    assert files.exit_code == 2 and "kept no state" in files.output
    assert not (job / "plain__oracle__1" / "rescore").exists()
