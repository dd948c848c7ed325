"""A jobs directory, job or output file on a read-only filesystem: `evsys run`, `run --resume`, `run
--jobs-dir` and `jobs config -o` say so in one `error:` line (exit 2) before any work starts, never with a
traceback. The read-only places are real read-only mounts (root ignores permission bits)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_tasks import make_task

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only filesystem needs root")


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def prove_read_only(place: Path) -> None:
    """Positive control: writing in `place` really fails, for root too."""
    with pytest.raises(OSError) as refused:
        (place / "probe").write_text("x")
    assert refused.value.errno == errno.EROFS


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """`empty`: an empty read-only tmpfs; `jobs`: a read-only bind mount of tmp_path/rw (the jobs written
    there before, through the writable path `rw`, show up read-only)."""
    empty, writable, frozen = tmp_path / "empty", tmp_path / "rw", tmp_path / "ro"
    for place in (empty, writable, frozen):
        place.mkdir()
    mount("-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(empty))
    mount("--bind", str(writable), str(frozen))
    try:
        mount("-o", "remount,bind,ro", str(frozen))
        yield {"empty": empty, "rw": writable, "ro": frozen}
    finally:
        subprocess.run(["umount", "-l", str(frozen)], check=False)
        subprocess.run(["umount", "-l", str(empty)], check=False)


def evsys(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real `evsys` command (as a user runs it, with its top-level error handling)."""
    env = {**os.environ, "COLUMNS": "200", "EVSYS_SANDBOX_DIR": str(cwd / "scratch")}
    return subprocess.run(
        [sys.executable, "-m", "evsys", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def one_error_line(out: subprocess.CompletedProcess[str], *expected: str) -> None:
    """Exit 2, a single `error:` line on stderr holding each of `expected`, nothing on stdout."""
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert "Traceback" not in out.stderr and not out.stdout.strip()
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.mark.needs_process
def test_a_new_job_in_a_read_only_place_is_refused_before_it_starts(tmp_path, read_only):
    empty = read_only["empty"]
    prove_read_only(empty)
    task = make_task(tmp_path / "tasks", "write-ok")
    for jobs in (empty, empty / "jobs"):
        out = evsys("run", task, "-a", "oracle", "--jobs-dir", jobs, cwd=tmp_path)
        one_error_line(out, f"--jobs-dir {jobs}", f"cannot write in {empty}", "Read-only file system")
    out = evsys("run", task, "-a", "oracle", cwd=empty)  # the default jobs/ in a read-only directory
    one_error_line(out, "--jobs-dir jobs", "Read-only file system")
    assert not list(empty.iterdir())
    assert not list(tmp_path.glob("evsys-exception-*"))


@pytest.mark.needs_process
def test_resuming_or_exporting_the_config_of_a_read_only_job_is_one_line(tmp_path, read_only):
    task = make_task(tmp_path / "tasks", "write-ok")
    first = evsys("run", task, "-a", "oracle", "--jobs-dir", read_only["rw"], "--job-name", "j", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    job = read_only["ro"] / "j"
    assert (job / "config.json").is_file()
    prove_read_only(job)

    one_error_line(evsys("run", "--resume", job, cwd=tmp_path), f"--resume {job}", "Read-only file system")
    assert not (job / "exception.txt").exists()

    target = read_only["empty"] / "job.yaml"
    out = evsys("jobs", "config", job, "-o", target, cwd=tmp_path)
    one_error_line(out, f"-o {target}", "Read-only file system")
    printed = evsys("jobs", "config", job, cwd=tmp_path)  # reading a read-only job still works
    assert printed.returncode == 0 and "agents" in printed.stdout, printed.stderr


@pytest.mark.needs_process
def test_any_other_command_failing_on_a_file_says_which_in_one_line(read_only):
    """The `evsys` command's own net: an OSError naming a file is one line from any command (`tasks new`
    scaffolding into a read-only directory here)."""
    empty = read_only["empty"]
    prove_read_only(empty)
    one_error_line(evsys("tasks", "new", "hello", cwd=empty), "hello: Read-only file system")
