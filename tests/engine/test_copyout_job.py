"""Hostile /logs through whole jobs: a name that is not UTF-8 and log bombs beside ordinary trials."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evsys.engine import Job, JobConfig

# the agent's solution: the right answer, plus /logs entries whose names hold the bytes ff fe (not UTF-8): a
# file, and a link out that evsys refuses (so a warning names it)
BAD_NAME_SOLVE = (
    "#!/bin/bash\necho ok > /app/out.txt\ntouch /logs/agent/$'bad-\\xff\\xfe-name'\n"
    "ln -s /etc/passwd /logs/agent/$'link-\\xff\\xfe'\n"
)


def read_result(trial_dir: Path) -> dict:
    return json.loads((trial_dir / "result.json").read_bytes().decode("utf-8"))  # strict: valid UTF-8


@pytest.mark.needs_sandbox
async def test_a_name_that_is_not_utf8_fails_nothing_and_resume_is_a_noop(task_factory):
    task_factory("bad-name", solve=BAD_NAME_SOLVE)
    task_factory("plain")
    config = JobConfig(
        datasets=[task_factory.dataset],
        jobs_dir=task_factory.dataset.parent / "jobs",
        job_name="badname",
    )
    result = await Job(config).run()
    assert result.complete and result.n_errors == 0
    assert {t.task_name: t.reward for t in result.trials} == {"bad-name": 1.0, "plain": 1.0}
    job_dir = config.job_dir
    bad = next(d for d in job_dir.iterdir() if d.name.startswith("bad-name"))
    # positive control: the attack ran, the file with the undecodable name reached the trial dir
    assert b"bad-\xff\xfe-name" in os.listdir(os.fsencode(bad / "agent"))
    saved = read_result(bad)
    assert saved["reward"] == 1.0
    assert any("\\xff\\xfe" in w for w in saved["warnings"]), saved["warnings"]
    assert read_result(job_dir)["complete"] is True
    before = {d.name: read_result(d)["started_at"] for d in job_dir.iterdir() if d.is_dir()}
    resumed = await Job.resume(job_dir).run()
    assert resumed.complete and resumed.n_done == 2
    after = {d.name: read_result(d)["started_at"] for d in job_dir.iterdir() if d.is_dir()}
    assert after == before  # nothing ran again


TOML = (
    '[task]\nname = "{name}"\n[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n'
    '[environment]\nworkdir = "/app"\nnetwork_mode = "no-network"\n{extra}'
)
BOMBS = {
    # a 2 GiB sparse file in a 64 MB sandbox
    "bomb-sparse": ("truncate -s 2G /logs/agent/sparse\n", "storage_mb = 64\n"),
    # 20,000 empty files; the task's own [environment.logs] lowers the entry cap
    "bomb-files": (
        "mkdir /logs/agent/many && cd /logs/agent/many && seq 20000 | xargs touch\n",
        "[environment.logs]\nmax_entries = 500\n",
    ),
    # more bytes than the default byte cap, in files under the single-file cap
    "bomb-bytes": ("for i in 1 2 3 4; do head -c 30M /dev/urandom > /logs/artifacts/blob$i; done\n", ""),
    # a chain of links climbing out of the log directory
    "bomb-links": (
        "cd /logs/agent && ln -s . l0 && for i in $(seq 1 12); do ln -s l$((i-1))/.. l$i; done\n"
        "ln -s l12/etc/passwd leak\n",
        "",
    ),
    "bomb-name": ("touch /logs/agent/$'\\xff\\xfe'; ln -s /etc $'/logs/agent/\\xfe-out'\n", ""),
}
# the wrapper reports the orchestrator's own peak RSS (VmHWM) however `evsys run` ends
RSS_WRAPPER = (
    "import runpy, sys\n"
    "sys.argv = ['evsys', *sys.argv[2:]]\n"
    "try:\n    runpy.run_module('evsys.cli.main', run_name='__main__')\n"
    "finally:\n"
    "    status = open('/proc/self/status').read()\n"
    "    hwm = int(status.split('VmHWM:')[1].split()[0])\n"
    "    open(sys.argv_out if hasattr(sys, 'argv_out') else RSS_FILE, 'w').write(str(hwm))\n"
)


def run_cli(args: list[str], rss_file: Path) -> subprocess.CompletedProcess:
    code = f"RSS_FILE = {str(rss_file)!r}\n" + RSS_WRAPPER
    return subprocess.run(
        [sys.executable, "-c", code, "--", *args], capture_output=True, text=True, timeout=900
    )


@pytest.mark.needs_process
@pytest.mark.slow
def test_log_bombs_beside_ordinary_trials_at_n4(task_factory, tmp_path):
    for name, (attack, extra) in BOMBS.items():
        solve = f"#!/bin/bash\nset -e\necho ok > /app/out.txt\n{attack}"
        task_factory(name, solve=solve, toml=TOML.format(name=name, extra=extra))
    for i in range(3):
        task_factory(f"ordinary-{i}")
    jobs = tmp_path / "jobs"
    rss = tmp_path / "rss-kib"
    args = ["run", str(task_factory.dataset), "-n", "4", "--jobs-dir", str(jobs), "--job-name", "mix"]
    done = run_cli(args, rss)
    assert done.returncode == 0, done.stderr[-3000:]
    job_dir = jobs / "mix"
    trials = {read_result(d)["task_name"]: read_result(d) for d in job_dir.iterdir() if d.is_dir()}
    assert {name: t["reward"] for name, t in trials.items()} == {name: 1.0 for name in trials}
    assert len(trials) == len(BOMBS) + 3
    # positive controls: each attack ran and reached the copy (its trace is in the trial dir or warnings)
    dirs = {read_result(d)["task_name"]: d for d in job_dir.iterdir() if d.is_dir()}
    assert (dirs["bomb-sparse"] / "agent" / "sparse").exists()
    assert (dirs["bomb-files"] / "agent" / "many").is_dir()
    assert (dirs["bomb-links"] / "agent" / "l0").is_symlink()
    assert b"\xff\xfe" in os.listdir(os.fsencode(dirs["bomb-name"] / "agent"))
    warnings = {name: " ".join(t["warnings"]) for name, t in trials.items()}
    assert "sparse" in warnings["bomb-sparse"]
    assert "entry cap (500)" in warnings["bomb-files"]
    assert "byte cap" in warnings["bomb-bytes"]
    assert "resolves outside" in warnings["bomb-links"]
    assert "\\xfe-out" in warnings["bomb-name"]
    assert not any(warnings[f"ordinary-{i}"] for i in range(3))
    for d in dirs.values():
        for link in (p for p in d.rglob("*") if p.is_symlink()):
            assert os.path.realpath(link).startswith(str(d) + "/"), link
    assert read_result(job_dir)["complete"] is True
    peak_kib = int(rss.read_text())
    print(f"orchestrator peak RSS: {peak_kib} KiB")
    assert peak_kib < 1024 * 1024, f"orchestrator peak RSS {peak_kib} KiB"
    before = {name: t["started_at"] for name, t in trials.items()}
    resumed = run_cli(["run", "--resume", str(job_dir)], tmp_path / "rss-resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = {
        read_result(d)["task_name"]: read_result(d)["started_at"] for d in job_dir.iterdir() if d.is_dir()
    }
    assert after == before  # resume ran nothing again
