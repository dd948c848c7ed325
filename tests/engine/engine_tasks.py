"""Build small task directories for the engine tests, and what their scripts do in an in-memory sandbox."""

from __future__ import annotations

from pathlib import Path

from evsys.testing.memory_sandbox import Program, ProgramCall, ProgramOutput

REWARD_ONE = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
CHECK_OUT = (
    "#!/bin/bash\n"
    'if [ "$(cat /app/out.txt 2>/dev/null)" = ok ]; then r=1; else r=0; fi\n'
    "echo $r > /logs/verifier/reward.txt\n"
)
SOLVE_OUT = "#!/bin/bash\necho ok > /app/out.txt\n"


def make_task(
    root: Path,
    name: str,
    *,
    test: str | None = CHECK_OUT,
    solve: str | None = SOLVE_OUT,
    toml: str | None = None,
    instruction: str | None = "Write ok to /app/out.txt.\n",
    dockerfile: str | None = None,
    agent_timeout: float = 60.0,
) -> Path:
    """Write a task directory `root/name`; pass None to leave a part out."""
    task = root / name
    task.mkdir(parents=True)
    if toml is None:
        toml = (
            f'[task]\nname = "{name}"\n[agent]\ntimeout_sec = {agent_timeout}\n'
            '[verifier]\ntimeout_sec = 60.0\n[environment]\nworkdir = "/app"\nnetwork_mode = "no-network"\n'
        )
    (task / "task.toml").write_text(toml)
    if instruction is not None:
        (task / "instruction.md").write_text(instruction)
    if test is not None:
        (task / "tests").mkdir()
        (task / "tests" / "test.sh").write_text(test)
    if solve is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text(solve)
    if dockerfile is not None:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


def _solve(call: ProgramCall) -> None:
    call.sandbox.write("/app/out.txt", "ok\n")


def _check_out(call: ProgramCall) -> None:
    reward = "1" if call.sandbox.read("/app/out.txt") == b"ok\n" else "0"
    call.sandbox.write("/logs/verifier/reward.txt", reward + "\n")


def _reward_one(call: ProgramCall) -> None:
    call.sandbox.write("/logs/verifier/reward.txt", "1\n")


# What this module's scripts do, for the in-memory sandbox (evsys.testing.memory_sandbox), by their text.
SCRIPT_EFFECTS: dict[bytes, Program] = {
    SOLVE_OUT.encode(): _solve,
    CHECK_OUT.encode(): _check_out,
    REWARD_ONE.encode(): _reward_one,
}


def run_script(call: ProgramCall) -> ProgramOutput:
    """Run a script of this module placed in the in-memory sandbox (exit 127 for any other script)."""
    effect = SCRIPT_EFFECTS.get(call.sandbox.read(call.argv[-1]) or b"")
    return 127 if effect is None else effect(call)


# The programs of an in-memory sandbox running this module's tasks, and the engine agents' `echo ok`.
MEMORY_PROGRAMS: dict[str, Program] = {
    "/solution/solve.sh": run_script,
    "/tests/test.sh": run_script,
    "echo ok > /app/out.txt": _solve,
}
