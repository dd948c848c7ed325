"""`evsys doctor`: the checks and the command's table and exit code."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from evsys.cli.doctor import doctor
from evsys.sandbox.local import doctor as checks
from evsys.sandbox.local.cgroups import CgroupLayout


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(doctor)
    return app


@pytest.mark.needs_sandbox
def test_checks_find_what_this_machine_has():
    found = {c.name: c for c in checks.run_checks(smoke=False)}
    assert found["bubblewrap"].ok and "bubblewrap" in found["bubblewrap"].detail
    assert found["memory_mb limit"].ok and found["pids_max limit"].ok  # cgroup v1 on this machine
    assert "enforced by cgroup v1 memory" in found["memory_mb limit"].detail
    assert found["seccomp"].ok and "syscalls denied" in found["seccomp"].detail
    assert found["machinery headroom"].ok  # memory and pids cgroups: the nested layout
    score = found["daemon oom_score_adj -1000"]  # no CAP_SYS_RESOURCE in this container: said, and harmless
    assert score.ok and score.detail.startswith("NOT SET (no CAP_SYS_RESOURCE); the nested cgroups keep")


def test_doctor_says_when_the_machinery_has_no_headroom():
    layout = CgroupLayout(2, {"pids": Path("/sys/fs/cgroup/x")}, {"memory": "not delegated to evsys"})
    [headroom, _] = checks.check_headroom(layout)
    assert not headroom.ok and "NOT SET: no nested memory cgroups (not delegated" in headroom.detail


@pytest.mark.needs_sandbox
def test_doctor_prints_a_table_and_exits_0_when_everything_works(monkeypatch):
    monkeypatch.setattr(
        checks, "check_link_protections", lambda: checks.Check("link protections", True, "on")
    )
    result = CliRunner().invoke(_app(), [])
    assert result.exit_code == 0, result.output
    assert "sandbox smoke test" in result.output and "fully supported" in result.output


@pytest.mark.needs_images
def test_doctor_exits_1_with_the_fix_when_something_required_is_missing(monkeypatch):
    monkeypatch.setattr(
        checks,
        "check_bwrap",
        lambda: checks.Check("bubblewrap", False, "bwrap not found", "apt-get install bubblewrap"),
    )
    result = CliRunner().invoke(_app(), [], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "apt-get install bubblewrap" in result.output
    assert "cannot run here" in result.output and "smoke" not in result.output


def test_doctor_reports_the_kernels_link_protections_when_they_are_off(monkeypatch, tmp_path):
    for name, value in (
        ("protected_symlinks", "0"),
        ("protected_hardlinks", "1"),
        ("protected_regular", "0"),
    ):
        (tmp_path / name).write_text(value + "\n")
    monkeypatch.setattr(checks, "SYSCTL_FS", tmp_path)
    found = checks.check_link_protections()
    assert not found.ok and not found.required  # degraded, not broken
    assert "fs.protected_symlinks=0" in found.detail and "fs.protected_hardlinks=1" in found.detail
    assert found.fix == "sysctl -w fs.protected_symlinks=1 fs.protected_regular=1"
    (tmp_path / "protected_symlinks").write_text("1\n")
    (tmp_path / "protected_regular").write_text("2\n")
    assert checks.check_link_protections().ok


@pytest.mark.needs_sandbox
def test_doctor_on_an_80_column_terminal_wraps_and_cuts_nothing(monkeypatch):
    long_path = "/var/tmp/evsys-sandbox-cache/exec-daemon/" + "x" * 40
    monkeypatch.setattr(
        checks, "check_bwrap", lambda: checks.Check("bubblewrap", True, f"bubblewrap at {long_path}")
    )
    result = CliRunner().invoke(_app(), [], env={"COLUMNS": "80"})
    # no cell is cut by the table (a message evsys itself shortened at a word boundary says "… " there)
    assert not [line for line in result.output.splitlines() if "…" in line and "… " not in line]
    folded = "".join(line.split("│")[3].strip() for line in result.output.splitlines() if line.count("│") > 3)
    assert long_path in folded  # the whole path is there, wrapped over lines
