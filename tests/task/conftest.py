"""Fixtures for the task-loading tests: a factory that writes small task directories."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

TEST_SH = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
SOLVE_SH = "#!/bin/bash\ntrue\n"
BASIC_TOML = '[task]\nname = "{name}"\n\n[agent]\ntimeout_sec = 30\n'

MakeTask = Callable[..., Path]


@pytest.fixture
def make_task(tmp_path: Path) -> MakeTask:
    """Write a task directory under tmp_path; pass None for a file to leave it out."""

    def make(
        name: str = "demo",
        *,
        toml: str | None = BASIC_TOML,
        instruction: str | None = "Do the thing.\n",
        test_sh: str | None = TEST_SH,
        solve_sh: str | None = SOLVE_SH,
        dockerfile: str | None = None,
        files: dict[str, str] | None = None,
        parent: Path | None = None,
    ) -> Path:
        root = (parent or tmp_path) / name
        root.mkdir(parents=True)
        contents = {
            "task.toml": toml.replace("{name}", name) if toml is not None else None,
            "instruction.md": instruction,
            "tests/test.sh": test_sh,
            "solution/solve.sh": solve_sh,
            "environment/Dockerfile": dockerfile,
            **(files or {}),
        }
        for relative, text in contents.items():
            if text is None:
                continue
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if relative.endswith(".sh"):
                os.chmod(path, 0o755)
        return root

    return make
