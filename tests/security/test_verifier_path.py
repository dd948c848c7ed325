"""Red team: the verifier takeover through PATH, and the PATH semantics evsys gives a trial.

A task with `ENV PATH="/app/.venv/bin:${PATH}"` (the common virtualenv idiom) puts a directory the agent can
write first on the trial's PATH. The agent plants `/app/.venv/bin/bash` (and `rm`, `tar`, `tail`...) that
write reward 1; evsys runs the verifier's shell and its own helpers by absolute path with a PATH it controls,
so none of them runs, while test.sh itself still sees the task's PATH (as Harbor gives it)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from evsys.records import ExecResult, SandboxSpec
from evsys.sandbox import LocalSandbox
from evsys.sandbox.base import SHELL, Sandbox
from evsys.task.dockerfile import DOCKER_DEFAULT_PATH, parse_dockerfile
from evsys.task.loader import load_task
from evsys.verify import ScriptVerifier

pytestmark = pytest.mark.security

DOCKERFILE = 'FROM ubuntu:24.04\nWORKDIR /app\nENV PATH="/app/.venv/bin:${PATH}"\n'
TEST_SH = (
    "#!/bin/bash\n"
    'printf "%s\\n" "$PATH" > /logs/verifier/path.txt\n'
    'if [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]; then r=1; else r=0; fi\n'
    "echo $r > /logs/verifier/reward.txt\n"
)
# What the agent plants: each program records that it ran, then forges the reward.
FAKE = '#!/bin/sh\necho "$0" >> /tmp/planted-ran\necho 1 > /logs/verifier/reward.txt\n'
# evsys's own programs (test.sh's own commands, here cat, follow the task's PATH as under Harbor: not planted)
PLANTED = ("bash", "sh", "rm", "mkdir", "find", "tar", "tail")


_names = itertools.count()


def spec(**kw) -> SandboxSpec:
    """A sandbox spec with a unique name."""
    return SandboxSpec(name=f"verifier-path-{os.getpid()}-{next(_names)}", **kw)


def write_task(root: Path) -> Path:
    """A task whose Dockerfile puts the agent-writable /app/.venv/bin first on PATH."""
    task = root / "venv-path"
    for rel, text in {
        "task.toml": '[task]\nname = "venv-path"\n\n[agent]\ntimeout_sec = 30\n',
        "instruction.md": "Write 42 to /app/answer.txt.\n",
        "environment/Dockerfile": DOCKERFILE,
        "tests/test.sh": TEST_SH,
    }.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    return task


async def plant(sandbox: LocalSandbox) -> None:
    """As the agent user: put fake programs in /app/.venv/bin."""
    script = "mkdir -p /app/.venv/bin && cd /app/.venv/bin && " + " && ".join(
        f"printf '%s' \"$FAKE\" > {name} && chmod 755 {name}" for name in PLANTED
    )
    planted = await sandbox.exec(script, user="agent", env={"FAKE": FAKE})
    assert planted.ok, planted.stderr


class ShellOnly(Sandbox):
    """A backend with only `exec`: the base class's defaults (rm/find/tar, tail, `exec` + argv) run."""

    def __init__(self, inner: LocalSandbox) -> None:
        super().__init__(inner.spec)
        self._inner = inner

    async def start(self) -> None:
        """Already started."""

    async def exec(self, command: str, **kw) -> ExecResult:
        """The inner sandbox's exec."""
        return await self._inner.exec(command, **kw)

    async def kill_processes(self) -> int:
        """The inner sandbox's."""
        return await self._inner.kill_processes()

    async def stop(self) -> None:
        """The inner sandbox is stopped by its owner."""


@pytest.fixture
async def trial(tmp_path):
    """A running sandbox with the task's environment (its ENV PATH) and the agent's plants in place."""
    task = load_task(write_task(tmp_path))
    async with LocalSandbox(spec(env=dict(task.environment.env), workdir="/app")) as sb:
        await plant(sb)
        yield task, sb


async def as_root(sb: LocalSandbox, command: str) -> ExecResult:
    """The test's own look inside, as root with the system PATH (not the planted programs)."""
    return await sb.exec(command, user="root", env={"PATH": "/usr/bin:/bin"})


async def positive_control(sb: LocalSandbox) -> None:
    """The plants are the agent's, executable, first on the trial's PATH, and forge reward 1 when looked up
    there (as a verifier run through PATH would)."""
    owner = await sb.exec("stat -c %u /app/.venv/bin/bash; command -v bash", user="root")
    assert owner.stdout.split() == [str(sb.agent_uid), "/app/.venv/bin/bash"]
    forged = await sb.exec_program(["bash", "/dev/null"], user="root")
    assert forged.ok
    assert (await as_root(sb, "cat /logs/verifier/reward.txt")).stdout == "1\n"
    await as_root(sb, "rm -f /logs/verifier/reward.txt /tmp/planted-ran")


@pytest.mark.needs_sandbox
async def test_dockerfile_path_reaches_the_trial(trial):
    task, _ = trial
    assert task.environment.env["PATH"] == f"/app/.venv/bin:{DOCKER_DEFAULT_PATH}"


@pytest.mark.needs_sandbox
async def test_verifier_never_runs_the_agents_bash(trial, tmp_path):
    task, sb = trial
    await positive_control(sb)
    verifier = ScriptVerifier(task.tests_dir, timeout_sec=30, workdir="/app")
    result = await verifier.verify_sandbox(sb, tmp_path / "verifier")
    assert result.rewards == {"reward": 0.0}
    # test.sh got the task's environment, as under Harbor: its PATH (venv first) is the task's
    assert (tmp_path / "verifier" / "path.txt").read_text().strip() == task.environment.env["PATH"]
    ran = await as_root(sb, "cat /tmp/planted-ran 2>/dev/null || true")
    assert ran.stdout == ""


@pytest.mark.needs_sandbox
async def test_generic_fallbacks_never_run_the_agents_programs(trial, tmp_path):
    """Through a backend with only `exec`: the tests are placed with rm/mkdir/find/tar, test.sh is started
    with `exec /bin/bash`, the logs are packed with tar, a file is read with tail; no plant runs."""
    task, sb = trial
    await positive_control(sb)
    tar = await sb.exec("tar --version", user="root")  # a helper looked up on the trial's PATH is the plant
    assert tar.ok and (await as_root(sb, "cat /tmp/planted-ran")).stdout.strip() == "/app/.venv/bin/tar"
    await as_root(sb, "rm -f /tmp/planted-ran /logs/verifier/reward.txt")
    shell_only = ShellOnly(sb)
    verifier = ScriptVerifier(task.tests_dir, timeout_sec=30, workdir="/app")
    result = await verifier.verify_sandbox(shell_only, tmp_path / "verifier")
    assert result.rewards == {"reward": 0.0}
    assert await shell_only.read_file("/logs/verifier/reward.txt", 100) == b"0\n"
    direct = await shell_only.exec_program(
        [SHELL, "/tests/test.sh"], output_file="/tmp/out.txt", user="root", cwd="/app", timeout=30
    )
    assert direct.ok
    ran = await as_root(sb, "cat /tmp/planted-ran 2>/dev/null || true")
    assert ran.stdout == ""


@pytest.mark.needs_sandbox
async def test_empty_path_entry_is_the_current_directory_not_root():
    """POSIX: an empty PATH entry (leading, trailing, or `::`) is the current directory."""
    async with LocalSandbox(spec(workdir="/app")) as sb:
        await check_empty_path_entries(sb)


async def check_empty_path_entries(sb: LocalSandbox) -> None:
    """/prog and /app/prog both exist; with cwd /app, an empty PATH entry must find ./prog."""
    for where, text in (("/", "root-dir"), ("/app", "cwd")):
        made = await sb.exec(
            f"printf '#!/bin/sh\\necho {text}\\n' > {where}/prog && chmod 755 {where}/prog", user="root"
        )
        assert made.ok
    # positive control: both programs exist and run by path
    assert (await sb.exec_program(["/prog"], cwd="/app")).stdout == "root-dir\n"
    assert (await sb.exec_program(["./prog"], cwd="/app")).stdout == "cwd\n"
    for path in (":/nonexistent", "/nonexistent:", "/nonexistent::/also-missing"):
        result = await sb.exec_program(["prog"], cwd="/app", env={"PATH": path})
        assert result.stdout == "cwd\n", path
    missing = await sb.exec_program(["prog"], cwd="/app", env={"PATH": "/nonexistent"})
    assert missing.exit_code == 127


def test_env_path_expansion_starts_from_the_default_path(tmp_path):
    env, problems = parse_dockerfile(DOCKERFILE, tmp_path)
    assert not [p for p in problems if p.severity == "error"]
    assert env.env["PATH"] == "/app/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_env_path_expansion_starts_from_the_base_images_path(tmp_path):
    base = {"PATH": "/opt/conda/bin:/usr/bin:/bin"}
    env, _ = parse_dockerfile(
        'FROM ubuntu\nENV PATH=/app/.venv/bin:$PATH\nENV X="${PATH}"\n', tmp_path, base_env=base
    )
    assert env.env["PATH"] == "/app/.venv/bin:/opt/conda/bin:/usr/bin:/bin"
    assert env.env["X"] == env.env["PATH"]


def test_a_dockerfile_that_sets_no_path_leaves_the_sandboxs_own(tmp_path):
    env, _ = parse_dockerfile('FROM ubuntu\nENV HOME_DIR="${PATH}/x"\n', tmp_path)
    assert "PATH" not in env.env
    assert env.env["HOME_DIR"] == f"{DOCKER_DEFAULT_PATH}/x"
