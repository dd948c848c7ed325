"""Scaffold a task directory (`evsys tasks new`) that `evsys tasks check` accepts and the oracle solves."""

from __future__ import annotations

import os
import re
from pathlib import Path

from evsys.util.atomic import write_text_atomic

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
DEFAULT_ORG = "local"
"""The org of a task scaffolded by its short name: Harbor needs `[task] name` as `org/name`."""

INSTRUCTION = """\
Create the file `/app/hello.txt` containing exactly one line: `Hello, world!`

(Replace this with what the agent should do. Everything in this file is shown to the agent as is.)
"""

TASK_TOML = """\
# Task configuration (Harbor task.toml, schema 1.4). Every key is optional; defaults are shown commented out.

[task]
name = "{name}"                 # Harbor's org/name; evsys also selects the task by the part after "/"
version = "0.1.0"
description = "Write hello.txt (replace with a one-line summary of the task)."

[metadata]
# Free-form; shown in reports and used to filter datasets.
difficulty = "easy"
category = "file-creation"
tags = ["example"]

[agent]
timeout_sec = 60.0              # wall-clock limit for the agent's run
# setup_timeout_sec = 360.0     # limit for installing the agent into the sandbox
# user = "agent"                # user the agent runs as

[verifier]
timeout_sec = 60.0              # limit for tests/test.sh
# env = {{ KEY = "value" }}       # extra environment for tests/test.sh
# user = "root"
# environment_mode = "shared"   # "shared" (the agent's sandbox) or "separate"

[environment]
# build_timeout_sec = 600.0
# docker_image = "python:3.12"  # prebuilt image (instead of environment/Dockerfile)
# cpus = 1
# memory_mb = 2048              # legacy form: memory = "2G"
# storage_mb = 10240            # legacy form: storage = "10G"
# gpus = 0
# env = {{ KEY = "value" }}       # extra environment for the agent
# workdir = "/app"              # default: the Dockerfile's WORKDIR, else /app
# network_mode = "no-network"   # "no-network", "public" or "allowlist" (legacy: allow_internet = true)
# allowed_hosts = []            # with network_mode = "allowlist"
# healthcheck = ...
# mcp_servers = []

[solution]
# env = {{ KEY = "value" }}       # extra environment for solution/solve.sh
"""

DOCKERFILE = """\
# Every trial runs on this base: pulled, or synthesised offline from the package mirrors (the local sandbox
# runs it on the host's /usr where the host provides the same release and Python). RUN lines need an image
# build; see docs/tasks.md and docs/images.md.
FROM python:3.13-slim
WORKDIR /app
"""

TEST_SH = """\
#!/bin/bash
# Verifier: runs after the agent, from /tests; writes the reward (a number, usually 0 or 1) to
# /logs/verifier/reward.txt, or several named rewards as a JSON object to /logs/verifier/reward.json.
export PATH=/usr/bin:/bin
mkdir -p /logs/verifier
if [ -f /app/hello.txt ] && [ "$(cat /app/hello.txt)" = "Hello, world!" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
"""

SOLVE_SH = """\
#!/bin/bash
# Reference solution, run by the oracle agent from /solution; it must reach reward 1.0.
set -euo pipefail
echo "Hello, world!" > /app/hello.txt
"""


class ScaffoldError(ValueError):
    """The task cannot be scaffolded (bad name, or the directory already exists)."""


def scaffold_task(name: str, parent: Path | str = ".", *, org: str = DEFAULT_ORG) -> Path:
    """Create `parent/<short name>/` with instruction.md, task.toml, environment/Dockerfile, tests/ and
    solution/. `name` is `org/name` (Harbor's form), or a short name that gets `org`; `[task] name` is the
    full `org/name`, so Harbor loads the task too."""
    short = name
    if "/" in name:
        org, _, short = name.partition("/")
    for part, what in ((org, "org"), (short, "task name")):
        if not _NAME.match(part) or ".." in part:
            raise ScaffoldError(
                f"{what} '{part}' must start with a lower-case letter or digit "
                "and use only a-z, 0-9, '.', '_', '-'"
            )
    task_dir = Path(parent) / short
    if task_dir.exists():
        raise ScaffoldError(f"'{task_dir}' already exists; choose another name or remove it")
    files = {
        "instruction.md": INSTRUCTION,
        "task.toml": TASK_TOML.format(name=f"{org}/{short}"),
        "environment/Dockerfile": DOCKERFILE,
        "tests/test.sh": TEST_SH,
        "solution/solve.sh": SOLVE_SH,
    }
    for relative, text in files.items():
        path = task_dir / relative
        write_text_atomic(path, text)
        if relative.endswith(".sh"):
            os.chmod(path, 0o755)
    return task_dir
