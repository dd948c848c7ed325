"""A custom agent from the current directory (`-a my_agents:Boom`) run by a launcher like the installed
`evsys` script; its exception's traceback lands in the trial's exception.txt, the terminal shows none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_tasks import make_task

AGENT = """
from evsys.agent.base import Agent, AgentResult


class Boom(Agent):
    name = "boom"

    async def setup(self, sandbox, ctx):
        return None

    async def run(self, instruction, sandbox, ctx):
        return explode_deep_inside()


def explode_deep_inside():
    raise RuntimeError("the custom agent broke")
"""


@pytest.mark.needs_process
def test_custom_agent_from_cwd_and_its_traceback_in_exception_txt(tmp_path: Path):
    project = tmp_path / "project"
    (project / "my_agents").mkdir(parents=True)
    (project / "my_agents" / "__init__.py").write_text(AGENT)
    make_task(tmp_path / "tasks", "write-ok")
    launcher = tmp_path / "bin" / "evsys"  # sys.path[0] is the script's directory, as for a console script
    launcher.parent.mkdir()
    launcher.write_text("from evsys.cli.main import app\napp()\n")
    env = {**os.environ, "EVSYS_SANDBOX_DIR": str(tmp_path / "scratch"), "COLUMNS": "200"}
    done = subprocess.run(
        [
            sys.executable,
            str(launcher),
            "run",
            str(tmp_path / "tasks"),
            "-a",
            "my_agents:Boom",
            "--job-name",
            "j",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    trial_dir = project / "jobs" / "j" / "write-ok__Boom__1"
    result = json.loads((trial_dir / "result.json").read_text())
    assert result["failure"]["cause"] == "agent_error"
    assert "the custom agent broke" in result["failure"]["message"]
    assert result["exception_file"] == "exception.txt"
    traceback = (trial_dir / "exception.txt").read_text()
    assert "Traceback" in traceback and "explode_deep_inside" in traceback
    assert "Traceback" not in done.stdout + done.stderr
    assert f"{trial_dir.relative_to(project)}/exception.txt" in done.stdout
